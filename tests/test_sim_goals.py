"""The gap to issue 35's goals (kernelgym_gap/sim/goals.py, scripts/simulate_throughput.py --goals): each stage
family scaled alone, the greedy combinations and the lane shares, on a small synthetic records folder and on the
committed H100 call. cpu only; every figure is a replay of records, no GPU."""
import dataclasses
import importlib.util
import json
from pathlib import Path

import pytest

from kernelgym_gap.sim import goals, ipc_outputs, levers, study
from kernelgym_gap.sim.pipeline import Setup, simulate
from kernelgym_gap.sim.workload import job_from_record

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "results" / "h200_2026-12-04_corpus" / "gap_study_cuda.json"
CALL1 = ROOT / "results" / "h100_2026-12-06_lane_levers" / "call1"


def _script():
    spec = importlib.util.spec_from_file_location("simulate_throughput", ROOT / "scripts" / "simulate_throughput.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# one evaluation's stages as the H100 records carry them (child_timing's parts, the correctness stretch's parts,
# the checkpoints' let-go writes, the check's parts), scaled per submission so the batch is not uniform
_LAT = {"gate": 0.02, "child": 7.0, "child_preimport": 0.3, "child_setup": 0.3, "child_import": 0.05,
        "child_lane_wait_shared": 0.2, "child_correctness": 3.4, "child_correctness_inputs": 0.3,
        "child_correctness_calls": 1.6, "child_correctness_save": 0.9, "child_checkpoint_write": 0.45,
        "child_checkpoint_unlaned": 0.4, "child_lane_wait_after_checkpoint": 0.3, "child_lane_wait_exclusive": 0.4,
        "child_timing": 2.3, "child_timing_setup": 0.3, "child_timing_clock_warmup": 0.3,
        "child_timing_inputs": 0.02, "child_timing_first_call": 0.01, "child_timing_probe": 0.6,
        "child_timing_measure": 1.1, "child_timing_recheck": 0.27, "child_outputs_write": 0.2, "child_total": 6.6,
        "check": 2.4, "check_lane_wait": 0.3, "check_inputs": 0.05, "check_reference": 0.05, "check_read": 1.6,
        "check_compare": 0.15, "total": 9.6}


def _record(i: int, mode: str = "lanes") -> dict:
    k = 1.0 + 0.15 * (i % 3)
    lat = {key: round(v * k, 4) for key, v in _LAT.items()}
    return {"mode": mode, "task": f"T{i % 3}", "submission": f"T{i % 3}/s{i}.py", "status": "ok",
            "at_s": 4.0 * (i + 1), "started_s": 4.0 * (i + 1) - lat["total"], "latency": lat}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    d = tmp_path_factory.mktemp("call")
    (d / "throughput_records.jsonl").write_text("\n".join(json.dumps(_record(i)) for i in range(8)) + "\n")
    step = {"task": "T0", "status": "ok", "latency": dict(_LAT, total=9.0)}
    summary = {"device": "synthetic", "modes": [{"mode": "lanes x4", "evals_per_gpu_hour": 700.0}],
               "env_step": {"steps": [step, step, step], "p50_s": 9.0}}
    (d / "throughput_synthetic_2026-12-06.json").write_text(json.dumps(summary))
    return d


@pytest.fixture(scope="module")
def light(folder):
    return study.load_light(folder, CORPUS)


@pytest.fixture(scope="module")
def workload(light):
    return goals.Workload("light", tuple(goals.stage(j) for j in light.rows[study.DEFAULTS_MODE]), copies=2,
                          seeds=(1, 2))


def test_the_studys_start_is_the_lane_time_levers_with_the_hand_over(light):
    """stage() is the existing transform (ipc_outputs.lane_time_levers_ipc): setting the compiles apart does not move
    the simulated rate or the step, so the study starts where the prediction tables' last row is."""
    base = light.rows[study.DEFAULTS_MODE]
    ours = simulate([goals.stage(j).job for j in base]).evals_per_gpu_hour
    theirs = simulate([ipc_outputs.lane_time_levers_ipc(j) for j in base]).evals_per_gpu_hour
    assert ours == pytest.approx(theirs, rel=1e-12)
    assert goals.step_p50([goals.stage(s) for s in light.steps], {}) == pytest.approx(
        study.step_p50([ipc_outputs.lane_time_levers_ipc(s) for s in light.steps]), rel=1e-12)


def test_the_families_split_the_timing_and_the_correctness_stretch_without_overlap(workload):
    for s in workload.staged:
        j = s.job
        timing = sum(goals.family(n).seconds(s) for n in goals.FAMILY_NAMES if n.startswith("timing:"))
        held = sum(goals.family(n).seconds(s) for n in goals.FAMILY_NAMES if n.startswith("correctness:"))
        check = sum(goals.family(n).seconds(s) for n in goals.FAMILY_NAMES if n.startswith("check:"))
        assert timing == pytest.approx(j.timing) and held == pytest.approx(j.correctness)
        assert check == pytest.approx(j.check) and s.handover > 0 and s.warmup == levers.STEADY_CLOCK_WARMUP_S
        assert j.recheck > 0 and goals.family("the rechecks").seconds(s) == pytest.approx(j.recheck)


def test_a_record_without_the_timings_parts_loses_its_measured_repetitions_when_scaled_to_zero():
    """The H200 records carry no child_timing_measure: the levers give the job MEASURE_SHARE of its timing as its
    measured part, and scaling that family to 0 takes exactly it off the timing (it does not come back as
    MEASURE_SHARE of what is left, as levers.measured_part would read a 0 without a probe)."""
    lat = {k: v for k, v in _LAT.items() if not k.startswith("child_timing_")}
    s = goals.stage(job_from_record({"mode": "lanes", "task": "T", "status": "ok", "at_s": 10.0,
                                    "latency": lat}))
    f = goals.family("timing: measured repetitions")
    measure = f.seconds(s)
    assert measure > 0 and s.job.timing_probe == 0
    zero = f.scale(s, 0.0)
    assert f.seconds(zero) == 0 and zero.job.timing == pytest.approx(s.job.timing - measure)
    parts = sum(goals.family(n).seconds(zero) for n in goals.FAMILY_NAMES if n.startswith("timing:"))
    assert parts == pytest.approx(zero.job.timing)


def test_scaling_a_family_by_one_changes_nothing(workload):
    base = workload.rate({})
    for name in goals.FAMILY_NAMES:
        f = goals.family(name)
        assert all(f.scale(s, 1.0) == s for s in workload.staged), name
        assert workload.rate({name: 1.0}) == base


LET_GOS = "checkpoints' let-gos (messages)"


def test_scaling_a_family_to_zero_never_lowers_the_rate_and_takes_its_seconds(workload):
    """Every family at 0 leaves the rate at least where it was, but for the checkpoints' let-go messages: their
    seconds are the windows in which a timing waiting at the gate finds the lane free (ipc_outputs' docstring), so
    at 0 the model gives a little less (-0.4% here), never more than 1% either way."""
    base = workload.rate({})
    for name in goals.FAMILY_NAMES:
        f = goals.family(name)
        zero = workload.rate({name: 0.0})
        if name == LET_GOS:
            assert zero == pytest.approx(base, rel=0.01)
        else:
            assert zero >= base - 1e-9, name
        assert all(f.seconds(f.scale(s, 0.0)) <= 1e-9 for s in workload.staged), name


def test_the_checkpoint_messages_at_zero_keep_the_let_gos(workload):
    """unlaned 0 would make the simulator hold the correctness stretch in one piece (the let-gos dropped), a
    different design that costs a waiting timing its window; the family keeps the let-gos at a floor."""
    f = goals.family(LET_GOS)
    for s in workload.staged:
        zero = f.scale(s, 0.0).job
        assert zero.checkpoints == s.job.checkpoints > 0 and 0 < zero.unlaned <= goals.LET_GO_FLOOR_S


def test_a_greedy_combination_that_reaches_its_goal_reaches_it_when_replayed(workload):
    base = workload.rate({})
    target = 1.3 * base
    combo = goals.greedy("light", target, lambda f: workload.rate(f, 4), slots=4)
    assert combo.reached and combo.path and combo.value >= target
    assert workload.rate(combo.factors, 4) == pytest.approx(combo.value) and workload.rate(combo.factors, 4) >= target
    row = combo.as_row()
    assert row["reached"] and row["factors"] and all(k in (0.0, 0.5) for k in row["factors"].values())
    # a goal already met takes no step
    met = goals.greedy("light", 0.5 * base, lambda f: workload.rate(f, 4))
    assert met.reached and not met.path and met.as_row()["combination"].startswith("(none")


def test_an_unreachable_goal_is_reported_unreachable_not_as_a_combination(workload):
    combo = goals.greedy("light", 1e9, lambda f: workload.rate(f, 4), slots=4)
    assert not combo.reached and all(k == 0.0 for k in combo.factors.values())
    row = combo.as_row()
    assert not row["reached"] and row["combination"].startswith("UNREACHABLE") and row["value"] < 1e9
    step = goals.greedy("step", 0.0, lambda f: 1.0 + sum(f.values()), higher_is_better=False)
    assert not step.reached and step.value == 1.0


def test_bad_factors_and_unknown_families_are_refused(workload):
    with pytest.raises(goals.GoalsError, match="within 0..1"):
        goals.apply(workload.staged, {goals.FAMILY_NAMES[0]: 1.5})
    with pytest.raises(goals.GoalsError, match="no stage family"):
        goals.apply(workload.staged, {"the moon": 0.5})
    with pytest.raises(goals.GoalsError, match="light batch"):
        goals.study([], None, [])


def test_the_lane_shares_add_up_and_leave_host_stages_off_the_lane(workload):
    rows = goals.lane_shares(workload.staged)
    assert sum(r["lane_share"] for r in rows) == pytest.approx(1.0, abs=1e-3)
    assert sum(r["own_share"] for r in rows) == pytest.approx(1.0, abs=1e-3)
    host = {r["family"]: r for r in rows if r["lane"] == "host"}
    assert host and all(r["lane_seconds"] == 0 for r in host.values())


def test_goals_is_printed_last_and_changes_no_other_table(folder, tmp_path, capsys):
    """--goals adds its tables after every other one and a "goals" key to the JSON; everything else, the
    calibration (the 15% bound rows) and the predictions included, is byte for byte what it was without it."""
    script = _script()
    rc0 = script.main(["--light-only", "--records", str(folder), "--json", str(tmp_path / "a.json")])
    plain = capsys.readouterr().out
    rc1 = script.main(["--light-only", "--records", str(folder), "--json", str(tmp_path / "b.json"), "--goals",
                       "--goals-full", str(folder)])
    with_goals = capsys.readouterr().out
    assert rc0 == rc1
    plain, with_goals = (x.replace(str(tmp_path / "a.json"), "J").replace(str(tmp_path / "b.json"), "J")
                         for x in (plain, with_goals))
    assert with_goals.startswith(plain) and "== the gap to the goals" in with_goals[len(plain):]
    a, b = json.loads((tmp_path / "a.json").read_text()), json.loads((tmp_path / "b.json").read_text())
    assert {k: v for k, v in b.items() if k != "goals"} == a
    g = b["goals"]
    assert {r["goal"].split()[0] for r in g["combinations"]} == {"light", "full", "step"}
    assert {r["slots"] for r in g["combinations"] if r["slots"]} == set(goals.SLOTS)
    assert len(g["sensitivity"]) == 1 + len(goals.FAMILIES) * len(goals.FACTORS)


def test_a_missing_full_mix_folder_is_a_clear_error(folder, tmp_path, capsys):
    rc = _script().main(["--light-only", "--records", str(folder), "--goals", "--goals-full", str(tmp_path)])
    assert rc == 2 and "--goals-full" in capsys.readouterr().err


def test_on_the_h100_call_the_studys_as_run_baseline_is_the_prediction_tables_row():
    """The committed H100 lane-levers call: the study's as-run light baseline is the prediction table's 'lane-time
    levers + outputs handed over' row (961.8 with the hand-over's costs measured on the H200 and the pre-started
    children's startup read from the records, workload.prestarts; docs/measurement.md's 1,031.0 predates that),
    and its step the 3.77 s of docs/measurement.md (3.83 assumed)."""
    inp = study.load_light(CALL1, CORPUS)
    preds = {r["scenario"]: r for r in study.light_predictions(inp)}
    row = preds[ipc_outputs.SCENARIOS[1][0]]
    w = goals.Workload("light", tuple(goals.stage(j) for j in inp.rows[study.DEFAULTS_MODE]))
    assert round(w.as_run({}), 1) == row["simulated"] == 961.8
    assert round(goals.step_p50([goals.stage(s) for s in inp.steps], {}), 2) == row["step_p50_s"] == 3.77
    # the probe holds the largest exclusive share there (1.06 s of an evaluation's 1.39 s exclusive stretch)
    shares = {r["family"]: r for r in goals.lane_shares(w.staged)}
    excl = [r for r in shares.values() if r["lane"] == "exclusive"]
    assert max(excl, key=lambda r: r["lane_seconds"])["family"] == "timing: the probe"
    assert dataclasses.replace(Setup()).slots_per_gpu == 4


def test_goals_leaves_the_h200_calibration_and_predictions_as_they_were(tmp_path, capsys):
    """The H200 mode (no --light-only): its calibration (the rows the 15% bound gates), scaling and predictions are
    the same with --goals, whose tables come last with the records' own light batch and full mix."""
    script = _script()
    rc0 = script.main(["--json", str(tmp_path / "a.json")])
    plain = capsys.readouterr().out.replace(str(tmp_path / "a.json"), "J")
    rc1 = script.main(["--json", str(tmp_path / "b.json"), "--goals"])
    with_goals = capsys.readouterr().out.replace(str(tmp_path / "b.json"), "J")
    assert rc0 == rc1 == 0 and with_goals.startswith(plain) and "== the gap to the goals" in with_goals[len(plain):]
    a, b = json.loads((tmp_path / "a.json").read_text()), json.loads((tmp_path / "b.json").read_text())
    assert {k: v for k, v in b.items() if k != "goals"} == a and b["goals"]["full_mix"] == "studied"
