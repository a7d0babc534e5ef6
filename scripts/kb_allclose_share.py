"""How much of the trusted check's second reference (the same-dtype reference behind `kernelbench_allclose`,
the record's `check_allclose`) falls on trials of each task's timed distribution (issue 35, 2026-12-06).

`python scripts/kb_allclose_share.py` prints, per task of the built-in corpus and per backend, the
correctness trials of one evaluation (EvalConfig's defaults), how many are on the timed distribution, the
cuda rechecks (one per timed case, all on the timed distribution), and the share of the second references
that are still computed when only the timed distribution's correctness trials need one: by count, and
weighted by the task's counted flops per trial (a reference's cost grows with its shape). A trial whose
same-dtype reference is the checker's first reference itself (the task's reference runs in the input dtype,
or a float64 trial) needs none at all.

`--evaluate TASK:SOLUTION [...]` also runs those reference solutions through the real pipeline on cpu
(`engine.pipeline.evaluate`, fixed seeds) `--repeat` times and prints the check's parts (`check_*` latency
keys, seconds) and the verdict, so the same command before and after a checker change compares them.

`--checker-source FILE` loads judge/checker.py from FILE instead before anything imports it (e.g. the one of
02c9931, the last before this change: `git show 02c9931:kernelgym_gap/judge/checker.py > /tmp/checker_old.py`), so that
the old and the new check are measured by the same command on the same machine.

`--predict FOLDER` (a throughput folder whose records carry `check_allclose`, e.g. the H100 full mix
results/h100_2026-12-06b_full_levers/call1_full) is a PREDICTION of the simulator, not a measurement: each
defaults-row record's `check` less (1 - that task's cuda share kept, by flops) x its `check_allclose`, then the
goals study's steady rate (kernelgym_gap/sim/goals.py: the lane-time levers and the hand-over applied, 4 slots)
with nothing else scaled, with the killed calls at today's deadlines (x0.27) and at 0, before and after."""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path

from kernelgym_gap.core.config import EvalConfig
from kernelgym_gap.core.registry import default_registry
from kernelgym_gap.core.task import TaskSpec
from kernelgym_gap.engine.trials import make_timing_trials, make_trials

def _reuses_first_reference(task: TaskSpec, dtype: str) -> bool:
    """Whether the same-dtype reference is the first reference itself (judge/checker.py reuses it)."""
    return not task.reference_in_float64 or (dtype == "float64" and task.float64_reference is None)


def share(task: TaskSpec, backend: str, config: EvalConfig) -> dict:
    """One evaluation's second references before (every correctness trial and, on cuda, every recheck) and
    after (the timed distribution's correctness trials, and the rechecks only where the task's verdict
    applies KernelBench's check), by count and by flops."""
    rng = random.Random(0)
    trials = make_trials(task, backend, config, rng)
    rechecks = make_timing_trials(task, config, rng) if backend == "cuda" else ()
    # the checker before 2026-12-06 computed one for every trial it judged, the rechecks included
    before_all = list((*trials, *rechecks))
    after = [t for t in trials if t.distribution == task.timed_distribution
             and not _reuses_first_reference(task, t.dtype)]
    after += [t for t in rechecks if t.dtype in task.kernelbench_check
              and not _reuses_first_reference(task, t.dtype)]

    def flops(ts) -> int:
        return sum(int(task.flops(tuple(t.shape))) for t in ts)
    return {"task": task.name, "backend": backend, "trials": len(trials),
            "timed": sum(t.distribution == task.timed_distribution for t in trials), "rechecks": len(rechecks),
            "refs_before": len(before_all), "refs_after": len(after),
            "kept": len(after) / len(before_all) if before_all else 0.0,
            "kept_flops": flops(after) / flops(before_all) if flops(before_all) else None}   # None: no flops counted


def table(rows: list[dict]) -> str:
    head = "| task | backend | correctness trials | of them timed distribution | rechecks | second refs before -> after | kept (count) | kept (flops) |"
    lines = [head, "|" + "---|" * 8]
    for r in rows:
        lines.append(f"| {r['task']} | {r['backend']} | {r['trials']} | {r['timed']} | {r['rechecks']} | "
                     f"{r['refs_before']} -> {r['refs_after']} | {r['kept']:.2f} | "
                     + (f"{r['kept_flops']:.2f} |" if r["kept_flops"] is not None else "- |"))
    return "\n".join(lines)


def evaluate_parts(spec: str, repeat: int) -> dict:
    """`TASK:SOLUTION` (a file under the task's solutions/) evaluated on cpu; the check's parts per run."""
    from kernelgym_gap.engine.pipeline import evaluate
    name, solution = spec.split(":", 1)
    task = default_registry().get(name)
    sol = next(s for s in task.solutions if s.file == solution)
    source = task.solution_path(sol).read_bytes()
    runs = []
    for i in range(repeat):
        rec = evaluate(name, source, sol.dsl, backend="cpu", config=EvalConfig(trial_seed=7 + i))
        runs.append({"status": rec.status.value, "kernelbench_allclose": (rec.terms or {}).get("kernelbench_allclose"),
                     "trials_checked": rec.trials_checked,
                     **{k: round(v, 4) for k, v in rec.latency.items() if k.startswith("check")}})
    keys = sorted({k for r in runs for k in r if k.startswith("check")})
    return {"spec": spec, "runs": runs,
            "median": {k: round(statistics.median(r.get(k, 0.0) for r in runs), 4) for k in keys}}


HANGS_TODAY = 0.27   # the goals study's "hangs today": (30 + 2) / (60.4 + 60.1) of the recorded hang seconds
KILLED = "killed calls (to their deadline)"
PROBE = "timing: the probe"
CHECK_REST = "check: inputs, reference, compare"


def predict(folder: Path, kept_flops: dict[str, float]) -> dict:
    """The goals study's full-mix rate with and without the timed-only second reference (a PREDICTION).
    `kept_flops`: per task name, the share of the second references' flops still computed on cuda."""
    from kernelgym_gap.sim import goals, study, workload
    records = workload.read_records(folder / study.LIGHT_RECORDS)
    cut_records, cut_s = [], []
    for r in records:
        lat = dict(r["latency"])
        if r.get("mode") == study.DEFAULTS_MODE and lat.get("check_allclose"):
            cut = (1.0 - kept_flops.get(r.get("task", ""), 1.0)) * lat["check_allclose"]
            lat["check"] -= cut
            lat["check_allclose"] -= cut
            cut_s.append(cut)
        cut_records.append({**r, "latency": lat})
    rates = {}
    for label, recs in (("before", records), ("after", cut_records)):
        staged = tuple(goals.stage(j) for j in workload.jobs_of_mode(recs, study.DEFAULTS_MODE))
        w = goals.Workload("full", staged)
        rates[label] = {"levers + hand-over": round(w.rate({}), 1),
                        "hangs at today's deadlines": round(w.rate({KILLED: HANGS_TODAY}), 1),
                        "hangs at 0": round(w.rate({KILLED: 0.0}), 1),
                        # the goals study's path from the hangs today (docs/measurement.md item 12: 995 before)
                        "hangs today, the probe at 0": round(w.rate({KILLED: HANGS_TODAY, PROBE: 0.0}), 1),
                        "hangs today, the probe at 0, the check's rest x0.5":
                            round(w.rate({KILLED: HANGS_TODAY, PROBE: 0.0, CHECK_REST: 0.5}), 1)}
    n = sum(r.get("mode") == study.DEFAULTS_MODE for r in records)
    return {"folder": str(folder), "evaluations": n, "check_allclose_cut_s_per_evaluation": round(sum(cut_s) / n, 3),
            "rates_4_slots": rates, "note": "SIMULATED prediction (kernelgym_gap/sim/goals.py), not a measurement"}


def load_checker(path: Path) -> None:
    """judge/checker.py replaced by the module in `path` for this process (the cpu check runs in the parent)."""
    import importlib.util

    import kernelgym_gap.judge as judge_pkg
    spec = importlib.util.spec_from_file_location("kernelgym_gap.judge.checker", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["kernelgym_gap.judge.checker"] = module
    spec.loader.exec_module(module)
    judge_pkg.checker = module


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--evaluate", nargs="*", default=[], metavar="TASK:SOLUTION")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--predict", type=Path, metavar="FOLDER", help="the simulator's prediction on these records")
    ap.add_argument("--json", type=Path, help="also write every row and run here")
    ap.add_argument("--checker-source", type=Path, metavar="FILE", help="judge/checker.py taken from FILE")
    args = ap.parse_args(argv)
    if args.checker_source:
        load_checker(args.checker_source)
    config = EvalConfig()
    rows = [share(t, b, config) for t in default_registry() for b in ("cpu", "cuda") if b in t.workloads]
    print(table(rows))
    for b in ("cpu", "cuda"):
        mine = [r for r in rows if r["backend"] == b]
        print(f"{b}: {len(mine)} tasks, kept by count median {statistics.median(r['kept'] for r in mine):.2f} "
              f"(min {min(r['kept'] for r in mine):.2f}, max {max(r['kept'] for r in mine):.2f}), by flops median "
              f"{statistics.median(r['kept_flops'] for r in mine if r['kept_flops'] is not None):.2f}; tasks with no timed-distribution "
              f"correctness trial: {sum(r['timed'] == 0 for r in mine)}")
    evaluated = [evaluate_parts(s, args.repeat) for s in args.evaluate]
    for e in evaluated:
        print(json.dumps(e))
    predicted = None
    if args.predict:
        kept = {r["task"]: r["kept_flops"] if r["kept_flops"] is not None else r["kept"]
                for r in rows if r["backend"] == "cuda"}
        predicted = predict(args.predict, kept)
        print(json.dumps(predicted))
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "evaluated": evaluated, "predicted": predicted}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
