"""TimingConfig.recheck_outside_exclusive (issue 35): each timed shape's recheck runs after the exclusive
stretch, under the shared lane, with its own call mark; the checker, the record's recheck fields and the
verdict on a hung recheck are what they are with the recheck inside the timing.

The timing runs only on cuda (a cpu job has no timing), so the child's timing functions run here on the cpu:
inputs made on the cpu, torch.cuda.synchronize and empty_cache no-ops, and the Bench (CUDA events) replaced by
one that calls the kernel and the library as a timing does and reports fixed readings (`cpu_timing`). The
submissions are real files run by the Triton interpreter: the honest LayerNorm solution and hostile fixtures."""
from __future__ import annotations

import dataclasses
import functools
import importlib.util
import os
import subprocess
import sys
import textwrap
import time
import types
from pathlib import Path

import pytest
import torch

from conftest import FIXTURES
from kernelgym_gap.child import timing
from kernelgym_gap.child.instances import HarnessInstances
from kernelgym_gap.child.lanes import ChildLane
from kernelgym_gap.child.marks import CallMarks
from kernelgym_gap.child.outputs import HeldOutputs
from kernelgym_gap.core import inputs as inputs_mod
from kernelgym_gap.core.config import EvalConfig, SandboxConfig, TimingConfig
from kernelgym_gap.core.lane import Lane, LaneTimeout
from kernelgym_gap.core.record import CALL_MARKER, ChildReport, Job, Trial, TrialOutcome
from kernelgym_gap.core.status import Status
from kernelgym_gap.device.bench import Measurement
from kernelgym_gap.engine import too_slow
from kernelgym_gap.judge import checker
from kernelgym_gap.judge.reward import too_slow_reward
from kernelgym_gap.sandbox.deadlines import CallWatch, call_bounds

TESTS = Path(__file__).resolve().parent
HONEST = TESTS.parent / "tasks" / "normalization" / "layernorm" / "solutions" / "triton_rowwise.py"
SHAPES = ((16, 128), (7, 96))          # LayerNorm's cpu shapes: a few interpreted programs each
SANDBOX = SandboxConfig(call_floor_s=0.5, call_unknown_s=1.5)


class CallingBench:
    """The Bench's interface without CUDA: a probe and a full measurement that call the kernel and the library
    as often as a short timing does (the kernel's calls rotate over the input sets), with fixed readings."""
    sync_jitter_ms = 0.0
    clock_warmup_s = 0.0
    CALLS = 6

    def __init__(self, cfg):
        self.cfg, self.watch = cfg, None

    def _reading(self, fn, n) -> Measurement:
        for i in range(n):
            fn(i)
        return Measurement(median_ms=1.0, spread=0.01, reps=n, stream_ms=1.0, device_ms=1.0)

    def probe(self, kernel, library, reps, budget_ms, hint_ms=None):
        return self._reading(kernel, self.CALLS), self._reading(library, 3)

    def measure(self, fn):
        return self._reading(fn, self.CALLS)

    def measure_interleaved(self, fns):
        return [self._reading(fn, self.CALLS) for fn in fns]


def cpu_timing(setattr_) -> None:
    """child/timing.py's cuda calls made on the cpu (`setattr_`: monkeypatch.setattr, or setattr in a child)."""
    real = inputs_mod.make_trial_inputs
    setattr_(torch.cuda, "synchronize", lambda *a: None)
    setattr_(torch.cuda, "empty_cache", lambda: None)
    setattr_(inputs_mod, "make_trial_inputs", lambda task, trial, device: real(task, trial, "cpu"))
    setattr_(timing, "Bench", CallingBench)


def load_entry(path: Path):
    """A submission file's `layernorm`, its kernels run by the Triton interpreter (TRITON_INTERPRET set)."""
    spec = importlib.util.spec_from_file_location(f"sub_{path.stem}_{time.monotonic_ns()}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.layernorm


def timed_job(task_id: str, outside: bool, directory: Path) -> Job:
    """A cuda job with two correctness trials (not run here: they only place the timed shapes' call indices)
    and one timed shape per cpu shape; its call bounds as the parent computes them."""
    trials = tuple(Trial(index=i, shape=s, dtype="float32", seed=11 + i, distribution="normal", split="public")
                   for i, s in enumerate(SHAPES))
    timed = tuple(Trial(index=10_000 + i, shape=s, dtype="float32", seed=500 + i, distribution="normal",
                        split="public") for i, s in enumerate(SHAPES))
    cfg = TimingConfig(min_reps=3, budget_ms=100.0, warmup_ms=0.0, recheck_outside_exclusive=outside)
    job = Job(task_id=task_id, dsl="triton", backend="cuda", source_file="", outputs_dir=str(directory),
              report_file=str(directory / "report.json"), trials=trials, timing=cfg, timing_trials=timed)
    return dataclasses.replace(job, call_bounds=call_bounds(job, SANDBOX))


@pytest.fixture(autouse=True)
def _no_snapshots(monkeypatch):
    """run.py calls Integrity.violations through the class (child/instances.py: a shadow on the instance never
    runs); the partial child here has no snapshots (nothing tampers), so its stand-in's own `violations` is
    called instead, for these tests only."""
    from kernelgym_gap.child import run as run_mod
    monkeypatch.setattr(run_mod, "_VIOLATIONS", lambda integrity: integrity.violations())


def partial_child(job: Job, task, entry, lane: ChildLane, phases: dict):
    """A ChildRun with what `timing_stages` uses: the job, task and entry, this lane, real call marks and
    held outputs in the job's directory, an adapter's launch log and no integrity snapshots (nothing here
    tampers; the op recorders do run around the watched calls, as in a child)."""
    from kernelgym_gap.child.run import ChildRun
    run = ChildRun.__new__(ChildRun)
    run.job, run.task, run.entry, run.lane, run.phases = job, task, entry, lane, phases
    run.report_path = Path(job.report_file)
    run.marks = CallMarks(run.report_path.parent, job.call_bounds)
    run.held = HeldOutputs(Path(job.outputs_dir), 1 << 30)
    log = types.SimpleNamespace(reset=lambda: None, launches=1, max_programs=1, handed_bytes=0, side_stream=0,
                                failed=0, notes=set())
    run.adapter = types.SimpleNamespace(streams=None, log=log)
    run.integrity = types.SimpleNamespace(violations=lambda: [], instances=HarnessInstances())
    run.outcomes, run.timings, run.common = [], (), {}
    run.t0 = time.perf_counter()
    return run


def _interpreter_ready() -> bool:
    """Whether Triton was first imported in this process under its interpreter (TRITON_INTERPRET=1): its
    standard functions (tl.sum, ...) are then interpreted ones. Imported without it, by an earlier test of the
    suite, they are GPU-compiled JITFunctions, and an interpreted kernel that calls them raises "Cannot call
    @triton.jit'd outside of the scope of a kernel" (CI, 2026-12-06)."""
    import triton.language as tl
    return type(tl.sum).__name__ == "InterpretedFunction"


def in_interpreter(test):
    """Runs the test here where Triton's interpreter is ready, else this very test (its node id, from
    PYTEST_CURRENT_TEST) in a fresh pytest process with TRITON_INTERPRET=1, whose failure is this test's."""
    @functools.wraps(test)
    def run(*args, **kwargs):
        if _interpreter_ready():
            return test(*args, **kwargs)
        node = os.environ["PYTEST_CURRENT_TEST"].rsplit(" (", 1)[0]
        env = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
        env["TRITON_INTERPRET"] = "1"
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", node],
                              cwd=TESTS.parent, env=env, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, f"{node} in a fresh interpreter process:\n{done.stdout[-6000:]}{done.stderr[-2000:]}"
        assert " passed" in done.stdout and "skipped" not in done.stdout, done.stdout[-2000:]
    return run


@pytest.fixture
def interpreted(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    cpu_timing(monkeypatch.setattr)


@pytest.fixture(scope="module")
def layernorm(registry):
    return registry.get("LayerNorm")


def _run_timing(task, entry_file: Path, outside: bool, directory: Path, lane=None) -> tuple:
    """(the ShapeTimings, the child's phases, the checker's verdict on the rechecks) of one child's timing
    stages, its outputs written."""
    directory.mkdir(parents=True, exist_ok=True)
    job = timed_job(task.id, outside, directory)
    phases: dict = {}
    run = partial_child(job, task, load_entry(entry_file), lane or ChildLane(None, None, phases), phases)
    assert run.timing_stages() is None
    run.held.write()
    # the checker judges the rechecks (no correctness trial ran here: a job without them)
    result = checker.check(task, dataclasses.replace(job, trials=()), ChildReport(
        status=Status.OK, message="", timings=run.timings), "cpu")
    return run.timings, phases, result


# ------------------------------------------------------------------------ the same record and verdicts

@in_interpreter
def test_the_rechecks_after_the_timing_give_the_same_fields_outputs_and_verdict(layernorm, interpreted, tmp_path):
    inside, p_in, r_in = _run_timing(layernorm, HONEST, False, tmp_path / "inside")
    outside, p_out, r_out = _run_timing(layernorm, HONEST, True, tmp_path / "outside")
    assert r_in.status is r_out.status is Status.OK and r_in.trials_checked == r_out.trials_checked == 2
    for a, b in zip(inside, outside, strict=True):
        assert (a.recheck_output_file, a.recheck_trial) == (b.recheck_output_file, b.recheck_trial)
        assert torch.equal(_read(tmp_path / "inside" / a.recheck_output_file),
                           _read(tmp_path / "outside" / b.recheck_output_file))
    timed = timed_job(layernorm.id, True, tmp_path).timing_trials
    assert [t.recheck_trial for t in outside] == [
        dataclasses.replace(t, seed=t.seed + 7919, index=t.index + 5000) for t in timed]
    # the recheck's own time is timing_recheck wherever it ran; outside, the shapes' inputs freed are apart
    assert p_in["timing_recheck"] > 0 and p_out["timing_recheck"] > 0
    assert "timing_release" in p_out and "timing_release" not in p_in
    assert "recheck" in p_out and "recheck" not in p_in


def _read(path: Path) -> torch.Tensor:
    from kernelgym_gap.core.tensor_file import read_tensor
    return read_tensor(path, 1 << 30)


@pytest.mark.parametrize("fixture", ["hostile/gpu_warmup_detection.py", "hostile/stateful_drift.py"])
@in_interpreter
def test_a_kernel_that_goes_wrong_after_the_timing_still_fails_its_recheck(layernorm, interpreted, tmp_path,
                                                                           fixture):
    verdicts = {}
    for outside in (False, True):
        _, _, result = _run_timing(layernorm, FIXTURES / fixture, outside, tmp_path / str(outside))
        verdicts[outside] = (result.status, result.trials_checked)
        assert result.status is Status.MISMATCH, result.message
        assert "after timing" in result.message, result.message
    assert verdicts[False] == verdicts[True]


# ------------------------------------------------------------------------------------------- the lanes

def _free_for(other: Lane, mode: str) -> bool:
    try:
        other.acquire(mode, timeout_s=0)
    except LaneTimeout:
        return False
    other.release()
    return True


@in_interpreter
def test_the_exclusive_stage_holds_no_recheck_and_the_rechecks_hold_the_lane_shared(layernorm, interpreted,
                                                                                     tmp_path):
    """Each call the submission gets, with the lane as it was held then and the call mark the parent read:
    the timing's calls under the exclusive lane, then one recheck per shape, in shape order, under the shared
    lane (another evaluation may hold it shared meanwhile), each marked as its own call after the timed
    shapes'; the wait for it is its own phase."""
    mine, other = Lane.open(tmp_path / "lanes", 0), Lane.open(tmp_path / "lanes", 0)
    phases: dict = {}
    child = ChildLane(mine, 30.0, phases)
    job = timed_job(layernorm.id, True, tmp_path)
    honest = load_entry(HONEST)
    seen = []

    def entry(x, w, b):
        seen.append((child.holding, _free_for(other, "shared"), (tmp_path / CALL_MARKER).read_text().split()[:2],
                     tuple(x.shape)))
        return honest(x, w, b)

    run = partial_child(job, layernorm, entry, child, phases)
    run.phases = phases
    assert run.timing_stages() is None
    n_trials, n_timed = len(job.trials), len(job.timing_trials)
    rechecks = [s for s in seen if s[0] == "shared"]
    assert [s[0] for s in seen] == ["exclusive"] * (len(seen) - n_timed) + ["shared"] * n_timed
    assert all(not free for holding, free, _, _ in seen if holding == "exclusive")
    assert all(free for _, free, _, _ in rechecks)
    assert [(mark, shape) for _, _, mark, shape in rechecks] == [
        (["call", str(n_trials + n_timed + k)], SHAPES[k]) for k in range(n_timed)]
    assert (tmp_path / CALL_MARKER).read_text() == f"done {n_trials + 2 * n_timed - 1}\n"
    assert phases["lane_wait_exclusive"] >= 0 and phases["lane_wait_recheck"] >= 0
    assert "lane_timeout_recheck" not in phases and phases["recheck"] >= phases["timing_recheck"] > 0
    assert _free_for(other, "exclusive")            # both stages let go
    mine.close()
    other.close()


@in_interpreter
def test_with_it_off_the_recheck_stays_inside_the_exclusive_stage(layernorm, interpreted, tmp_path):
    mine, other = Lane.open(tmp_path / "lanes", 0), Lane.open(tmp_path / "lanes", 0)
    phases: dict = {}
    child = ChildLane(mine, 30.0, phases)
    honest = load_entry(HONEST)
    holding = []
    run = partial_child(timed_job(layernorm.id, False, tmp_path), layernorm,
                        lambda *a: holding.append(child.holding) or honest(*a), child, phases)
    assert run.timing_stages() is None
    assert set(holding) == {"exclusive"} and "lane_wait_recheck" not in phases and "recheck" not in phases
    mine.close()
    other.close()


# ----------------------------------------------------------------------------------- a recheck that hangs

def test_the_rechecks_have_a_later_calls_bound_after_the_timed_shapes():
    off = timed_job("LayerNorm", False, Path("/tmp")).call_bounds
    on = timed_job("LayerNorm", True, Path("/tmp")).call_bounds
    assert on[:len(off)] == off and len(on) == len(off) + len(SHAPES)
    assert [b.what for b in on[len(off):]] == [
        f"recheck after the timing of public shape {list(s)}, float32" for s in SHAPES]
    # no library time known here: the unknown later-call bound, not the timed shape's repetitions' worth
    assert [b.bound_s for b in on[len(off):]] == [SANDBOX.call_unknown_s] * len(SHAPES)
    hint = ((SHAPES[0], "float32", 0.01),)
    job = dataclasses.replace(timed_job("LayerNorm", True, Path("/tmp")), library_hint=hint)
    assert call_bounds(job, SANDBOX)[-2].bound_s == max(SANDBOX.call_floor_s, SANDBOX.call_factor * 0.01e-3)


_HUNG_CHILD = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    sys.path.insert(0, sys.argv[1])
    import test_recheck_outside as t
    from kernelgym_gap.child.lanes import ChildLane
    from kernelgym_gap.core.record import Job
    from kernelgym_gap.core.registry import find_task
    t.cpu_timing(setattr)
    from kernelgym_gap.child import run as run_mod
    run_mod._VIOLATIONS = lambda integrity: integrity.violations()     # as t._no_snapshots does in a test
    job = Job.from_json(Path(sys.argv[2]).read_text())
    task = find_task(job.task_id, None)
    phases = {}
    run = t.partial_child(job, task, t.load_entry(Path(sys.argv[3])), ChildLane(None, None, phases), phases)
    run.timing_stages()
""")


def _killed_where(task, outside: bool, directory: Path) -> tuple[int, float, float]:
    """The real hung fixture's timing stages in a process of their own; the parent's CallWatch over its marks,
    polled as the sandbox polls it (0.1 s), kills it at the first call past its bound: that overrun."""
    directory.mkdir(parents=True)
    job = timed_job(task.id, outside, directory)
    (directory / "job.json").write_text(job.to_json())
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    child = subprocess.Popen([sys.executable, "-c", _HUNG_CHILD, str(TESTS), str(directory / "job.json"),
                              str(FIXTURES / "slow" / "recheck_hang.py")], env=env, cwd=TESTS.parent)
    watch = CallWatch(directory / CALL_MARKER, job.call_bounds)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and child.poll() is None:
            if watch.overdue(time.monotonic()) is not None:
                break
            time.sleep(0.1)
        assert child.poll() is None, "the child ended: the fixture did not hang"
        assert watch.overrun is not None, "no call ran past its bound within 120 s"
        return watch.overrun
    finally:
        child.kill()
        child.wait()


def test_a_hung_recheck_is_killed_at_its_own_mark_and_judged_too_slow_as_with_it_off(layernorm, tmp_path):
    """tests/fixtures/slow/recheck_hang.py is honest in the timing and hangs in the recheck. With the recheck
    inside the timing it is killed past the first timed shape's bound; after the timing, past the first
    recheck's own (a later call's, much shorter). Either way the verdict from the checkpoint is too_slow."""
    n_trials, n_timed = len(SHAPES), len(SHAPES)
    i_off, bound_off, _ = _killed_where(layernorm, False, tmp_path / "off")
    i_on, bound_on, _ = _killed_where(layernorm, True, tmp_path / "on")
    assert i_off == n_trials and i_on == n_trials + n_timed
    off_job, on_job = timed_job(layernorm.id, False, tmp_path), timed_job(layernorm.id, True, tmp_path)
    assert bound_off == off_job.call_bounds[i_off].bound_s and bound_on == SANDBOX.call_unknown_s < bound_off
    killed = {}
    for job, i, bound in ((off_job, i_off, bound_off), (on_job, i_on, bound_on)):
        status, message, fields = too_slow.decide(_killed_evaluation(layernorm, job, (i, bound, bound + 0.1)))
        assert status is Status.TOO_SLOW, message
        assert fields["reward"] == too_slow_reward(EvalConfig().reward, False)
        killed[job.timing.recheck_outside_exclusive] = fields["terms"]["killed_call"]
    assert killed == {False: "the timing of public shape [16, 128], float32",
                      True: "the recheck after the timing of public shape [16, 128], float32"}


def _killed_evaluation(task, job: Job, overrun):
    """An evaluation as the Sandbox stage leaves it after a kill at a call's deadline (engine/stages.py): its
    report the checkpoint before the timing (every correctness trial finished and checked correct), on the cpu
    backend's terms (no performance bound: the kill's place alone decides)."""
    from kernelgym_gap.core.placement import Placement
    from kernelgym_gap.core.record import CheckResult
    outcomes = tuple(TrialOutcome(index=t.index, output_file=f"trial_{t.index}", launches=1, programs=1,
                                  seconds=0.1, input_digest_before="d", input_digest_after="d") for t in job.trials)
    what = job.call_bounds[overrun[0]].what
    outcome = types.SimpleNamespace(stage_timeout="call", stage_overrun=overrun, returncode=-9, stderr_tail="",
                                    stage_detail=f"call {overrun[0]} ({what}) ran past {overrun[1]:.1f} s")
    return types.SimpleNamespace(
        task=task, dsl="triton", source="", config=EvalConfig(), placement=Placement(), flags=[], job=job,
        killed=overrun, child=types.SimpleNamespace(outcome=outcome, report=ChildReport(
            status=Status.OK, message="checkpoint", trials=outcomes)),
        backend=types.SimpleNamespace(measures_time=False, name="cpu"),
        check_result=CheckResult(status=Status.OK, message="", trials_checked=len(outcomes),
                                 kernelbench_allclose=True))


def test_on_cuda_a_killed_recheck_bounds_e_as_one_later_call_and_the_timing_does_not(layernorm, monkeypatch,
                                                                                     tmp_path):
    """A recheck is one call on a compiled shape: its kill bounds E by the library's time over the time
    reached, as a correctness trial's later call does; a kill in the timing (many calls under one mark) does not."""
    from kernelgym_gap.judge.calibrate import Calibration
    cal = Calibration(device_key="k", device_name="NVIDIA H100 80GB HBM3", copy_bytes_per_s=3.0e12,
                      matmul_flops_per_s={"float32": 6e13, "tf32": 4e14, "float16": 8e14, "bfloat16": 8e14},
                      source="datasheet")
    monkeypatch.setattr("kernelgym_gap.judge.measure.get_calibration", lambda report, config: cal)
    monkeypatch.setattr("kernelgym_gap.judge.measure.best_known_efficiency", lambda *a: None)
    lib_ms = 0.02
    terms = {}
    for outside in (False, True):
        job = timed_job(layernorm.id, outside, tmp_path)
        job = dataclasses.replace(job, library_hint=((SHAPES[0], "float32", lib_ms),))
        job = dataclasses.replace(job, call_bounds=call_bounds(job, SANDBOX))
        i = len(job.trials) + (len(job.timing_trials) if outside else 0)
        bound = job.call_bounds[i].bound_s
        ev = _killed_evaluation(layernorm, job, (i, bound, bound + 0.1))
        ev.backend = types.SimpleNamespace(measures_time=True, name="cuda")
        status, message, fields = too_slow.decide(ev)
        assert status is Status.TOO_SLOW, message
        terms[outside] = fields["terms"]
    assert terms[False]["E_upper"] is None
    reached_ms = (SANDBOX.call_floor_s + 0.1) * 1e3        # 200 x 0.02 ms is under the floor: the floor is the bound
    assert terms[True]["E_upper"] == pytest.approx(lib_ms / reached_ms)
    assert terms[True]["too_slow_by_rule"] is True and terms[True]["first_call"] is False
