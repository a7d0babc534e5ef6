"""The simulator's transform for the probe's readings counted (TimingConfig.probe_readings_count; sim/probe_fold.py)
and the estimate it rests on, on the H100 light batch's records of 2026-12-06 (results/h100_2026-12-06_lane_levers/
call1). cpu only, no GPU."""
import importlib.util
from pathlib import Path

import pytest

from kernelgym_gap.core.config import EvalConfig, TimingConfig
from kernelgym_gap.sim import probe_fold as pf
from kernelgym_gap.sim import workload
from kernelgym_gap.sim.pipeline import Job

ROOT = Path(__file__).resolve().parent.parent
CALL1 = ROOT / "results" / "h100_2026-12-06_lane_levers" / "call1" / "throughput_records.jsonl"


@pytest.fixture(scope="module")
def base():
    return workload.jobs_of_mode(workload.read_records(CALL1), "lanes")


def test_the_constants_are_the_timing_configs_and_the_variant_parses():
    cfg = TimingConfig()
    assert (pf.PROBE_REPS, pf.MIN_REPS, pf.MIN_TIME_S * 1e3) == (cfg.library_check_reps, cfg.min_reps, cfg.min_time_ms)
    spec = importlib.util.spec_from_file_location("throughput_pf", ROOT / "scripts" / "throughput.py")
    tp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tp)
    assert tp.apply_variant(EvalConfig(), tp.parse_variant(pf.PROBE_FOLD))[0].timing.probe_readings_count


@pytest.mark.parametrize("measure,first_call", [(0.06, 0.0005), (0.146, 0.0005), (0.03, 0.004), (0.064, 0.0045),
                                                (0.022, 0.0005)])
def test_a_shapes_repetitions_give_its_measured_part_in_the_regime_its_first_call_tells(measure, first_call):
    n, c = pf.shape_reps(measure, first_call)
    assert n * (pf.REP_OVERHEAD_S + c) == pytest.approx(measure)
    assert n >= pf.MIN_REPS
    if n > pf.MIN_REPS:           # the min_time regime: its GPU time is min_time_ms
        assert n * c == pytest.approx(pf.MIN_TIME_S) and first_call < pf.MIN_TIME_S / pf.MIN_REPS


def _job(**kw):
    base = dict(name="x", timing=1.5, timing_measure=0.5, timing_probe=0.4, timing_first_call=0.004)
    return Job(**{**base, **kw})


@pytest.mark.parametrize("change", [dict(timing_measure=0.0), dict(timing_probe=0.0), dict(timing_first_call=0.0),
                                    dict(timing=0.0)])
def test_jobs_without_a_full_timing_after_their_probe_are_left(change):
    j = _job(**change)
    assert pf.probe_fold(j) == j


def test_the_cut_comes_out_of_the_measured_part_and_the_stretch_alike():
    j = _job()
    out = pf.probe_fold(j)
    n, c = pf.shape_reps(0.5 / 8, 0.004 / 8)
    cut = 8 * 10 * (pf.REP_OVERHEAD_S + c)
    assert j.timing - out.timing == pytest.approx(cut) == pytest.approx(j.timing_measure - out.timing_measure)
    assert out.timing_probe == j.timing_probe


def test_on_the_records_the_fast_kernels_lose_10_of_their_hundreds_and_the_slow_half(base):
    """The optimized solutions' timings are min_time_ms-bound (100-320 repetitions of 60-200 us calls): the probe's
    10 are 3-10% of them. The scalar loops' are min_reps-bound (20 of 1-3 ms calls): the probe's 10 are half."""
    for j in base:
        t = pf.todays_defaults(j)
        if t.timing_measure <= 0:
            continue
        share = (t.timing_measure - pf.probe_fold(t).timing_measure) / t.timing_measure
        if "scalar_loop" in j.name:
            assert share == pytest.approx(0.5)
        else:
            assert 0.03 <= share <= 0.10, j.name


def test_the_predictions_order_and_the_early_jobs_untouched(base):
    rows = {r["row"]: r for r in pf.predictions(base)}
    d, fold, hop, both = (rows[k]["evals_per_gpu_hour"] for k in
                          ("today's defaults", "+ the probe's readings counted", "+ the hopeless probe ends at 3",
                           "+ both"))
    assert d < fold < hop < both
    assert rows["+ both"]["measure_per_eval_s"] == rows["+ the probe's readings counted"]["measure_per_eval_s"]
    early = [j for j in base if j.timing_measure == 0 and j.timing_probe > 0]
    assert len(early) == 2 and all(pf.probe_fold(pf.todays_defaults(j)) == pf.todays_defaults(j) for j in early)


def test_the_device_step_runs_the_gpu_test_then_the_three_rows(tmp_path):
    """scripts/device_session.sh probe-fold, its python replaced by one that records its arguments: the gpu test it
    names exists, and the throughput rows are the defaults, the lever, and the lever with the hopeless rule, each a
    --variant throughput.py accepts, on the light batch's 24 at 4 slots."""
    import os
    import subprocess
    calls, bin_dir = tmp_path / "calls.txt", tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "python3"
    fake.write_text(f'#!/usr/bin/env bash\nprintf "%s\\n" "$@" "----" >> {calls}\n')
    fake.chmod(0o755)
    env = dict(os.environ, OUT=str(tmp_path / "out"), PATH=f"{bin_dir}:{os.environ.get('PATH', '')}")
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "device_session.sh"), "probe-fold"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    test_args, run_args = [c.split("\n") for c in calls.read_text().split("----\n")[:2]]
    node = next(a for a in test_args if a.startswith("tests/"))
    path, name = node.split("::")
    assert f"def {name}(" in (ROOT / path).read_text()
    assert run_args[0] == "scripts/throughput.py"
    spec = importlib.util.spec_from_file_location("throughput_step", ROOT / "scripts" / "throughput.py")
    tp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tp)
    variants = [run_args[k + 1] for k, a in enumerate(run_args) if a == "--variant"]
    timings = [tp.apply_variant(EvalConfig(), tp.parse_variant(v))[0].timing for v in variants]
    assert [(t.probe_readings_count, t.probe_hopeless_reps) for t in timings] == [(False, 0), (True, 0), (True, 3)]
    assert run_args[run_args.index("--max") + 1] == "24" and run_args[run_args.index("--per-gpu") + 1] == "4"
    assert run_args[run_args.index("--out") + 1] == str(tmp_path / "out" / "probe_fold")
