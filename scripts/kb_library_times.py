"""The library's time and the floor of every timed case of imported tasks (issue 36's H200 table).

KernelBench's known weakness is problems whose torch eager time is a few microseconds: launch overhead, not
the op, is measured, and fast_p on them says little. This script times each imported task's library (its
reference, torch eager, on the task's timed distribution, as the child times it: child/timing.py's Bench, L2
flushed, CUDA events) at every timed cuda case, beside `triton.testing.do_bench` on the same inputs (an
independent summariser; same process, so a cross-check of the summariser, not of the process), and the
roofline floor (judge/floor.floor_ms, the calibration measured or cached for this GPU). It prints the share
of cases and of tasks whose library runs under 20 us, and writes every row as JSON.

    python scripts/kb_library_times.py --tasks-dir kb [--tasks-dir kb2] --out results/kb_library_times.json

`--sample N --deadline-s S` times a seeded random N of the tasks, for a device call too short for all.
`--backend cpu` runs the same loop with wall-clock timing on the cpu shapes (a check of the plumbing:
those times are NOT GPU figures and the floor is not computed). `--deadline-s` stops early, the JSON then
says how many tasks were left.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

OVERHEAD_BOUND_MS = 0.020      # KernelBench's overhead-bound problems: torch eager under 20 us


def _cases(task, backend: str, config):
    from kernelgym_gap.engine.trials import cases, make_timing_trials, trial_rng
    if backend == "cuda":
        return make_timing_trials(task, config, trial_rng(config))
    from kernelgym_gap.core.record import Trial
    return tuple(Trial(index=i, shape=shape, dtype=dtype, seed=1000 + i, distribution=task.timed_distribution,
                       split=split) for i, (split, shape, dtype) in enumerate(cases(task, "cpu")))


def _time_cpu(fn, reps: int = 5) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def rows_for(task, backend: str, config, bench=None, cal=None) -> list[dict]:
    """One row per timed case of `task`: library_ms (the project's Bench on cuda, wall clock on cpu),
    do_bench_ms (cuda), floor_ms and which bound (cuda)."""
    import torch

    from kernelgym_gap.core.inputs import make_trial_inputs
    from kernelgym_gap.judge.floor import floor_ms
    device = "cuda" if backend == "cuda" else "cpu"
    out = []
    for trial in _cases(task, backend, config):
        ins = make_trial_inputs(task, trial, device)
        row = {"task": task.id, "category": task.category, "shape": list(trial.shape), "dtype": trial.dtype,
               "split": trial.split}
        with torch.no_grad():
            if backend == "cuda":
                import triton.testing
                row["library_ms"] = bench.measure(lambda i: task.reference(*ins)).median_ms
                row["do_bench_ms"] = float(triton.testing.do_bench(lambda: task.reference(*ins), warmup=25, rep=100))
                row["floor_ms"], row["bound"] = floor_ms(task, trial.shape, trial.dtype, cal)
            else:
                row["library_ms"] = _time_cpu(lambda: task.reference(*ins))
        del ins
        out.append(row)
    return out


def summary(rows: list[dict]) -> dict:
    """Cases and tasks whose library runs under OVERHEAD_BOUND_MS (a task counts when all its cases do)."""
    by_task: dict[str, list[float]] = {}
    for r in rows:
        by_task.setdefault(r["task"], []).append(r["library_ms"])
    under = [r for r in rows if r["library_ms"] < OVERHEAD_BOUND_MS]
    tasks_under = [t for t, ms in by_task.items() if max(ms) < OVERHEAD_BOUND_MS]
    return {"cases": len(rows), "cases_under_20us": len(under), "tasks": len(by_task),
            "tasks_all_cases_under_20us": len(tasks_under),
            "share_cases_under_20us": round(len(under) / len(rows), 4) if rows else None,
            "share_tasks_under_20us": round(len(tasks_under) / len(by_task), 4) if by_task else None,
            "median_library_ms": statistics.median(r["library_ms"] for r in rows) if rows else None}


def table(rows: list[dict], backend: str) -> str:
    lines = [f"{'task':58} {'shape':>24} {'dtype':>9} {'library ms':>11}"
             + (f" {'do_bench':>9} {'floor ms':>9} {'lib U':>6}" if backend == "cuda" else "")]
    for r in rows:
        line = f"{r['task'][-58:]:58} {str(r['shape'])[-24:]:>24} {r['dtype']:>9} {r['library_ms']:11.4f}"
        if backend == "cuda":
            line += f" {r['do_bench_ms']:9.4f} {r['floor_ms']:9.4f} {r['floor_ms'] / r['library_ms']:6.2f}"
        lines.append(line)
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks-dir", action="append", required=True, help="an imported task directory (repeatable)")
    ap.add_argument("--backend", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--out", help="JSON file for the rows and the summary")
    ap.add_argument("--deadline-s", type=float, default=None, help="stop starting tasks after this many seconds")
    ap.add_argument("--sample", type=int, default=None,
                    help="time this many tasks drawn at random (seeded), so that a run cut short by its deadline "
                         "is still an unbiased sample rather than the first categories")
    args = ap.parse_args(argv)
    from kernelgym_gap.core.config import EvalConfig
    from kernelgym_gap.core.registry import TaskRegistry
    config = EvalConfig(trial_seed=20261206)
    bench = cal = None
    if args.backend == "cuda":
        from kernelgym_gap.device.bench import Bench
        from kernelgym_gap.judge.calibrate import calibrate
        cal = calibrate(0)
        bench = Bench(config.timing)
    start = time.monotonic()
    tasks = [t for d in args.tasks_dir for t in TaskRegistry(d)]
    if args.sample is not None:
        import random
        tasks = random.Random(20261206).sample(tasks, min(args.sample, len(tasks)))
    rows, failed, left = [], {}, 0
    for i, task in enumerate(tasks):
        if args.deadline_s is not None and time.monotonic() - start > args.deadline_s:
            left = len(tasks) - i
            break
        try:
            rows += rows_for(task, args.backend, config, bench, cal)
        except Exception as e:  # noqa: BLE001 - one task's failure is that task's row, the survey goes on
            failed[task.id] = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200] if str(e).strip() else ''}"
    result = {"backend": args.backend, "device": _device(args.backend), "date": time.strftime("%Y-%m-%d"),
              "tasks_dirs": args.tasks_dir, "sampled": args.sample, "rows": rows, "failed": failed, "tasks_left": left,
              "summary": summary(rows)}
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1))
    print(table(rows, args.backend))
    for name, why in failed.items():
        print(f"FAILED {name}: {why}")
    s = result["summary"]
    print(f"\n{result['device']}: {s['tasks']} tasks, {s['cases']} timed cases; library under 20 us: "
          f"{s['cases_under_20us']} cases ({s['share_cases_under_20us']}), {s['tasks_all_cases_under_20us']} "
          f"tasks in every case ({s['share_tasks_under_20us']}); median library {s['median_library_ms']} ms; "
          f"{len(failed)} failed, {left} not reached" + ("" if args.backend == "cuda" else " (cpu wall clock: not GPU figures)"))
    return 0


def _device(backend: str) -> str:
    if backend != "cuda":
        return "cpu (wall clock)"
    import torch
    return torch.cuda.get_device_name(0)


if __name__ == "__main__":
    sys.exit(main())
