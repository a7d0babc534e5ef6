"""The hand-over's model held to a measured row stage by stage (sim/handover_stages.py), on made-up jobs and on
the H100 call of 2026-12-07 10:14 (results/h100_2026-12-07_session50/handover_light), whose flag row ran before
the file outputs were read ahead of the lane. cpu only, no GPU."""
import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from kernelgym_gap.sim import handover_stages as hs
from kernelgym_gap.sim import ipc_outputs, levers
from kernelgym_gap.sim.pipeline import Job, simulate

ROOT = Path(__file__).resolve().parent.parent
CALL = ROOT / "results" / "h100_2026-12-07_session50" / "handover_light"
CORPUS = ROOT / "results" / "h200_2026-12-04_corpus" / "gap_study_cuda.json"


def _job(name, **kw):
    base = dict(calls=1.0, correctness=2.0, save=0.5, unlaned=1.0, checkpoints=2, timing=1.5, write=0.6,
                check=1.2, check_read=0.4, check_prefetch=1.0)
    return Job(name=name, **{**base, **kw})


def test_the_model_column_is_the_as_built_transform_of_the_defaults_and_measured_is_the_flags_mean():
    d = [_job("a"), _job("b", correctness=3.0)]
    f = [_job("b", correctness=4.0, check_prefetch=0.0), _job("a", correctness=5.0, check_prefetch=0.0)]
    rows = {r["stage"]: r for r in hs.stage_rows(d, f)}
    model = [ipc_outputs.ipc_outputs_as_built(j, read_before_lane=False) for j in d]
    assert rows["correctness"]["defaults"] == pytest.approx(2.5)
    assert rows["correctness"]["model"] == pytest.approx(sum(j.correctness for j in model) / 2, abs=1e-3)
    assert rows["correctness"]["measured"] == pytest.approx(4.5)
    assert rows["correctness"]["model_minus_measured"] == pytest.approx(rows["correctness"]["model"] - 4.5, abs=2e-3)
    shared = rows["lane held shared"]
    assert shared["measured"] == pytest.approx(4.5 + 1.2)      # correctness + check (no recheck)
    assert rows["lane held exclusive"]["measured"] == pytest.approx(1.5)


def test_the_model_reads_before_the_lane_when_the_flags_row_did():
    d = [_job("a")]
    f = [_job("a", check_prefetch=0.3)]
    rows = {r["stage"]: r for r in hs.stage_rows(d, f)}
    assert rows["check_prefetch"]["model"] == pytest.approx(
        ipc_outputs.ipc_outputs_as_built(d[0], read_before_lane=True).check_prefetch, abs=1e-3)
    assert rows["check_prefetch"]["model"] > 0


def test_rows_without_a_submission_in_common_are_a_typed_error():
    with pytest.raises(hs.StagesError, match="no submission in both rows"):
        hs.stage_rows([_job("a")], [_job("b")])


def test_the_flags_row_read_before_its_lane_predicts_more_per_gpu_hour_on_the_measured_scale():
    flag = [_job(f"s{i}", check=2.0, check_read=1.5, check_prefetch=0.0) for i in range(8)]
    pred = hs.from_flag_row(flag, measured=500.0)
    assert pred.replayed == pytest.approx(simulate(flag).evals_per_gpu_hour, abs=0.1)
    moved = [levers.read_outside(j) for j in flag]
    assert pred.predicted == pytest.approx(simulate(moved).evals_per_gpu_hour, abs=0.1)
    assert pred.predicted > pred.replayed
    assert pred.scaled == pytest.approx(500.0 * pred.predicted / pred.replayed, abs=0.1)
    assert pred.moved_s == pytest.approx(1.5 * (1 - levers.H2D_SHARE_OF_READ), abs=1e-3)


def test_a_flag_row_that_read_before_its_lane_has_nothing_to_predict():
    assert hs.from_flag_row([_job("a", check_prefetch=0.2)], 500.0) is None
    assert hs.from_flag_row([], 500.0) is None
    assert hs.step_from_flag([_job("a", check_prefetch=0.2)], 9.0) is None


def test_of_call_needs_the_flag_alone_beside_the_defaults():
    rows = {"lanes": [_job("a")], "lanes [x=1]": [_job("a")]}
    assert hs.of_call(rows, {"lanes": "", "lanes [x=1]": "x=1"}, {"lanes": 1.0, "lanes [x=1]": 1.0}) is None
    rows["lanes [hand_over_outputs=1]"] = [dataclasses.replace(_job("a"), check_prefetch=0.0)]
    out = hs.of_call(rows, {"lanes": "", "lanes [x=1]": "x=1", "lanes [hand_over_outputs=1]": hs.FLAG},
                     {"lanes": 1.0, "lanes [x=1]": 1.0, "lanes [hand_over_outputs=1]": 300.0})
    assert out["row"] == "lanes [hand_over_outputs=1]" and out["read_before_lane"] is False
    assert out["from_flag_row"]["measured"] == 300.0 and out["step_from_flag"] is None


def test_on_the_h100_call_the_model_misses_the_shared_lane_holds_growth_not_the_timing():
    from kernelgym_gap.sim import study
    inp = study.load_light(CALL, CORPUS)
    out = hs.of_call(inp.rows, inp.variants, inp.measured, study.DEFAULTS_MODE)
    rows = {r["stage"]: r for r in out["stages"]}
    # measured on that call: the shared holds grew 5.13 -> 7.84 s per evaluation, the model says 6.56
    assert rows["lane held shared"]["measured"] - rows["lane held shared"]["defaults"] > 2.5
    assert rows["lane held shared"]["model_minus_measured"] < -1.0
    assert abs(rows["lane held exclusive"]["model_minus_measured"]) < 0.05
    # the host copies of the outputs past the device budget (save) and the check's reads under the lane are
    # the model's largest misses
    assert rows["save"]["model_minus_measured"] < -0.3 and rows["check_read"]["model_minus_measured"] < -0.4
    pred = out["from_flag_row"]
    assert pred["replayed"] < pred["predicted"] < 700.0
    # docs/measurement.md's 598.1 -> 621.9 (no gain over the defaults' 627.9) predates the pre-started children's
    # startup read from the records (workload.prestarts): 598.1 -> 674.8 since, +7.5% over the defaults, within
    # the run's noise (RUN_NOISE, 10%)
    assert pred["scaled"] < inp.measured[study.DEFAULTS_MODE] * 1.1


def test_the_script_prints_both_tables_for_the_h100_call():
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "simulate_throughput.py"), "--records", str(CALL),
                          "--light-only", "--seed", "1"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert "the hand-over AS BUILT applied to the defaults row (model)" in out.stdout
    assert "lane held shared" in out.stdout
    assert "598.1 -> 674.8" in out.stdout
    # the 10:14 row sits beside the model of the code it ran (no read before the lane), not the newer code's
    line = next(x for x in out.stdout.splitlines() if x.startswith("outputs handed over on the device, as run"))
    assert "598.1" in line and "hand_over_outputs=1" in line


def test_with_plans_sets_the_tasks_bytes_and_nothing_else():
    from kernelgym_gap.sim.checkpoints import REPEATS, CheckpointPlan
    plan = CheckpointPlan((REPEATS,), (3 << 30,), 1 << 20, 16)
    j = dataclasses.replace(_job("a"), task="GELU")
    got = ipc_outputs.with_plans({"GELU": plan})(j)
    assert got == dataclasses.replace(j, checkpoint_plan=plan)
    assert ipc_outputs.output_bytes(got)[0] > ipc_outputs.output_bytes(j)[0]     # its own 3 GiB, not the batch's
    assert ipc_outputs.with_plans({"GELU": plan})(dataclasses.replace(j, task="RowSum")).checkpoint_plan is None
    assert ipc_outputs.with_plans(None)(j) is j
    other = CheckpointPlan((REPEATS,), (1,), 1, 16)
    kept = dataclasses.replace(j, checkpoint_plan=other)
    assert ipc_outputs.with_plans({"GELU": plan})(kept).checkpoint_plan is other


def test_the_flags_variant_names_the_model_of_the_code_its_row_ran():
    now = {sc.name: sc.variant for sc in ipc_outputs.scenarios()}
    then = {sc.name: sc.variant for sc in ipc_outputs.scenarios(read_before_lane_ran=False)}
    first, second = ipc_outputs.AS_BUILT[0][0], ipc_outputs.AS_BUILT[1][0]
    assert (now[first], now[second]) == (None, hs.FLAG)
    assert (then[first], then[second]) == (hs.FLAG, None)
    assert hs.flag_read_before_lane({"lanes": [_job("a")]}, {"lanes": ""}) is True        # no flag row: as now
    rows = {"lanes": [_job("a")], "f": [_job("a", check_prefetch=0.0)]}
    assert hs.flag_read_before_lane(rows, {"lanes": "", "f": hs.FLAG}) is False
