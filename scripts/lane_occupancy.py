"""How much of a throughput run the GPU's lanes were held, from the per-evaluation records that
scripts/throughput.py keeps (throughput_records.jsonl: each record's end time `at_s` and its stage latencies).

    python3 scripts/lane_occupancy.py results/h200_2026-12-05/throughput_full_records.jsonl

The records hold durations, not the stages' start times, so each evaluation's lane intervals are rebuilt from
its end time and the stages' known order: the child's pre-import, set-up, import and shared-lane wait, then
the correctness stretch (shared lane), the exclusive-lane wait and the timing (exclusive lane), the rechecks
after it where they ran there (shared lane, after their own wait: TimingConfig.recheck_outside_exclusive); the trusted
check ends at `at_s` and holds the shared lane for its duration less its own lane wait. The rebuild is
approximate (unrecorded gaps move intervals by up to a second or so); the lanes forbid shared and exclusive
holders at once, so the time the rebuilt intervals overlap that way is printed as the rebuild's error. A
serial mode holds no lane (one evaluation at a time): its row says when the same stages ran.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

BEFORE_CORRECTNESS = ("child_preimport", "child_setup", "child_import", "child_lane_wait_shared")


def lane_intervals(record: dict) -> dict[str, list[tuple[float, float]]]:
    """One evaluation's rebuilt lane holdings on the run's clock: {"shared": [...], "exclusive": [...]}."""
    lat = record["latency"]
    t = record["at_s"] - lat["total"] + lat.get("gate", 0.0)
    t += sum(lat.get(k, 0.0) for k in BEFORE_CORRECTNESS)
    end = t + lat.get("child_correctness", 0.0)
    # compiles with the lane let go (EvalConfig.compile_outside_lane) and the waits to take it back: not held,
    # put at the stretch's start (the first calls come first; where exactly is not recorded)
    # likewise the checkpoints' writes (issue 38: written with the shared lane let go) and their take-back waits
    let_go = sum(lat.get(k, 0.0) for k in ("child_compile_unlaned", "child_lane_wait_after_compile",
                                           "child_checkpoint_unlaned", "child_lane_wait_after_checkpoint"))
    correctness = (min(t + let_go, end), end)
    t = end + lat.get("child_lane_wait_exclusive", 0.0)
    timing = (t, t + lat.get("child_timing", 0.0))
    # the timed shapes' rechecks after the timing (TimingConfig.recheck_outside_exclusive): the lane taken
    # again, shared, after its own wait; records without them have none (the recheck inside the timing)
    shared = [correctness]
    if lat.get("child_recheck", 0.0) > 0:
        t = timing[1] + lat.get("child_lane_wait_recheck", 0.0)
        shared.append((t, t + lat["child_recheck"]))
    # the check's outputs read before its lane (EvalConfig.read_outputs_outside_lane), then its wait: not held
    check = (record["at_s"] - lat.get("check", 0.0) + lat.get("check_lane_wait", 0.0) + lat.get("check_prefetch", 0.0),
             record["at_s"])
    return {"shared": shared + [check], "exclusive": [timing]}


def union_length(intervals: list[tuple[float, float]]) -> float:
    """The time covered by at least one of the intervals."""
    total, reach = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b > reach:
            total += b - max(a, reach)
            reach = b
    return total


def occupancy(records: list[dict]) -> dict:
    """The span from the first evaluation's start to the last one's end, and how long each lane, either lane,
    and neither was held in it (seconds)."""
    shared, exclusive = [], []
    for r in records:
        iv = lane_intervals(r)
        shared += iv["shared"]
        exclusive += iv["exclusive"]
    t0 = min(r["at_s"] - r["latency"]["total"] for r in records)
    span = max(r["at_s"] for r in records) - t0
    s, e, either = union_length(shared), union_length(exclusive), union_length(shared + exclusive)
    return {"evaluations": len(records), "span_s": span, "shared_s": s, "exclusive_s": e, "either_s": either,
            "idle_s": span - either, "rebuild_overlap_s": s + e - either}


TIMING_PARTS = ("child_timing_setup", "child_timing_inputs", "child_timing_first_call", "child_timing_probe",
                "child_timing_measure", "child_timing_recheck")
# the trusted check's parts (judge/checker._Parts), measured by the checker itself, lane wait excluded;
# check_prefetch (EvalConfig.read_outputs_outside_lane) is the outputs read before the lane, not under it
CHECK_PARTS = ("check_prefetch", "check_inputs", "check_reference", "check_read", "check_compare", "check_allclose",
               "check_other")


def mean_parts(records: list[dict], parts: tuple[str, ...], whole: str) -> dict[str, float] | None:
    """Mean seconds per evaluation of each of `parts`, and of the stretch they divide (`whole`), over the
    records that have them; None when none has them (older records)."""
    rows = [r["latency"] for r in records if any(k in r["latency"] for k in parts)]
    if not rows:
        return None
    return {k: sum(lat.get(k, 0.0) for lat in rows) / len(rows) for k in parts + (whole,)}


def timing_parts(records: list[dict]) -> dict[str, float] | None:
    """The exclusive stretch's parts (child/timing.time_submission's phases) and its mean (`child_timing`);
    records from before 2026-12-05, 06:00 UTC have none."""
    return mean_parts(records, TIMING_PARTS, "child_timing")


def check_parts(records: list[dict]) -> dict[str, float] | None:
    """The trusted check's parts and the check's mean (`check`, its lane wait included); records from
    before 2026-12-05, 09:00 UTC have none."""
    return mean_parts(records, CHECK_PARTS, "check")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("records", help="a throughput_records.jsonl")
    args = ap.parse_args(argv)
    rows = [json.loads(line) for line in Path(args.records).read_text().splitlines() if line.strip()]
    rows = [r for r in rows if r.get("latency") and "child_timing" in r["latency"]]
    if not rows:
        print("no record with a timing stage", file=sys.stderr)
        return 2
    print(f"{'mode':30} {'evals':>5} {'span s':>7} {'exclusive':>14} {'shared':>14} {'either':>14} {'idle s':>7} "
          f"{'rebuild error s':>15}")
    for mode in sorted({r["mode"] for r in rows}):
        o = occupancy([r for r in rows if r["mode"] == mode])
        pct = lambda k: f"{o[k]:6.0f} ({o[k] / o['span_s']:4.0%})"   # noqa: E731
        print(f"{mode:30} {o['evaluations']:5d} {o['span_s']:7.0f} {pct('exclusive_s'):>14} {pct('shared_s'):>14} "
              f"{pct('either_s'):>14} {o['idle_s']:7.0f} {o['rebuild_overlap_s']:15.0f}")
    for mode in sorted({r["mode"] for r in rows}):
        of_mode = [r for r in rows if r["mode"] == mode]
        for what, names, whole, prefix, parts in (
                ("the exclusive stretch", TIMING_PARTS, "child_timing", "child_timing_", timing_parts(of_mode)),
                ("the trusted check", CHECK_PARTS, "check", "check_", check_parts(of_mode))):
            if parts:
                print(f"{mode}: {what}, mean s per evaluation: "
                      + ", ".join(f"{k.removeprefix(prefix)} {parts[k]:.2f}" for k in names)
                      + f" (of {parts[whole]:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
