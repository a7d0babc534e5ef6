"""When the simulator pre-starts a slot's next child (pipeline.Setup.prestart_at, sim/prestart_start.py): as the
slot's child ends (as built, the default) or as it starts (a candidate, not built), and started then but given its
task as the child ends. Small hand-made batches whose every second is known, then the H100 rows of 2026-12-07
(SIMULATED, not measurements). cpu only, no GPU."""
import dataclasses
from pathlib import Path

import pytest

from kernelgym_gap.sim import levers, prestart_start, prestart_start_table, study, workload
from kernelgym_gap.sim.pipeline import WARMED_S, Job, Setup, simulate, step_p50

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "results" / "h200_2026-12-04_corpus" / "gap_study_cuda.json"
SESSION52 = ROOT / "results" / "h100_2026-12-07_session52"


def _mix():
    """Eight jobs of three tasks: slow pre-starts with warm-ups, one refused at the gate, one hung in a call."""
    out = []
    for k in range(8):
        out.append(Job(name=f"j{k}", task="ABC"[k % 3], cold_start=3.0, handoff=0.1, pre_startup=4.0 + 0.5 * (k % 2),
                       pre_host=0.3, pre_context=0.1, pre_warm=1.0 + 0.25 * k, setup=0.5, correctness=3.0 + k % 3,
                       timing=2.0 + 0.5 * (k % 2), write=0.4, misc=0.1, check=1.5, check_prefetch=0.3, rest=0.1,
                       library_warm=1.5, library_warm_cold=1.5 + 0.5 * (k % 3), warms_library=True))
    out[3] = dataclasses.replace(out[3], child=False, gate=0.2, rest=0.1)
    out[5] = dataclasses.replace(out[5], hang_s=6.0, hang_lane="shared", timed=False, checked=False)
    return out


# (prestart_warm, slots) -> (makespan, each job's wall) as the simulator gave them before Setup.prestart_at existed
# (a179b76), and the makespans on 2 slots of one core with the laned stages on it
BEFORE = {
    ("recorded", 1): (96.9, [10.9, 13.0, 14.25, 0.3, 12.7, 16.2, 15.05, 14.5]),
    ("recorded", 2): (59.9, [13.6, 14.4, 15.25, 0.3, 14.95, 14.5, 18.0, 16.55]),
    ("previous", 1): (101.9, [10.9, 14.0, 16.0, 0.3, 14.2, 17.2, 15.3, 14.0]),
    ("previous", 2): (59.94, [14.1, 14.9, 14.52, 0.3, 14.22, 14.02, 17.52, 17.3]),
    ("next", 1): (91.5, [10.9, 12.52, 14.02, 0.3, 13.2, 15.22, 12.82, 12.52]),
    ("next", 2): (58.94, [14.1, 14.9, 16.0, 0.3, 15.7, 14.02, 17.52, 14.82]),
}
BEFORE_ONE_CORE = {"recorded": 112.2, "previous": 112.74, "next": 108.28}


@pytest.mark.parametrize("warm", ["recorded", "previous", "next"])
def test_child_end_is_the_default_and_reproduces_the_simulator_before_it(warm):
    assert Setup().prestart_at == "child_end"
    for slots in (1, 2):
        run = simulate(_mix(), Setup(slots_per_gpu=slots, prestart_warm=warm))
        makespan, walls = BEFORE[(warm, slots)]
        assert run.makespan == pytest.approx(makespan, abs=1e-9)
        assert [d.wall for d in run.done] == pytest.approx(walls, abs=1e-9)
        explicit = simulate(_mix(), Setup(slots_per_gpu=slots, prestart_warm=warm, prestart_at="child_end"))
        assert explicit.trace == run.trace
    tight = simulate(_mix(), Setup(slots_per_gpu=2, cores_per_host=1, laned_cores=True, prestart_warm=warm))
    assert tight.makespan == pytest.approx(BEFORE_ONE_CORE[warm], abs=1e-9)
    assert step_p50(_mix()[:3]) == pytest.approx(9.5, abs=1e-9)


def test_child_end_keeps_the_h100_replays_of_1512():
    """The calibration's replays of the 15:12 rows as docs/measurement.md gives them (a179b76)."""
    got = {}
    for folder in ("prestart_next_1", "prestart_next_2"):
        inp = study.load_light(SESSION52 / folder, CORPUS)
        for row in study.light_calibration(inp):
            got[(folder, row["row"])] = row["simulated"]
    assert got == {("prestart_next_1", "lanes"): 568.6, ("prestart_next_1", "lanes [prestart_for_next=1]"): 505.5,
                   ("prestart_next_2", "lanes"): 491.6, ("prestart_next_2", "lanes [prestart_for_next=1]"): 537.4}


def _pair(pre_startup=4.0, pre_warm=0.0, **a_fields):
    """One slot, two jobs: `a` on a cold child (1 s), its child's stages 6 s (set-up 0.5, correctness 3 under the
    shared lane, timing 2 exclusive, write 0.5), its check 1 s; its pre-start: `pre_startup`, 0.3 s of imports,
    0.1 s of context and `pre_warm` under the shared lane. `b` the same stages."""
    a = Job(name="a", task="T", cold_start=1.0, handoff=0.1, setup=0.5, correctness=3.0, timing=2.0, write=0.5,
            misc=0.0, check=1.0, rest=0.0, pre_startup=pre_startup, pre_host=0.3, pre_context=0.1, pre_warm=pre_warm,
            **a_fields)
    return [a, dataclasses.replace(a, name="b", pre_startup=0.0)]


def _waits(run, stage="wait child"):
    return {iv.job: iv.end - iv.start for iv in run.trace if iv.row == "slot" and iv.stage == stage}


def test_child_start_hides_a_startup_shorter_than_the_evaluation():
    """a's child ends at 7 and its check at 8. Started then, b's child is ready at 7 + 4 + 0.3 + 0.1 = 11.4: b waits
    3.4 s. Started with a's cold child at 0, it is ready at 4.4, before b begins: b waits nothing, and its wall is
    its own stages."""
    end = simulate(_pair(), Setup(slots_per_gpu=1))
    start = simulate(_pair(), Setup(slots_per_gpu=1, prestart_at="child_start"))
    assert _waits(end)[1] == pytest.approx(3.4)
    assert 1 not in _waits(start)
    assert start.done[1].start == pytest.approx(8.0)
    assert start.done[1].wall == pytest.approx(0.1 + 6.0 + 1.0)
    assert end.makespan - start.makespan == pytest.approx(3.4)
    # the pre-start ran beside a's child: its startup from a's launch, its context inside a's correctness
    first = [iv for iv in start.trace if iv.row == "pre-start" and iv.name == "a"]
    assert [(iv.stage, round(iv.start, 6), round(iv.end, 6)) for iv in first] == [
        ("child startup", 0.0, 4.0), ("preimport", 4.0, 4.3), ("cuda context", 4.3, 4.4)]
    # handed its pre-started child, b starts the slot's next one at once (after its wait, before its hand-off)
    second = next(iv for iv in start.trace if iv.row == "pre-start" and iv.name == "b")
    assert second.start == pytest.approx(8.0)


def test_a_startup_longer_than_the_evaluation_still_makes_the_job_wait_for_the_rest():
    """A 20 s startup: from a's launch at 0 its child is ready at 20.4, and b, begun at 8, waits the 12.4 s left
    (19.4 s when the child starts as a's ends, at 7)."""
    end = simulate(_pair(pre_startup=20.0), Setup(slots_per_gpu=1))
    start = simulate(_pair(pre_startup=20.0), Setup(slots_per_gpu=1, prestart_at="child_start"))
    assert _waits(start)[1] == pytest.approx(20.4 - 8.0)
    assert _waits(end)[1] == pytest.approx(7.0 + 20.4 - 8.0)
    assert start.done[1].wall == pytest.approx(12.4 + 0.1 + 6.0 + 1.0)


def test_the_pre_starts_startup_competes_for_the_hosts_cores():
    """One core: a's cold child takes it first (0-1), the pre-start's startup, asked at 0, holds it 1-5, and a's
    set-up, asked at 1, waits 4 s for it: a is 4 s later than on a roomy host, and its imports (asked at 5) wait for
    a's set-up. Child_end's pre-start meets no running child of its slot."""
    roomy = simulate(_pair(), Setup(slots_per_gpu=1, prestart_at="child_start"))
    tight = simulate(_pair(), Setup(slots_per_gpu=1, cores_per_host=1, prestart_at="child_start"))
    assert _waits(roomy, "wait core") == {}
    assert _waits(tight, "wait core") == {0: pytest.approx(4.0), 1: pytest.approx(0.2)}   # b's, behind its own
    assert tight.done[0].wall == pytest.approx(roomy.done[0].wall + 4.0)
    pre = [iv for iv in tight.trace if iv.row == "pre-start" and iv.name == "a" and iv.stage == "wait core"]
    assert [(round(iv.start, 6), round(iv.end, 6)) for iv in pre] == [(0.0, 1.0), (5.0, 5.5)]
    assert _waits(simulate(_pair(), Setup(slots_per_gpu=1, cores_per_host=1)), "wait core") == {}
    # with the laned stages on the core too (Setup.laned_cores), more of the running child waits for it
    laned = simulate(_pair(), Setup(slots_per_gpu=1, cores_per_host=1, laned_cores=True, prestart_at="child_start"))
    assert laned.makespan >= tight.makespan


def test_the_pre_starts_warm_up_under_the_shared_lane_delays_the_running_childs_timing():
    """With 1 s of warm-up the pre-start holds the shared lane 4.3-5.4; a's timing, asked at 4.5, waits for it to
    drain: 0.9 s that child_end's pre-start (after a's child) never costs a."""
    run = simulate(_pair(pre_warm=1.0), Setup(slots_per_gpu=1, prestart_at="child_start"))
    assert _waits(run, "wait exclusive")[0] == pytest.approx(0.9)
    assert 0 not in _waits(simulate(_pair(pre_warm=1.0), Setup(slots_per_gpu=1)), "wait exclusive")


def _task_job(name, task, own=1.0, cold=2.0):
    return Job(name=name, task=task, cold_start=0.5, handoff=0.0, setup=0.0, correctness=own + cold, timing=0.5,
               write=0.0, misc=0.0, check=0.5, rest=0.0, pre_startup=1.0, pre_host=0.0, pre_context=0.0,
               library_warm=cold, library_warm_cold=cold, warms_library=True)


def test_child_start_takes_the_next_job_ahead_then_and_an_idle_slot_takes_it_warmed_for_another_task():
    """Two GPUs of one slot (one queue): as 'long' (30 s of timing) and 'short' start, their slots take 'x' and 'y'
    ahead. Short's slot runs y, finds the queue empty and runs x, which long's slot took: its child warmed y's
    task, so x warms C again (2 s) in its own hold. Taken ahead only as a child ends (as built), x goes to short's
    slot from the queue as short's child ends, and meets a child warmed for it."""
    jobs = [dataclasses.replace(_task_job("long", "A"), timing=30.0), _task_job("short", "B"), _task_job("x", "C"),
            _task_job("y", "D")]
    corr = lambda run: {iv.job: iv.end - iv.start for iv in run.trace if iv.stage == "correctness"}  # noqa: E731
    two = Setup(gpus_per_host=2, slots_per_gpu=1, prestart_warm="next")
    start = simulate(jobs, dataclasses.replace(two, prestart_at="child_start"))
    by = {d.name: d for d in start.done}
    assert by["x"].start < by["long"].end and by["x"].start >= by["y"].end
    assert corr(start)[2] == pytest.approx(1.0 + 2.0) and corr(start)[3] == pytest.approx(1.0 + WARMED_S)
    end = simulate(jobs, two)
    by = {d.name: d for d in end.done}
    assert by["x"].start < by["y"].start < by["long"].end
    assert corr(end)[2] == pytest.approx(1.0 + WARMED_S)


def test_bind_at_end_starts_the_process_early_and_gives_it_its_task_as_the_child_ends():
    """As Placement.prestart_early builds it: the process's start, imports and CUDA context run from the child's
    start; the warm-up (for the job taken ahead as the child ends) waits for that end: a's child ends at 7, its
    1 s of warm-up then, in a shared hold of its own (the child ready at 8.0, as a's check ends: b waits nothing),
    and no job is taken ahead before it."""
    jobs = [dataclasses.replace(j, library_warm_cold=1.0) for j in _pair()]
    run = simulate(jobs, Setup(slots_per_gpu=1, prestart_warm="next", prestart_at="child_start_bind_at_end"))
    first = {iv.stage: (round(iv.start, 6), round(iv.end, 6)) for iv in run.trace
             if iv.row == "pre-start" and iv.name == "a"}
    assert first["child startup"] == (0.0, 4.0)
    assert first["cuda context"] == (4.3, 4.4)
    assert first["wait for its task"] == (4.4, 7.0)
    assert first["library warm-up"] == (7.0, 8.0)
    assert "cuda context + library warm-up" not in first
    assert 1 not in _waits(run)


def test_bind_at_end_makes_the_context_before_the_bind_and_the_warm_up_after_it():
    """The CUDA context is made under the shared lane right after the imports, before the child waits for its
    task (child/runner.wait_for_job with bind); the warm-up comes after the bind in a second hold, none without one.
    A 0.5 s context (4.3-4.8) now falls inside a's child: a's timing, asked at 4.5, waits 0.3 s for it, and the
    child, bound as a's child ends at 7.3, warms 7.3-8.3."""
    jobs = [dataclasses.replace(j, library_warm_cold=1.0, pre_context=0.5) for j in _pair()]
    run = simulate(jobs, Setup(slots_per_gpu=1, prestart_warm="next", prestart_at="child_start_bind_at_end"))
    pre = [(iv.stage, round(iv.start, 6), round(iv.end, 6), iv.lane) for iv in run.trace
           if iv.row == "pre-start" and iv.name == "a" and iv.stage not in ("wait shared", "wait core")]
    assert pre == [("child startup", 0.0, 4.0, ""), ("preimport", 4.0, 4.3, ""),
                   ("cuda context", 4.3, 4.8, "shared"), ("wait for its task", 4.8, 7.3, ""),
                   ("library warm-up", 7.3, 8.3, "shared")]
    assert _waits(run, "wait exclusive")[0] == pytest.approx(0.3)
    # no warm-up for the task ("recorded", none recorded): no second hold, the child ready as it is bound
    bare = simulate(_pair(), Setup(slots_per_gpu=1, prestart_at="child_start_bind_at_end"))
    stages = [iv.stage for iv in bare.trace if iv.row == "pre-start" and iv.name == "a"]
    assert stages.index("cuda context") < stages.index("wait for its task") and "library warm-up" not in stages


def test_an_unknown_setting_is_refused():
    with pytest.raises(ValueError, match="prestart_at"):
        simulate(_pair(), Setup(prestart_at="sometimes"))


def test_the_rows_are_candidates_in_the_levers_and_the_light_predictions():
    fit = levers.fit_timing(CORPUS)
    names = {s.name: s for s in levers.scenarios(fit)}
    for name, _, setup, _, variant in prestart_start.ROWS:
        assert names[name].variant is None and variant is None
        assert setup(Setup()).prestart_at in ("child_start", "child_start_bind_at_end")
    inp = study.load_light(SESSION52 / "light_warm", CORPUS)
    rows = {r["scenario"]: r for r in study.light_predictions(inp)}
    for name in prestart_start.NAMES:
        assert rows[name]["measured"] is None and rows[name]["step_p50_s"] is not None
    # the warm env.step: its next child is the one it met (startup from the defaults row), and starting it beside
    # the step's child moves the step's p50 by little (its context's shared hold); the first step's unready child
    # was started at reset, which no setting changes
    assert all(s.pre_startup > 4.0 and s.pre_warm > 0 for s in inp.steps)
    base = rows["as measured (4 slots)"]["step_p50_s"]
    assert abs(rows[prestart_start.NAMES[0]]["step_p50_s"] - base) <= 0.1


def test_the_step_carries_the_child_it_met():
    step = {"task": "T", "latency": {"child": 7.0, "child_total": 6.0, "child_preimport": 0.4,
                                     "child_preimport_library_warm": 0.05, "child_preimport_startup": 2.2,
                                     "child_setup": 0.5, "child_correctness": 3.0, "child_timing": 2.0}}
    job = workload.step_job(step)
    assert (job.pre_warm, job.pre_startup) == (0.05, 2.2)


def test_on_the_h100_rows_of_1512_the_children_wait_less_and_few_cores_take_the_gain():
    """SIMULATED: the taking-ahead row of each call, replayed with its pre-started children started as the child
    starts: its jobs wait less for their child, the rate rises, and with its laned stages on 4 host cores the gain
    is smaller than on the host's 16."""
    for folder in ("prestart_next_1", "prestart_next_2"):
        inp = study.load_light(SESSION52 / folder, CORPUS)
        rows = {r["row"]: r for r in prestart_start_table.prestart_at_rows(inp, seeds=(1,))}
        row = rows["lanes [prestart_for_next=1]"]
        assert row["wait_child_start_s"] < 0.5 * row["wait_child_end_s"]
        assert row["start"] > 1.1 * row["end"]
        assert row["start_cores_4_gain"] < row["start_cores_16_gain"]
        assert row["end"] == {"prestart_next_1": 505.5, "prestart_next_2": 537.4}[folder]
