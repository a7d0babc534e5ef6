"""child/lanes.py: the child's hold of its GPU's lane, and letting it go while the DSL compiles in a first call
and while a checkpoint is written between correctness calls.

Real lane files (core/lane.py works the same on a CPU machine); a second Lane object plays another
evaluation's timing."""
import threading
import time
from pathlib import Path

import pytest

from kernelgym_gap.child import lanes as child_lanes
from kernelgym_gap.child.lanes import ChildLane
from kernelgym_gap.core.lane import Lane, LaneTimeout

FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture
def pair(tmp_path):
    """(the child's ChildLane and phases, another holder's Lane) on one lane directory."""
    mine, other = Lane.open(tmp_path, 0), Lane.open(tmp_path, 0)
    phases = {}
    yield ChildLane(mine, 30.0, phases), phases, other
    mine.close()
    other.close()


def _free_for(other: Lane, mode: str) -> bool:
    try:
        other.acquire(mode, timeout_s=0)
    except LaneTimeout:
        return False
    other.release()
    return True


def test_without_a_lane_every_block_just_runs():
    phases = {}
    child = ChildLane(None, None, phases)
    ran = []
    with child.stage("shared"), child.first_call(True), child.let_go():
        ran.append(1)
    assert ran == [1] and phases == {}


def test_a_first_calls_compile_lets_the_lane_go_and_takes_it_back(pair):
    child, phases, other = pair
    with child.stage("shared"):
        assert phases["lane_wait_shared"] >= 0 and not _free_for(other, "exclusive")
        with child.first_call(True):
            with child.let_go():
                assert _free_for(other, "exclusive")         # another evaluation's timing can run now
                time.sleep(0.05)
            assert child.holding == "shared" and not _free_for(other, "exclusive")
    assert phases["compile_unlaned"] >= 0.05 and phases["lane_wait_after_compile"] >= 0
    assert _free_for(other, "exclusive")                     # the stage let it go at its end


def test_outside_a_first_call_or_the_shared_stage_nothing_is_let_go(pair):
    child, phases, other = pair
    with child.stage("shared"):
        with child.first_call(False), child.let_go():
            assert not _free_for(other, "exclusive")
        with child.let_go():                                 # not inside a first call at all
            assert not _free_for(other, "exclusive")
    with child.stage("exclusive"), child.first_call(True), child.let_go():
        assert not _free_for(other, "shared")                # a timing's compile keeps its exclusive hold
    assert "compile_unlaned" not in phases


def test_nested_compiles_let_go_once(pair):
    child, phases, other = pair
    with child.stage("shared"), child.first_call(True):
        with child.let_go():
            with child.let_go():
                assert _free_for(other, "exclusive")
            assert _free_for(other, "exclusive")             # the inner one did not take it back early
        assert not _free_for(other, "exclusive")


def test_taking_it_back_waits_behind_a_timing_that_came_meanwhile(pair):
    child, phases, other = pair
    took = threading.Event()

    def timing():
        other.acquire("exclusive")
        took.set()
        time.sleep(0.3)
        other.release()

    with child.stage("shared"), child.first_call(True):
        with child.let_go():
            t = threading.Thread(target=timing)
            t.start()
            assert took.wait(5)
        t.join()
    assert phases["lane_wait_after_compile"] >= 0.2


def test_one_calls_waits_are_bounded_in_all_then_its_compiles_keep_the_lane(pair, monkeypatch):
    """An autotuned first call compiles once per config: once that call has waited LET_GO_WAIT_S in all to
    take the lane back (its own 60 s bound counts every wait), its further compiles keep the lane. A wait is
    never cut short by that (no GPU work without the lane); the next first call starts afresh."""
    child, phases, other = pair
    monkeypatch.setattr(child_lanes, "LET_GO_WAIT_S", 0.3)

    def timing(seconds, took):
        other.acquire("exclusive")
        took.set()
        time.sleep(seconds)
        other.release()

    with child.stage("shared"):
        with child.first_call(True):
            for _ in range(2):                               # two compiles, each 0.2 s behind a timing
                took = threading.Event()
                with child.let_go():
                    t = threading.Thread(target=timing, args=(0.2, took))
                    t.start()
                    assert took.wait(5)
                t.join()
                assert child.holding == "shared"             # waited it out, past the 0.3 s
            with child.let_go():                             # spent: this compile keeps the lane
                assert not _free_for(other, "exclusive")
        with child.first_call(True), child.let_go():         # the next first call may let go again
            assert _free_for(other, "exclusive")
    assert phases["lane_wait_after_compile"] >= 0.35 and "lane_timeout_shared" not in phases


def test_past_the_childs_lane_budget_the_call_goes_on_without_the_lane_and_says_so(tmp_path):
    mine, other = Lane.open(tmp_path, 0), Lane.open(tmp_path, 0)
    phases = {}
    child = ChildLane(mine, 0.2, phases)                     # nearly nothing left of the child's lane budget
    ran = []
    with child.stage("shared"), child.first_call(True):
        with child.let_go():
            other.acquire("exclusive")                       # a timing that outlasts the budget
        ran.append(child.holding)
    other.release()
    assert ran == [None] and 0.1 <= phases["lane_timeout_shared"] < 1.0
    mine.close()
    other.close()


def _checkpointing_child(child, phases, tmp_path):
    """A ChildRun with just what `checkpoint` uses: this lane, one finished trial whose output is held."""
    import torch

    from kernelgym_gap.child.outputs import HeldOutputs
    from kernelgym_gap.child.run import ChildRun
    from kernelgym_gap.core.record import TrialOutcome
    run = ChildRun.__new__(ChildRun)
    run.lane, run.phases, run.common, run.checkpointed = child, phases, {}, 0
    run.report_path = tmp_path / "report.json"
    run.held = HeldOutputs(tmp_path, 1 << 20)
    run.held.add("trial_0.bin", torch.arange(16, dtype=torch.float32))
    run.outcomes = [TrialOutcome(index=0, output_file="trial_0.bin", launches=1, programs=1, seconds=0.01,
                                 input_digest_before="d", input_digest_after="d")]
    return run


def test_a_checkpoint_between_calls_is_written_with_the_shared_lane_let_go(pair, tmp_path, monkeypatch):
    """ChildRun.checkpoint (issue 38) writes held outputs between correctness calls: pure disk work, so an
    evaluation's timing that waits for the lane gets it during the write, and the child takes the lane back,
    behind that timing, before `checkpoint` returns (the next call starts only then), with the checkpoint
    already on disk."""
    from kernelgym_gap.core.record import ChildReport
    from kernelgym_gap.core.slowness import CHECKPOINT_FILE
    from kernelgym_gap.core.status import Status
    child, phases, other = pair
    run = _checkpointing_child(child, phases, tmp_path)
    took, seen = threading.Event(), {}

    def timing():
        other.acquire("exclusive")          # queued behind the child's shared hold
        took.set()
        time.sleep(0.3)
        other.release()

    from kernelgym_gap.child import run as run_mod
    write = run_mod._HELD_WRITE

    def write_and_look(held):
        seen["timing_ran_during_the_write"] = took.wait(5)
        seen["holding"] = child.holding
        return write(held)

    # run.py calls HeldOutputs.write bound at import (child/instances.py: a shadow on the instance never runs)
    monkeypatch.setattr(run_mod, "_HELD_WRITE", write_and_look)
    with child.stage("shared"):
        t = threading.Thread(target=timing)
        t.start()
        time.sleep(0.1)                     # the timing is waiting at the gate
        assert not took.is_set()
        assert run.checkpoint() is None
        # taken back before the next call could start: held shared again, the timing done
        assert child.holding == "shared" and not t.is_alive() and not _free_for(other, "exclusive")
        assert (tmp_path / "trial_0.bin").exists()
        report = ChildReport.from_json((tmp_path / CHECKPOINT_FILE).read_text())
        assert report.status is Status.OK and [o.index for o in report.trials] == [0]
    t.join()
    assert seen == {"timing_ran_during_the_write": True, "holding": None}
    assert phases["lane_wait_after_checkpoint"] >= 0.2 and phases["checkpoint_unlaned"] > 0
    # the write alone, all of it with the lane let go; the wait behind the timing is not counted in it
    assert 0 < phases["checkpoint_write"] <= phases["checkpoint_unlaned"] < 0.25 and run.checkpointed == 1
    assert "lane_timeout_shared" not in phases


def test_disk_work_never_breaks_the_timings_exclusive_hold_nor_runs_without_a_lane_differently(pair):
    child, phases, other = pair
    with child.stage("exclusive"), child.unlaned("checkpoint"):
        assert child.holding == "exclusive" and not _free_for(other, "shared")
    ran = []
    with child.unlaned("checkpoint"):      # between the stages: nothing held, nothing to let go
        ran.append(child.holding)
    with ChildLane(None, None, {}).unlaned("checkpoint"):
        ran.append("no lane")
    assert ran == [None, "no lane"] and "checkpoint_unlaned" not in phases


def test_a_checkpoint_that_fails_does_not_wait_to_take_the_lane_back(pair, tmp_path, monkeypatch):
    """A failed write ends the child (its report says why): it does not queue for the lane first."""
    child, phases, other = pair
    run = _checkpointing_child(child, phases, tmp_path)
    failed = []

    def full_disk(held):
        raise OSError(28, "No space left on device")

    from kernelgym_gap.child import run as run_mod
    monkeypatch.setattr(run_mod, "_HELD_WRITE", full_disk)     # what run.py calls (child/instances.py)
    run.fail = lambda failure, **kw: failed.append(failure) or 0
    run.classify = lambda exc, where: (where, exc)
    with child.stage("shared"):
        assert run.checkpoint() == 0
        assert child.holding is None and _free_for(other, "exclusive")
    assert failed[0][0] == "while writing the outputs for the checker" and isinstance(failed[0][1], OSError)
    assert "lane_wait_after_checkpoint" not in phases and run.checkpointed == 0


def test_a_cpu_childs_checkpoints_let_its_lane_go(registry, tmp_path):
    """A real child on cpu (a lane only with an explicit lane_dir) checkpoints between its correctness calls
    with the lane let go, takes it back without running out of its budget, and the evaluation is unchanged."""
    from kernelgym_gap.core.config import EvalConfig
    from kernelgym_gap.core.status import Status
    from kernelgym_gap.engine.pipeline import evaluate
    task = registry.get("AddReLU")
    sol = next(s for s in task.solutions if s.dsl == "triton" and s.cpu_status == "ok")
    from kernelgym_gap.core.placement import Placement
    config = EvalConfig(trial_seed=0)
    rec = evaluate(task, task.solution_path(sol).read_text(), "triton", "cpu", config,
                   placement=Placement(lane_dir=str(tmp_path / "lanes")))
    assert rec.status is Status.OK, rec.message
    assert rec.latency["child_checkpoint_unlaned"] > 0, rec.latency
    assert rec.latency["child_checkpoint_write"] <= rec.latency["child_checkpoint_unlaned"], rec.latency
    assert "child_lane_wait_after_checkpoint" in rec.latency
    assert not any(k.startswith("child_lane_timeout") for k in rec.latency), rec.latency


def test_a_child_killed_past_a_call_deadline_left_checkpoints_written_with_the_lane_let_go(registry, tmp_path):
    """The too_slow path (issue 38) with a lane: the correct but hopeless fixture is killed in its largest
    shape's call and judged from its checkpoints, which it wrote with the shared lane let go (the phases come
    from the last checkpoint's report) and took back within its budget before each next call."""
    from kernelgym_gap.core.config import EvalConfig, SandboxConfig
    from kernelgym_gap.core.status import Status
    from kernelgym_gap.engine.pipeline import evaluate
    from kernelgym_gap.core.placement import Placement
    config = EvalConfig(trial_seed=0).replace(sandbox=SandboxConfig(compile_call_s=8.0, call_unknown_s=8.0))
    source = (FIXTURES / "failures" / "too_slow_serial.py").read_text()
    rec = evaluate(registry.get("LayerNorm"), source, "triton", "cpu", config,
                   placement=Placement(lane_dir=str(tmp_path / "lanes")))
    assert rec.status is Status.TOO_SLOW, rec.message
    assert rec.latency["child_checkpoint_unlaned"] > 0, rec.latency
    assert "child_lane_wait_after_checkpoint" in rec.latency
    assert not any(k.startswith("child_lane_timeout") for k in rec.latency), rec.latency


def test_the_triton_adapter_wraps_the_compile_step_in_its_hook():
    """The wrapper around JITFunction._do_compile (triton 3.6 and 3.7) enters the adapter's compile hook;
    without the method (another triton) nothing is wrapped."""
    import contextlib

    import triton.runtime.jit as jit
    from kernelgym_gap.dsl.triton import TritonAdapter
    assert hasattr(jit.JITFunction, "_do_compile"), "the triton this runs has no JITFunction._do_compile"

    class Fake:
        def _do_compile(self, key, *rest, **kw):
            entered.append(("compile", key))
            return "kernel"

    entered = []

    @contextlib.contextmanager
    def hook():
        entered.append("let go")
        yield
        entered.append("taken back")

    adapter = TritonAdapter.for_backend("cpu")
    adapter._wrap_compile(Fake)
    assert Fake()._do_compile("k") == "kernel" and entered == [("compile", "k")]   # no hook: as it was
    adapter.compile_hook = hook
    assert Fake()._do_compile("k2", 1, warmup=False) == "kernel"
    assert entered[1:] == ["let go", ("compile", "k2"), "taken back"]
    adapter._wrap_compile(object)                           # no _do_compile: left alone


@pytest.mark.slow
def test_a_real_tilelang_child_compiles_with_the_lane_let_go(registry, tmp_path):
    """A TileLang kernel compiles when it is built in its first call (JITKernel): with compile_outside_lane
    the child's phases show the compile time spent without the lane and the wait to take it back, and the
    evaluation is unchanged (ok). On cpu a child has a lane only with an explicit lane_dir."""
    pytest.importorskip("tilelang")
    from kernelgym_gap.core.config import EvalConfig, SandboxConfig
    from kernelgym_gap.core.status import Status
    from kernelgym_gap.engine.pipeline import evaluate
    task = registry.get("AddReLU")
    sol = next(s for s in task.solutions if s.dsl == "tilelang" and s.cpu_status == "ok")
    from kernelgym_gap.core.placement import Placement
    config = EvalConfig(trial_seed=0, compile_outside_lane=True)
    rec = evaluate(task, task.solution_path(sol).read_text(), "tilelang", "cpu", config,
                   placement=Placement(lane_dir=str(tmp_path / "lanes")))
    assert rec.status is Status.OK, rec.message
    assert rec.latency["child_compile_unlaned"] > 0.05, rec.latency
    assert "child_lane_wait_after_compile" in rec.latency
    assert not any(k.startswith("child_lane_timeout") for k in rec.latency), rec.latency


# ---- Placement.outputs_copy_laned: a copy off the GPU holds the shared lane for itself alone ------------------------

def test_a_copy_outside_the_stages_holds_the_shared_lane_and_waits_behind_a_timing(pair):
    child, phases, other = pair
    with child.copying():
        assert not _free_for(other, "exclusive") and child.holding is None   # held shared for the copy alone
    assert _free_for(other, "exclusive") and phases["copies_laned"] == 1.0
    other.acquire("exclusive")                  # another evaluation's timing

    def timing_ends():
        time.sleep(0.3)
        other.release()

    t = threading.Thread(target=timing_ends)
    t.start()
    with child.copying():                       # waits for the timing: no copy beside a measurement
        assert not _free_for(other, "exclusive")
    t.join()
    assert phases["lane_wait_copies"] >= 0.2 and phases["copies_laned"] == 2.0


def test_a_copy_inside_a_stage_or_without_a_lane_just_runs(pair):
    child, phases, other = pair
    with child.stage("exclusive"), child.copying():
        assert child.holding == "exclusive"
    with child.stage("shared"), child.copying():
        assert child.holding == "shared"
    with ChildLane(None, None, {}).copying():
        pass
    assert "copies_laned" not in phases and "lane_wait_copies" not in phases


def test_a_copy_past_the_lane_budget_runs_without_it_and_says_so(tmp_path):
    mine, other = Lane.open(tmp_path, 0), Lane.open(tmp_path, 0)
    phases = {}
    child = ChildLane(mine, 0.2, phases)
    other.acquire("exclusive")
    ran = []
    with child.copying():
        ran.append(True)
    other.release()
    assert ran == [True] and phases["lane_timeout_copies"] >= 0.15 and "copies_laned" not in phases
    mine.close()
    other.close()


def test_a_checkpoints_device_copies_hold_the_shared_lane_and_its_writes_do_not(pair, tmp_path, monkeypatch):
    """A ChildRun whose Job asks for it (Job.outputs_copy_laned) gives its held outputs the lane's copy guard: in a
    checkpoint (both lanes let go) each device copy's trip to the host holds the shared lane, so another
    evaluation's timing cannot run beside it, and each file write runs with the lane free. The GPU is pretended."""
    import torch

    from kernelgym_gap.child import outputs
    from kernelgym_gap.child.run import ChildRun
    from kernelgym_gap.core import tensor_file
    from kernelgym_gap.core.record import Job, TrialOutcome
    child, phases, other = pair
    job = Job(task_id="AddReLU", dsl="triton", backend="cuda", source_file="s.py", outputs_dir=str(tmp_path),
              report_file=str(tmp_path / "report.json"), trials=(), timing=None, held_device_bytes=1 << 20,
              outputs_copy_laned=True)
    run = ChildRun(job)
    run.lane, run.common = child, {}
    monkeypatch.setattr(outputs, "_on_gpu", lambda t: True)
    monkeypatch.setattr(tensor_file, "_on_device", lambda t: True)
    seen = []
    write = tensor_file._write

    def looking_write(fd, buf):
        seen.append(("write", _free_for(other, "exclusive")))
        return write(fd, buf)

    copying = ChildLane.copying

    def looking_copy(lane):
        seen.append(("copy", None))
        return copying(lane)

    monkeypatch.setattr(tensor_file, "_write", looking_write)
    monkeypatch.setattr(ChildLane, "copying", looking_copy)
    to = torch.Tensor.to

    def looking_to(t, *a, **k):
        seen.append(("copying", _free_for(other, "exclusive")))
        return to(t, *a, **k)

    monkeypatch.setattr(torch.Tensor, "to", looking_to)
    with child.stage("shared"):
        run.held.add("trial_0.bin", torch.arange(16, dtype=torch.float32))
        run.outcomes = [TrialOutcome(index=0, output_file="trial_0.bin", launches=1, programs=1, seconds=0.01,
                                     input_digest_before="d", input_digest_after="d")]
        assert run.checkpoint() is None
    assert ("copy", None) in seen and ("copying", False) in seen         # the copy under the shared lane
    assert [free for kind, free in seen if kind == "write"] and all(free for kind, free in seen if kind == "write")
    assert phases["copies_laned"] == 1.0 and (tmp_path / "trial_0.bin").exists()
