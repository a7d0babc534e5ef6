"""scripts/ipc_probe.py, the GPU probe of the outputs' hand-over by CUDA IPC, in the parts that run without a GPU:
the clear exit on a cpu machine (alone and as device_session.sh's step), the sizes and the arena's layout, the
child protocol's timeouts and deaths, the rows' wording, and the opener's logic against a runtime of host memory
(the opener's handlers are what the device runs; only the runtime under them is replaced)."""
import importlib.util
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernelgym_gap.judge.cuda_ipc import CudaIpcError, handle_hex

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "ipc_probe.py"


@pytest.fixture(scope="module")
def probe():
    spec = importlib.util.spec_from_file_location("ipc_probe_under_test", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _no_cuda() -> bool:
    try:
        import torch
        return not torch.cuda.is_available()
    except Exception:
        return True


@pytest.mark.skipif(not _no_cuda(), reason="the cpu machine's exit")
def test_without_cuda_it_exits_2_with_one_clear_line():
    r = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert r.stdout.strip() == "no CUDA device: the probe runs on a GPU (scripts/device_session.sh ipc-probe)"


@pytest.mark.skipif(not _no_cuda(), reason="the cpu machine's exit")
def test_the_device_session_step_runs_the_probe_and_keeps_its_log(tmp_path):
    env = dict(os.environ, OUT=str(tmp_path / "out"), PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    r = subprocess.run(["bash", str(ROOT / "scripts" / "device_session.sh"), "ipc-probe"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 2, r.stdout + r.stderr      # pipefail: the step's status is the probe's
    assert "no CUDA device" in r.stdout
    assert "no CUDA device" in (tmp_path / "out" / "ipc_probe" / "log.txt").read_text()


def test_bad_options_are_refused_before_anything_starts():
    for args in (["--sizes", "3"], ["--sizes", "0K"], ["--handles", "0"], ["--rounds", "0"], ["--sizes", "x"]):
        r = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and "usage" in r.stderr, (args, r.stderr)


def test_sizes_default_to_24_outputs_of_a_light_batch(probe):
    s = probe.DEFAULT_SIZES
    assert len(s) == 24 and min(s) == 4096 and max(s) == 256 << 20
    assert 1.3 < sum(s) / (1 << 30) < 1.45
    assert [probe.parse_size(x) for x in ("4K", "4KiB", "256M", "1G", "4096", "1.5M")] == \
        [4096, 4096, 256 << 20, 1 << 30, 4096, 3 << 19]
    assert probe.pick_sizes([1, 2, 3], 5) == [1, 2, 3, 1, 2]
    assert probe.pick_sizes([1, 2], None) == [1, 2]


def test_the_arena_layout_aligns_every_output(probe):
    offs, total = probe.arena_layout([4096, 100, 4, 1 << 20])
    assert offs == [0, 4096, 4096 + 256, 4096 + 512]
    assert total == 4096 + 512 + (1 << 20) and all(o % probe.ARENA_ALIGN == 0 for o in offs)


def test_quantiles_in_ms(probe):
    n, med, p90 = probe.quantiles([0.001 * i for i in range(1, 11)])
    assert n == 10 and med == pytest.approx(5.5) and p90 == pytest.approx(9.0)
    assert probe.quantiles([])[0] == 0


def _child(probe, code, name="t"):
    return probe.Child(name, [sys.executable, "-c", code], dict(os.environ))


def test_a_child_that_says_nothing_times_out_and_one_that_dies_is_gone(probe):
    quiet = _child(probe, "import time; print('noise'); time.sleep(30)")
    try:
        with pytest.raises(TimeoutError):
            quiet.recv(0.5)
    finally:
        quiet.kill()
    assert quiet.proc.poll() is not None
    dead = _child(probe, "import sys; sys.stderr.write('boom\\n'); sys.exit(3)")
    with pytest.raises(probe.ChildGone, match="rc 3.*boom"):
        dead.recv(30)
    with pytest.raises(probe.ChildGone):        # and again: the end is remembered
        dead.recv(1)


def test_a_childs_protocol_lines_pass_and_its_noise_does_not(probe):
    c = _child(probe, "import sys, json\nprint('warning: noise')\nfor l in sys.stdin:\n"
                      "    print('@@' + json.dumps({'echo': json.loads(l)}), flush=True)")
    try:
        assert c.call({"op": "x"}, 30) == {"echo": {"op": "x"}}
    finally:
        c.kill()


def test_the_deadline_refuses_a_step_past_the_run(probe):
    d = probe.Deadline(3)
    with pytest.raises(probe.OutOfTime):
        d.limit(10)
    assert probe.Deadline(100).limit(10) == 10


def test_rows_say_what_happened_and_whether_it_stuck(probe):
    d = probe.Probe.describe({"ok": True, "open": "cudaErrorInvalidResourceHandle",
                              "alive": None}, None)
    assert d["result"] == "open cudaErrorInvalidResourceHandle" and d["sticky"] == "no"
    d = probe.Probe.describe({"ok": True, "open": "ok", "range": "ok", "base_is_pointer": True, "copy": "ok",
                              "sha": "a", "close": "ok", "alive": "cudaErrorIllegalAddress"}, "a")
    assert "copy ok, bytes match" in d["result"] and d["sticky"] == "yes: cudaErrorIllegalAddress"
    d = probe.Probe.describe({"ok": True, "open": "ok", "copy": "ok", "sha": "old", "alive": None}, "new", "old")
    assert "the OLD memory's" in d["result"]
    d = probe.Probe.describe({"ok": True, "open": "ok", "copy": "ok", "sha": "new", "alive": None}, "new", "old")
    assert "the NEW allocation's" in d["result"]


# ------------------------------------------------------------------------- the opener against host memory
class HostRuntime:
    """The runtime's calls over host bytearrays: allocations at fake addresses, handles that name them, a copy
    past an allocation's end fails stickily as an illegal address does on a GPU."""

    def __init__(self, exported: dict[bytes, bytearray]):
        self.mem: dict[int, bytearray] = {}
        self.exported = exported
        self.opened: dict[int, int] = {}
        self.next = 0x10000000
        self.sticky: str | None = None
        self.last_error = None
        self.rt_path = "host"
        self.calls: list[str] = []

    def _check(self):
        if self.sticky:
            raise CudaIpcError("any", 700, self.sticky)

    def _place(self, buf) -> int:
        p, self.next = self.next, self.next + ((len(buf) + 0xFFFFF) & ~0xFFFFF) + 0x100000
        self.mem[p] = buf
        return p

    def _find(self, ptr, n=1):
        for base, buf in self.mem.items():
            if base <= ptr < base + len(buf):
                if ptr + n > base + len(buf):
                    self.sticky = "cudaErrorIllegalAddress"
                    raise CudaIpcError("cudaMemcpy", 700, self.sticky)
                return buf, ptr - base
        raise CudaIpcError("cudaMemcpy", 1, "cudaErrorInvalidValue")

    def open(self, handle, flags=1):
        self._check()
        self.calls.append("open")
        if bytes(handle) not in self.exported:
            raise CudaIpcError("cudaIpcOpenMemHandle", 400, "cudaErrorInvalidResourceHandle")
        p = self._place(self.exported[bytes(handle)])
        self.opened[p] = 1
        return p

    def address_range(self, ptr):
        self._check()
        for base, buf in self.mem.items():
            if base <= ptr < base + len(buf):
                return base, len(buf)
        raise CudaIpcError("cuMemGetAddressRange_v2", 1, "CUDA_ERROR_INVALID_VALUE")

    def copy_d2d(self, dst, src, n):
        self._check()
        self.calls.append("copy")
        s, so = self._find(src, n)
        d, do = self._find(dst, n)
        d[do:do + n] = s[so:so + n]

    def copy_to_host(self, src, n):
        self._check()
        s, so = self._find(src, n)
        return bytes(s[so:so + n])

    def close(self, ptr):
        self._check()
        self.calls.append("close")
        del self.opened[ptr], self.mem[ptr]

    def synchronize(self):
        self._check()

    def malloc(self, n):
        self._check()
        return self._place(bytearray(n))

    def free(self, ptr):
        self._check()
        del self.mem[ptr]

    def alive(self):
        return self.sticky


def _run_opener(probe, monkeypatch, exported, commands):
    """role_opener in this process: its stdin the commands, its replies parsed from its stdout."""
    real = probe._load_cuda_ipc()
    rt = HostRuntime(exported)
    CudaIpcError_ = CudaIpcError

    class Mod:
        IpcRuntime = staticmethod(lambda device: rt)
        CudaIpcError = CudaIpcError_        # the class HostRuntime raises (real's is a copy loaded by path)
        IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 1
        handle_from_hex = staticmethod(real.handle_from_hex)

    monkeypatch.setattr(probe, "_load_cuda_ipc", lambda: Mod)
    monkeypatch.setattr(sys, "stdin", io.StringIO("".join(json.dumps(c) + "\n" for c in commands)))
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    probe.role_opener()
    msgs = [json.loads(line[2:]) for line in out.getvalue().splitlines() if line.startswith("@@")]
    return rt, msgs


def test_the_opener_copies_each_record_into_the_arena_at_its_offset(probe, monkeypatch):
    seg_a = bytearray(os.urandom(8192))           # one segment holding two outputs
    seg_b = bytearray(os.urandom(4096))
    arena = bytearray(3 * 4096)
    ha, hb, hr = b"a" * 64, b"b" * 64, b"r" * 64
    recs = [{"i": 0, "handle": handle_hex(ha), "offset": 0, "nbytes": 4096, "arena_offset": 0},
            {"i": 1, "handle": handle_hex(ha), "offset": 4096, "nbytes": 4096, "arena_offset": 4096},
            {"i": 2, "handle": handle_hex(hb), "offset": 0, "nbytes": 4096, "arena_offset": 8192}]
    rt, msgs = _run_opener(probe, monkeypatch, {ha: seg_a, hb: seg_b, hr: arena},
                           [{"op": "copy", "arena": {"handle": handle_hex(hr), "offset": 0}, "records": recs}])
    assert msgs[0]["hello"] and msgs[1]["ready"]
    reply = msgs[2]
    assert reply["ok"] and [r["status"] for r in reply["records"]] == ["copied"] * 3
    assert arena == seg_a + seg_b
    assert all(k in reply["records"][0] for k in ("open_s", "range_s", "copy_s", "close_s"))
    assert not rt.opened                          # every handle closed, the arena's too


def test_the_opener_refuses_an_extent_past_its_allocation_before_any_copy(probe, monkeypatch):
    seg, arena = bytearray(4096), bytearray(8192)
    h, hr = b"s" * 64, b"r" * 64
    rec = {"i": 0, "handle": handle_hex(h), "offset": 1024, "nbytes": 4096, "arena_offset": 0}
    rt, msgs = _run_opener(probe, monkeypatch, {h: seg, hr: arena},
                           [{"op": "copy", "arena": {"handle": handle_hex(hr), "offset": 0}, "records": [rec]},
                            {"op": "try", "handle": handle_hex(h), "offset": 1024, "nbytes": 4096}])
    row = msgs[2]["records"][0]
    assert row["status"].startswith("refused") and "size 4096" in row["status"]
    assert msgs[3]["copy"].startswith("refused by the range check") and msgs[3]["alive"] is None
    assert "copy" not in rt.calls and not rt.opened


def test_the_opener_reports_a_forged_handle_and_a_sticky_copy_as_rows(probe, monkeypatch):
    seg = bytearray(4096)
    h = b"s" * 64
    rt, msgs = _run_opener(probe, monkeypatch, {h: seg}, [
        {"op": "try", "handle": os.urandom(64).hex(), "nbytes": 4096},
        {"op": "try", "handle": handle_hex(h), "offset": 0, "nbytes": 8192, "check_range": False},
        {"op": "alive"}])
    forged, unchecked, alive = msgs[2], msgs[3], msgs[4]
    assert forged["open"] == "cudaErrorInvalidResourceHandle" and forged["alive"] is None
    assert unchecked["copy"] == "cudaErrorIllegalAddress" and unchecked["alive"] == "cudaErrorIllegalAddress"
    assert alive["alive"] == "cudaErrorIllegalAddress"


def test_the_opener_holds_a_mapping_and_copies_it_later(probe, monkeypatch):
    import hashlib
    seg = bytearray(os.urandom(4096))
    h = b"s" * 64
    first = 0x10000000                          # HostRuntime's first address: the held pointer
    rt, msgs = _run_opener(probe, monkeypatch, {h: seg}, [
        {"op": "try", "handle": handle_hex(h), "offset": 0, "nbytes": 4096, "hold": True},
        {"op": "copy_held", "held": first}])
    assert msgs[2]["open"] == "ok" and msgs[2]["held"] == first and "close" not in msgs[2]
    done = msgs[3]
    assert done["copy"] == "ok" and done["close"] == "ok" and done["alive"] is None
    assert done["sha"] == hashlib.sha256(bytes(seg)).hexdigest() and not rt.opened


def test_a_bad_command_is_a_reply_not_the_end(probe, monkeypatch):
    rt, msgs = _run_opener(probe, monkeypatch, {}, [{"op": "nonsense"}, {"op": "alive"}])
    assert msgs[2]["ok"] is False and "KeyError" in msgs[2]["error"]
    assert msgs[3]["alive"] is None


# ------------------------------------------------------------------------- the parent's flow, children scripted
class ScriptedChild:
    """A role's process replaced by its replies (the parent's side of the protocol is what is under test). Its
    `proc` is a real sleeping process, so the rows' SIGSTOP and SIGKILL reach something of ours."""

    def __init__(self, name, role, log):
        self.name, self.role, self.log = name, role, log
        self.t_start = __import__("time").perf_counter()
        self.proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        self.inbox = ([{"hello": True, "pid": 1, "import_s": 0.01}, {"ready": True, "context_s": 0.2, "cudart": "x"}]
                      if role == "opener" else
                      [{"hello": True, "ready": True, "context_s": 2.0, "device": "Scripted", "torch": "t",
                        "cudart": "x"}])

    def recv(self, timeout):
        return __import__("time").perf_counter(), self.inbox.pop(0)

    def send(self, obj):
        if obj.get("op") == "exit":          # a real role exits on it; the parent then waits for the process
            self.kill()

    def tail(self, n=6):
        return ""

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def call(self, obj, timeout):
        self.log.append((self.role, obj["op"]))
        op = obj["op"]
        h = "ab" * 64
        if op == "exit":
            return {"ok": True}
        if self.role == "exporter":
            if op == "make":
                return {"ok": True, "records": [
                    {"i": i, "nbytes": n, "dtype": "float32", "shape": [n // 4], "seed": 1000 + i, "handle": h,
                     "offset": 0, "segment": n, "torch_share_s": 1e-4, "raw_handle_s": 2e-5, "device_copy_s": 1e-3,
                     "checksum": 5, "torch_holds_raw": True, "offsets_agree": True, "interior_handle_same": True}
                    for i, n in enumerate(obj["sizes"])]}
            if op == "hold":
                return {"ok": True, "record": {"handle": h, "offset": 0, "nbytes": obj["nbytes"],
                                               "segment": obj["nbytes"]}, "sha": "s"}
            if op == "freed":
                return {"ok": True, "handle": h, "offset": 0, "nbytes": obj["nbytes"], "segment": obj["nbytes"],
                        "reserved_freed": obj["nbytes"], "same_base": True, "same_handle": False,
                        "new_sha": "n", "old_sha": "o"}
            if op == "self_open":
                return {"ok": True, "open": "cudaErrorInvalidContext", "alive": None}
        if self.role == "checker":
            if op == "arena":
                return {"ok": True, "handle": h, "offset": 0, "segment": obj["nbytes"]}
            if op == "verify":
                return {"ok": True, "verify_s": 0.1,
                        "records": [{"i": r["i"], "exact": True, "checksum": True} for r in obj["records"]]}
            return {"ok": True, "alive": None}
        if self.role == "opener":
            if op == "copy":
                return {"ok": True, "arena_open_s": 1e-3, "arena_close_s": 1e-4, "total_s": 0.05, "records": [
                    {"i": r["i"], "open_s": 1e-3, "range_s": 1e-5, "copy_s": 1e-4, "close_s": 5e-4,
                     "segment": r["nbytes"], "status": "copied"} for r in obj["records"]]}
            if op == "try":
                if obj.get("hold"):
                    return {"ok": True, "open": "ok", "range": "ok", "held": 123}
                if not obj.get("check_range", True):
                    return {"ok": True, "open": "ok", "range": "ok", "copy": "cudaErrorIllegalAddress",
                            "close": "cudaErrorIllegalAddress", "alive": "cudaErrorIllegalAddress"}
                return {"ok": True, "open": "cudaErrorInvalidResourceHandle", "alive": None}
            if op == "copy_held":
                return {"ok": True, "copy": "ok", "sha": "s", "close": "ok", "alive": None}
            return {"ok": True, "alive": None}
        raise AssertionError(f"unscripted {self.role} {op}")


def test_the_parent_runs_every_section_and_prints_its_tables(probe, monkeypatch, tmp_path, capsys):
    log, made = [], []

    def start(self, name, role, prefix=None, cwd=None, env=None):
        c = ScriptedChild(name, role, log)
        made.append(c)
        self.children.append(c)
        return c

    monkeypatch.setattr(probe.Probe, "start", start)
    monkeypatch.setattr(probe.Probe, "namespace_exporters", lambda self: {
        "namespace: pid alone (unshare --pid)": self.start("ns", "exporter"),
        "namespace: the sandbox's": "not possible here: needs root and util-linux unshare"})
    monkeypatch.setattr(probe, "has_cuda", lambda: True)
    out = tmp_path / "p.json"
    rc = probe.main(["--handles", "5", "--rounds", "2", "--json", str(out), "--timeout-s", "120"])
    text = capsys.readouterr().out
    assert rc == 0, text
    report = json.loads(out.read_text())
    assert report["errors"] == [] and len(report["rounds"]) == 2
    assert [r["status"] for r in report["rounds"]] == [{"copied": 5}] * 2
    cases = [r["case"] for r in report["rows"]]
    assert len(cases) == 11 and cases[-2].startswith("copy past the extent WITHOUT")
    assert cases[-1] == "the exporter opening its own handle"        # last: it may poison the exporter
    rows = {r["case"]: r for r in report["rows"]}
    assert rows["random 64 handle bytes"]["result"] == "open cudaErrorInvalidResourceHandle"
    assert rows["namespace: the sandbox's"]["result"].startswith("not possible here")
    assert "the NEW allocation's" not in rows["handle of memory freed then allocated again"]["result"]
    kill = rows["exporter SIGKILLed while the opener holds the mapping"]["result"]
    assert "copy ok, bytes match" in kill and "checker: alive yes, its arena intact" in kill
    assert rows["copy past the extent WITHOUT the range check (why the check; disposable opener)"]["sticky"] \
        .startswith("yes")
    # the tables, last: the parts, the rows, the simulator's figures beside the measured
    assert "per handle: open + range + close" in text and "simulator" in text and "measured" in text
    assert text.rstrip().splitlines()[-1].startswith("whole hand-over of 5 outputs")
    assert all(c.proc.poll() is not None for c in made)        # nothing left running


@pytest.mark.skipif(not _no_cuda(), reason="on a GPU the exporters would really start; the probe covers that")
@pytest.mark.timeout(240)
def test_the_namespace_exporters_start_under_the_sandboxs_own_argv(probe):
    """Each namespace row's exporter (the sandbox's bwrap/unshare argv with and without its uid, and unshare of one
    namespace) reaches the exporter role inside its namespaces: here it stops at torch's missing CUDA, which
    proves the interpreter, the packages and the script were all visible in there."""
    import argparse
    args = argparse.Namespace(timeout_s=200, rounds=1, skip_hostile=False, json=None, handles=None, sizes=None,
                              role=None)
    pr = probe.Probe(args)
    try:
        spares = pr.namespace_exporters()
        started = {k: c for k, c in spares.items() if not isinstance(c, str)}
        for k, why in spares.items():
            if isinstance(why, str):
                assert why.startswith("not possible here"), (k, why)
        if not started:
            pytest.skip("no namespace can be made here: " + "; ".join(spares.values()))
        for name, c in started.items():
            with pytest.raises(probe.ChildGone, match="not ready: .*CUDA"):
                pr.ready(c, 120)
    finally:
        pr.cleanup()
    assert not any(d.exists() for d in pr.scratches)      # their working directories go with them


@pytest.mark.gpu
@pytest.mark.timeout(240)
def test_gpu_a_small_probe_hands_every_output_over_bit_exact(tmp_path):
    """The probe's timed rounds on the device, small: four outputs, two rounds (a fresh opener each), no hostile
    rows; every copy bit-exact in the checker's arena."""
    out = tmp_path / "p.json"
    r = subprocess.run([sys.executable, str(SCRIPT), "--sizes", "4K,64K,1M,32M", "--rounds", "2", "--skip-hostile",
                        "--timeout-s", "180", "--json", str(out)], capture_output=True, text=True, timeout=220)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["errors"] == []
    assert [x["status"] for x in report["rounds"]] == [{"copied": 4}] * 2
    assert all(x["mismatched"] == [] for x in report["rounds"])
