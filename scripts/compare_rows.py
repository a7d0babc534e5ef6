"""Two rows of one throughput call compared through the simulator (issue 35): is a rate difference between them
the order of a short run, or a stage that grew?

For a light-only records folder (scripts/throughput.py's throughput_records.jsonl and its summary; the full mix's
first 16 run that way too) and two of its rows A and B (default: A the one variant row, B the defaults row "lanes"):

- each row replayed as it ran, and in `--orders` seeded dispatch orders of its own jobs (and `--orders` random
  gate orders): the spread a run of this size has from its order alone;
- each row x4 in seeded orders (the steady state, past one run's tail);
- the swap: the other row's jobs with ONE stage family taken from this row, submission by submission, replayed in
  the same seeded orders: how much of the rate difference that family carries (a family's swap near the whole
  difference is its cause; the families' swaps need not add up, the lane makes them interact);
- the per-submission stage sums of both rows (seconds), the families' parts.

No GPU. Every rate past the "as run" column is a SIMULATION of the records' own seconds.

    nice -n 10 .venv/bin/python scripts/compare_rows.py results/h200_2026-12-06c_ipc_defaults/call4_defaults_full \\
        --out results/simulate_throughput/compare_rows_h200_2026-12-06c_call4_defaults_full
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import random
import statistics
import sys
from pathlib import Path

from kernelgym_gap.sim import study, workload
from kernelgym_gap.sim.pipeline import Job, Setup, simulate

# the Job fields of each stage family (kernelgym_gap/sim/workload.job_of maps the records' latency keys to them)
FAMILIES: dict[str, tuple[str, ...]] = {
    "start (child start, setup)": ("cold_start", "handoff", "pre_startup", "pre_host", "pre_context", "pre_warm",
                                   "setup", "gate"),
    "correctness (calls, host copies, checkpoint writes)": ("compile", "calls", "correctness", "unlaned", "save",
                                                             "checkpoints", "checkpoint_shares", "kept_checkpoints"),
    "timing (warm-up, probe, measure, rechecks)": ("timing", "timing_measure", "timing_probe", "timing_first_call",
                                                   "timing_recheck", "recheck"),
    "outputs write": ("write", "misc"),
    "check (prefetch, read, reference, compare)": ("check", "check_prefetch", "check_read", "check_ref"),
    "hangs and rest": ("hang_s", "hang_lane", "hang_lane_s", "rest"),
}

# the records' latency keys whose per-submission sums the report prints (the stages the levers move); the probe's
# parts (sim/workload.PROBE_PARTS, recorded from 2026-12-06 on; 0 in older records) are inside child_timing_probe
STAGE_KEYS = ("child_correctness_save", "child_checkpoint_write", "child_checkpoint_unlaned", "child_outputs_write",
              "check_prefetch", "check_read", "child_lane_wait_shared", "child_lane_wait_after_checkpoint",
              "child_lane_wait_exclusive", "check_lane_wait", "child_timing_probe", *workload.PROBE_PARTS,
              "child_timing_measure",
              "child_timing_recheck", "child_recheck", "child_preimport", "child_correctness", "child_timing", "check",
              "total")


# the gap study whose per-shape repetitions the loader's timing fit reads (unused by these tables; the loader wants it)
CORPUS = Path(__file__).resolve().parent.parent / "results" / "h200_2026-12-04_corpus" / "gap_study_cuda.json"


class CompareError(ValueError):
    """The folder or the rows named cannot be compared."""


def spread(jobs: list[Job], orders: int, setup: Setup = Setup()) -> dict:
    """The row as run, in `orders` seeded dispatch orders, in `orders` random gate orders, and x4 in seeded orders."""
    as_run = simulate(jobs, setup).evals_per_gpu_hour
    shuffled = [simulate(random.Random(s).sample(jobs, len(jobs)), setup).evals_per_gpu_hour for s in range(orders)]
    gated = [simulate(jobs, dataclasses.replace(setup, gate_seed=s)).evals_per_gpu_hour for s in range(orders)]
    steady = [simulate(study.replicated(jobs, 4, s), setup).evals_per_gpu_hour for s in range(orders)]

    def summ(xs: list[float]) -> dict:
        return {"mean": round(statistics.mean(xs), 1), "min": round(min(xs), 1), "max": round(max(xs), 1)}
    return {"as_run": round(as_run, 1), "orders": summ(shuffled), "gates": summ(gated), "steady_x4": summ(steady)}


def swapped(base: list[Job], donor: list[Job], fields: tuple[str, ...]) -> list[Job]:
    """`base`'s jobs with `fields` taken from `donor`'s job of the same submission (the jobs keep base's order)."""
    by_name = {j.name: j for j in donor}
    missing = sorted(j.name for j in base if j.name not in by_name)
    if missing:
        raise CompareError(f"the rows do not hold the same submissions: {missing[:3]} ...")
    return [dataclasses.replace(j, **{f: getattr(by_name[j.name], f) for f in fields}) for j in base]


def mean_rate(jobs: list[Job], orders: int) -> float:
    """The mean over the as-run order and `orders` seeded orders: the swap's figure, less one order's luck."""
    rates = [simulate(jobs).evals_per_gpu_hour]
    rates += [simulate(random.Random(s).sample(jobs, len(jobs))).evals_per_gpu_hour for s in range(orders)]
    return statistics.mean(rates)


# The library check's repetitions under a GPU-time budget (a lever NOT built; issue 35's probe): each timed shape's
# check stops after 3 repetitions instead of library_check_reps (10) once its budget is spent. ESTIMATED saving
# per timed shape at most 7 x (library call + the repetition's flush and spin, ~0.46 ms): with a library call of
# <= 3 ms (the full mix's attention and backward references, ESTIMATED from the gap study's per-shape times)
# that is <= 7 x 3.46 ms = 24 ms a shape, 0.19 s for a task's 8 timed cases
CHECK_REPS, CHECK_MIN_REPS, REP_OVERHEAD_MS, LIBRARY_MS_BOUND, TIMED_CASES = 10, 3, 0.46, 3.0, 8
CHECK_BUDGET_SAVED_S = (CHECK_REPS - CHECK_MIN_REPS) * (LIBRARY_MS_BOUND + REP_OVERHEAD_MS) * TIMED_CASES / 1e3


def probe_cut(jobs: list[Job], saved_s: float = 0.0, factor: float = 1.0) -> list[Job]:
    """Each timed job's probe (sim/goals.py's family "timing: the probe") cut by `saved_s` seconds (at most half
    of it: the warm-ups and the kernel's repetitions stay) or scaled by `factor`; the row's jobs as they ran,
    no other transform."""
    from kernelgym_gap.sim import goals
    fam = goals.family("timing: the probe")
    out = []
    for j in jobs:
        # the row's jobs as they ran (goals.stage would add the levers and the hand-over design on top)
        st = goals.Staged(j)
        probe = goals._probe(st)
        if probe > 0:
            k = factor if saved_s == 0 else max(0.5, 1 - saved_s / probe)
            st = fam.scale(st, k)
        out.append(st.job)
    return out


def compare(folder: str, a: str | None, b: str | None, orders: int) -> dict:
    inp = study.load_light(folder, CORPUS)
    modes = list(inp.rows)
    # default: A the variant row, B the defaults row "lanes" (this call's variant row is the OLD defaults)
    b = b or study.DEFAULTS_MODE
    a = a or next((m for m in modes if m != b), None)
    for m in (a, b):
        if m not in inp.rows:
            raise CompareError(f"{folder}: no row {m!r}; rows: {modes}")
    records = workload.read_records(Path(folder) / study.LIGHT_RECORDS)
    rows = {}
    for m in (a, b):
        rows[m] = {"measured": inp.measured[m], **spread(inp.rows[m], orders)}
    base_mean = mean_rate(inp.rows[b], orders)
    swaps = []
    for fam, fields in FAMILIES.items():
        r = mean_rate(swapped(inp.rows[b], inp.rows[a], fields), orders)
        swaps.append({"family": fam, "rate": round(r, 1), "change": round(r / base_mean - 1, 4)})
    probe = []
    for label, kw in ((f"the library check budgeted to {CHECK_MIN_REPS} reps (<= {CHECK_BUDGET_SAVED_S:.2f} s a "
                       f"job, ESTIMATED)", {"saved_s": CHECK_BUDGET_SAVED_S}),
                      ("the probe x0.75", {"factor": 0.75}), ("the probe x0.5", {"factor": 0.5}),
                      ("the probe x0", {"factor": 0.0})):
        jobs = probe_cut(inp.rows[b], **kw)
        steady = [simulate(study.replicated(jobs, 4, s)).evals_per_gpu_hour for s in range(orders)]
        probe.append({"scenario": label, "rate": round(mean_rate(jobs, orders), 1),
                      "change": round(mean_rate(jobs, orders) / base_mean - 1, 4),
                      "steady_x4": round(statistics.mean(steady), 1)})
    stages: dict[str, dict[str, dict[str, float]]] = {}
    for rec in records:
        if rec.get("mode") not in (a, b):
            continue
        per = stages.setdefault(rec["submission"], {a: {}, b: {}})
        per[rec["mode"]] = {k: round(float(rec["latency"].get(k, 0.0) or 0.0), 3) for k in STAGE_KEYS}
        per[rec["mode"]]["status"] = rec.get("status")
        per[rec["mode"]]["E"] = rec.get("E")
    return {"records": folder, "device": inp.device, "row_a": a, "row_b": b, "orders": orders, "rows": rows,
            "swap_base": round(base_mean, 1), "swaps_b_with_family_of_a": swaps, "probe_b": probe, "stages": stages,
            "note": "rates past 'measured' are SIMULATED from the records' own seconds"}


def render(res: dict) -> str:
    a, b = res["row_a"], res["row_b"]
    out = [f"records {res['records']} ({res['device']}); A = {a!r}, B = {b!r}; {res['orders']} seeded orders",
           "", "== each row: measured, replayed as run, and the spread of its own jobs (SIMULATED)",
           f"{'row':4} {'measured':>9} {'as_run':>8} {'orders mean (min..max)':>26} {'gates mean (min..max)':>26} "
           f"{'x4 steady mean (min..max)':>28}"]
    for label, m in (("A", a), ("B", b)):
        r = res["rows"][m]
        f = lambda d: f"{d['mean']:.1f} ({d['min']:.1f}..{d['max']:.1f})"  # noqa: E731
        out.append(f"{label:4} {r['measured']:9.1f} {r['as_run']:8.1f} {f(r['orders']):>26} {f(r['gates']):>26} "
                   f"{f(r['steady_x4']):>28}")
    out += ["", f"== B's jobs with one family taken from A, submission by submission (SIMULATED; mean of as-run + "
                f"{res['orders']} orders; B itself {res['swap_base']:.1f})"]
    for s in res["swaps_b_with_family_of_a"]:
        out.append(f"  {s['family']:55} {s['rate']:8.1f} {s['change']:+8.1%}")
    out += ["", "== B's probe cut (SIMULATED PREDICTIONS; sim/goals.py's probe family; mean of as-run + orders, and x4 "
                "steady)"]
    for p in res["probe_b"]:
        out.append(f"  {p['scenario']:70} {p['rate']:8.1f} {p['change']:+8.1%}  x4 {p['steady_x4']:8.1f}")
    out += ["", "== per-submission stages (s), A -> B"]
    keys = [k for k in STAGE_KEYS if k != "total"] + ["total"]
    sums = {a: dict.fromkeys(keys, 0.0), b: dict.fromkeys(keys, 0.0)}
    for sub, per in res["stages"].items():
        moved = [f"{k}: {per[a].get(k, 0):.2f}->{per[b].get(k, 0):.2f}" for k in keys
                 if abs(per[b].get(k, 0) - per[a].get(k, 0)) >= 0.5]
        for m in (a, b):
            for k in keys:
                sums[m][k] += per[m].get(k, 0.0)
        out.append(f"  {sub} [{per[a].get('status')} / {per[b].get('status')}]: " + ("; ".join(moved) or "-"))
    out.append("  SUM: " + "; ".join(f"{k}: {sums[a][k]:.1f}->{sums[b][k]:.1f}" for k in keys))
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("records", help="a light-only records folder (throughput_records.jsonl and its summary)")
    ap.add_argument("--a", help="row A's records mode (default: the row other than B)")
    ap.add_argument("--b", help="row B's records mode (default: the defaults row 'lanes')")
    ap.add_argument("--orders", type=int, default=20, help="seeded orders per spread (default 20)")
    ap.add_argument("--out", help="write <out>.txt and <out>.json")
    args = ap.parse_args(argv)
    try:
        res = compare(args.records, args.a, args.b, args.orders)
    except (CompareError, study.StudyError, OSError) as e:
        print(f"compare_rows: {e}", file=sys.stderr)
        return 2
    text = render(res)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out + ".txt").write_text(text + "\n")
        Path(args.out + ".json").write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
