"""core/cuda_vmm.py (issue 35's second route for the outputs' hand-over: VMM allocations exported as POSIX fds and
sent by SCM_RIGHTS) and scripts/ipc_probe_vmm.py. The cpu tests hold the struct layouts, the typed errors without
libcuda, the socket layer's bounds on a real socket pair (no descriptor leaked), the opener's clean-up order over a
scripted driver, and the probe's exit 2; the gpu tests do the round trip across processes on the device."""
from __future__ import annotations

import ctypes
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from kernelgym_gap.core import cuda_vmm as vmm
from kernelgym_gap.core import fd_channel as ch

ROOT = Path(__file__).resolve().parent.parent
PROBE = ROOT / "scripts" / "ipc_probe_vmm.py"


def _libcuda_present() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


def _open_fds(f) -> int:
    """How many descriptors of this process refer to `f`'s file. Counted by the file, not as the length of
    /proc/self/fd: another thread of the test process (a pool, a logger) may open or close descriptors of its own
    meanwhile, which made the whole-table count flaky in a long pytest run."""
    want = os.fstat(f.fileno())
    n = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            st = os.stat(f"/proc/self/fd/{name}")
        except OSError:            # closed since the listing (the listing's own descriptor among them)
            continue
        n += (st.st_dev, st.st_ino) == (want.st_dev, want.st_ino)
    return n


def _record(n: int = 4096, **kw) -> dict:
    return dict({"offset": 0, "nbytes": n, "dtype": "float32", "shape": [n // 4]}, **kw)


# ------------------------------------------------------------------------------------------ import, layouts
def test_the_module_imports_without_cuda_and_loads_nothing_until_a_driver_is_made():
    # loaded by its path, as the opener does (the package's __init__ imports torch)
    by_path = ("import importlib.util as u; s = u.spec_from_file_location('m', %r); m = u.module_from_spec(s); "
               "import sys; sys.modules['m'] = m; s.loader.exec_module(m); maps = open('/proc/self/maps').read(); "
               "print('libcuda' in maps, 'torch' in sys.modules)" % str(ROOT / "kernelgym_gap/core/cuda_vmm.py"))
    r = subprocess.run([sys.executable, "-c", by_path], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "False"]
    assert "import torch" not in (ROOT / "kernelgym_gap/core/cuda_vmm.py").read_text()


def test_the_driver_structs_have_cuda_h_layout():
    # cuda.h (CUDA 12/13): CUmemAllocationProp {int type; int requestedHandleTypes; CUmemLocation {int type; int
    # id;} location; void *win32HandleMetaData; struct {uchar compressionType; uchar gpuDirectRDMACapable; ushort
    # usage; uchar reserved[4];} allocFlags;}: 32 bytes on LP64
    P = vmm.CUmemAllocationProp
    assert ctypes.sizeof(P) == 32
    assert [(f, getattr(P, f).offset) for f, _ in P._fields_] == [
        ("type", 0), ("requestedHandleTypes", 4), ("location", 8), ("win32HandleMetaData", 16), ("allocFlags", 24)]
    assert ctypes.sizeof(vmm.CUmemLocation) == 8 and vmm.CUmemLocation.id.offset == 4
    F = vmm.CUmemAllocFlags
    assert ctypes.sizeof(F) == 8
    assert (F.gpuDirectRDMACapable.offset, F.usage.offset, F.reserved.offset) == (1, 2, 4)
    assert ctypes.sizeof(vmm.CUmemAccessDesc) == 12 and vmm.CUmemAccessDesc.flags.offset == 8
    # the generic handle and device pointers are 64-bit in every signature that carries them
    assert vmm.DRIVER_SIGNATURES["cuMemMap"][1][3] is ctypes.c_ulonglong
    assert vmm.DRIVER_SIGNATURES["cuMemcpyDtoDAsync_v2"][1][:2] == [ctypes.c_uint64, ctypes.c_uint64]


@pytest.mark.skipif(_libcuda_present(), reason="libcuda is present here")
def test_no_libcuda_is_a_typed_unsupported_error():
    with pytest.raises(vmm.VmmUnsupported) as e:
        vmm.VmmDriver(0)
    assert e.value.call == "load libcuda" and e.value.code == -1
    assert isinstance(e.value, vmm.CudaVmmError)


def test_a_library_that_is_not_cuda_is_a_typed_unsupported_error():
    import ctypes.util
    libc = ctypes.util.find_library("c")
    with pytest.raises(vmm.VmmUnsupported) as e:
        vmm.VmmDriver(0, libcuda=libc)
    assert e.value.call == "load symbols"


@pytest.mark.skipif(_libcuda_present(), reason="libcuda is present here")
def test_the_probe_exits_2_with_one_line_without_cuda():
    r = subprocess.run([sys.executable, str(PROBE), "--json", "/nonexistent/x.json"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ipc_probe_vmm: no CUDA device")
    assert r.stderr == ""


@pytest.mark.skipif(_libcuda_present(), reason="libcuda is present here")
def test_the_device_session_step_runs_the_vmm_probe_and_keeps_its_log(tmp_path):
    env = dict(os.environ, OUT=str(tmp_path / "out"), PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    r = subprocess.run(["bash", str(ROOT / "scripts" / "device_session.sh"), "ipc-probe-vmm"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 2, r.stdout + r.stderr      # pipefail: the step's status is the probe's
    assert "ipc_probe_vmm: no CUDA device" in r.stdout
    assert "no CUDA device" in (tmp_path / "out" / "ipc_probe_vmm" / "log.txt").read_text()


def test_the_probe_plans_the_light_batch_outputs():
    spec = __import__("importlib.util").util.spec_from_file_location("probe_vmm", PROBE)
    m = __import__("importlib.util").util.module_from_spec(spec)
    spec.loader.exec_module(m)
    sizes = m.pick_sizes(None)
    assert len(sizes) == 24 and min(sizes) == 4096 and max(sizes) == 256 << 20
    assert 1.3 < sum(sizes) / 2 ** 30 < 1.45
    offs, total = m.arena_layout([4096, 100, 8])
    assert offs == [0, 4096, 4352] and total == 4608
    assert m.quantiles([0.001, 0.002, 0.003])[:2] == (3, 2.0)
    with pytest.raises(ValueError):
        m.pick_sizes(0)


def test_the_probes_tables_print_a_full_report(capsys):
    """The success path's tables never run on cpu otherwise: a report as the device would give it prints every
    round, part and hostile row, the failed ones included."""
    spec = __import__("importlib.util").util.spec_from_file_location("probe_vmm_t", PROBE)
    m = __import__("importlib.util").util.module_from_spec(spec)
    spec.loader.exec_module(m)
    ok = {"row": "a: root namespaces", "handles": 24, "bytes": 1449132032, "parent_pid_ns": "pid:[1]",
          "exporter": {"sent": 24, "fd_kinds": ["a character device"], "granularity": 2097152, "pid_ns": "pid:[1]",
                       "uid": 0},
          "opener_errors": [], "verified": 24, "mismatched": [], "error": None, "round_trip_s": 9.1,
          "from_first_start_s": 9.5, "handover_s": 0.21,
          "start": {"python_s": 0.05, "context_s": 0.3, "to_first_cuda_s": 0.4}}
    report = {"rounds": [ok, {"row": "b: exporter in bwrap", "error": "RuntimeError: exporter exited"}],
              "parts": {"a: exporter create+map+copy+export": [0.001, 0.002],
                        "a: opener import+props+map+copy+unmap/release": []},
              "hostile": [{"row": "file", "sent": "a regular file", "result": "NotAnAllocation: fstat failed",
                           "opener_alive": "yes", "fresh_alive": "yes"},
                          {"row": "kill", "result": "not run (time)"}]}
    m.print_tables(report)
    out = capsys.readouterr().out
    assert "24/24 verified (1.35 GiB)" in out and "hand-over 0.210 s" in out
    assert "b: exporter in bwrap: FAILED: RuntimeError" in out
    assert "a: exporter create+map+copy+export" in out and "nan" in out      # an empty part prints, as NaN
    assert "NotAnAllocation: fstat failed" in out and "not run (time)" in out


class _HostDriver:
    """The opener role's driver over host memory: an "allocation" is a memfd, its import a dup, its map an mmap.
    Only the role's flow is under test (the arena's import, each record copied at its planned offset, the done
    messages, a broken channel ending the loop); the driver's own sequence is held by the scripted tests above."""
    granularity = 4096

    def __init__(self, device=0):
        self.mms = []

    def import_fd(self, fd, prefilter=True):
        return os.dup(fd)

    def map(self, handle, size):
        import mmap
        mm = mmap.mmap(handle, size)
        self.mms.append(mm)
        return ctypes.addressof(ctypes.c_char.from_buffer(mm))

    def unmap(self, ptr, size):
        pass

    def release(self, handle):
        os.close(handle)

    def copy_from_fd(self, fd, record, dst_ptr, prefilter=True, times=None):
        data = os.pread(fd, record["nbytes"], record["offset"])
        ctypes.memmove(dst_ptr, data, len(data))
        os.close(fd)
        times.update(import_s=0.0, props_s=0.0, map_s=0.0, copy_s=0.0, release_s=0.0)


def _memfd(data: bytes) -> int:
    fd = os.memfd_create("kgg-test")
    os.ftruncate(fd, max(len(data), 4096))
    os.pwrite(fd, data, 0)
    return fd


@pytest.mark.parametrize("break_after", [None, 2])
def test_the_probes_opener_copies_each_record_to_its_offset_and_says_done(capsys, monkeypatch, break_after):
    import argparse
    spec = __import__("importlib.util").util.spec_from_file_location("probe_vmm_o", PROBE)
    m = __import__("importlib.util").util.module_from_spec(spec)
    spec.loader.exec_module(m)
    real = m.load_vmm()
    fake = type("V", (), {k: getattr(real, k) for k in ("recv_output", "recv_message", "ChannelRefused",
                                                         "round_up")})
    fake.VmmDriver = _HostDriver
    monkeypatch.setattr(m, "load_vmm", lambda: fake)
    sizes = [4096, 100, 8, 5000]
    offs, total = m.arena_layout(sizes)
    total = -(-total // 4096) * 4096              # the checker's allocation is whole granules, as the driver's is
    arena = _memfd(b"\0" * total)
    e_mine, e_theirs = ch.socket_pair()
    c_mine, c_theirs = ch.socket_pair()
    outs = [bytes([i + 1]) * n for i, n in enumerate(sizes)]
    ch.send_output(c_mine, arena, {"offset": 0, "nbytes": total, "dtype": "uint8", "shape": [total]})
    for i, data in enumerate(outs[:break_after]):
        fd = _memfd(b"x" * 16 + data)
        ch.send_output(e_mine, fd, {"offset": 16, "nbytes": len(data), "dtype": "uint8", "shape": [len(data)]})
        os.close(fd)
    if break_after is not None:
        e_mine.close()                            # the exporter gone: the opener must not wait per record
    a = argparse.Namespace(t0=__import__("time").time(), arena_sock=c_theirs.detach(), sock=e_theirs.detach(),
                           wait_s=5.0, n=len(sizes), offsets=",".join(map(str, offs)))
    m.role_opener(a)
    report = json.loads(capsys.readouterr().out.strip()[len("@@"):])
    got = os.pread(arena, total, 0)
    n_ok = len(sizes) if break_after is None else break_after
    for i in range(n_ok):
        assert got[offs[i]:offs[i] + sizes[i]] == outs[i]
    assert len(report["parts"]) == n_ok and report["handover_s"] is not None
    assert set(report["start"]) == {"python_s", "context_s", "to_first_cuda_s"}
    assert c_mine.recv(16) == b"done"
    if break_after is None:
        assert report["errors"] == [] and e_mine.recv(16) == b"done"
    else:
        # one error for the broken channel (the loop ended there, not 2 x 5 s of waiting), one for the done it
        # could not send to the gone exporter
        assert report["errors"] == ["2: channel: the peer closed the channel", "done: [Errno 32] Broken pipe"]
    os.close(arena)


_SCRIPTED_ROLES = {
    "hexporter": "import time; print('@@' + '{\"sent\": \"kill\", \"record\": {\"offset\": 0}}', flush=True); "
                 "time.sleep(60)",
    "hopener": "import sys; print('@@{\"mapped\": true}', flush=True); sys.stdin.readline(); "
               "print('@@{\"result\": \"copied, bytes intact\", \"opener_alive\": \"yes\"}', flush=True)",
    "fresh": "print('@@{\"alive\": \"yes\"}', flush=True)",
    # an opener that fails before it maps (its import refused): its answer is the row
    "hopener_fails": "print('@@{\"result\": \"NotAnAllocation: refused\", \"opener_alive\": \"yes\"}', flush=True)",
}


@pytest.mark.parametrize("opener", ["hopener", "hopener_fails"])
def test_the_probes_kill_row_kills_the_exporter_while_the_opener_holds_the_mapping(opener):
    """The kill row's order, with scripted roles: the opener says "mapped", only then is the exporter killed
    (SIGKILL, reaped), then the opener is told to copy; its answer and a fresh process's make the row."""
    spec = __import__("importlib.util").util.spec_from_file_location("probe_vmm_k", PROBE)
    m = __import__("importlib.util").util.module_from_spec(spec)
    spec.loader.exec_module(m)

    class Scripted(m.Probe):
        def start(self, name, role, extra, fds=(), prefix=(), cwd=None, env=None):
            role = opener if role == "hopener" else role
            c = m.Child(name, [sys.executable, "-c", _SCRIPTED_ROLES[role]], self.env, pass_fds=fds)
            self.children.append(c)
            return c

    import argparse
    p = Scripted(argparse.Namespace(timeout_s=60, handles=1, skip_hostile=False, child_s=20))
    t0 = __import__("time").monotonic()
    p.hostile_row("kill")
    row = p.hostile[-1]
    if opener == "hopener":
        assert row["exporter_rc"] == -9
        assert row["result"] == "copied, bytes intact"
    else:                                        # never mapped: nothing to kill under it, and no wait for a 2nd answer
        assert "exporter_rc" not in row and row["result"] == "NotAnAllocation: refused"
        assert __import__("time").monotonic() - t0 < 15
    assert row["opener_alive"] == "yes" and row["fresh_alive"] == "yes"
    assert all(c.proc.poll() is not None for c in p.children)


# ------------------------------------------------------------------------------------------ the socket layer
def test_a_record_and_its_fd_cross_a_socket_pair():
    a, b = ch.socket_pair()
    with a, b, tempfile.TemporaryFile() as f:
        ch.send_output(b, f.fileno(), _record(8192, i=3))
        rec, fd = ch.recv_output(a, timeout_s=5)
        try:
            assert rec == _record(8192, i=3)
            assert fd != f.fileno() and os.fstat(fd).st_ino == os.fstat(f.fileno()).st_ino
            # received close-on-exec: a process the opener starts does not inherit it
            import fcntl
            assert fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC
        finally:
            os.close(fd)


def test_more_descriptors_than_the_bound_are_refused_and_none_leak():
    a, b = ch.socket_pair()
    with a, b, tempfile.TemporaryFile() as f:
        before = _open_fds(f)
        fds = [os.dup(f.fileno()) for _ in range(3)]
        socket.send_fds(b, [json.dumps(_record()).encode()], fds)
        for fd in fds:
            os.close(fd)
        with pytest.raises(ch.ChannelRefused, match="more than 1 descriptor"):
            ch.recv_output(a, timeout_s=5)
        assert _open_fds(f) == before


def test_a_record_over_the_byte_bound_is_refused_and_its_fd_closed():
    a, b = ch.socket_pair()
    with a, b, tempfile.TemporaryFile() as f:
        before = _open_fds(f)
        big = json.dumps(_record(pad="x" * ch.RECORD_MAX_BYTES)).encode()
        socket.send_fds(b, [big], [f.fileno()])
        with pytest.raises(ch.ChannelRefused, match="over 4096 bytes"):
            ch.recv_output(a, timeout_s=5)
        assert _open_fds(f) == before
        with pytest.raises(ValueError):           # the honest sender refuses to make one
            ch.send_output(b, f.fileno(), _record(pad="x" * ch.RECORD_MAX_BYTES))


@pytest.mark.parametrize("payload, fds, why", [
    (json.dumps(_record()).encode(), 0, "exactly one descriptor"),
    (b"{not json", 1, "JSON"),
    (json.dumps(_record(offset=-1)).encode(), 1, "out of range"),
    (json.dumps(_record(nbytes=0)).encode(), 1, "out of range"),
    (json.dumps(_record(nbytes=1.5)).encode(), 1, "integer"),
    (json.dumps(_record(offset=True)).encode(), 1, "integer"),
    (json.dumps(_record(nbytes=1 << 48)).encode(), 1, "out of range"),
    (json.dumps(_record(shape=[2, -1])).encode(), 1, "shape"),
    (json.dumps(_record(dtype=7)).encode(), 1, "dtype"),
    (json.dumps([1, 2]).encode(), 1, "JSON object"),
])
def test_a_malformed_message_is_refused_with_its_fd_closed(payload, fds, why):
    a, b = ch.socket_pair()
    with a, b, tempfile.TemporaryFile() as f:
        before = _open_fds(f)
        if fds:
            socket.send_fds(b, [payload], [f.fileno()])
        else:
            b.send(payload)
        with pytest.raises(ch.ChannelRefused, match=why):
            ch.recv_output(a, timeout_s=5)
        assert _open_fds(f) == before


def test_the_nbytes_bound_and_silence_and_a_closed_peer_are_refused():
    a, b = ch.socket_pair()
    with a, tempfile.TemporaryFile() as f:
        socket.send_fds(b, [json.dumps(_record(1 << 20)).encode()], [f.fileno()])
        with pytest.raises(ch.ChannelRefused, match="over the bound"):
            ch.recv_output(a, timeout_s=5, max_nbytes=4096)
        with pytest.raises(ch.ChannelRefused, match="no message within"):
            ch.recv_output(a, timeout_s=0.2)
        b.close()
        with pytest.raises(ch.ChannelRefused, match="closed"):
            ch.recv_output(a, timeout_s=5)


def test_the_prefilter_refuses_files_pipes_and_sockets_but_leaves_character_devices_to_the_driver():
    r, w = os.pipe()
    a, b = socket.socketpair()
    with tempfile.TemporaryFile() as f, a, b:
        try:
            for fd, kind in ((f.fileno(), "a regular file"), (r, "a pipe"), (a.fileno(), "a socket")):
                assert vmm.fd_kind(fd) == kind
                with pytest.raises(vmm.NotAnAllocation, match=kind) as e:
                    vmm.refuse_plain_fd(fd)
                assert e.value.call == "fstat"
        finally:
            os.close(r)
            os.close(w)
    z = os.open("/dev/zero", os.O_RDONLY)
    try:
        assert vmm.fd_kind(z) == "a character device"
        vmm.refuse_plain_fd(z)                     # no error: the import call decides
    finally:
        os.close(z)
    with pytest.raises(vmm.NotAnAllocation, match="descriptor"):
        vmm.refuse_plain_fd(z)                     # closed: EBADF is a typed refusal too


@pytest.mark.parametrize("kind", ["bwrap", "unshare"])
def test_a_descriptor_crosses_the_sandboxs_pid_namespace_by_scm_rights(kind, tmp_path):
    """The route's premise without a GPU: a child started under sandbox/isolation.py's own argv (its own pid, ipc
    and net namespaces; a fresh uid when root), its socket end passed with pass_fds at fd 300, sends the fd of a
    file it made; the parent reads the child's bytes through it. No pid is named on either side."""
    from kernelgym_gap.core.config import SandboxConfig
    from kernelgym_gap.sandbox import isolation
    if not isolation.mode_works(kind):
        pytest.skip(f"{kind} does not work on this machine")
    import fcntl
    uid = isolation._fresh_uid() if isolation.mode_works(kind + "+uid") else None
    scratch = tmp_path / "scratch"
    scratch.mkdir(mode=0o755)
    if uid is not None:
        os.chown(scratch, uid, uid)
    prefix = (isolation.bwrap_argv(scratch, SandboxConfig(), uid, privileged=os.geteuid() == 0) if kind == "bwrap"
              else isolation.unshare_argv(scratch, SandboxConfig(), uid))
    mine, theirs = ch.socket_pair()
    child_fd = fcntl.fcntl(theirs.fileno(), fcntl.F_DUPFD_CLOEXEC, 300)
    theirs.close()
    code = ("import os, socket, json; s = socket.socket(fileno=300); f = open('out', 'w+b'); "
            "f.write(os.readlink('/proc/self/ns/pid').encode()); f.flush(); "
            "socket.send_fds(s, [json.dumps({'offset': 0, 'nbytes': 4, 'dtype': 'uint8', 'shape': [4]}).encode()], "
            "[f.fileno()])")
    try:
        r = subprocess.run(prefix + [sys.executable, "-S", "-c", code], pass_fds=(child_fd,), cwd=scratch,
                           capture_output=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    finally:
        os.close(child_fd)
    assert r.returncode == 0, r.stderr[-500:]
    with mine:
        rec, fd = ch.recv_output(mine, timeout_s=5)
    try:
        their_ns = os.pread(fd, 64, 0).decode()
    finally:
        os.close(fd)
    assert rec["nbytes"] == 4
    assert their_ns.startswith("pid:[") and their_ns != os.readlink("/proc/self/ns/pid")


# ------------------------------------------------------------------------------------------ the opener's order
class _ScriptedDriver:
    """libcuda's calls as the opener makes them, each answering from `codes` (default success) and logged, so the
    clean-up order after each refusal can be held without a GPU."""

    def __init__(self, **codes):
        self.codes, self.log, self.args = codes, [], {}

    def __getattr__(self, name):
        def call(*args):
            self.log.append(name)
            self.args[name] = args
            if name == "cuGetErrorName":
                args[1]._obj.value = b"CUDA_ERROR_SCRIPTED"
                return 0
            if name == "cuMemGetAllocationPropertiesFromHandle":
                p = args[0]._obj
                p.type, p.location.type, p.location.id = 1, 1, 0
            return self.codes.get(name, 0)
        return call


def _driver(**codes) -> vmm.VmmDriver:
    d = vmm.VmmDriver.__new__(vmm.VmmDriver)
    d.drv, d.device, d.cu_device, d.granularity = _ScriptedDriver(**codes), 0, 0, 2 << 20
    return d


def _closed(fd: int) -> bool:
    try:
        os.fstat(fd)
        return False
    except OSError:
        return True


def test_a_refused_import_is_not_an_allocation_and_the_fd_is_closed():
    d = _driver(cuMemImportFromShareableHandle=vmm.CUDA_ERROR_INVALID_VALUE)
    fd = os.open("/dev/zero", os.O_RDONLY)
    with pytest.raises(vmm.NotAnAllocation) as e:
        d.copy_from_fd(fd, _record(), 0)
    assert e.value.call == "cuMemImportFromShareableHandle" and e.value.name == "CUDA_ERROR_SCRIPTED"
    assert _closed(fd)
    assert "cuMemMap" not in d.drv.log and "cuMemRelease" not in d.drv.log


def test_not_supported_from_a_childs_fd_is_a_verdict_not_the_fallback():
    d = _driver(cuMemImportFromShareableHandle=vmm.CUDA_ERROR_NOT_SUPPORTED)
    fd = os.open("/dev/zero", os.O_RDONLY)
    with pytest.raises(vmm.NotAnAllocation) as e:
        d.copy_from_fd(fd, _record(), 0)
    assert not isinstance(e.value, vmm.VmmUnsupported)


def test_a_plain_file_never_reaches_the_driver():
    d = _driver()
    with tempfile.TemporaryFile() as f:
        fd = os.dup(f.fileno())
        with pytest.raises(vmm.NotAnAllocation, match="regular file"):
            d.copy_from_fd(fd, _record(), 0)
    assert d.drv.log == [] and _closed(fd)


def test_an_extent_the_map_refuses_is_extent_refused_and_everything_is_released():
    d = _driver(cuMemMap=vmm.CUDA_ERROR_INVALID_VALUE)
    fd = os.open("/dev/zero", os.O_RDONLY)
    with pytest.raises(vmm.ExtentRefused):
        d.copy_from_fd(fd, _record(offset=(2 << 20) - 4096, n=8192), 0)
    log = d.drv.log
    assert "cuMemcpyDtoDAsync_v2" not in log and "cuMemUnmap" not in log
    assert log.index("cuMemAddressFree") > log.index("cuMemMap") and log[-1] == "cuMemRelease"
    assert _closed(fd)


def test_the_map_covers_the_records_extent_rounded_to_the_granularity():
    d = _driver()
    fd = os.open("/dev/zero", os.O_RDONLY)
    times: dict = {}
    d.copy_from_fd(fd, _record(offset=4096, n=(2 << 20)), 0x1000, times=times)
    assert d.drv.args["cuMemMap"][1].value == 4 << 20      # 4 KiB + 2 MiB: two 2 MiB granules, from offset 0
    assert d.drv.args["cuMemMap"][2].value == 0
    assert d.drv.log[-3:] == ["cuMemUnmap", "cuMemAddressFree", "cuMemRelease"]
    assert set(times) == {"import_s", "props_s", "map_s", "copy_s", "release_s"} and _closed(fd)


def test_an_allocation_of_another_device_is_not_an_allocation_here():
    d = _driver()
    d.cu_device = 1                              # the scripted properties say device 0
    fd = os.open("/dev/zero", os.O_RDONLY)
    with pytest.raises(vmm.NotAnAllocation, match="not pinned memory of device 1"):
        d.copy_from_fd(fd, _record(), 0)
    assert "cuMemMap" not in d.drv.log and d.drv.log[-1] == "cuMemRelease" and _closed(fd)


# ------------------------------------------------------------------------------------------ on the GPU
_EXPORTER = textwrap.dedent("""
    import os, sys, socket, time, torch
    from kernelgym_gap.core import cuda_vmm as vmm, fd_channel as ch
    s = socket.socket(fileno=int(sys.argv[1]))
    torch.cuda.init()
    drv = vmm.VmmDriver(0)
    t = torch.arange(int(sys.argv[2]) // 4, dtype=torch.int32, device="cuda") * 7 + 3
    alloc, fd = drv.export_copy(t.data_ptr(), t.numel() * 4, torch.cuda.current_stream().cuda_stream)
    ch.send_output(s, fd, {"offset": 0, "nbytes": t.numel() * 4, "dtype": "int32", "shape": [t.numel()]})
    os.close(fd)
    print(os.readlink("/proc/self/ns/pid"), flush=True)
    ch.recv_message(s, timeout_s=60)
""")


# The pid namespace the gpu test's exporter runs in: isolation.unshare_argv's namespaces (the probe's row b, which
# passed on the H200 on 2026-12-06) without its shell. --mount --mount-proc matter: without them the child keeps the
# host's /proc, where /proc/<its getpid()> is the host's pid 1, not itself (a cpu test below shows it), while every
# row that passed with a pid namespace had a fresh /proc (row b, and ipc_probe.py's "pid alone" row). The bare
# `unshare --pid --ipc --net --fork --kill-child` failed on that H200 with the exporter gone before it sent anything.
PID_NS_PREFIX = ["unshare", "--mount", "--pid", "--ipc", "--net", "--fork", "--kill-child", "--mount-proc", "--"]


def _recv_or_explain(mine: socket.socket, p: subprocess.Popen, argv: list[str], timeout_s: float = 120):
    """The exporter's record and descriptor, or an AssertionError that carries what the child said: its exit status
    and stderr (on the H200 the failure said only "the peer closed the channel")."""
    try:
        return ch.recv_output(mine, timeout_s=timeout_s)
    except ch.ChannelRefused as e:
        p.kill()
        try:
            out, err = p.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            out, err = b"", b"(no stderr: the child did not end within 10 s of its kill)"
        raise AssertionError(f"the exporter sent nothing ({e}); argv {argv[:12]}; exit {p.returncode}; "
                             f"stderr:\n{err.decode(errors='replace')[-4000:]}\nstdout:\n"
                             f"{out.decode(errors='replace')[-1000:]}") from None


def _start_exporter(prefix: list[str], script: str, *args: str):
    """The exporter under prefix with its socket end at fd 300 (clear of a shell's 3..9, as the probe places it)."""
    mine, theirs = ch.socket_pair()
    import fcntl
    child_fd = fcntl.fcntl(theirs.fileno(), fcntl.F_DUPFD_CLOEXEC, 300)
    theirs.close()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT)] + sys.path))
    argv = prefix + [sys.executable, "-c", script, str(child_fd), *args]
    p = subprocess.Popen(argv, env=env, pass_fds=(child_fd,), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    os.close(child_fd)
    return p, mine, argv


def _round_trip(prefix: list[str], nbytes: int = 3 << 20):
    torch = pytest.importorskip("torch")
    drv = vmm.VmmDriver(0)
    p, mine, argv = _start_exporter(prefix, _EXPORTER, str(nbytes))
    try:
        rec, fd = _recv_or_explain(mine, p, argv)
        dst = drv.allocate(nbytes)
        drv.copy_from_fd(fd, rec, dst.ptr)
        got = drv.copy_to_host(dst.ptr, nbytes)
        expect = ((torch.arange(nbytes // 4, dtype=torch.int64) * 7 + 3).to(torch.int32)).numpy().tobytes()
        assert got == expect
        drv.free(dst)
        mine.send(b"done")
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        return out.decode().strip()
    finally:
        p.kill()
        mine.close()


def test_an_exporter_that_sends_nothing_fails_with_its_own_stderr():
    p, mine, argv = _start_exporter([], "import sys; print('the exporter broke here', file=sys.stderr); sys.exit(3)")
    try:
        with pytest.raises(AssertionError, match=r"(?s)exit 3.*the exporter broke here"):
            _recv_or_explain(mine, p, argv, timeout_s=60)
    finally:
        p.kill()
        mine.close()


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare")
def test_the_pid_namespace_prefix_gives_the_exporter_a_proc_of_its_own():
    """Under PID_NS_PREFIX /proc/self is the process itself, as in the sandbox; under the bare prefix the gpu test
    used before, it is not (this machine: pid 1 inside, /proc/self a host pid)."""
    probe = "import os; print(os.readlink('/proc/self') == str(os.getpid()))"
    ours = subprocess.run(PID_NS_PREFIX + [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert ours.returncode == 0 and ours.stdout.strip() == "True", ours.stderr
    bare = ["unshare", "--pid", "--ipc", "--net", "--fork", "--kill-child", "--"]
    old = subprocess.run(bare + [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert old.returncode == 0 and old.stdout.strip() == "False", old.stderr


@pytest.mark.gpu
def test_gpu_an_exported_output_crosses_processes_by_its_fd():
    assert _round_trip([])


@pytest.mark.gpu
@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare")
def test_gpu_an_exported_output_crosses_a_pid_namespace_by_its_fd():
    child_ns = _round_trip(PID_NS_PREFIX)
    assert child_ns != os.readlink("/proc/self/ns/pid")


@pytest.mark.gpu
def test_gpu_a_non_cuda_fd_is_a_typed_refusal_and_the_opener_lives():
    drv = vmm.VmmDriver(0)
    dst = drv.allocate(4096)
    for make in (lambda: os.open("/dev/zero", os.O_RDONLY), lambda: os.pipe()[0]):
        fd = make()
        with pytest.raises(vmm.NotAnAllocation):
            drv.copy_from_fd(fd, _record(), dst.ptr, prefilter=False)
        assert _closed(fd)
        assert drv.alive() is None
    drv.free(dst)


@pytest.mark.gpu
def test_gpu_an_extent_past_the_allocation_is_refused_before_any_copy():
    drv = vmm.VmmDriver(0)
    a = drv.allocate(1)
    fd = drv.export_fd(a.handle)
    dst = drv.allocate(8192)
    with pytest.raises(vmm.ExtentRefused):
        drv.copy_from_fd(fd, _record(offset=a.size - 4096, n=8192), dst.ptr)
    assert drv.alive() is None
    drv.free(dst)
    drv.free(a)
