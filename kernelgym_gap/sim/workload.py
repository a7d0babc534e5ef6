"""Jobs from measured records, and the measured figures the simulator is calibrated against.

A record of scripts/throughput.py (one line of throughput_records.jsonl) gives an evaluation's stage
durations *with* the waits it met; the simulator needs them *without*, since it makes its own waits:
  correctness   child_correctness (held shared; its lane wait is child_lane_wait_shared, apart), less the
                checkpoints' writes with the lane let go and the waits to take it back (LET_GO_PARTS, the
                2026-12-06 records on): those are the Job's `unlaned` and the simulator's own waits; the
                compiles let go (child_compile_unlaned) are the Job's `compile`
  timing        child_timing (held exclusive; its wait is child_lane_wait_exclusive, apart)
  recheck       child_recheck (held shared, after the timing: a record of TimingConfig.recheck_outside_exclusive;
                its wait is child_lane_wait_recheck, apart); child_timing_recheck is the rechecks' part wherever
                they ran (inside child_timing without child_recheck)
  check         check - check_lane_wait - check_prefetch (the outputs read before the lane, with
                EvalConfig.read_outputs_outside_lane: the Job's check_prefetch, a host stage before the wait)
  setup         child_setup + child_import; write: child_outputs_write; misc: child_total less its stages
  cold start    child - child_total, for a record without child_preimport (a cold child: its start and imports)
  rest          total - gate - child - check
The slot's pre-started child (started as the slot's previous child ended) is in the record of the evaluation that
met it: child_preimport (from its runner's start to ready: its imports, its wait for the lane, its CUDA context
and, in the same shared hold, its library warm-up child_preimport_library_warm), child_preimport_lane_wait and
child_preimport_startup (its process's age at the runner's start: the interpreter and the package's imports; both
recorded from 2026-12-07 15:55 on). `prestarts` gives each record's Job the figures of the child pre-started as
its child ended (the Job's pre_ fields, pipeline.prestart), from the record that met that child:
  startup       child_preimport_startup; without it, the seconds the record shows the child was not ready for
                (`_unready_s`: child - child_total - child_after_report, less the wait child_preimport explains,
                measured from the previous child's end): within a row the records that waited spread by 1-2
                s, as long as a cold child's start (row medians 1.9-3.8 s on the H200s, 2.9 s on the H100 of
                2026-12-06, 4.5-5.6 s on the H100s from 2026-12-07 13:00); for a record that did not wait, the
                row's median of the waited records' (`startup_estimate`), or its child's slack where less
  imports       child_preimport less its lane wait, its warm-up and PRE_CONTEXT_S; without
                child_preimport_lane_wait, PRE_HOST_S (the smallest pre-import seen without contention, 0.33-0.59 s
                on the warm env.step, 0.4 s in the full mix, 0.43-0.55 s in the H100 rows of 2026-12-07 15:12):
                the rest of child_preimport is taken as its lane wait, which the simulator makes itself
  warm-up       child_preimport_library_warm, in the context's shared hold (0 where not recorded)
A slot's last pre-started child (or one whose evaluation recorded no stages) gets the row's median startup,
PRE_HOST_S and no warm-up.
  hand-off      child - child_total of a warm record, less the time it waited for its pre-started child. That
                wait is rebuilt from the record that ended as this one started (the same slot's previous
                evaluation: its child ended `check + rest` before, and the next child's start began then): its
                startup (above) and child_preimport. What is left is the child's exit after its report
                (child_after_report, 0.12-0.18 s) and the hand-off itself. Before the startup was counted the rest
                was bimodal in the 2026-12-05 records: 0.1-0.3 s, or 2.5-4.9 s (the startup of a child that was
                not ready, in 28 of 58 warm records). Each record keeps its own.
How far each record went (the H100 full mix of 2026-12-06 has every case; a stage a record lacks takes no lane):
  gate only     no `child` (a syntax error): the gate and the rest; no child used, no lane
  stopped       child_total but no child_timing (a runtime error in a call, reported by the child): its correctness
                stretch is child_total less the set-up and its lane wait (the failing call ran under the lane); no
                timing, and a check only where the record has one
  killed        the child's stages but no child_total (too_slow, or a timeout in a call): the correctness parts
                before the hung call, then the call for the seconds its message gives ("60.1 s into the call",
                engine/too_slow.py), holding the shared lane; its check where the record has one (too_slow checks
                the trials it finished); the hand-off rebuilt as for a finished record
  no stages     a timeout without stages (the 2026-12-05 records): a hung job of its whole `child` seconds, holding
                the shared lane when it hung in a correctness call (its message names a call) and nothing when it
                hung in the import."""
from __future__ import annotations

import dataclasses
import json
import re
import statistics
from pathlib import Path

from kernelgym_gap.sim.pipeline import Job

PRE_HOST_S = 0.3
PRE_CONTEXT_S = 0.1
HANDOFF_S = 0.1
# the seconds from a child's report to its parent's wait returning (child_after_report: its exit), where a record
# predates that field: the median of the H100 rows of 2026-12-07 15:12 (0.115-0.134 s)
AFTER_REPORT_S = 0.13
# how close the slot's previous evaluation's end is to a record's start (the two are one event, the slot's refill)
SAME_SLOT_S = 0.15
COLD_START_S = 3.8        # child - child_total of the cold children of the 2026-12-05 runs: 3.0-4.8 s
# The checkpoints' let-gos per evaluation (child/outputs.checkpoint_due over the correctness order): 8 for each
# of the light batch's six tasks (16 trials of 8 shapes: before the second call and before each new group
# of the order; the one before the timing holds no lane and is not counted). The records give their summed
# write (child_checkpoint_unlaned), not their number; tests/test_simulate_throughput.py recomputes it.
CHECKPOINT_LET_GOS = 8
# the parts of child_correctness that are not held: the checkpoints' writes with the lane let go and the waits
# to take it back after them and after the compiles (child/lanes.py). The compiles themselves
# (child_compile_unlaned) stay inside the Job's correctness, whose `compile` they are.
LET_GO_PARTS = ("child_checkpoint_unlaned", "child_lane_wait_after_checkpoint", "child_lane_wait_after_compile")


class RecordError(ValueError):
    """A records file or line the simulator cannot read (named, with the reason)."""


def read_records(path: str | Path) -> list[dict]:
    rows = []
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
        except json.JSONDecodeError as e:
            raise RecordError(f"{path}:{n}: not JSON ({e.msg})") from None
        if not isinstance(r, dict) or not isinstance(r.get("latency"), dict) or "at_s" not in r:
            raise RecordError(f"{path}:{n}: a record needs 'latency' (an object) and 'at_s'")
        rows.append(r)
    return rows


def _rest(lat: dict) -> float:
    return max(0.0, lat.get("total", 0.0) - lat.get("gate", 0.0) - lat.get("child", 0.0) - lat.get("check", 0.0))


# the correctness stretch's parts a child records call by call (child/run.py): a killed child has them up to its
# last finished call but no child_correctness (the stretch's total, written when it ends)
CORRECTNESS_PARTS = ("child_correctness_inputs", "child_correctness_calls", "child_correctness_save",
                     "child_checkpoint_write", "child_lane_wait_after_checkpoint", "child_lane_wait_after_compile")
# child_timing_probe's parts (child/timing.time_shape, from 2026-12-06 on): Bench.probe's kernel warm-up, library
# warm-up and interleaved repetitions. They are inside child_timing_probe (itself inside child_timing), so no lane
# time reads them: adding them would count the probe twice (Job.library_first_call, their difference, is read by a
# transform alone). Named here for the readers that split the probe (scripts/compare_rows.py) and for the test that
# a record with them replays as one without.
PROBE_PARTS = ("child_timing_probe_warm_kernel", "child_timing_probe_warm_library", "child_timing_probe_reps")
_INTO_THE_CALL = re.compile(r"\(([0-9]+(?:\.[0-9]+)?) s into the call")


def _g(lat: dict, k: str) -> float:
    return float(lat.get(k, 0.0) or 0.0)


def copy_waits(lat: dict) -> tuple[float, float]:
    """The outputs' copies' waits for the shared lane (child_lane_wait_copies: Placement.outputs_copy_laned, on by
    default since 2026-12-08) inside the checkpoints' writes with the lane let go (child_checkpoint_unlaned) and the
    final write (child_outputs_write), split between the two by their seconds, since a record sums them: a wait the
    replay's lanes make, not host work, so the host stages leave it out (sim/copy_laned.py puts the copies' holds
    back where a prediction asks for them)."""
    wait = _g(lat, "child_lane_wait_copies")
    unlaned, write = _g(lat, "child_checkpoint_unlaned"), _g(lat, "child_outputs_write")
    if wait <= 0 or unlaned + write <= 0:
        return 0.0, 0.0
    return min(unlaned, wait * unlaned / (unlaned + write)), min(write, wait * write / (unlaned + write))


def killed_in_call(r: dict) -> bool:
    """A child killed at a call's stage deadline whose stages up to then are recorded (no child_total: the child
    never finished; child_setup: it reported its stages)."""
    lat = r["latency"]
    return "child" in lat and "child_total" not in lat and "child_setup" in lat


def _before_calls(lat: dict) -> float:
    return _g(lat, "child_setup") + _g(lat, "child_import") + _g(lat, "child_lane_wait_shared")


def hung_call_s(r: dict) -> float:
    """How long a killed child's hung call ran: the seconds its message gives (engine/too_slow.py's "(60.1 s into
    the call"); without them, the child's time less its recorded stages (the hand-off then counted as hung)."""
    m = _INTO_THE_CALL.search(r.get("message") or "")
    if m:
        return float(m.group(1))
    lat = r["latency"]
    return max(0.0, _g(lat, "child") - _before_calls(lat) - sum(_g(lat, k) for k in CORRECTNESS_PARTS))


def child_own_s(r: dict) -> float | None:
    """The seconds of the child's own stages: child_total, or for a killed child its recorded stages and its hung
    call; None where the record has no stages."""
    lat = r["latency"]
    if "child_total" in lat:
        return _g(lat, "child_total")
    if killed_in_call(r):
        return _before_calls(lat) + sum(_g(lat, k) for k in CORRECTNESS_PARTS) + hung_call_s(r)
    return None


def _previous(records: list[dict]) -> list[int | None]:
    """Per record of one mode (dispatch order), the index of the same slot's previous evaluation: the record with a
    child that ended within SAME_SLOT_S of this one's start; None for a cold child (no child_preimport), a record
    without stages, or where none is found. A record refused at the gate used no child: the slot's pre-started
    child was made when the evaluation before it ended, so it is never the previous evaluation (it ends as it
    starts, beside the one that is)."""
    with_child = [k for k, p in enumerate(records) if "child" in p["latency"]]
    out: list[int | None] = []
    for k, r in enumerate(records):
        lat = r["latency"]
        if "child_preimport" not in lat or child_own_s(r) is None or not with_child:
            out.append(None)
            continue
        start = r["at_s"] - lat.get("total", 0.0)
        prev = min(with_child, key=lambda i: abs(records[i]["at_s"] - start))
        out.append(None if prev == k or abs(records[prev]["at_s"] - start) > SAME_SLOT_S else prev)
    return out


def _child_end(p: dict) -> float:
    """When a record's child ended on the run's clock (its check and its rest came after)."""
    return p["at_s"] - p["latency"].get("check", 0.0) - _rest(p["latency"])


def _unready_s(r: dict, prev: dict) -> tuple[float, float]:
    """A warm record's (waited, slack): the seconds its evaluation waited for its pre-started child beyond its own
    hand-off (child - child_total - child_after_report, less HANDOFF_S), and how far child_preimport, counted from
    the previous child's end, left the child ready before the evaluation began (negative: that many seconds late)."""
    lat = r["latency"]
    start = r["at_s"] - lat.get("total", 0.0)
    after = lat.get("child_after_report", AFTER_REPORT_S)
    waited = lat.get("child", 0.0) - (child_own_s(r) or 0.0) - after - HANDOFF_S
    return waited, start - _child_end(prev) - lat["child_preimport"]


def _shown_startup(r: dict, prev: dict) -> tuple[float | None, float]:
    """(the startup a record that waited for its child shows: the seconds that wait leaves after child_preimport,
    else None; its slack, `_unready_s`)."""
    waited, slack = _unready_s(r, prev)
    return (max(0.0, waited + HANDOFF_S + slack) if waited > 0 else None), slack


def _startup_s(r: dict, prev: dict, row_startup: float) -> float:
    """The seconds before the runner's start of the child `r` met (see the module's docstring)."""
    lat = r["latency"]
    if "child_preimport_startup" in lat:
        return max(0.0, _g(lat, "child_preimport_startup"))
    shown, slack = _shown_startup(r, prev)
    return shown if shown is not None else max(0.0, min(row_startup, slack))


def startup_estimate(records: list[dict], previous: list[int | None] | None = None) -> float:
    """A row's pre-started children's startup where no record says it: the median over its warm records without
    child_preimport_startup that waited for their child of the seconds that wait leaves after child_preimport
    (`_shown_startup`); 0 where none waited. `previous`: `_previous(records)`, where the caller has it."""
    prev = _previous(records) if previous is None else previous
    xs = []
    for r, p in zip(records, prev):
        if p is None or "child_preimport_startup" in r["latency"]:
            continue
        shown, _ = _shown_startup(r, records[p])
        if shown is not None:
            xs.append(shown)
    return statistics.median(xs) if xs else 0.0


def handoffs(records: list[dict]) -> list[float | None]:
    """Per record of one mode, the hand-off of a warm child less its wait for that child (see above); None
    for a cold child or where no previous evaluation of the slot is found."""
    out: list[float | None] = []
    previous = _previous(records)
    row_startup = startup_estimate(records, previous)
    for r, p in zip(records, previous):
        if p is None:
            out.append(None)
            continue
        lat = r["latency"]
        prev = records[p]
        start = r["at_s"] - lat.get("total", 0.0)
        ready = _child_end(prev) + _startup_s(r, prev, row_startup) + lat["child_preimport"]
        waited = max(0.0, ready - start)
        out.append(max(HANDOFF_S, lat.get("child", 0.0) - child_own_s(r) - waited))
    return out


def prestarts(records: list[dict]) -> list[dict]:
    """Per record of one mode, the Job fields of the child pre-started as its child ended (pre_startup, pre_host,
    pre_context, pre_warm), from the record of the evaluation that met it (see the module's docstring); a record
    none met (the slot's last, or one whose evaluation recorded no stages) gets the row's median startup and no
    warm-up."""
    previous = _previous(records)
    row_startup = startup_estimate(records, previous)
    out = [dict(pre_startup=row_startup, pre_host=PRE_HOST_S, pre_context=PRE_CONTEXT_S, pre_warm=0.0)
           for _ in records]
    for r, p in zip(records, previous):
        if p is None:
            continue
        lat = r["latency"]
        warm = max(0.0, _g(lat, "child_preimport_library_warm"))
        imports = PRE_HOST_S
        if "child_preimport_lane_wait" in lat:
            imports = max(0.0, _g(lat, "child_preimport") - _g(lat, "child_preimport_lane_wait") - warm
                          - PRE_CONTEXT_S)
        out[p] = dict(pre_startup=_startup_s(r, records[p], row_startup), pre_host=imports,
                      pre_context=PRE_CONTEXT_S, pre_warm=warm)
    return out


def job_from_record(r: dict, handoff: float | None = None) -> Job:
    lat = r["latency"]
    g = lambda k: _g(lat, k)     # noqa: E731
    name = r.get("submission") or r.get("task", "?")
    if "child" not in lat:
        # refused at the gate (a syntax error): no child, no lane
        return Job(name=name, task=r.get("task", ""), status=r.get("status", ""), gate=g("gate"), child=False,
                   rest=max(0.0, g("total") - g("gate")))
    cold = "child_preimport" not in lat
    # the check where the record has one (less its lane wait and its reads before the lane)
    check = dict(check=max(0.0, g("check") - g("check_lane_wait") - g("check_prefetch")),
                 check_prefetch=g("check_prefetch"), check_read=g("check_read"), checked="check" in lat)
    if killed_in_call(r):
        # killed in a call with its stages recorded: the parts before the hung call, then the call, on the lane
        let_go = sum(g(k) for k in LET_GO_PARTS)
        return Job(name=name, task=r.get("task", ""), status=r.get("status", ""), gate=g("gate"),
                   cold_start=max(0.0, g("child") - (child_own_s(r) or 0.0)) if cold else COLD_START_S,
                   handoff=HANDOFF_S if handoff is None else handoff, pre_host=PRE_HOST_S,
                   pre_context=PRE_CONTEXT_S, setup=g("child_setup") + g("child_import"),
                   calls=g("child_correctness_calls"),
                   correctness=max(0.0, sum(g(k) for k in CORRECTNESS_PARTS) - let_go),
                   unlaned=g("child_checkpoint_unlaned") - copy_waits(lat)[0], save=g("child_correctness_save"),
                   checkpoints=1 if g("child_checkpoint_unlaned") > 0 else 0, timing=0.0, write=0.0, misc=0.0,
                   rest=_rest(lat), hang_s=hung_call_s(r), hang_lane="shared", timed=False, **check)
    if "child_timing" not in lat and "child_correctness" not in lat and "child_total" not in lat:
        # hung or failed before the lanes: the child's whole time, on the lane when a call hung
        in_call = "call" in (r.get("message") or "") and "import" not in (r.get("message") or "")
        return Job(name=name, task=r.get("task", ""), status=r.get("status", ""), gate=g("gate"),
                   cold_start=0.0, handoff=0.0, pre_host=PRE_HOST_S, pre_context=PRE_CONTEXT_S, setup=0.0,
                   correctness=0.0, timing=0.0, write=0.0, misc=0.0, check=0.0, rest=max(0.0, g("total") - g("child")
                                                                                          - g("gate")),
                   hang_s=g("child"), hang_lane="shared" if in_call else "")
    stages = ("child_setup", "child_import", "child_lane_wait_shared", "child_correctness",
              "child_library_warm", "child_lane_wait_exclusive", "child_timing", "child_lane_wait_recheck",
              "child_recheck", "child_outputs_write")
    if "child_timing" not in lat and "child_correctness" not in lat:
        # stopped in its correctness stretch (the child reported an error from a call): what its set-up leaves of
        # child_total ran there, under the shared lane; no timing
        return Job(name=name, task=r.get("task", ""), status=r.get("status", ""), gate=g("gate"),
                   cold_start=max(0.0, g("child") - g("child_total")) if cold else COLD_START_S,
                   handoff=HANDOFF_S if handoff is None else handoff, pre_host=PRE_HOST_S,
                   pre_context=PRE_CONTEXT_S, setup=g("child_setup") + g("child_import"),
                   calls=g("child_correctness_calls"),
                   correctness=max(0.0, g("child_total") - _before_calls(lat)),
                   timing=0.0, write=g("child_outputs_write"), misc=0.0, rest=_rest(lat), timed=False, **check)
    job = Job(
        name=name, task=r.get("task", ""), status=r.get("status", ""), gate=g("gate"),
        cold_start=max(0.0, g("child") - g("child_total")) if cold else COLD_START_S,
        handoff=HANDOFF_S if handoff is None else handoff,
        pre_host=PRE_HOST_S, pre_context=PRE_CONTEXT_S, setup=g("child_setup") + g("child_import"),
        compile=g("child_compile_unlaned"), calls=g("child_correctness_calls"),
        # the library's warm-up before the lane (TimingConfig.library_warm_before_lane) ends the shared stretch
        correctness=max(0.0, g("child_correctness") - sum(g(k) for k in LET_GO_PARTS)) + g("child_library_warm"),
        unlaned=g("child_checkpoint_unlaned") - copy_waits(lat)[0], save=g("child_correctness_save"),
        checkpoints=CHECKPOINT_LET_GOS if g("child_checkpoint_unlaned") > 0 else 0,
        timing=g("child_timing"), timing_measure=g("child_timing_measure"), timing_probe=g("child_timing_probe"),
        timing_first_call=g("child_timing_first_call"),
        timing_recheck=g("child_timing_recheck"), recheck=g("child_recheck"),
        write=g("child_outputs_write") - copy_waits(lat)[1],
        library_first_call=0.0 if "child_library_warm" in lat else max(
            0.0, g("child_timing_probe_warm_library") - g("child_timing_probe_warm_kernel")),
        library_warm=g("child_library_warm"), warms_library="child_library_warm" in lat,
        misc=max(0.0, g("child_total") - sum(g(k) for k in stages)),
        check=max(0.0, g("check") - g("check_lane_wait") - g("check_prefetch")),
        check_prefetch=g("check_prefetch"), check_read=g("check_read"),
        rest=_rest(lat))
    if g("child_copies_laned") > 0:     # its copies held the shared lane (their waits left out above): so in the replay
        from kernelgym_gap.sim.copy_laned import DEFAULT_DEVICE, copies_laned, copy_share
        job = copies_laned(copy_share(DEFAULT_DEVICE, "child_outputs_staging_alloc" in lat))(job)
    return job


def dispatch_order(records: list[dict]) -> list[dict]:
    """The records in the order their evaluations started (at_s - total; a records file is in completion
    order), which is the batch's order as the slots took it; `started_s` where the record has it (2026-12-06 on)."""
    return sorted(records, key=lambda r: (r.get("started_s", r["at_s"] - r["latency"].get("total", 0.0)), r["at_s"]))


def jobs_of_mode(records: list[dict], mode: str) -> list[Job]:
    chosen = [r for r in records if r.get("mode") == mode]
    if not chosen:
        raise RecordError(f"no record of mode {mode!r} (modes: {sorted({r.get('mode') for r in records})})")
    ordered = dispatch_order(chosen)
    return with_cold_warm([dataclasses.replace(job_from_record(r, h), **pre)
                           for r, h, pre in zip(ordered, handoffs(ordered), prestarts(ordered))])


def startup_of_mode(records: list[dict], mode: str) -> float:
    """startup_estimate of the row of `records` with records mode `mode`, taken in the order it dispatched."""
    return startup_estimate(dispatch_order([r for r in records if r.get("mode") == mode]))


def with_cold_warm(jobs: list[Job]) -> list[Job]:
    """Every job with its task's cold library warm-up (Job.library_warm_cold): the largest of the task's jobs'
    library warm-ups (child_library_warm) or first calls inside the timing (Job.library_first_call, a row without
    TimingConfig.library_warm_before_lane). The largest, since a child that met the task warm made them in 0.01 s
    (sim/prestart_warm.py); a task with neither in these jobs has none."""
    cold: dict[str, float] = {}
    for j in jobs:
        cold[j.task] = max(cold.get(j.task, 0.0), j.library_warm, j.library_first_call)
    return [dataclasses.replace(j, library_warm_cold=cold.get(j.task, 0.0)) for j in jobs]


def measured_rate(records: list[dict], mode: str, n_gpus: int = 1) -> float:
    """Evaluations per GPU-hour as throughput.py reports it: the mode's evaluations over its last end time."""
    chosen = [r for r in records if r.get("mode") == mode]
    return 3600.0 * len(chosen) / max(r["at_s"] for r in chosen) / n_gpus


def step_job(step: dict, startup: float = 0.0) -> Job:
    """A warm env.step (throughput.py's env_step rows): one evaluation alone, its child pre-started during the
    agent's turn; its wall is the evaluation's own stages, with no lane to wait for. `startup`: the startup of
    the child pre-started for the next step where the step's record has none (study.load_light: the defaults
    row's, startup_estimate)."""
    lat = step["latency"]
    job = job_from_record({"task": step.get("task", ""), "status": step.get("status", ""), "at_s": 0.0,
                           "latency": {**lat, "child_preimport": lat.get("child_preimport", 0.0)}})
    # alone on the machine, the whole of child - child_total is its own (nothing to wait for). The child pre-started
    # for the next step is taken as the one this step met (its warm-up, its startup where recorded): the replay
    # starts it after the step's child, where it delays nothing; Setup.prestart_at "child_start" starts it beside it
    recorded = max(0.0, _g(lat, "child_preimport_startup"))
    return dataclasses.replace(job, handoff=max(0.0, lat.get("child", 0.0) - lat.get("child_total", 0.0)),
                               pre_warm=max(0.0, _g(lat, "child_preimport_library_warm")),
                               pre_startup=recorded if recorded > 0 else startup)
