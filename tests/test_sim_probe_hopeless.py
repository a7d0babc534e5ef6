"""The simulator's transform for the probe's hopeless rule (TimingConfig.probe_hopeless_reps; sim/levers.
probe_hopeless_stop) and the estimate it rests on, checked against the H100 records of 2026-12-06 (the light batch
with its library warm: results/h100_2026-12-06_lane_levers/call1). cpu only, no GPU."""
import dataclasses
import importlib.util
from pathlib import Path

import pytest

from kernelgym_gap.sim import levers, probe_levers, workload
from kernelgym_gap.sim.pipeline import Job

ROOT = Path(__file__).resolve().parent.parent
CALL1 = ROOT / "results" / "h100_2026-12-06_lane_levers" / "call1" / "throughput_records.jsonl"
HOPELESS = {"AddReLU/triton_single_program.py", "GELU/triton_scalar.py"}   # every shape exited early


@pytest.fixture(scope="module")
def jobs():
    return [(r, workload.job_from_record(r)) for r in workload.read_records(CALL1) if r.get("mode") == "lanes"]


def _early(**kw):
    base = dict(name="x", timing=5.0, timing_measure=0.0, timing_probe=4.5, timing_first_call=0.36)
    return Job(**{**base, **kw})


def test_the_shape_count_is_the_simulators():
    assert probe_levers.SHAPES == levers.TIMED_SHAPES


def test_the_probes_constants_are_the_timing_configs_defaults():
    """The simulator keeps no import of the package's config; its copies of the probe's repetitions and budget
    must still be what TimingConfig gives the child."""
    from kernelgym_gap.core.config import TimingConfig
    cfg = TimingConfig()
    assert probe_levers.PROBE_REPS == cfg.library_check_reps
    assert probe_levers.EARLY_EXIT_BUDGET_S * 1e3 == cfg.early_exit_budget_ms
    assert probe_levers.PROBE_HOPELESS == f"probe_hopeless_reps={probe_levers.PROBE_HOPELESS_REPS}"


def test_the_records_probe_and_first_call_reach_the_job(jobs):
    r, j = next((r, j) for r, j in jobs if r["submission"] == "GELU/triton_scalar.py")
    assert (j.timing_probe, j.timing_first_call) == (r["latency"]["child_timing_probe"],
                                                     r["latency"]["child_timing_first_call"])


def test_the_estimate_gives_the_hopeless_records_probe(jobs):
    """The arithmetic of docs/measurement.md ("The probe's seconds"): per shape, 2 warm-up calls and 10 probe
    repetitions at first_call / 8 each, and ~30 ms of the library's warm-up and check, is each hopeless record's
    child_timing_probe within 2%."""
    for r, j in jobs:
        if r["submission"] in HOPELESS:
            per_call = j.timing_first_call / levers.TIMED_SHAPES
            estimate = levers.TIMED_SHAPES * ((2 + probe_levers.PROBE_REPS) * per_call + 0.03)
            assert estimate == pytest.approx(j.timing_probe, rel=0.02)


def test_only_the_jobs_that_exited_early_everywhere_lose_probe_seconds(jobs):
    cut = {r["submission"]: j.timing - probe_levers.probe_hopeless_stop(j).timing for r, j in jobs}
    assert {s for s, c in cut.items() if c > 0} == HOPELESS
    assert cut["GELU/triton_scalar.py"] == pytest.approx(8 * 0.362 / 8 * 7, rel=0.01)      # 2.53 s
    assert cut["AddReLU/triton_single_program.py"] == pytest.approx(0.255 * 7, rel=0.01)   # 1.79 s
    assert sum(cut.values()) == pytest.approx(4.32, abs=0.01)


def test_the_cut_leaves_the_probe_and_the_stretch_consistent():
    j = probe_levers.probe_hopeless_stop(_early())
    assert j.timing == pytest.approx(5.0 - 0.36 * 7) and j.timing_probe == pytest.approx(4.5 - 0.36 * 7)


@pytest.mark.parametrize("change", [
    dict(timing_measure=0.5),          # a full timing followed (some shape was not hopeless, or the library was timed)
    dict(timing_probe=0.0),            # a record without the probe's part
    dict(timing_first_call=0.0),
    dict(timing=0.0),                  # no timing (stopped before it)
    dict(timing_first_call=8 * 0.4),   # 400 ms calls: the budget's 1 s already ends the probe at 3
])
def test_jobs_the_rule_cannot_shorten_are_left(change):
    j = _early(**change)
    assert probe_levers.probe_hopeless_stop(j) == j


def test_the_cut_is_at_most_the_kernels_share_of_the_probe():
    j = probe_levers.probe_hopeless_stop(_early(timing_probe=1.2))
    assert j.timing_probe == pytest.approx(1.2 * (1 - 7 / 12))


def test_the_scenario_is_the_throughput_variant_and_lands_on_the_timing_config():
    sc = next(s for s in levers.scenarios(levers.fit_timing(ROOT / "results" / "h200_2026-12-04_corpus"
                                                            / "gap_study_cuda.json"))
              if s.variant == probe_levers.PROBE_HOPELESS)
    assert sc.job is probe_levers.probe_hopeless_stop
    spec = importlib.util.spec_from_file_location("throughput", ROOT / "scripts" / "throughput.py")
    tp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tp)
    from kernelgym_gap.core.config import EvalConfig
    config, _ = tp.apply_variant(EvalConfig(), tp.parse_variant(probe_levers.PROBE_HOPELESS))
    assert config.timing.probe_hopeless_reps == probe_levers.PROBE_HOPELESS_REPS
    assert dataclasses.replace(config.timing, probe_hopeless_reps=0) == EvalConfig().timing
    assert probe_levers.PROBE_HOPELESS in tp.LEVERS


def test_a_record_that_measured_nothing_after_its_probe_loses_no_measured_part(jobs):
    """A job that exited early on every shape recorded child_timing_measure 0 beside its probe: the levers that
    shrink the measured repetitions (graph replay with the interval stop, warm-once) leave its timing as it is. The
    old rule read the 0 as unrecorded and cut MEASURE_SHARE of the timing that was never there."""
    for r, j in jobs:
        if r["submission"] in HOPELESS:
            assert levers.measured_part(j) == 0.0
            assert levers.graph_interval_measured(j).timing == j.timing
            assert levers.warm_once(j).timing == j.timing
    bare = Job(name="old", timing=2.0)                    # a record without the timing's parts: the share stands
    assert levers.measured_part(bare) == pytest.approx(levers.MEASURE_SHARE * 2.0)
