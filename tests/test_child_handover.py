"""The child's side of the outputs' hand-over on the device (issue 35; Job.outputs_by_handle): the export of a
device copy's record (child/export.py), HeldOutputs' handle mode (child/outputs.py), the checkpoint and final
reports naming handed-over outputs by their records (child/run.py), and the hold after the final OK report with
its SIGUSR1 fallback to files (child/hold.py).

On cpu the GPU is pretended as in tests/test_outputs.py: `outputs._on_gpu` takes a cpu tensor for a device one
(its "device copy" is then a cpu clone) and `outputs._export` stands in for torch's `_share_cuda_`, giving a
record whose handle is the copy's sha512 (128 hex digits), so a test can tell which bytes it named. The gpu test
exports a real CUDA tensor and opens its handle in another process (judge/cuda_ipc)."""
from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from kernelgym_gap.child import outputs
from kernelgym_gap.child.export import ExportError, NotOnCuda, export_handle, record_from_share
from kernelgym_gap.child.outputs import HeldOutputs
from kernelgym_gap.core.output_handle import OutputHandle
from kernelgym_gap.core.record import ChildReport, ShapeTiming, TrialOutcome
from kernelgym_gap.core.slowness import CHECKPOINT_FILE, HOLD_MARKER
from kernelgym_gap.core.status import Status
from kernelgym_gap.core.tensor_file import read_tensor


def fake_export(t: torch.Tensor) -> OutputHandle:
    """The record torch's export would give, its handle the bytes' sha512 (the GPU is pretended)."""
    return OutputHandle(handle=hashlib.sha512(t.numpy().tobytes()).hexdigest(), offset=0,
                        nbytes=t.numel() * t.element_size(), dtype=str(t.dtype).removeprefix("torch."),
                        shape=tuple(t.shape))


@pytest.fixture
def pretend_gpu(monkeypatch):
    """Every output taken for a device one; the exports counted by name of the bytes' digest."""
    exported: list[str] = []

    def export(t):
        record = fake_export(t)
        exported.append(record.handle)
        return record

    monkeypatch.setattr(outputs, "_on_gpu", lambda t: True)
    monkeypatch.setattr(outputs, "_export", export)
    return exported


def _digest(value: float, n: int = 8) -> str:
    return hashlib.sha512(torch.full((n,), value).numpy().tobytes()).hexdigest()


# ---- child/export.py -------------------------------------------------------------------------------------

RAW = bytes(range(64))


@pytest.mark.parametrize("version", [2, 3])
def test_a_records_handle_is_the_segments_raw_handle_and_its_offset_adds_the_tensors(version):
    """torch's handle string is [version][b"c"][64 raw bytes] (2; 3 from torch 2.13, the payload unchanged);
    the record carries the raw bytes as hex, and the offset of the storage in its segment plus the tensor's
    own storage offset in bytes."""
    share = (0, bytes([version]) + b"c" + RAW, 4096, 1536, b"ref", 0, b"ev", False)
    rec = record_from_share(share, storage_offset=10, itemsize=2, numel=6, dtype=torch.float16, shape=(2, 3))
    assert rec == OutputHandle(handle=RAW.hex(), offset=1536 + 20, nbytes=12, dtype="float16", shape=(2, 3))


@pytest.mark.parametrize("handle,says", [
    (b"\x03e" + RAW, "expandable segment"),
    (b"\x03c" + RAW[:63], "not a cudaMalloc segment"),
    (b"\x03x" + RAW, "not a cudaMalloc segment"),
    (b"", "not a cudaMalloc segment"),
])
def test_a_handle_that_is_not_a_cudamalloc_segments_is_an_export_error(handle, says):
    with pytest.raises(ExportError, match=says):
        record_from_share((0, handle, 64, 0), 0, 4, 4, torch.float32, (4,))


def test_an_empty_output_is_not_exported():
    with pytest.raises(ExportError, match="empty"):
        record_from_share((0, b"\x03c" + RAW, 64, 0), 0, 4, 0, torch.float32, (0,))


def test_a_tensor_not_on_cuda_is_a_typed_error_before_any_export():
    with pytest.raises(NotOnCuda, match="not on a CUDA device"):
        export_handle(torch.zeros(4))
    assert issubclass(NotOnCuda, ExportError)
    with pytest.raises(ExportError, match="torch.Tensor"):
        export_handle([1.0])


# ---- child/outputs.py: HeldOutputs in handle mode --------------------------------------------------------

def test_in_handle_mode_device_copies_are_exported_once_and_never_written(tmp_path, pretend_gpu):
    held = HeldOutputs(tmp_path, budget_bytes=1 << 20, device_budget_bytes=64, by_handle=True)
    returned = torch.full((8,), 1.0)                # 32 bytes each
    held.add("a.tensor", returned)
    returned.fill_(-1)                              # the submission reuses its buffer: the copy kept 1.0
    held.add("b.tensor", torch.full((8,), 2.0))
    held.add("c.tensor", torch.full((8,), 3.0))     # past the device budget: a host copy, written as before
    held.write()                                    # a checkpoint
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.tensor"]
    assert held.handles["a.tensor"].handle == _digest(1.0) and held.handles["b.tensor"].handle == _digest(2.0)
    assert [n for n, _ in held.held] == ["a.tensor", "b.tensor"] and held.device_bytes == 64
    # the handed-over copies stay held, so the device budget counts them until the end: a later output goes
    # to the host, and the next checkpoint exports nothing again
    held.add("d.tensor", torch.full((8,), 4.0))
    held.write()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.tensor", "d.tensor"]
    assert pretend_gpu == [_digest(1.0), _digest(2.0)]


def test_before_the_hold_the_free_cached_segments_go_back_and_the_reserved_memory_is_said(tmp_path, pretend_gpu,
                                                                                             monkeypatch):
    """A held child keeps its device memory until the verdict: what it still reserves then is its handed-over
    copies' segments, not its peak (the full mix's OOM of 2026-12-07), and the record says how much."""
    calls = []
    monkeypatch.setattr(outputs, "_empty_cache", lambda: calls.append("empty"))
    monkeypatch.setattr(outputs, "_reserved", lambda: 3 << 20)
    held = HeldOutputs(tmp_path, budget_bytes=1 << 20, device_budget_bytes=1 << 20, by_handle=True)
    assert held.before_hold() == 0.0 and calls == []        # nothing handed over: nothing to keep
    held.add("a.tensor", torch.full((8,), 1.0))
    held.write()
    assert held.before_hold() == 3.0 and calls == ["empty"]


def test_an_output_whose_export_fails_is_written_as_a_file_instead(tmp_path, monkeypatch):
    def export(t):
        if float(t[0]) == 2.0:
            raise ExportError("an expandable segment")
        return fake_export(t)

    monkeypatch.setattr(outputs, "_on_gpu", lambda t: True)
    monkeypatch.setattr(outputs, "_export", export)
    held = HeldOutputs(tmp_path, budget_bytes=0, device_budget_bytes=1 << 20, by_handle=True)
    held.add("a.tensor", torch.full((8,), 1.0))
    held.add("b.tensor", torch.full((8,), 2.0))
    held.write()
    assert set(held.handles) == {"a.tensor"} and [p.name for p in tmp_path.iterdir()] == ["b.tensor"]
    assert held.not_exported == {"b.tensor": "ExportError: an expandable segment"}
    assert torch.equal(read_tensor(tmp_path / "b.tensor", 1 << 20), torch.full((8,), 2.0))


def test_reports_name_the_handed_over_outputs_by_their_records_and_the_fallback_writes_them(tmp_path, pretend_gpu):
    held = HeldOutputs(tmp_path, budget_bytes=1 << 20, device_budget_bytes=1 << 20, by_handle=True)
    returned = torch.full((8,), 1.0)
    held.add("trial_0.tensor", returned)
    returned.fill_(-1)
    held.add("recheck_9.tensor", torch.full((8,), 5.0))
    held.write()
    report = ChildReport(status=Status.OK, message="", trials=(_outcome(0, "trial_0.tensor"),
                                                                _outcome(1, None)),
                         timings=(_timing("recheck_9.tensor"),))
    shown = held.handed_over(report)
    assert shown.trials[0].output_file is None and shown.trials[0].output_handle.handle == _digest(1.0)
    assert shown.trials[1] == report.trials[1]
    assert shown.timings[0].recheck_output_file is None
    assert shown.timings[0].recheck_output_handle.handle == _digest(5.0)
    assert ChildReport.from_json(shown.to_json()) == shown      # what the parent reads back
    assert not any(tmp_path.iterdir())
    held.write_instead_of_handles()                             # the parent asked for files
    assert torch.equal(read_tensor(tmp_path / "trial_0.tensor", 1 << 20), torch.full((8,), 1.0))
    assert torch.equal(read_tensor(tmp_path / "recheck_9.tensor", 1 << 20), torch.full((8,), 5.0))
    assert held.held == [] and held.device_bytes == 0 and held.handed_over(report) is report


def test_with_the_flag_off_nothing_is_exported_and_every_device_copy_is_written(tmp_path, monkeypatch):
    def export(t):
        raise AssertionError("exported with Job.outputs_by_handle off")

    monkeypatch.setattr(outputs, "_on_gpu", lambda t: True)
    monkeypatch.setattr(outputs, "_export", export)
    held = HeldOutputs(tmp_path, budget_bytes=1 << 20, device_budget_bytes=1 << 20)
    held.add("a.tensor", torch.full((8,), 1.0))
    held.write()
    report = ChildReport(status=Status.OK, message="", trials=(_outcome(0, "a.tensor"),))
    assert (tmp_path / "a.tensor").exists() and held.handles == {} and held.handed_over(report) is report


def _outcome(index: int, name: str | None) -> TrialOutcome:
    return TrialOutcome(index=index, output_file=name, launches=1, programs=1, seconds=0.01,
                        input_digest_before="d", input_digest_after="d")


def _timing(name: str) -> ShapeTiming:
    from kernelgym_gap.core.record import Trial
    return ShapeTiming(shape=(8,), dtype="float32", split="public", kernel_ms=0.1, kernel_spread=0.0,
                       kernel_reps=5, library_ms=0.1, library_spread=0.0, library_reps=5, launches_per_call=1,
                       programs=1, recheck_output_file=name,
                       recheck_trial=Trial(9, (8,), "float32", 1, "normal", "public"))


# ---- child/run.py: the checkpoint, the final report and the hold --------------------------------------------

def partial_child(tmp_path: Path, by_handle: bool):
    """A ChildRun with what `checkpoint` and `finish` use (as tests/test_child_lanes.py builds one): no lane,
    the outputs and reports in `tmp_path`, one finished trial whose output is held on the (pretended) device."""
    from kernelgym_gap.child.lanes import ChildLane
    from kernelgym_gap.child.run import ChildRun
    run = ChildRun.__new__(ChildRun)
    run.lane, run.phases, run.common, run.checkpointed, run.checkpoint_report = ChildLane(None, None, {}), {}, {}, 0, None
    run.report_path = tmp_path / "report.json"
    run.t0 = time.perf_counter()
    run.held = HeldOutputs(tmp_path / "outputs", 1 << 20, device_budget_bytes=1 << 20, by_handle=by_handle)
    run.held.add("trial_0.tensor", torch.full((8,), 1.0))
    run.outcomes = [_outcome(0, "trial_0.tensor")]
    return run


@pytest.fixture
def no_hold(monkeypatch):
    """The hold made to fail the test instead of waiting for a signal that never comes."""
    from kernelgym_gap.child import run as run_mod

    def hold(directory, fallback):
        raise AssertionError("held")

    monkeypatch.setattr(run_mod, "hold_outputs", hold)


def test_a_checkpoint_in_handle_mode_carries_the_records_and_writes_no_file_for_them(tmp_path, pretend_gpu):
    (tmp_path / "outputs").mkdir()
    run = partial_child(tmp_path, by_handle=True)
    assert run.checkpoint() is None
    report = ChildReport.from_json((tmp_path / CHECKPOINT_FILE).read_text())
    assert report.status is Status.OK and report.trials[0].output_file is None
    assert report.trials[0].output_handle.handle == _digest(1.0)
    assert not any((tmp_path / "outputs").iterdir()) and [n for n, _ in run.held.held] == ["trial_0.tensor"]
    assert run.checkpoint_report.trials[0].output_file == "trial_0.tensor"   # for the fallback's rewrite


def test_a_non_ok_report_never_holds_and_names_files_as_before(tmp_path, pretend_gpu, no_hold):
    (tmp_path / "outputs").mkdir()
    run = partial_child(tmp_path, by_handle=True)
    run.checkpoint()
    assert run.held.handles                         # something is handed over, and still it does not hold
    assert run.finish(Status.MISMATCH, "wrong", trials=tuple(run.outcomes)) == 0
    report = ChildReport.from_json(run.report_path.read_text())
    assert report.status is Status.MISMATCH and report.trials[0].output_file == "trial_0.tensor"
    assert report.trials[0].output_handle is None and not (tmp_path / HOLD_MARKER).exists()


def test_with_the_flag_off_the_final_report_names_files_and_nothing_holds(tmp_path, pretend_gpu, no_hold):
    (tmp_path / "outputs").mkdir()
    run = partial_child(tmp_path, by_handle=False)
    run.checkpoint()
    assert run.finish(Status.OK, "", trials=tuple(run.outcomes)) == 0
    report = ChildReport.from_json(run.report_path.read_text())
    assert report.trials[0].output_file == "trial_0.tensor" and report.trials[0].output_handle is None
    assert (tmp_path / "outputs" / "trial_0.tensor").exists() and pretend_gpu == []
    assert not (tmp_path / HOLD_MARKER).exists()


# The child's final report and hold, in a process of its own (the hold installs a signal handler and waits):
# the same partial child, with a slow report write so that a marker made before the report were seen.
_HOLDING_CHILD = textwrap.dedent("""
    import sys, time, signal, threading
    from pathlib import Path
    sys.path.insert(0, sys.argv[2])
    import test_child_handover as t
    from kernelgym_gap.child import outputs, run as run_mod
    from kernelgym_gap.core.status import Status
    tmp, other_thread = Path(sys.argv[1]), sys.argv[3] == "other_thread"
    outputs._on_gpu = lambda x: True
    outputs._export = t.fake_export
    real_write = run_mod.write_report
    def slow_write(path, report):
        time.sleep(0.3)
        real_write(path, report)
    run_mod.write_report = slow_write
    run = t.partial_child(tmp, by_handle=True)
    run.checkpoint()                                   # trial 0 handed over at the checkpoint
    run.held.add("recheck_9.tensor", t.torch.full((8,), 5.0))
    run.write_outputs()                                # after the timing: the recheck's copy exported
    if other_thread:
        # SIGUSR1 reaches a thread other than the main one (torch's threads do not block it)
        threading.Thread(target=threading.Event().wait, daemon=True).start()
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    before = signal.getsignal(signal.SIGUSR1)
    code = run.finish(Status.OK, "", trials=tuple(run.outcomes), timings=(t._timing("recheck_9.tensor"),))
    assert signal.getsignal(signal.SIGUSR1) is before, "the hold left its handler installed"
    sys.exit(code)
    """)


def _cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])          # utime + stime


@pytest.mark.timeout(120)
@pytest.mark.parametrize("receiver", ["main_thread", "other_thread"])
def test_the_final_ok_report_holds_until_sigusr1_then_writes_the_files_and_rewrites_the_reports(tmp_path, receiver):
    (tmp_path / "outputs").mkdir()
    child = subprocess.Popen([sys.executable, "-c", _HOLDING_CHILD, str(tmp_path), str(Path(__file__).parent),
                              receiver], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        marker, deadline = tmp_path / HOLD_MARKER, time.monotonic() + 90
        while not os.path.lexists(marker):
            assert child.poll() is None, child.communicate()
            assert time.monotonic() < deadline, "no hold marker"
            time.sleep(0.002)
        # the marker means a complete report: read the instant it appears, it parses and names the records
        report = ChildReport.from_json((tmp_path / "report.json").read_text())
        assert report.status is Status.OK and report.trials[0].output_file is None
        assert report.trials[0].output_handle.handle == _digest(1.0)
        assert report.timings[0].recheck_output_file is None
        assert report.timings[0].recheck_output_handle.handle == _digest(5.0)
        assert ChildReport.from_json((tmp_path / CHECKPOINT_FILE).read_text()).trials[0].output_handle is not None
        assert not any((tmp_path / "outputs").iterdir())
        # it waits, without spinning: a second of CPU time in 100 ticks would be a busy loop
        ticks = _cpu_ticks(child.pid)
        time.sleep(0.5)
        assert child.poll() is None and _cpu_ticks(child.pid) - ticks <= 5
        child.send_signal(signal.SIGUSR1)             # the fallback
        out, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 0, err
    report = ChildReport.from_json((tmp_path / "report.json").read_text())
    assert report.status is Status.OK and report.trials[0].output_file == "trial_0.tensor"
    assert report.trials[0].output_handle is None and report.timings[0].recheck_output_handle is None
    assert report.timings[0].recheck_output_file == "recheck_9.tensor" and "outputs_write_fallback" in report.phases
    checkpoint = ChildReport.from_json((tmp_path / CHECKPOINT_FILE).read_text())
    assert checkpoint.trials[0].output_file == "trial_0.tensor" and checkpoint.trials[0].output_handle is None
    assert torch.equal(read_tensor(tmp_path / "outputs" / "trial_0.tensor", 1 << 20), torch.full((8,), 1.0))
    assert torch.equal(read_tensor(tmp_path / "outputs" / "recheck_9.tensor", 1 << 20), torch.full((8,), 5.0))
    assert not os.path.lexists(tmp_path / HOLD_MARKER)


def test_the_hold_replaces_a_marker_the_submission_left(tmp_path):
    """A file or link by the marker's name made earlier (the submission can write the scratch directory) is
    replaced by the hold's own marker, never followed."""
    from kernelgym_gap.child.hold import _create_marker
    target = tmp_path / "elsewhere"
    target.write_text("keep")
    (tmp_path / HOLD_MARKER).symlink_to(target)
    _create_marker(tmp_path / HOLD_MARKER)
    assert not (tmp_path / HOLD_MARKER).is_symlink() and (tmp_path / HOLD_MARKER).read_text() == ""
    assert target.read_text() == "keep"


def test_the_new_harness_modules_load_before_the_snapshot():
    """child/snapshots covers every harness module loaded when it is taken (`harness_modules`); a prestarted
    child imports child/run before any job (child/runner.wait_for_job), which must bring the export and the
    hold with it, bound before the submission loads."""
    code = ("import sys, kernelgym_gap.child.run; "
            "print(all(m in sys.modules for m in ('kernelgym_gap.child.export', 'kernelgym_gap.child.hold')))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.stdout.strip() == "True", r.stderr


# ---- on a GPU: a real export opens in another process ------------------------------------------------------

_EXPORTER = textwrap.dedent("""
    import hashlib, json, sys, torch
    from kernelgym_gap.child.export import export_handle
    base = torch.arange(1 << 20, dtype=torch.float32, device="cuda") * 3 + 1
    x = base[1000:]                       # a storage offset: the record's offset must count it
    torch.cuda.synchronize()
    r = export_handle(x)
    print(json.dumps({"handle": r.handle, "offset": r.offset, "nbytes": r.nbytes, "dtype": r.dtype,
                      "shape": list(r.shape), "sha256": hashlib.sha256(x.cpu().numpy().tobytes()).hexdigest()}),
          flush=True)
    sys.stdin.readline()                  # keeps the memory exported until the opener is done
    """)
_OPENER = textwrap.dedent("""
    import hashlib, sys
    from kernelgym_gap.judge.cuda_ipc import IpcRuntime, handle_from_hex
    h, off, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rt = IpcRuntime(0)
    p = rt.open(handle_from_hex(h))
    base, size = rt.address_range(p)
    assert base == p and off + n <= size, (base, p, off, n, size)
    dst = rt.malloc(n)
    rt.copy_d2d(dst, p + off, n)
    rt.close(p)
    print(hashlib.sha256(rt.copy_to_host(dst, n)).hexdigest())
    """)


@pytest.mark.gpu
@pytest.mark.timeout(180)
def test_gpu_an_exported_output_opens_in_another_process_with_the_same_bytes():
    exp = subprocess.Popen([sys.executable, "-c", _EXPORTER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        line = exp.stdout.readline()
        assert line, exp.stderr.read() if exp.poll() is not None else "no record"
        rec = json.loads(line)
        record = OutputHandle(rec["handle"], rec["offset"], rec["nbytes"], rec["dtype"], tuple(rec["shape"]))
        assert record.nbytes == ((1 << 20) - 1000) * 4 and record.dtype == "float32"
        assert record.shape == ((1 << 20) - 1000,) and record.offset % 4 == 0 and record.offset >= 4000
        r = subprocess.run([sys.executable, "-c", _OPENER, record.handle, str(record.offset), str(record.nbytes)],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == rec["sha256"]
    finally:
        exp.stdin.close()
        exp.wait(timeout=60)



def test_where_no_hold_can_be_set_up_the_outputs_go_by_file_at_once(tmp_path):
    """Off the main thread no signal handler can be installed: no marker is made (the parent would stop a child
    that cannot be asked for its files), and the fallback runs at once, its exit code returned."""
    import threading

    from kernelgym_gap.child.hold import hold_outputs
    got = {}
    thread = threading.Thread(target=lambda: got.update(code=hold_outputs(tmp_path, lambda: 7)))
    thread.start()
    thread.join(30)
    assert got == {"code": 7} and not os.path.lexists(tmp_path / HOLD_MARKER)


@pytest.mark.parametrize("flag", [False, True])
def test_the_jobs_flag_reaches_the_childs_held_outputs(tmp_path, flag):
    from kernelgym_gap.child.run import ChildRun
    from kernelgym_gap.core.record import Job, Trial
    job = Job(task_id="kernelgym_gap/AddReLU-v0", dsl="triton", backend="cuda", source_file=str(tmp_path / "s.py"),
              outputs_dir=str(tmp_path), report_file=str(tmp_path / "report.json"),
              trials=(Trial(0, (8,), "float32", 1, "normal", "public"),), timing=None,
              held_device_bytes=1 << 20, outputs_by_handle=flag)
    run = ChildRun(job)
    assert run.held.by_handle is flag and run.held.device_budget_bytes == 1 << 20 and run.checkpoint_report is None
