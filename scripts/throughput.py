"""Evaluations per minute on the cpu backend: the local pool (kernelgym_gap.api.batch.evaluate_many) and the Ray
pool (kernelgym_gap.api.ray_pool.RayPool), each with 1 and 2 workers, over the same fixed batch of reference
solutions. Prints the table last.

    .venv/bin/python scripts/throughput.py                       # default batch, 1 and 2 workers, local + Ray
    .venv/bin/python scripts/throughput.py --tasks AddReLU RowSum --repeat 2 --workers 1 2 4 --no-ray

What is timed: `evaluate_many(batch, workers=n)` (local) and `pool.evaluate(batch)` (Ray) from the first
submission to the last record; Ray's start and the actors' start are reported apart (`startup s`), outside
the rate. Every evaluation is a full sandboxed one (gate, child process, Triton compile probe, checker).
The rate depends on how many cores are free: the load average before each run is printed beside it.
The statuses of every run are checked to agree with the first run's (the same submissions, the same
records).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kernelgym_gap.api.batch import EvalRequest, evaluate_many  # noqa: E402
from kernelgym_gap.core.config import EvalConfig  # noqa: E402
from kernelgym_gap.core.registry import default_registry  # noqa: E402

DEFAULT_TASKS = ("AddReLU", "RowSum", "RMSNorm")


def make_batch(tasks, dsl: str, repeat: int) -> list[EvalRequest]:
    reg = default_registry()
    batch = []
    for _ in range(repeat):
        for name in tasks:
            task = reg.get(name)
            for sol in task.solutions:
                if sol.dsl == dsl:
                    batch.append(EvalRequest(task.id, task.solution_path(sol).read_text(), dsl, "cpu",
                                             tag=f"{task.name}/{sol.file}"))
    return batch


def _row(mode, workers, batch, records, seconds, startup, load):
    ok = sum(r.status.value == "ok" for r in records)
    return {"mode": mode, "workers": workers, "evaluations": len(batch), "ok": ok, "seconds": round(seconds, 2),
            "evals_per_min": round(60 * len(batch) / seconds, 2), "startup_s": startup, "load_before": load}


def run_local(batch, workers, config):
    load = round(os.getloadavg()[0], 2)
    t = time.perf_counter()
    records = evaluate_many(batch, workers=workers, config=config)
    return _row("local", workers, batch, records, time.perf_counter() - t, None, load), records


def run_ray(batch, workers, config, num_cpus):
    import ray
    from kernelgym_gap.api.ray_pool import RayPool
    t = time.perf_counter()
    if not ray.is_initialized():
        ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False, configure_logging=False)
    with RayPool(address="auto", backend="cpu", workers=workers) as pool:
        startup = round(time.perf_counter() - t, 2)
        load = round(os.getloadavg()[0], 2)
        t = time.perf_counter()
        records = pool.evaluate(batch, config=config)
        seconds = time.perf_counter() - t
    return _row("ray", workers, batch, records, seconds, startup, load), records


def format_table(rows) -> str:
    header = ("mode", "workers", "evaluations", "ok", "seconds", "evals/min", "startup s", "load before")
    body = [(r["mode"], str(r["workers"]), str(r["evaluations"]), str(r["ok"]), f"{r['seconds']:.1f}",
             f"{r['evals_per_min']:.1f}", "-" if r["startup_s"] is None else f"{r['startup_s']:.1f}",
             f"{r['load_before']:.2f}") for r in rows]
    widths = [max(len(x[i]) for x in [header] + body) for i in range(len(header))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in body]
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", nargs="+", default=list(DEFAULT_TASKS))
    p.add_argument("--dsl", default="triton", choices=["triton", "tilelang"])
    p.add_argument("--repeat", type=int, default=1, help="the batch is every solution of the tasks, this many times")
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    p.add_argument("--no-ray", action="store_true")
    p.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    args = p.parse_args(argv)
    batch = make_batch(args.tasks, args.dsl, args.repeat)
    if not batch:
        p.error("the batch is empty (no solution in that DSL for those tasks)")
    config = EvalConfig(trial_seed=0)
    print(f"batch: {len(batch)} evaluations ({', '.join(r.tag for r in batch)}); cpu backend; "
          f"{os.cpu_count()} CPUs on this machine", file=sys.stderr, flush=True)
    rows, reference = [], None
    modes = ["local"] + ([] if args.no_ray else ["ray"])
    try:
        for mode in modes:
            for n in args.workers:
                row, records = (run_local(batch, n, config) if mode == "local"
                                else run_ray(batch, n, config, max(args.workers)))
                statuses = [r.status.value for r in records]
                reference = reference or statuses
                row["same_statuses"] = statuses == reference
                rows.append(row)
                print(f"{mode} x{n}: {row['seconds']:.1f} s, {row['evals_per_min']:.1f} evaluations/min "
                      f"({row['ok']}/{len(batch)} ok)", file=sys.stderr, flush=True)
    finally:
        if "ray" in modes and "ray" in sys.modules and sys.modules["ray"].is_initialized():
            sys.modules["ray"].shutdown()
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    if not all(r["same_statuses"] for r in rows):
        print("WARNING: the runs disagree on some statuses", file=sys.stderr)
    print(format_table(rows))
    return 0 if all(r["same_statuses"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
