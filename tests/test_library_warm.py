"""The library's first calls made before the exclusive lane (TimingConfig.library_warm_before_lane, child/timing.
warm_library; issue 35), and the simulator's change for it (sim/library_warm.py). cpu tests with the device calls
faked; the gpu test (scripts/device_session.sh library-warm) runs the real child on an attention task."""
import dataclasses
import importlib.util
import types
from pathlib import Path

import pytest

from kernelgym_gap.child import timing as child_timing
from kernelgym_gap.core.config import EvalConfig, TimingConfig
from kernelgym_gap.sim import levers, library_warm, workload
from kernelgym_gap.sim.pipeline import Job, Setup, simulate

ROOT = Path(__file__).resolve().parent.parent
FULL16 = ROOT / "results" / "h100_2026-12-07_session50" / "handover_full16" / "throughput_records.jsonl"


class _Device:
    """torch.cuda's calls warm_library makes, counted, on a machine without a GPU."""
    def __init__(self):
        self.synchronized = self.emptied = 0

    def install(self, monkeypatch):
        monkeypatch.setattr(child_timing.torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(child_timing.torch.cuda, "synchronize", lambda *a: setattr(self, "synchronized",
                                                                                        self.synchronized + 1))
        monkeypatch.setattr(child_timing.torch.cuda, "empty_cache", lambda: setattr(self, "emptied", self.emptied + 1))


def _job(on=True, shapes=((4, 8), (16, 8), (64, 8))):
    trials = tuple(types.SimpleNamespace(shape=s, dtype="float32", seed=100 + i, index=i) for i, s in enumerate(shapes))
    return types.SimpleNamespace(timing=TimingConfig(library_warm_before_lane=on), timing_trials=trials)


def _task(calls, fail_at=None):
    def reference(*ins):
        calls.append(ins)
        if fail_at is not None and len(calls) == fail_at:
            raise RuntimeError("CUDA out of memory (a fake)")
        return ins[0]
    return types.SimpleNamespace(reference=reference)


def test_each_timed_shape_s_reference_is_called_once_on_the_timings_own_first_input_set(monkeypatch):
    dev, made, calls, phases = _Device(), [], [], {}
    dev.install(monkeypatch)

    def make(task, trial, device):
        made.append((trial, device))
        return (("input", trial.shape, trial.seed),)
    monkeypatch.setattr(child_timing.inputs_mod, "make_trial_inputs", make)
    job = _job()
    child_timing.warm_library(_task(calls), job, phases)
    # time_submission's set k is make_trial_inputs(task, replace(trial, seed=trial.seed + k), "cuda"): set 0 is the
    # trial itself, so the warm-up meets the very inputs (shape, dtype, seed) the timing will warm and measure first
    assert made == [(t, "cuda") for t in job.timing_trials]
    assert calls == [(("input", t.shape, t.seed),) for t in job.timing_trials]
    assert dev.synchronized == len(job.timing_trials) and dev.emptied == 1
    assert phases["library_warm"] >= 0 and "library_warm_failed" not in phases


def test_off_or_without_a_timing_or_a_gpu_it_does_nothing(monkeypatch):
    calls, phases = [], {}
    monkeypatch.setattr(child_timing.inputs_mod, "make_trial_inputs", lambda *a: pytest.fail("inputs made"))
    monkeypatch.setattr(child_timing.torch.cuda, "is_available", lambda: True)
    child_timing.warm_library(_task(calls), _job(on=False), phases)
    child_timing.warm_library(_task(calls), types.SimpleNamespace(timing=None, timing_trials=()), phases)
    monkeypatch.setattr(child_timing.torch.cuda, "is_available", lambda: False)
    child_timing.warm_library(_task(calls), _job(on=True), phases)
    assert calls == [] and phases == {}


def test_a_failing_reference_is_left_to_the_timing_which_meets_it_again(monkeypatch):
    """Only a warm-up: what the reference raises here is not judged here (the timing calls the same reference on
    the same inputs and judges it there); the child goes on, with the failure counted."""
    dev, calls, phases = _Device(), [], {}
    dev.install(monkeypatch)
    monkeypatch.setattr(child_timing.inputs_mod, "make_trial_inputs", lambda task, trial, device: (trial.shape,))
    child_timing.warm_library(_task(calls, fail_at=2), _job(), phases)
    assert len(calls) == 2 and phases["library_warm_failed"] == 1.0 and "library_warm" in phases
    assert dev.emptied == 1                     # what it made is given back all the same


def test_a_kill_is_not_swallowed(monkeypatch):
    """A signal's exception (the parent's deadline) is not an Exception: it passes through the warm-up."""
    _Device().install(monkeypatch)
    monkeypatch.setattr(child_timing.inputs_mod, "make_trial_inputs", lambda task, trial, device: (trial.shape,))

    def reference(*ins):
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        child_timing.warm_library(types.SimpleNamespace(reference=reference), _job(), {})


def test_the_switch_is_a_throughput_variant_off_by_default():
    assert TimingConfig().library_warm_before_lane is False
    spec = importlib.util.spec_from_file_location("throughput_lw", ROOT / "scripts" / "throughput.py")
    tp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tp)
    config, _ = tp.apply_variant(EvalConfig(), tp.parse_variant(library_warm.LIBRARY_WARM))
    assert config.timing.library_warm_before_lane is True
    assert library_warm.LIBRARY_WARM in tp.LEVERS


def test_the_child_warms_inside_its_shared_stretch_before_the_pre_timing_checkpoint():
    """child/run.ChildRun.run: the warm-up is the shared stage's last work (the lane is still held), and the
    checkpoint and the exclusive stage come after it."""
    import inspect

    from kernelgym_gap.child.run import ChildRun
    src = inspect.getsource(ChildRun.run)
    shared, warm = src.index('self.lane.stage("shared")'), src.index("warm_library(self.task, self.job, self.phases)")
    trials, checkpoint = src.index("self.run_trials()"), src.index("ChildRun.checkpoint(self)")
    assert shared < trials < warm < checkpoint
    # inside the `with` block: indented deeper than the `with` line
    line = next(x for x in src.splitlines() if "warm_library(" in x)
    with_line = next(x for x in src.splitlines() if 'self.lane.stage("shared")' in x)
    assert len(line) - len(line.lstrip()) > len(with_line) - len(with_line.lstrip())


# ---- the simulator's change ---------------------------------------------------------------------------------------

def test_the_first_calls_move_from_the_exclusive_timing_to_the_shared_stretch():
    j = Job(name="a", correctness=2.0, timing=6.0, timing_probe=5.0, library_first_call=4.0)
    m = library_warm.library_warm_before_lane(j)
    assert (m.timing, m.timing_probe, m.correctness, m.library_first_call) == (2.0, 1.0, 6.0, 0.0)
    assert library_warm.library_warm_before_lane(m) == m
    assert library_warm.library_warm_before_lane(Job(name="b", timing=1.0)) == Job(name="b", timing=1.0)


def _record(**lat):
    base = {"child": 10.0, "child_total": 9.0, "child_correctness": 3.0, "child_timing": 5.0,
            "child_timing_probe": 4.0, "child_timing_probe_warm_kernel": 0.2, "child_timing_probe_warm_library": 3.2,
            "child_timing_probe_reps": 0.6, "check": 1.0, "total": 12.0}
    return {"mode": "lanes", "task": "T", "submission": "T/s.py", "status": "ok", "at_s": 12.0,
            "latency": {**base, **lat}}


def test_a_record_gives_its_library_first_calls_and_one_that_warmed_before_its_lane_gives_none():
    j = workload.job_from_record(_record())
    assert j.library_first_call == pytest.approx(3.0)
    # a record that ran the switch: its warm-up closes the shared stretch, nothing is left to move
    w = workload.job_from_record(_record(child_library_warm=2.5, child_timing_probe_warm_library=0.25))
    assert w.library_first_call == 0.0
    assert w.correctness == pytest.approx(j.correctness + 2.5)
    # and it is not counted again as the child's unattributed rest
    assert w.misc == pytest.approx(max(0.0, j.misc - 2.5))


def test_the_scenario_is_one_of_the_levers_with_its_variant():
    sc = [s for s in levers.scenarios(levers.fit_timing(ROOT / "results" / "h200_2026-12-04_corpus" /
                                                        "gap_study_cuda.json")) if s.variant == library_warm.LIBRARY_WARM]
    assert len(sc) == 1 and sc[0].job is library_warm.library_warm_before_lane


def test_on_the_h100_full_mix_it_is_predicted_to_pay_and_on_the_light_batch_not():
    """SIMULATED (not a measurement): the full mix's first 16 of 2026-12-07 10:26, +15% from the attention tasks'
    2-13 s first calls; the light batch's library warms as fast as its kernels, so nothing moves."""
    jobs = workload.jobs_of_mode(workload.read_records(FULL16), "lanes")
    moved = [library_warm.library_warm_before_lane(j) for j in jobs]
    setup = Setup()
    base, new = simulate(jobs, setup).evals_per_gpu_hour, simulate(moved, setup).evals_per_gpu_hour
    assert new > 1.1 * base
    attention = [j for j in jobs if "Attention" in j.task]
    assert attention and min(j.library_first_call for j in attention) > 1.5
    assert max(j.library_first_call for j in jobs if "Attention" not in j.task) < 0.5
    light = workload.jobs_of_mode(workload.read_records(ROOT / "results" / "h100_2026-12-07_session50" /
                                                        "handover_light" / "throughput_records.jsonl"), "lanes")
    assert max(j.library_first_call for j in light) < 0.1


# ---- on a GPU (scripts/device_session.sh library-warm) ------------------------------------------------------------

@pytest.fixture(scope="module")
def warm_cuda():
    from kernelgym_gap.api.warm import WarmPool
    with WarmPool("cuda", gpu_index=0) as pool:
        yield pool


@pytest.mark.gpu
@pytest.mark.timeout(600)
def test_gpu_an_attention_solutions_library_first_calls_leave_the_exclusive_timing(warm_cuda):
    """The premise and the switch on the device: Attention/triton_flash.py without and with the switch (fresh
    children each). With it, the record has child_library_warm, the probe's library warm-up is at most half of
    what it was without, and the verdict and E agree (E within 10%: two timings of one kernel, not a fidelity
    figure)."""
    from kernelgym_gap.core.registry import default_registry
    from kernelgym_gap.engine.pipeline import evaluate
    task = default_registry().get("Attention")
    source = (task.directory / "solutions" / "triton_flash.py").read_text()
    out = {}
    for on in (False, True):
        cfg = EvalConfig(timing=dataclasses.replace(EvalConfig().timing, library_warm_before_lane=on))
        rec = evaluate(task, source, "triton", "cuda", cfg, checker=warm_cuda.checker, children=warm_cuda.children)
        lat = rec.latency
        out[on] = rec
        print(f"library_warm_before_lane={on}: {rec.status.value} E {(rec.terms or {}).get('E')}; warm library "
              f"{lat.get('child_timing_probe_warm_library')} s, warm kernel {lat.get('child_timing_probe_warm_kernel')} "
              f"s, before the lane {lat.get('child_library_warm')} s, timing {lat.get('child_timing')} s")
    off, on = out[False], out[True]
    assert off.ok and on.ok, (off.status, off.message, on.status, on.message)
    assert "child_library_warm" in on.latency and "child_library_warm" not in off.latency
    assert on.latency["child_timing_probe_warm_library"] <= 0.5 * off.latency["child_timing_probe_warm_library"]
    assert on.terms["E"] == pytest.approx(off.terms["E"], rel=0.10)
