"""The trusted per-evaluation opener (judge/opener.py; docs/measurement.md, "The outputs handed over on the
device", point 4): its loop against a host-memory runtime (tests/ipc_fakes.py), the request and response schema
on both sides, the parent's hand_over against openers that die, stay silent or write garbage, an end-to-end
cpu hand-over from plan_outputs to views_from_arena, and one gpu test of the real opener."""
import io
import json
import random
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from ipc_fakes import HostIpcRuntime, fake_handle
from kernelgym_gap.core.config import EvalConfig
from kernelgym_gap.core.record import ChildReport, Job, OutputHandle, TrialOutcome
from kernelgym_gap.core.status import Status
from kernelgym_gap.engine.trials import make_trials
from kernelgym_gap.judge import opener
from kernelgym_gap.judge.ipc_records import NeedsFile, Plan, plan_outputs, views_from_arena
from kernelgym_gap.judge.opener import MAX_LINE_BYTES, SchemaError, parse_request, parse_response, run_copies, serve
from kernelgym_gap.judge.opener_client import OpenerFailed, build_request, hand_over, start_opener

pytestmark = pytest.mark.usefixtures("one_torch_thread")
ROOT = Path(__file__).resolve().parent.parent
SEG_OFFSET = 512             # each child output sits this far into its fake segment, as in a caching allocator's


def _copy(key, name, nbytes, arena_offset, offset=0):
    return {"key": key, "handle": fake_handle(name), "offset": offset, "nbytes": nbytes, "arena_offset": arena_offset}


def _request(copies, arena_bytes=4096, deadline_s=30.0):
    return {"arena": {"handle": fake_handle("arena"), "offset": 0, "nbytes": arena_bytes}, "copies": copies,
            "deadline_s": deadline_s}


def _line(obj) -> bytes:
    return (json.dumps(obj) + "\n").encode()


def _run(rt, req):
    return run_copies(rt, parse_request(_line(req)))


def _bufs(**sizes):
    return {name: bytearray(bytes([i + 1]) * n) for i, (name, n) in enumerate(sizes.items())}


# ---- the loop -------------------------------------------------------------------------------------------------

def test_every_copy_lands_in_the_arena_in_the_plans_order_and_every_open_is_closed():
    rt = HostIpcRuntime({**_bufs(a=300, b=1000, c=64), "arena": bytearray(4096)})
    req = _request([_copy("k1", "b", 900, 0, offset=100), _copy("k2", "a", 300, 1024), _copy("k3", "c", 64, 2048)])
    resp = _run(rt, req)
    assert [c["result"] for c in resp["copies"]] == ["copied"] * 3
    assert resp["arena_error"] is None
    assert [s for s, _, _ in rt.copies] == ["b", "a", "c"]           # the request's order
    arena = rt.buffers["arena"]
    assert arena[:900] == rt.buffers["b"][100:] and arena[1024:1324] == rt.buffers["a"]
    assert arena[2048:2112] == rt.buffers["c"] and arena[900:1024] == bytes(124)
    assert sorted(rt.opens) == sorted(rt.closes) and not rt.mapped    # the arena's close included
    assert rt.synchronized == 1
    assert set(resp["seconds"]) == set(opener.SECONDS_PARTS) and resp["seconds"]["total"] >= 0


def test_an_open_failure_is_that_copys_and_the_loop_goes_on():
    rt = HostIpcRuntime({**_bufs(a=64, b=64), "arena": bytearray(4096)}, fail_open={"a"})
    resp = _run(rt, _request([_copy("k1", "a", 64, 0), _copy("k2", "nobody", 64, 256), _copy("k3", "b", 64, 512)]))
    assert [(c["result"], c["code"]) for c in resp["copies"]] == [("open_failed", 1), ("open_failed", 1),
                                                                  ("copied", None)]
    assert "cudaErrorInvalidValue" in resp["copies"][0]["error"]
    assert rt.closes == ["b", "arena"]                 # nothing opened is left open; nothing unopened is closed


@pytest.mark.parametrize("fake,copy", [
    (dict(), _copy("k", "a", 65, 0)),                  # one byte past the allocation
    (dict(), _copy("k", "a", 1, 0, offset=64)),        # the offset at its end
    (dict(shift_base={"a"}), _copy("k", "a", 8, 0)),   # the pointer is not the allocation's base
    (dict(fail_range={"a"}), _copy("k", "a", 8, 0)),   # the extent cannot be read: not copied either
])
def test_the_extent_check_refuses_before_any_copy_and_closes(fake, copy):
    rt = HostIpcRuntime({**_bufs(a=64, b=64), "arena": bytearray(4096)}, **fake)
    resp = _run(rt, _request([copy, _copy("k2", "b", 64, 256)]))
    assert [c["result"] for c in resp["copies"]] == ["extent_refused", "copied"]
    assert rt.copies == [("b", "arena", 64)]           # the refused one was never copied
    assert rt.closes.count("a") == 1 and not rt.mapped


def test_a_copy_failure_ends_the_loop_and_the_rest_are_not_attempted():
    rt = HostIpcRuntime({**_bufs(a=64, b=64, c=64), "arena": bytearray(4096)}, fail_copy={"b"})
    resp = _run(rt, _request([_copy("k1", "a", 64, 0), _copy("k2", "b", 64, 256), _copy("k3", "c", 64, 512)]))
    assert [c["result"] for c in resp["copies"]] == ["copied", "copy_failed", "not_attempted"]
    assert resp["copies"][1]["code"] == 700 and "not attempted" in resp["copies"][2]["error"]
    assert "c" not in rt.opens                          # nothing more is opened in a possibly poisoned context
    assert rt.closes == ["a", "b", "arena"]             # the failed copy's handle is still closed


def test_a_close_error_is_reported_beside_the_result():
    rt = HostIpcRuntime({**_bufs(a=64), "arena": bytearray(4096)}, fail_close={"a"})
    row, = _run(rt, _request([_copy("k1", "a", 64, 0)]))["copies"]
    assert row["result"] == "copied" and "close" in row["error"]


def test_an_arena_that_does_not_open_or_is_too_small_copies_nothing():
    rt = HostIpcRuntime(_bufs(a=64))
    resp = _run(rt, _request([_copy("k1", "a", 64, 0)]))
    assert resp["arena_error"].startswith("the arena:") and resp["copies"][0]["result"] == "not_attempted"
    rt = HostIpcRuntime({**_bufs(a=64), "arena": bytearray(1024)})
    resp = _run(rt, _request([_copy("k1", "a", 64, 0)], arena_bytes=2048))
    assert "extent" in resp["arena_error"] and rt.copies == [] and rt.closes == ["arena"]


def test_past_its_deadline_the_opener_attempts_nothing_more():
    rt = HostIpcRuntime({**_bufs(a=64, b=64), "arena": bytearray(4096)})
    ticks = iter([0.0, 0.0, 0.0] + [100.0] * 50)
    resp = run_copies(rt, parse_request(_line(_request([_copy("k1", "a", 64, 0), _copy("k2", "b", 64, 256)],
                                                       deadline_s=5.0))), clock=lambda: next(ticks))
    assert [c["result"] for c in resp["copies"]] == ["not_attempted"] * 2
    assert "deadline" in resp["copies"][0]["error"] and rt.copies == []


def test_serve_writes_ready_then_one_response_and_answers_a_bad_request_with_no_copy():
    rt = HostIpcRuntime({**_bufs(a=64), "arena": bytearray(4096)})
    out = io.BytesIO()
    assert serve(lambda: rt, io.BytesIO(_line(_request([_copy("k1", "a", 64, 0)]))), out) == 0
    ready, resp = out.getvalue().splitlines()
    assert json.loads(ready)["ready"] is True
    assert parse_response(resp + b"\n", ["k1"])["copies"][0]["result"] == "copied"
    out = io.BytesIO()
    assert serve(lambda: rt, io.BytesIO(b'{"arena": 1}\n'), out) == 3
    with pytest.raises(SchemaError, match="refused the request"):
        parse_response(out.getvalue().splitlines()[1] + b"\n", [])


def test_serve_reports_a_runtime_that_cannot_start():
    from kernelgym_gap.judge.cuda_ipc import IpcUnsupported

    def no_cuda():
        raise IpcUnsupported("load libcuda", -1, "not found")
    out = io.BytesIO()
    assert serve(no_cuda, io.BytesIO(), out) == 2
    msg = json.loads(out.getvalue())
    assert msg["ready"] is False and msg["unsupported"] is True


# ---- the schema, both sides -----------------------------------------------------------------------------------

_GOOD = _request([_copy("k1", "a", 64, 0)])


def _edit(path, value):
    req = json.loads(json.dumps(_GOOD))
    *head, last = path
    obj = req
    for p in head:
        obj = obj[p]
    if value is KeyError:
        del obj[last]
    else:
        obj[last] = value
    return req


@pytest.mark.parametrize("req", [
    _edit(["copies", 0, "offset"], -1), _edit(["copies", 0, "nbytes"], 0), _edit(["copies", 0, "nbytes"], True),
    _edit(["copies", 0, "offset"], False), _edit(["copies", 0, "arena_offset"], 1.0),
    _edit(["copies", 0, "arena_offset"], 4090), _edit(["copies", 0, "handle"], "AB" * 63),
    _edit(["copies", 0, "extra"], 1), _edit(["copies", 0, "key"], KeyError), _edit(["copies", 0, "key"], 7),
    _edit(["arena", "nbytes"], True), _edit(["arena", "offset"], -256), _edit(["deadline_s"], True),
    _edit(["deadline_s"], 0), _edit(["copies"], {}), _edit(["extra"], None), [1, 2],
    _request([_copy("k1", "a", 64, 0), _copy("k1", "b", 64, 256)]),          # a key twice
])
def test_the_opener_refuses_a_request_that_breaks_the_schema(req):
    with pytest.raises(SchemaError):
        parse_request(_line(req))


def test_a_line_past_the_bound_or_without_its_newline_is_refused():
    with pytest.raises(SchemaError):
        parse_request(b"{" + b" " * MAX_LINE_BYTES + b"}\n")
    with pytest.raises(SchemaError):
        parse_request(_line(_GOOD)[:-1])
    parse_request(_line(_GOOD))


_RESP = {"copies": [{"key": "k1", "result": "copied", "error": None, "code": None}], "arena_error": None,
         "seconds": dict.fromkeys(opener.SECONDS_PARTS, 0.0)}


@pytest.mark.parametrize("change", [
    lambda r: r["copies"][0].update(result="ok"), lambda r: r["copies"][0].update(code=True),
    lambda r: r["copies"][0].update(error=5), lambda r: r["copies"][0].update(key="k2"),
    lambda r: r["copies"].append(dict(r["copies"][0])), lambda r: r["copies"][0].update(extra=1),
    lambda r: r.update(arena_error=1), lambda r: r["seconds"].update(total=-1.0),
    lambda r: r["seconds"].pop("copy"), lambda r: r.update(more=1),
])
def test_the_parent_refuses_a_response_that_breaks_the_schema(change):
    resp = json.loads(json.dumps(_RESP))
    change(resp)
    with pytest.raises(SchemaError):
        parse_response(_line(resp), ["k1"])
    parse_response(_line(_RESP), ["k1"])


# ---- the parent's hand_over against real processes --------------------------------------------------------------

class _OnePlan:
    """A Plan with `n` Planned entries, duck-typed as hand_over reads it."""
    def __init__(self, n=1):
        rec = OutputHandle(handle="ab" * 64, offset=0, nbytes=64, dtype="float32", shape=(16,))
        self.planned = tuple(type("P", (), {"key": type("K", (), {"file_name": f"trial_{i}.tensor"})(),
                                            "record": rec, "arena_offset": 256 * i})() for i in range(n))
        self.arena_bytes = 256 * n


def _script(code):
    return start_opener(argv=[sys.executable, "-c", textwrap.dedent(code)])


@pytest.mark.parametrize("code,words", [
    ("import sys; sys.stderr.write('boom'); sys.exit(5)", "exit status 5"),
    ("print('{\"ready\": true}', flush=True); import sys; sys.stdin.readline(); sys.exit(6)", "exit status 6"),
])
def test_an_opener_that_dies_is_opener_failed(code, words):
    proc = _script(code)
    with pytest.raises(OpenerFailed, match=words):
        hand_over(proc, _OnePlan(), "cd" * 64, timeout_s=60)
    assert proc.returncode is not None


def test_a_silent_opener_is_killed_at_the_timeout():
    proc = _script("import sys, time; print('{\"ready\": true}', flush=True); time.sleep(120)")
    t = time.monotonic()
    with pytest.raises(OpenerFailed, match="silent"):
        hand_over(proc, _OnePlan(), "cd" * 64, timeout_s=3)
    assert time.monotonic() - t < 30 and proc.returncode == -9


def test_an_opener_that_never_reads_a_large_request_is_killed_at_the_timeout():
    """The request passes the pipe's 64 KiB: a blocking write would hold the parent past its deadline."""
    proc = _script("import time; print('{\"ready\": true}', flush=True); time.sleep(120)")
    t = time.monotonic()
    with pytest.raises(OpenerFailed, match="silent past the timeout at the request"):
        hand_over(proc, _OnePlan(600), "cd" * 64, timeout_s=3)
    assert time.monotonic() - t < 30 and proc.returncode == -9


@pytest.mark.parametrize("code,words", [
    ("print('garbage', flush=True)", "trusted opener"),
    ("import sys; print('{\"ready\": true}', flush=True); sys.stdin.readline(); print('[[[', flush=True)",
     "trusted opener"),
    ("import sys; print('{\"ready\": true}', flush=True); sys.stdin.readline(); sys.stdout.write('x' * (1 << 21))"
     "; sys.stdout.flush(); import time; time.sleep(60)", "without a newline"),
    ("print('{\"ready\": false, \"unsupported\": true}', flush=True)", "did not start CUDA"),
])
def test_an_opener_that_writes_garbage_is_opener_failed(code, words):
    proc = _script(code)
    with pytest.raises(OpenerFailed, match=words):
        hand_over(proc, _OnePlan(), "cd" * 64, timeout_s=60)
    assert proc.poll() is not None


def test_the_opener_module_loads_by_path_without_torch():
    code = ("import runpy, sys; sys.argv = ['opener', '--device', '0']; "
            f"sys.modules['torch'] = None; runpy.run_path({str(ROOT / 'kernelgym_gap/judge/opener.py')!r}, "
            "run_name='__main__')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120, stdin=subprocess.DEVNULL)
    first = json.loads(r.stdout.splitlines()[0])        # no CUDA here: the ready line says so, no traceback
    assert "ready" in first and b"Traceback" not in r.stderr, r.stderr


# ---- end to end on cpu: plan_outputs -> the opener -> views_from_arena -------------------------------------------

@pytest.fixture(scope="module")
def handed():
    """AddReLU's six trials, each output a 'child' tensor in its own fake segment, with its OutputHandle."""
    from kernelgym_gap.core.registry import default_registry
    task = default_registry().get("AddReLU")
    trials = make_trials(task, "cpu", EvalConfig(seeds_per_shape=1), random.Random(0))
    gen = torch.Generator().manual_seed(1)
    outs, segs, outcomes = {}, {}, []
    for t in trials:
        x = torch.randn(t.shape, generator=gen).to(getattr(torch, t.dtype))
        raw = x.contiguous().view(-1).view(torch.uint8).numpy().tobytes()
        segs[f"seg{t.index}"] = bytearray(b"\xee" * SEG_OFFSET + raw + b"\xee" * 100)
        outs[t.index] = x
        rec = OutputHandle(handle=fake_handle(f"seg{t.index}"), offset=SEG_OFFSET, nbytes=len(raw),
                           dtype=t.dtype, shape=tuple(t.shape))
        outcomes.append(TrialOutcome(index=t.index, output_file=None, launches=1, programs=1, seconds=0.0,
                                     input_digest_before="d", input_digest_after="d", output_handle=rec))
    job = Job(task_id="kernelgym_gap/AddReLU-v0", dsl="triton", backend="cuda", source_file="/s.py",
              outputs_dir="/nonexistent", report_file="/r.json", trials=tuple(trials), timing=None)
    report = ChildReport(status=Status.OK, message="", trials=tuple(outcomes))
    return task, job, report, outs, segs


def _check_views(plan, arena, outs):
    views = views_from_arena(torch.frombuffer(arena, dtype=torch.uint8), plan)
    assert len(views) == len(plan.planned) > 0
    for e in plan.planned:
        assert torch.equal(views[e.key], outs[e.trial.index]), e.key


def test_end_to_end_the_childs_outputs_are_the_checkers_views(handed):
    task, job, report, outs, segs = handed
    biggest = max(e.nbytes for e in (o.output_handle for o in report.trials))
    plan = plan_outputs(job, report, task, lambda t: tuple(t.shape), max_arena_bytes=2 * biggest + 512)
    assert isinstance(plan, Plan) and any(isinstance(e, NeedsFile) for e in plan.entries)
    rt = HostIpcRuntime({**segs, "arena": bytearray(plan.arena_bytes)})
    req = build_request(plan, fake_handle("arena"), 30.0)
    resp = run_copies(rt, parse_request(_line(req)))
    assert all(c["result"] == "copied" for c in resp["copies"])
    assert len(rt.copies) == len(plan.planned)          # NeedsFile entries never reach the opener
    _check_views(plan, rt.buffers["arena"], outs)


_LAUNCHER = textwrap.dedent("""
    import pickle, sys
    sys.path.insert(0, sys.argv[1])
    from ipc_fakes import HostIpcRuntime
    from kernelgym_gap.judge.opener import serve
    with open(sys.argv[2], "rb") as f:
        rt = HostIpcRuntime(pickle.load(f))
    code = serve(lambda: rt, sys.stdin.buffer, sys.stdout.buffer)
    with open(sys.argv[3], "wb") as f:
        f.write(rt.buffers["arena"])
    sys.exit(code)
    """)


def test_end_to_end_through_a_real_opener_process(handed, tmp_path):
    """The test's own launcher runs the opener's loop with the fake (no switch in the trusted code selects it)."""
    import pickle
    task, job, report, outs, segs = handed
    plan = plan_outputs(job, report, task, lambda t: tuple(t.shape))
    (tmp_path / "bufs.pkl").write_bytes(pickle.dumps({**segs, "arena": bytearray(plan.arena_bytes)}))
    proc = start_opener(argv=[sys.executable, "-c", _LAUNCHER, str(ROOT / "tests"), str(tmp_path / "bufs.pkl"),
                              str(tmp_path / "arena.bin")], cwd=ROOT)
    got = hand_over(proc, plan, fake_handle("arena"), timeout_s=120)
    assert got.all_copied and [r.key for r in got.results] == [e.key for e in plan.planned]
    assert proc.returncode == 0
    _check_views(plan, bytearray((tmp_path / "arena.bin").read_bytes()), outs)


# ---- gpu: the real opener against real exports ------------------------------------------------------------------

_EXPORTER = textwrap.dedent("""
    import json, sys, torch
    from kernelgym_gap.judge.cuda_ipc import IpcRuntime, handle_hex
    rt = IpcRuntime(0)
    outs = []
    for i, n in enumerate([1 << 10, (1 << 20) + 12, 3 << 20]):
        t = (torch.arange(n // 4, dtype=torch.int32, device="cuda") * (i + 7) + 3).clone()
        base, size = rt.address_range(t.data_ptr())
        outs.append((t, {"handle": handle_hex(rt.get_handle(base)), "offset": t.data_ptr() - base, "nbytes": n}))
    torch.cuda.synchronize()
    print(json.dumps([r for _, r in outs]), flush=True)
    sys.stdin.readline()
    """)


@pytest.mark.gpu
@pytest.mark.timeout(300)
def test_gpu_the_real_opener_copies_real_exports_into_a_real_arena_bit_exact():
    import numpy as np

    from kernelgym_gap.judge.cuda_ipc import IpcRuntime, handle_hex
    from kernelgym_gap.judge.ipc_records import ARENA_ALIGN
    exp = subprocess.Popen([sys.executable, "-c", _EXPORTER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        recs = json.loads(exp.stdout.readline() or "null") or pytest.fail(exp.stderr.read())
        offs, at = [], 0
        for r in recs:
            offs.append(at)
            at += -(-r["nbytes"] // ARENA_ALIGN) * ARENA_ALIGN
        arena = torch.zeros(at, dtype=torch.uint8, device="cuda")     # this process exports, never opens
        rt = IpcRuntime(0)
        base, _ = rt.address_range(arena.data_ptr())
        entries = tuple(type("P", (), {"key": type("K", (), {"file_name": f"trial_{i}.tensor"})(),
                                       "record": type("R", (), r)(), "arena_offset": o})()
                        for i, (r, o) in enumerate(zip(recs, offs)))
        plan = type("Plan", (), {"planned": entries, "arena_bytes": at})()
        proc = start_opener(0)
        got = hand_over(proc, plan, handle_hex(rt.get_handle(base)), timeout_s=120,
                        arena_offset=arena.data_ptr() - base)
        assert got.all_copied, got
        host = arena.cpu().numpy()
        for i, (r, o) in enumerate(zip(recs, offs)):
            want = (np.arange(r["nbytes"] // 4, dtype=np.int64) * (i + 7) + 3).astype(np.int32).tobytes()
            assert host[o:o + r["nbytes"]].tobytes() == want, i
        print("opener seconds", got.seconds)
    finally:
        exp.kill()
        exp.wait(timeout=30)


def test_kill_opener_bounds_its_wait_and_closes_the_pipes(caplog):
    """judge/opener_client.kill_opener, the one kill (engine/handover.py uses it too): an opener that outlasts
    SIGKILL's wait (stuck in the driver) is left with a warning, not waited on forever, and its pipes are closed."""
    from kernelgym_gap.judge import opener_client

    class Stuck:
        pid, returncode = 4242, None

        def __init__(self):
            self.stdin, self.stdout, self.stderr = io.BytesIO(), io.BytesIO(), io.BytesIO(b"late words")
            self.killed, self.waits = 0, []

        def poll(self):
            return None

        def kill(self):
            self.killed += 1

        def wait(self, timeout=None):
            self.waits.append(timeout)
            raise subprocess.TimeoutExpired("opener", timeout)
    proc = Stuck()
    with caplog.at_level("WARNING"):
        opener_client.kill_opener(proc)
    assert proc.killed == 1 and proc.waits == [opener_client.KILL_WAIT_S]
    assert proc.stdin.closed and proc.stdout.closed and proc.stderr.closed
    assert "did not exit" in caplog.text
    # a stuck one's stderr is not read (it would never end): the failure still comes back, without its words
    stuck = Stuck()
    failed = opener_client._gone(stuck, "its response")
    assert isinstance(failed, OpenerFailed) and "late words" not in str(failed) and stuck.stderr.closed
