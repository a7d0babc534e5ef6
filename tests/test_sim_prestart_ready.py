"""The slot's pre-started child as the simulator replays it from the records (sim/workload.prestarts, pipeline.
prestart): its startup before its runner's clock, its imports, and its library warm-up under the shared lane, each
read from the record of the evaluation that met that child, and the hand-off left once the wait is rebuilt. Small
hand-made records and jobs whose every second is known, then the committed H100 rows of 2026-12-07 15:12
(results/h100_2026-12-07_session52: SIMULATED replays, not measurements). cpu only, no GPU."""
from pathlib import Path

import pytest

from kernelgym_gap.sim import study, workload
from kernelgym_gap.sim.pipeline import Job, Setup, simulate

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "results" / "h200_2026-12-04_corpus" / "gap_study_cuda.json"
SESSION52 = ROOT / "results" / "h100_2026-12-07_session52"


def _cold(at_s=12.0):
    """A cold child's evaluation from 0: 4 s of start, 6 s of its own stages (its child ends at 10), a 2 s check."""
    return {"mode": "lanes", "task": "T", "status": "ok", "submission": "first", "started_s": 0.0, "at_s": at_s,
            "latency": {"gate": 0.0, "child": 10.0, "child_total": 6.0, "child_setup": 0.5,
                        "child_correctness": 3.0, "child_timing": 2.5, "check": 2.0, "total": at_s}}


def _warm(start, waited, preimport=3.4, warm=3.0, after=0.15, **extra):
    """The evaluation that met the child pre-started as `_cold`'s ended (at 10), begun at `start` and waiting
    `waited` s for it; its own stages as `_cold`'s."""
    child = waited + after + 6.0
    total = child + 2.0
    return {"mode": "lanes", "task": "T", "status": "ok", "submission": "second", "started_s": start,
            "at_s": start + total,
            "latency": {"gate": 0.0, "child": child, "child_total": 6.0, "child_after_report": after,
                        "child_preimport": preimport, "child_preimport_library_warm": warm, "child_setup": 0.5,
                        "child_correctness": 3.0, "child_timing": 2.5, "check": 2.0, "total": total, **extra}}


def test_a_waited_records_startup_is_what_child_preimport_leaves_of_its_wait():
    """Begun at 12, 2 s after the previous child ended; ready after 4 s of startup + 3.4 s of child_preimport:
    5.4 s of waiting. The startup goes to the child pre-started as the first one ended, the hand-off keeps the
    child's exit after its report, and its warm-up rides in its shared hold."""
    records = [_cold(), _warm(12.0, 5.4)]
    pre = workload.prestarts(records)
    assert pre[0] == dict(pre_startup=pytest.approx(4.0), pre_host=workload.PRE_HOST_S,
                          pre_context=workload.PRE_CONTEXT_S, pre_warm=3.0)
    assert workload.startup_estimate(records) == pytest.approx(4.0)
    assert workload.handoffs(records) == [None, pytest.approx(0.15)]
    jobs = workload.jobs_of_mode(records, "lanes")
    assert (jobs[0].pre_startup, jobs[0].pre_warm) == (pytest.approx(4.0), 3.0)
    assert jobs[1].pre_warm == 0.0          # the slot's last child: met by no record, no warm-up known


def test_the_replay_rebuilds_the_wait_from_the_pre_start():
    """One slot: the simulator's pre-start (4 s startup, 0.3 s imports, 0.1 + 3 s under the shared lane) ends 7.4 s
    after the first child, as the record's did: the second evaluation's wall and the run's end are the record's."""
    records = [_cold(), _warm(12.0, 5.4)]
    run = simulate(workload.jobs_of_mode(records, "lanes"), Setup(slots_per_gpu=1))
    assert run.done[1].wall == pytest.approx(records[1]["latency"]["total"])
    assert run.makespan == pytest.approx(records[1]["at_s"])
    stages = {}
    for iv in run.trace:        # the first pre-start's (the one the second evaluation met)
        if iv.row == "pre-start":
            stages.setdefault(iv.stage, (iv.start, iv.end))
    assert stages["child startup"] == (pytest.approx(10.0), pytest.approx(14.0))
    assert stages["preimport"] == (pytest.approx(14.0), pytest.approx(14.3))
    assert stages["cuda context + library warm-up"] == (pytest.approx(14.3), pytest.approx(17.4))
    wait = [iv for iv in run.trace if iv.job == 1 and iv.stage == "wait child"]
    assert wait and wait[0].end - wait[0].start == pytest.approx(5.4)


def test_a_record_that_did_not_wait_keeps_its_child_ready_and_its_whole_hand_off():
    """Begun 20 s after the previous child ended (0.05 s of hand-off beyond its exit): its child was ready. The
    row's startup (here none waited: 0) or the child's slack at most, so the replay does not make it wait."""
    records = [_cold(at_s=30.0), _warm(30.0, 0.0, after=0.15)]
    records[1]["latency"]["child"] += 0.05
    records[1]["latency"]["total"] += 0.05
    records[1]["at_s"] += 0.05
    pre = workload.prestarts(records)
    assert pre[0]["pre_startup"] == 0.0
    assert workload.handoffs(records)[1] == pytest.approx(0.2)
    # with a row startup of 4 s from other records: min(4, the child's 20 - 3.4 s of slack)
    assert workload._startup_s(records[1], records[0], 4.0) == pytest.approx(4.0)
    assert workload._startup_s(records[1], records[0], 30.0) == pytest.approx(20.0 - 3.4)


def test_recorded_startup_and_lane_wait_are_used_where_the_record_has_them():
    """Records from 2026-12-07 15:55 on: child_preimport_startup is the startup, and child_preimport less its lane
    wait, its warm-up and the context are its imports (the lane wait the simulator makes itself)."""
    rec = _warm(12.0, 5.4, preimport=5.0, warm=3.0, child_preimport_startup=2.2, child_preimport_lane_wait=1.2)
    pre = workload.prestarts([_cold(), rec])[0]
    assert pre["pre_startup"] == pytest.approx(2.2)
    assert pre["pre_host"] == pytest.approx(5.0 - 1.2 - 3.0 - workload.PRE_CONTEXT_S)
    assert pre["pre_warm"] == 3.0
    # the wait rebuilt from them: ready at 10 + 2.2 + 5.0; begun at 12, so 5.2 s of the record's 5.4 + 0.15 waited
    assert workload.handoffs([_cold(), rec])[1] == pytest.approx(5.4 + 0.15 - 5.2)


def test_the_rows_startup_is_the_median_of_the_records_that_waited():
    """Three slots' pairs, two that waited (startups 3 and 5 s) and one whose child was ready: 4 s, and the ready
    one's pre-start gets no more than its own slack."""
    pairs = []
    for k, (start, waited) in enumerate(((12.0, 4.4), (12.0, 6.4), (40.0, 0.0))):
        off = 100.0 * k                         # each pair on its own stretch of the clock
        first = _cold(at_s=start)
        first["at_s"] += off
        first["started_s"] = off
        second = _warm(start + off, waited)
        pairs += [first, second]
    records = workload.dispatch_order(pairs)
    assert workload.startup_estimate(records) == pytest.approx(4.0)
    pre = workload.prestarts(records)
    firsts = [k for k, r in enumerate(records) if r["submission"] == "first"]
    assert [round(pre[k]["pre_startup"], 6) for k in firsts] == [3.0, 5.0, 4.0]


def _run_two_slots(warm_s):
    """Slot 0: a job whose child ends at 0.2, then its 3 s check under the shared lane; its pre-start's 0.4 s of
    startup and 0.5 s of imports, then its shared hold of 0.1 + `warm_s` s from 1.1. Slot 1: a cold child (1 s),
    its correctness under the shared lane from 1.0 and its exclusive timing asked for at 2.0."""
    a = Job(name="a", cold_start=0.0, setup=0.0, correctness=0.1, timing=0.1, write=0.0, misc=0.0, check=3.0,
            rest=0.0, pre_startup=0.4, pre_host=0.5, pre_context=0.1, pre_warm=warm_s)
    b = Job(name="b", cold_start=1.0, setup=0.0, correctness=1.0, timing=1.0, write=0.0, misc=0.0, check=0.0,
            rest=0.0)
    return simulate([a, b], Setup(slots_per_gpu=2))


def test_the_pre_starts_recorded_warm_up_holds_the_shared_lane_against_a_timing():
    """The timing waits for every shared holder: a's check until 3.2, and with the warm-up the pre-start's hold
    until 1.1 + 5.1 = 6.2."""
    base, held = _run_two_slots(0.0), _run_two_slots(5.0)
    t_base = next(iv for iv in base.trace if iv.job == 1 and iv.stage == "timing")
    t_held = next(iv for iv in held.trace if iv.job == 1 and iv.stage == "timing")
    pre = next(iv for iv in held.trace if iv.row == "pre-start" and "library warm-up" in iv.stage)
    assert (pre.start, pre.end) == (pytest.approx(1.1), pytest.approx(6.2))
    assert t_base.start == pytest.approx(3.2)
    assert t_held.start == pytest.approx(6.2)


def test_the_modelled_settings_warm_their_own_not_the_recorded_one():
    """Setup.prestart_warm "previous" and "next" put the task's cold warm-up in the pre-start's hold (sim/
    prestart_warm.py); only "recorded" replays pre_warm."""
    jobs = [Job(name=n, task="T", cold_start=0.5, setup=0.0, correctness=1.0, timing=0.5, check=0.2, write=0.0,
                misc=0.0, rest=0.0, pre_warm=7.0, library_warm_cold=2.0) for n in ("a", "b")]
    holds = {}
    for pw in ("recorded", "previous", "next"):
        run = simulate(jobs, Setup(slots_per_gpu=1, prestart_warm=pw))
        holds[pw] = sorted(round(iv.end - iv.start, 6) for iv in run.trace
                           if iv.row == "pre-start" and iv.stage.startswith("cuda context"))
    assert holds["recorded"] == [7.1, 7.1]
    assert holds["previous"] == holds["next"] == [2.1, 2.1]


@pytest.mark.parametrize("folder", ["prestart_next_1", "prestart_next_2"])
def test_on_the_h100_rows_of_1512_the_pre_starts_warm_ups_are_the_records(folder):
    """Every recorded pre-started child's warm-up rides in the replay (the log's 26.64 / 24.98 and 31.5 / 23.38 s),
    and the rows' startups are 4.5-5.4 s (2.9 s on the H100 call of 2026-12-06: tests below)."""
    recs = workload.read_records(SESSION52 / folder / "throughput_records.jsonl")
    for mode in ("lanes", "lanes [prestart_for_next=1]"):
        rows = workload.dispatch_order([r for r in recs if r["mode"] == mode])
        jobs = workload.jobs_of_mode(recs, mode)
        recorded = sum(r["latency"].get("child_preimport_library_warm", 0.0) for r in rows)
        assert sum(j.pre_warm for j in jobs) == pytest.approx(recorded) and recorded > 20.0
        assert 4.4 < workload.startup_estimate(rows) < 5.5


def test_on_the_h100_rows_of_1512_the_replay_is_within_the_bound_but_one():
    """SIMULATED: the four rows replayed +15.6%, +12.5%, +15.2% and +17.3% with a ready pre-started child and no
    warm-up in its hold; with the records' pre-starts +15.1%, -3.4%, +4.8%, -1.3% (the first still 0.1 point past
    the 15% bound: docs or the report say what is left)."""
    errors = {}
    for folder in ("prestart_next_1", "prestart_next_2"):
        inp = study.load_light(SESSION52 / folder, CORPUS)
        for row in study.light_calibration(inp):
            errors[(folder, row["row"])] = row["error"]
    assert len(errors) == 4
    assert sum(abs(e) <= 0.15 for e in errors.values()) == 3
    assert max(abs(e) for e in errors.values()) < 0.16
    assert sum(abs(e) for e in errors.values()) / 4 < 0.07


def test_on_the_h100_call_of_1206_the_startup_is_shorter():
    recs = workload.read_records(ROOT / "results" / "h100_2026-12-06_lane_levers" / "call1" /
                                 "throughput_records.jsonl")
    rows = workload.dispatch_order([r for r in recs if r["mode"] == "lanes"])
    assert 2.5 < workload.startup_estimate(rows) < 3.3
