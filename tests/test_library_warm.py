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


def test_the_switch_is_on_by_default_and_a_throughput_variant_turns_it_off():
    """On since the H100 run of 2026-12-07 13:00 (core/config.py's comment): `library_warm_before_lane=0` runs the
    old order beside it."""
    assert TimingConfig().library_warm_before_lane is True
    spec = importlib.util.spec_from_file_location("throughput_lw", ROOT / "scripts" / "throughput.py")
    tp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tp)
    config, _ = tp.apply_variant(EvalConfig(), tp.parse_variant("library_warm_before_lane=0"))
    assert config.timing.library_warm_before_lane is False
    config, _ = tp.apply_variant(config, tp.parse_variant(library_warm.LIBRARY_WARM))
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


# ---- the pre-started child's warm-up (ChildSpec.warm, child/runner.read_warm, child/timing.warm_prestarted) --------

def test_warm_cases_are_the_timed_cases_with_the_switch_on_a_backend_that_times(registry):
    from kernelgym_gap.engine.trials import timed_cases, warm_cases
    task = registry.get("Softmax")
    on = EvalConfig(timing=dataclasses.replace(EvalConfig().timing, library_warm_before_lane=True))
    off = EvalConfig(timing=dataclasses.replace(EvalConfig().timing, library_warm_before_lane=False))
    assert warm_cases(task, "cuda", off) == ()
    assert warm_cases(task, "cpu", on) == ()
    assert warm_cases(task, "cuda", on) == tuple((tuple(s), d) for _, s, d in timed_cases(task, on))
    assert len(warm_cases(task, "cuda", on)) >= 2


def test_the_spec_carries_the_warm_up_without_it_deciding_which_child_serves(registry):
    import json

    from kernelgym_gap.sandbox.launch import child_spec
    task = registry.get("Softmax")
    cases = (((4, 8), "float32"), ((16, 8), "float16"))
    spec = child_spec(task, "triton", "cuda", EvalConfig(), warm_cases=cases)
    warm = json.loads(spec.warm)
    assert warm == {"task": task.id, "tasks_dir": task.tasks_dir, "distribution": task.timed_distribution,
                    "cases": [[[4, 8], "float32"], [[16, 8], "float16"]]}
    assert spec == child_spec(task, "triton", "cuda", EvalConfig())          # not compared
    assert child_spec(task, "triton", "cuda", EvalConfig()).warm is None      # no cases given: none
    assert child_spec(task, "triton", "cpu", EvalConfig(), warm_cases=cases).warm is None
    assert spec.argv()[-2:] == ["--backend", "cuda"]
    assert spec.argv(Path("/s/warm.json"))[-2:] == ["--warm", "/s/warm.json"]


def test_read_warm_removes_the_file_before_anything_and_takes_only_a_json_object(tmp_path):
    from kernelgym_gap.child.runner import read_warm
    f = tmp_path / "warm.json"
    f.write_text('{"task": "Softmax", "cases": []}')
    assert read_warm(str(f)) == {"task": "Softmax", "cases": []} and not f.exists()
    for text in ("not json", "[1, 2]"):
        f.write_text(text)
        assert read_warm(str(f)) is None and not f.exists()
    assert read_warm(str(tmp_path / "absent.json")) is None and read_warm(None) is None


def test_the_runner_takes_the_warm_file_after_its_backend(monkeypatch):
    from kernelgym_gap.child import runner
    seen = []
    monkeypatch.setattr(runner, "wait_for_job", lambda *a, bind=False: seen.append((*a, bind)) or 0)
    monkeypatch.setattr(runner, "keep_import_start_to_itself", lambda: None)
    assert runner.main(["--wait", "--dsl", "triton", "--backend", "cuda", "--warm", "/s/w.json"]) == 0
    assert runner.main(["--wait", "--dsl", "triton", "--backend", "cpu"]) == 0
    assert runner.main(["--wait", "--dsl", "triton", "--backend", "cuda", "--bind"]) == 0     # prestart_early's
    assert seen == [("triton", "cuda", "/s/w.json", False), ("triton", "cpu", None, False),
                    ("triton", "cuda", None, True)]
    assert runner.main(["--wait", "--dsl", "triton", "--backend", "cuda", "--other", "x"]) == 2


def test_warm_prestarted_calls_the_reference_on_each_case_and_never_raises(monkeypatch):
    dev, calls, made = _Device(), [], []
    dev.install(monkeypatch)
    monkeypatch.setattr(child_timing.inputs_mod, "make_trial_inputs",
                        lambda task, trial, device: made.append((trial, device)) or (trial.shape,))
    import kernelgym_gap.core.registry as registry_mod
    found = []
    monkeypatch.setattr(registry_mod, "find_task", lambda tid, d=None: found.append((tid, d)) or _task(calls))
    warm = {"task": "Softmax", "tasks_dir": None, "distribution": "normal",
            "cases": [[[4, 8], "float32"], [[16, 8], "float16"]]}
    out = child_timing.warm_prestarted(warm)
    assert found == [("Softmax", None)]
    assert [(t.shape, t.dtype, t.distribution, d) for t, d in made] == [((4, 8), "float32", "normal", "cuda"),
                                                                       ((16, 8), "float16", "normal", "cuda")]
    assert calls == [((4, 8),), ((16, 8),)] and "preimport_library_warm" in out
    assert "preimport_library_warm_failed" not in out
    bad = child_timing.warm_prestarted({"task": "Softmax"})            # no cases: a failure counted, not raised
    assert bad["preimport_library_warm_failed"] == 1.0


def test_a_real_waiting_child_removes_its_warm_file_before_its_job(tmp_path):
    """`python -m kernelgym_gap.child.runner --wait ... --warm FILE`, as the pool starts it, on the cpu backend:
    the file is gone before the child reads its job line (here none: it exits 0)."""
    import subprocess
    import sys
    f = tmp_path / "warm.json"
    f.write_text('{"task": "Softmax", "distribution": "normal", "cases": [[[4, 8], "float32"]]}')
    out = subprocess.run([sys.executable, "-m", "kernelgym_gap.child.runner", "--wait", "--dsl", "triton",
                          "--backend", "cpu", "--warm", str(f)], input="", capture_output=True, text=True,
                         timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert not f.exists()


SNOOP = '''
import os
here = os.path.dirname(os.path.abspath(__file__))
for d in {here, os.getcwd()}:
    if os.path.exists(os.path.join(d, "warm.json")):
        raise RuntimeError("the warm-up file was left for the submission: " + d)
'''


def test_a_submission_in_a_pre_started_child_finds_no_warm_file(registry, tmp_path):
    """Through the pool and the engine on the cpu backend: a child pre-started with a warm-up (its file written
    into the scratch directory the submission runs in) serves the evaluation, and the submission, looking for
    the file in its directory, finds none."""
    from kernelgym_gap.core.placement import Placement
    from kernelgym_gap.core.status import Status
    from kernelgym_gap.engine.pipeline import evaluate
    from kernelgym_gap.sandbox.launch import child_spec
    from kernelgym_gap.sandbox.prestart import ChildPool
    task = registry.get("AddReLU")
    sol = next(s for s in task.solutions if s.dsl == "triton" and s.kind == "optimized")
    source = SNOOP + task.solution_path(sol).read_text()
    cfg, where = EvalConfig(trial_seed=0), Placement(scratch_root=str(tmp_path))
    spec = child_spec(task, "triton", "cpu", cfg, where)
    with ChildPool() as pool:
        pool.refill(dataclasses.replace(spec, warm='{"task": "AddReLU", "cases": []}'))
        record = evaluate(task, source, "triton", "cpu", cfg, children=pool, placement=where)
        assert pool.served == 1
    assert record.status is Status.OK, record.message


@pytest.mark.gpu
@pytest.mark.timeout(600)
def test_gpu_a_child_pre_started_with_the_switch_made_the_first_calls_while_it_waited(warm_cuda):
    """Two evaluations of Attention/triton_flash.py with the switch on through one warm pool: the first one's
    child pre-starts the second's with the warm-up (ChildSpec.warm); after a wait like an agent's turn, the second
    record says the pre-started child warmed the library (child_preimport_library_warm), and its own warm-up under
    the shared lane costs at most half of that (the first calls were made while it waited)."""
    import time

    from kernelgym_gap.core.registry import default_registry
    from kernelgym_gap.engine.pipeline import evaluate
    task = default_registry().get("Attention")
    source = (task.directory / "solutions" / "triton_flash.py").read_text()
    cfg = EvalConfig(timing=dataclasses.replace(EvalConfig().timing, library_warm_before_lane=True))
    recs = []
    for _ in range(2):
        recs.append(evaluate(task, source, "triton", "cuda", cfg, checker=warm_cuda.checker,
                             children=warm_cuda.children))
        time.sleep(30)                      # the agent's turn: the next child's imports and warm-up
    for r in recs:
        print({k: v for k, v in r.latency.items() if "warm" in k or k in ("child_preimport", "child_timing")})
    first, second = recs
    assert first.ok and second.ok, (first.status, first.message, second.status, second.message)
    assert second.latency.get("child_preimport_library_warm", 0) > 0
    assert "child_preimport_library_warm_failed" not in second.latency
    assert second.latency["child_library_warm"] <= 0.5 * second.latency["child_preimport_library_warm"] + 0.05


def test_the_pre_started_bound_takes_the_first_calls_out_of_every_lane_and_predicts_more():
    j = Job(name="a", correctness=2.0, timing=6.0, timing_probe=5.0, library_first_call=4.0)
    p = library_warm.library_warm_prestarted(j)
    assert (p.timing, p.timing_probe, p.correctness, p.library_first_call) == (2.0, 1.0, 2.0, 0.0)
    names = [r[0] for r in library_warm.ROWS]
    assert [r[3] for r in library_warm.ROWS] == [library_warm.LIBRARY_WARM, None] and len(set(names)) == 2
    jobs = workload.jobs_of_mode(workload.read_records(FULL16), "lanes")
    shared = simulate([library_warm.library_warm_before_lane(j) for j in jobs], Setup()).evals_per_gpu_hour
    bound = simulate([library_warm.library_warm_prestarted(j) for j in jobs], Setup()).evals_per_gpu_hour
    assert bound > shared
