"""Issue 38: a correct but hopelessly slow kernel is diagnosed as such (`too_slow`), not called a timeout.

The ordering (smallest shapes first), the verdict on a kernel killed past a call's deadline after it finished
the small shapes (a real fixture through the real engine, cpu), the case where a finished trial is wrong,
the reward's place between wrong and finished kernels, and the cuda path's bounds and diagnosis on a
synthetic evaluation (the real cuda run is tests/test_gpu.py::test_serial_softmax_is_too_slow)."""
import dataclasses
import random
import time
import types

import pytest

from conftest import FIXTURES
from kernelgym_gap.core.config import EvalConfig, RewardConfig, SandboxConfig, TimingConfig
from kernelgym_gap.core.placement import Placement
from kernelgym_gap.core.record import CheckResult, EvalRecord, Job, TrialOutcome
from kernelgym_gap.core.slowness import too_slow_to_time
from kernelgym_gap.core.status import Status
from kernelgym_gap.engine import too_slow
from kernelgym_gap.engine.correctness_order import order_for_correctness, shape_size
from kernelgym_gap.engine.pipeline import evaluate
from kernelgym_gap.engine.stages import STAGE_OF
from kernelgym_gap.engine.trials import make_trials
from kernelgym_gap.judge.calibrate import Calibration
from kernelgym_gap.judge.diagnosis import diagnose_bound
from kernelgym_gap.judge.reward import reward_for, too_slow_reward

CALL_S = 8.0      # the tight call bound of the cpu tests: the small shapes' first calls take well under 1 s
CPU_CONFIG = EvalConfig(trial_seed=1234, seeds_per_shape=1,
                        sandbox=SandboxConfig(compile_call_s=CALL_S, call_unknown_s=CALL_S))


@pytest.fixture(scope="module")
def layernorm(registry):
    return registry.get("LayerNorm")


# ------------------------------------------------------------------------------------------ the order

@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_correctness_trials_run_smallest_shape_first_every_dtype_before_repeats(registry, backend):
    for name in ("LayerNorm", "Softmax", "Conv2d"):
        task = registry.get(name)
        trials = make_trials(task, backend, EvalConfig(seeds_per_shape=2), random.Random(7))
        ordered = order_for_correctness(task, trials)
        assert sorted(ordered, key=lambda t: t.index) == list(trials)      # the same trials, indices kept
        sizes = [shape_size(task, t.shape) for t in ordered]
        assert sizes == sorted(sizes), name                                # never a larger shape before a smaller
        smallest = [t for t in ordered if shape_size(task, t.shape) == sizes[0]]
        dtypes = task.workload(backend).dtypes
        # the smallest shape's first seed in every dtype comes before any second seed of it
        assert {t.dtype for t in smallest[:len(dtypes)]} == set(dtypes), name
        assert len(smallest) == 2 * len(dtypes)


def test_public_and_heldout_shapes_are_mixed_by_size(layernorm):
    trials = order_for_correctness(layernorm, make_trials(layernorm, "cpu", EvalConfig(), random.Random(1)))
    # LayerNorm's cpu held-out shape [7, 96] is its smallest: it runs first, before the public ones
    assert trials[0].split == "heldout" and trials[0].shape == (7, 96)
    assert trials[-1].shape == (16, 128)


# ------------------------------------------------------------------------------ the rule and the reward

def test_one_rule_for_too_slow_to_time():
    cfg = TimingConfig()
    assert cfg.hopeless(51.0, 1.0) is too_slow_to_time(51.0, 1.0, cfg.hopeless_factor) is True
    assert cfg.hopeless(49.0, 1.0) is too_slow_to_time(49.0, 1.0, cfg.hopeless_factor) is False
    # a call killed at its bound is hopeless by the same rule: the bound is at least hopeless_factor x library
    with pytest.raises(ValueError, match="call_factor"):
        EvalConfig(sandbox=SandboxConfig(call_factor=10.0), timing=TimingConfig(hopeless_factor=50.0))


def test_too_slow_reward_sits_between_wrong_and_every_finished_kernel():
    for cfg in (RewardConfig(), RewardConfig(correctness_weight=0.05), RewardConfig(too_slow_fraction=0.9)):
        slow = too_slow_reward(cfg, measures_time=True)
        assert reward_for(False, None, cfg) == 0.0 < slow < reward_for(True, 0.0, cfg)   # the slowest finished
        # cpu (and correctness mode): correct is 1.0, too_slow strictly between
        assert 0.0 < too_slow_reward(cfg, measures_time=False) < reward_for(True, None, cfg) == 1.0
    assert 0.0 < too_slow_reward(RewardConfig(mode="correctness"), True) < 1.0
    for bad in (0.0, 1.0, -0.1):
        with pytest.raises(ValueError, match="too_slow_fraction"):
            RewardConfig(too_slow_fraction=bad)


def test_the_stage_table_knows_too_slow():
    assert STAGE_OF[Status.TOO_SLOW] == ("too_slow",)
    assert Status("too_slow") is Status.TOO_SLOW and not Status.TOO_SLOW.is_failure


def test_trainers_get_the_too_slow_reward_not_their_failure_reward(serial_record):
    from kernelgym_gap.integrations.terms import record_terms, reward_of
    record, _ = serial_record
    assert reward_of(record, failure_reward=-1.0) == record.reward > 0.0
    assert record_terms(record, failure_reward=-1.0)["score"] == record.reward


# ---------------------------------------------------------------------------- cpu, through the engine

@pytest.fixture(scope="module")
def serial_record(layernorm):
    source = (FIXTURES / "failures" / "too_slow_serial.py").read_bytes()
    start = time.monotonic()
    record = evaluate(layernorm, source, "triton", "cpu", CPU_CONFIG)
    return record, time.monotonic() - start


def test_a_correct_kernel_killed_on_its_largest_shape_is_too_slow(serial_record, layernorm):
    record, elapsed = serial_record
    assert record.status is Status.TOO_SLOW and record.stage == "too_slow", record.message
    assert elapsed < 90, elapsed                     # the call bound, not the 300 s wall deadline
    # ranked above any wrong kernel and below any correct one that finished (cpu: 1.0)
    assert 0.0 < record.reward == too_slow_reward(CPU_CONFIG.reward, False) < 1.0
    assert record.correct is None                    # verified where checked, never on the largest shape
    # every smaller shape in both dtypes finished and was checked; the largest was killed
    assert record.trials_checked == 4
    t = record.terms
    assert t["trials_finished"] == 4 and t["bound_s"] == CALL_S and t["reached_s"] >= CALL_S
    assert "shape [16, 128]" in t["killed_call"]
    # cpu: no GPU figure from interpreter time, not even a bound
    assert t["E"] is None and t["U"] is None and t["E_upper"] is None and t["U_upper"] is None
    # KernelBench's check runs on the timed distribution's trials (terms v2): none of the 4 it finished is one
    assert t["kernelbench_allclose"] is None
    m = record.message
    assert m.startswith("correct on the 4 trial(s) it finished"), m
    assert f"ran past {CALL_S:.1f} s, its stage deadline" in m and "not a GPU figure" in m, m
    assert "the larger shapes were not checked" in m
    assert EvalRecord.from_json(record.to_json()) == record


def test_a_kernel_wrong_on_the_smallest_shape_is_wrong_even_if_it_hangs_later(layernorm):
    source = (FIXTURES / "slow" / "wrong_then_hang.py").read_bytes()
    start = time.monotonic()
    record = evaluate(layernorm, source, "triton", "cpu", CPU_CONFIG)
    assert time.monotonic() - start < 90
    assert record.status is Status.MISMATCH and record.stage == "trusted_check", record.message
    assert record.reward == 0.0 and record.correct is False
    # the first trial judged is the smallest shape's (held-out [7, 96]); the kill is not what decided
    assert record.failure is not None and record.failure.trial.shape == (7, 96)


# ---------------------------------------------------------------------- the verdict, synthetic evaluations

def _synthetic(layernorm, backend: str, finished, killed_at: int, first: bool = False, hint=()):
    """An Evaluation-like object as the stages leave it before TooSlow: the child killed at call position
    `killed_at` of the ordered trials, its checkpoint listing `finished` (positions)."""
    cfg = EvalConfig(trial_seed=1, seeds_per_shape=2)
    trials = order_for_correctness(layernorm, make_trials(layernorm, backend, cfg, random.Random(3)))
    outcomes = tuple(TrialOutcome(index=trials[i].index, output_file=f"trial_{trials[i].index}", launches=1,
                                  programs=1, seconds=0.1, input_digest_before="d", input_digest_after="d")
                     for i in finished)
    report = types.SimpleNamespace(status=Status.OK, trials=outcomes, timings=(),
                                   device={"name": "NVIDIA H100 80GB HBM3", "sm_count": 132}, versions={})
    bound = 60.0 if first else 2.0
    outcome = types.SimpleNamespace(stage_timeout="call", stage_overrun=(killed_at, bound, bound + 0.05),
                                    returncode=-9, stderr_tail="",
                                    stage_detail=f"call {killed_at} (trial {trials[killed_at].index}: ...) ran "
                                                 f"past {bound:.1f} s")
    job = Job(task_id=layernorm.id, dsl="triton", backend=backend, source_file="", outputs_dir="", report_file="",
              trials=trials, timing=TimingConfig() if backend == "cuda" else None, library_hint=hint)
    return types.SimpleNamespace(
        task=layernorm, dsl="triton", source="", config=cfg, placement=Placement(), flags=[], job=job,
        killed=outcome.stage_overrun,
        child=types.SimpleNamespace(outcome=outcome, report=report),
        backend=types.SimpleNamespace(measures_time=backend == "cuda", name=backend),
        check_result=CheckResult(status=Status.OK, message="", trials_checked=len(outcomes),
                                 kernelbench_allclose=True)), trials


def test_too_little_checked_is_still_a_timeout(layernorm):
    # only the smallest shape's float32 first seed finished: float16 was never checked
    ev, _ = _synthetic(layernorm, "cpu", finished=[0], killed_at=1, first=True)
    status, message, fields = too_slow.decide(ev)
    assert status is Status.TIMEOUT and "do not include the smallest shape in float16" in message, message
    assert "reward" not in fields


def test_the_checkpoint_is_read_only_after_a_calls_deadline_and_as_hostile_input(layernorm, tmp_path):
    from kernelgym_gap.core.record import ChildReport
    from kernelgym_gap.core.slowness import CHECKPOINT_FILE
    ev, trials = _synthetic(layernorm, "cpu", finished=[0, 1], killed_at=2)
    ev.job = dataclasses.replace(ev.job, report_file=str(tmp_path / "report.json"))
    assert too_slow.read_checkpoint(ev) is None                     # none written: the old timeout
    checkpoint = ChildReport(status=Status.OK, message="checkpoint after 2 trial(s)", trials=ev.child.report.trials)
    (tmp_path / CHECKPOINT_FILE).write_text(checkpoint.to_json())
    assert too_slow.read_checkpoint(ev) == checkpoint
    ev.child.outcome.stage_timeout = "import"                       # killed elsewhere: never read
    assert too_slow.read_checkpoint(ev) is None
    ev.child.outcome.stage_timeout = "call"
    (tmp_path / CHECKPOINT_FILE).write_text('{"schema": "kernelgym_gap.child_report", "status": [[[')
    assert too_slow.read_checkpoint(ev) is None                     # garbage: no verdict from it
    (tmp_path / CHECKPOINT_FILE).write_text(dataclasses.replace(checkpoint, trials=()).to_json())
    assert too_slow.read_checkpoint(ev) is None                     # nothing finished
    ev.killed = None
    assert too_slow.decide(ev) is None                              # and TooSlow lets other evaluations by


def test_on_cuda_the_bound_gives_e_and_u_upper_and_a_diagnosis(layernorm, monkeypatch):
    cal = Calibration(device_key="k", device_name="NVIDIA H100 80GB HBM3", copy_bytes_per_s=3.0e12,
                      matmul_flops_per_s={"float32": 6e13, "tf32": 4e14, "float16": 8e14, "bfloat16": 8e14},
                      source="datasheet")
    monkeypatch.setattr("kernelgym_gap.judge.measure.get_calibration", lambda report, config: cal)
    monkeypatch.setattr("kernelgym_gap.judge.measure.best_known_efficiency", lambda *a: None)
    ev, trials = _synthetic(layernorm, "cuda", finished=[0, 1], killed_at=2)
    killed = trials[2]
    lib_ms = 0.02
    ev.job = dataclasses.replace(ev.job, library_hint=((killed.shape, killed.dtype, lib_ms),))
    status, message, fields = too_slow.decide(ev)
    assert status is Status.TOO_SLOW, message
    t = fields["terms"]
    reached_ms = 2.05e3
    assert t["E_upper"] == pytest.approx(lib_ms / reached_ms)
    floor = t["floor_ms"]
    assert floor > 0 and t["U_upper"] == pytest.approx(floor / reached_ms)
    assert t["too_slow_by_rule"] is True                 # 2 s against 0.02 ms: far past 50x
    assert f"E <= {t['E_upper']:.2g}" in message and "too slow to time in full" in message
    assert fields["reward"] == too_slow_reward(ev.config.reward, True) == pytest.approx(0.1)
    assert fields["correct"] is None
    d = fields["diagnosis"]
    # the library's U on the shape decides (no best known solution): repairable where it runs well
    library_U = floor / lib_ms
    assert d["verdict"] == ("repairable_defect" if library_U >= 0.3 else "structural_residual")
    assert d["E_upper"] == t["E_upper"] and d["E"] is None
    # one program on 132 SMs: the sequential work is named
    assert any("too little parallelism" in e for e in d["evidence"])
    # the killed call is LayerNorm's held-out [3000, 1000]: terms and diagnosis (not scrubbed as the message
    # is, engine/feedback.py) name it in kind only
    assert killed.split == "heldout" and "held-out shape" in t["killed_call"]
    assert "3000" not in t["killed_call"] and "3000" not in d["summary"]


def test_a_first_call_killed_gives_no_e_bound(layernorm, monkeypatch):
    """A first call's time includes its compilation: no bound on the kernel's own time."""
    monkeypatch.setattr("kernelgym_gap.judge.measure.get_calibration",
                        lambda report, config: (_ for _ in ()).throw(RuntimeError("no device")))
    ev, trials = _synthetic(layernorm, "cuda", finished=[0, 1, 2, 3], killed_at=4, first=True)
    status, message, fields = too_slow.decide(ev)
    assert status is Status.TOO_SLOW
    assert fields["terms"]["E_upper"] is None and "includes compilation" in message
    assert any("no device ceilings" in f for f in ev.flags)
    assert fields["diagnosis"]["verdict"] == "undetermined"     # no library time, no best known solution


def test_diagnose_bound_rules():
    assert diagnose_bound(1e-4, 1e-5, 0.8, None, [], "x")["verdict"] == "repairable_defect"
    assert diagnose_bound(1e-4, 1e-5, 0.1, None, [], "x")["verdict"] == "structural_residual"
    assert diagnose_bound(1e-4, 1e-5, 0.8, 0.2, [], "x")["verdict"] == "structural_residual"   # best known decides
    assert diagnose_bound(None, None, None, 0.9, [], "x")["verdict"] == "repairable_defect"
    d = diagnose_bound(None, None, None, None, ["1 program(s)"], "killed")
    assert d["verdict"] == "undetermined" and "1 program(s)" in d["summary"]


# ------------------------------------------------------------------------------- bench and the gap study

def test_bench_counts_too_slow_apart_never_correct_nor_fast():
    from kernelgym_gap.bench import metrics
    episode = {"task_id": "kernelgym_gap/Softmax-v1", "sample": 0, "category": "reduction"}
    steps = [{"step": 0, "status": "mismatch", "reward": 0.0, "correct": False, "e": None, "u": None,
              "verdict": None},
             {"step": 1, "status": "too_slow", "reward": 0.1, "correct": None, "e": None, "u": None,
              "verdict": "repairable_defect"}]
    s = metrics.summarize_episode(episode, steps)
    assert s["status"] == "too_slow" and s["too_slow"] and not s["correct"] and s["E"] is None
    m = metrics.task_metrics([s], [1], speed=True)
    assert m["too_slow"] == 1 and m["correct"] == 0 and m["pass_at_k"]["1"] == 0.0 and m["fast_p"]["0"] == 0.0
    assert m["failures"] == {"too_slow": 1}
    assert metrics.aggregate([m], speed=True)["too_slow"] == 1


def test_the_gap_study_table_shows_the_bound():
    import importlib.util
    from conftest import ROOT
    spec = importlib.util.spec_from_file_location("gap_study", ROOT / "scripts" / "gap_study.py")
    gap = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gap)
    row = {"task": "kernelgym_gap/Softmax-v1", "kernel": "triton_scalar_loop", "dsl": "triton",
           "category": "reduction", "kind": "slow", "defect": "scalar_loop", "status": "too_slow",
           "kernelbench_allclose": True, "E": None, "E_compile": None, "U": None, "E_upper": 4.1e-5,
           "U_upper": 2.2e-5, "reward_full": 0.1, "reward_correctness_only": 0.5, "verdict": "repairable_defect"}
    table = gap.table([row])
    assert "<=4.1e-05" in table and "<=2.2e-05" in table and "too_slow" in table
    assert {"E_upper", "U_upper"} <= set(gap.CSV_FIELDS)
