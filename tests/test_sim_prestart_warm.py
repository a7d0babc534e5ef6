"""The simulator's pre-started children and the task they warm the library for (pipeline.Setup.prestart_warm,
sim/prestart_warm.py): small hand-made batches whose every second is known, then the prediction on the H100
full mix's records of 2026-12-07 13:00 (SIMULATED, not a measurement). cpu only, no GPU."""
import dataclasses
import importlib.util
from pathlib import Path

import pytest

from kernelgym_gap.core.config import EvalConfig
from kernelgym_gap.core.placement import Placement
from kernelgym_gap.sim import levers, prestart_warm, workload
from kernelgym_gap.sim.pipeline import WARMED_S, Job, Setup, simulate

ROOT = Path(__file__).resolve().parent.parent
SWITCH_ROW = ROOT / "results" / "h100_2026-12-07_session51" / "library_warm" / "throughput_records.jsonl"


def _job(name, task, cold=4.0):
    # a job that made its warm-up cold in its record (so `correctness` holds `cold` of it)
    return Job(name=name, task=task, correctness=1.0 + cold, timing=1.0, check=0.5, write=0.0, misc=0.0, rest=0.0,
               setup=0.0, handoff=0.0, cold_start=1.0, library_warm=cold, library_warm_cold=cold, warms_library=True)


def _warm_ups(run):
    """(job index, correctness seconds) of each job's correctness stretch and the pre-starts' warm-up holds."""
    corr = {iv.job: iv.end - iv.start for iv in run.trace if iv.stage == "correctness"}
    pre = [iv.end - iv.start for iv in run.trace if iv.row == "pre-start" and "library warm-up" in iv.stage]
    return corr, pre


def test_recorded_replays_the_records_and_warms_nothing_in_the_pre_start():
    jobs = [_job("a", "A"), _job("b", "B"), _job("c", "A")]
    corr, pre = _warm_ups(simulate(jobs, Setup(slots_per_gpu=1)))
    assert list(corr.values()) == [5.0, 5.0, 5.0] and pre == []


def test_previous_warms_the_task_just_evaluated_and_a_job_of_another_task_pays_again():
    jobs = [_job("a", "A"), _job("b", "B"), _job("c", "B")]
    corr, pre = _warm_ups(simulate(jobs, Setup(slots_per_gpu=1, prestart_warm="previous")))
    # a: cold child, pays 4; b met a child warmed for A: pays 4 again; c met one warmed for B: WARMED_S
    assert [corr[0], corr[1], corr[2]] == pytest.approx([5.0, 5.0, 1.0 + WARMED_S])
    assert len(pre) == 3 and all(p == pytest.approx(0.1 + 4.0) for p in pre)      # context + the warm-up


def test_next_warms_the_job_the_slot_took_ahead():
    jobs = [_job("a", "A"), _job("b", "B"), _job("c", "A")]
    corr, pre = _warm_ups(simulate(jobs, Setup(slots_per_gpu=1, prestart_warm="next")))
    assert [corr[0], corr[1], corr[2]] == pytest.approx([5.0, 1.0 + WARMED_S, 1.0 + WARMED_S])
    assert simulate(jobs, Setup(slots_per_gpu=1, prestart_warm="next")).makespan < \
        simulate(jobs, Setup(slots_per_gpu=1, prestart_warm="previous")).makespan


def test_next_leaves_no_slot_idle_while_a_job_waits_for_a_busy_one():
    # slot 0's first job is long: as its child ends it takes the last job ahead; slot 1 is free by then and
    # runs it rather than leaving it to wait for slot 0's check
    long = dataclasses.replace(_job("long", "A", cold=0.0), check=20.0, warms_library=False)
    jobs = [long, _job("s", "B", cold=0.0), _job("last", "C", cold=0.0)]
    run = simulate(jobs, Setup(slots_per_gpu=2, prestart_warm="next"))
    by = {d.name: d for d in run.done}
    assert by["last"].start < by["long"].end                      # not after the long job's check


def test_the_env_step_meets_a_child_warmed_for_its_own_task():
    from kernelgym_gap.sim.pipeline import step_p50
    job = _job("a", "A")
    assert step_p50([job], Setup(prestart_warm="next")) == step_p50([job], Setup(prestart_warm="previous")) \
        < step_p50([job], Setup())          # the record's cold warm-up replaced by the pre-start's


def test_an_unknown_setting_is_refused():
    with pytest.raises(ValueError, match="prestart_warm"):
        simulate([_job("a", "A")], Setup(prestart_warm="sometimes"))


def test_the_cold_warm_up_is_the_tasks_largest():
    jobs = workload.with_cold_warm([_job("a", "A", cold=4.0), dataclasses.replace(_job("b", "A", cold=0.01)),
                                    dataclasses.replace(_job("c", "B", cold=0.0), library_first_call=2.5,
                                                        warms_library=False)])
    assert [j.library_warm_cold for j in jobs] == [4.0, 4.0, 2.5]


def test_the_rows_are_levers_and_the_variant_sets_the_placement():
    names = {s.name: s for s in levers.scenarios(levers.fit_timing(ROOT / "results" / "h200_2026-12-04_corpus" /
                                                                   "gap_study_cuda.json"))}
    for name, _, _, _, variant in prestart_warm.ROWS:
        assert names[name].variant == variant
    spec = importlib.util.spec_from_file_location("throughput_pw", ROOT / "scripts" / "throughput.py")
    tp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tp)
    config, where = tp.apply_variant(EvalConfig(), tp.parse_variant(prestart_warm.PRESTART_NEXT))
    assert where == Placement(prestart_for_next=True) == Placement() and config == EvalConfig()   # on by default
    assert tp.apply_variant(EvalConfig(), tp.parse_variant("prestart_for_next=0"))[1].prestart_for_next is False


def test_on_the_h100_full_mix_taking_ahead_is_predicted_to_pay():
    """SIMULATED (not a measurement), from the switch's own row of 2026-12-07 13:00 (453.1 measured): the model
    of the code as built stays within 5% of its replay, and taking the next job ahead gains over it."""
    recs = workload.read_records(SWITCH_ROW)
    jobs = workload.jobs_of_mode(recs, "lanes [library_warm_before_lane=1]")
    rate = {pw: simulate(jobs, Setup(prestart_warm=pw)).evals_per_gpu_hour for pw in ("recorded", "previous", "next")}
    assert abs(rate["previous"] / rate["recorded"] - 1) < 0.05
    assert rate["next"] > rate["previous"] * 1.02
