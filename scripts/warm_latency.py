"""Per-step latency without and with the warm pool (kernelgym_gap.api.warm.WarmPool: a warm trusted checker and
pre-started children), on the cpu backend.

    .venv/bin/python scripts/warm_latency.py [--task AddReLU] [--solution triton_blocked.py] [--n 3] [--k 5]
                                             [--think 4]

1. The per-step breakdown (record.latency) of `--n` evaluations in each of three modes: the default (a cold
   child per step, the check in the parent), a WarmChecker(device="cpu") alone, and a whole WarmPool (the
   checker plus a prestart.ChildPool: the step's child, and on Triton its compile probe, did their imports
   before the step). Steps are `--think` seconds apart, standing in for the agent writing its next kernel
   (the time the pre-started child imports in); the pool's first child is started before the first step, as
   KernelEnv.reset() does. `child_preimport` is the import time a pre-started child spent before its step.
   On the cpu backend the default checker runs inside the parent (no process), so the warm checker removes
   no start here: its `check` is the in-parent check plus a round trip.
2. What the warm checker removes on the cuda backend, where each evaluation starts `python -m
   kernelgym_gap.judge.checker CHECK.json`: the same check request `--k` times as a fresh process (the engine's
   per-evaluation command and environment, device cpu) and `--k` times as a round trip to the warm server.
   On cuda the fresh process also creates a CUDA context, which this cpu figure does not include
   (gpu_check.py's latency section measures that on the device).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kernelgym_gap.sandbox.child_io import backend_env  # noqa: E402
from kernelgym_gap.core.config import EvalConfig  # noqa: E402
from kernelgym_gap.core.errors import UnknownChoiceError  # noqa: E402
from kernelgym_gap.core.placement import Placement  # noqa: E402
from kernelgym_gap.engine.pipeline import evaluate  # noqa: E402
from kernelgym_gap.sandbox.launch import child_spec  # noqa: E402
from kernelgym_gap.core.registry import get_task  # noqa: E402
from kernelgym_gap.sandbox.process import child_env  # noqa: E402
from kernelgym_gap.api.warm import WarmChecker, WarmPool  # noqa: E402

KEYS = ("gate", "child", "child_preimport", "compile_probe", "check", "total")


def _fmt(lat: dict) -> str:
    return ", ".join(f"{k}={lat[k]:.3f}" for k in KEYS if k in lat)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", default="AddReLU")
    p.add_argument("--solution", default="triton_blocked.py")
    p.add_argument("--n", type=int, default=3, help="evaluations per mode")
    p.add_argument("--think", type=float, default=4.0, help="seconds between two steps (the agent's turn)")
    p.add_argument("--k", type=int, default=5, help="check requests per mode in part 2")
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args(argv)
    task = get_task(args.task)
    by_file = {s.file: s for s in task.solutions}
    if args.solution not in by_file:
        p.error(str(UnknownChoiceError(f"{task.name} solution", args.solution, sorted(by_file))))
    source = task.solution_path(by_file[args.solution]).read_text()
    dsl = "tilelang" if args.solution.startswith("tilelang") else "triton"
    out: dict = {"task": task.id, "solution": args.solution, "cpus": os.cpu_count(),
                 "load_before": round(os.getloadavg()[0], 2)}
    with tempfile.TemporaryDirectory(prefix="kgg-warm-latency-") as root:
        cfg = EvalConfig(trial_seed=0)
        where = Placement(scratch_root=root)

        def steps(**warm):
            recs = []
            for i in range(args.n):
                time.sleep(args.think)
                recs.append(evaluate(task, source, dsl, "cpu", cfg, placement=where, **warm))
            return recs
        cold = steps()
        with WarmPool(device="cpu", scratch_root=root) as pool:
            pool.checker.warm_up()
            pool.children.refill(child_spec(task, dsl, "cpu", cfg, where))
            pooled = steps(checker=pool.checker, children=pool.children)
            n_served = pool.children.served
        t0 = time.perf_counter()
        with WarmChecker(device="cpu", scratch_root=root) as chk:
            chk.warm_up()
            start_s = time.perf_counter() - t0
            warm = steps(checker=chk)
            # part 2: one kept check request (its outputs, job, report and spec), asked both ways
            kept = evaluate(task, source, dsl, "cpu", cfg, placement=where.replace(keep_scratch=True), checker=chk)
            spec = next(Path(root).glob("kgg-check-*/check_spec.json"))
            result = spec.parent / "check.json"
            env = child_env(spec.parent, backend_env("cpu"))
            fresh_s, served_s = [], []
            for _ in range(args.k):
                result.unlink(missing_ok=True)
                t = time.perf_counter()
                subprocess.run([sys.executable, "-m", "kernelgym_gap.judge.checker", str(spec)], env=env, cwd=spec.parent,
                               capture_output=True, timeout=600, check=True)
                fresh_s.append(time.perf_counter() - t)
                fresh_result = result.read_text()
                result.unlink()
                t = time.perf_counter()
                served = chk.check_spec(spec, result, timeout=600)
                served_s.append(time.perf_counter() - t)
                assert served.to_json() == fresh_result, "the warm and the fresh checker disagree"
            processes = chk.starts
    statuses = {r.status.value for r in cold + warm + pooled + [kept]}
    out.update({"cold": [r.latency for r in cold], "warm": [r.latency for r in warm],
                "warm_pool": [r.latency for r in pooled], "prestarted_served": n_served,
                "think_s": args.think, "statuses": sorted(statuses),
                "warm_checker_start_s": start_s, "warm_checker_processes": processes,
                "fresh_checker_process_s": fresh_s, "warm_round_trip_s": served_s,
                "trials_checked": kept.trials_checked})
    print(f"{task.id} {args.solution}, cpu backend, {os.cpu_count()} CPUs, load {out['load_before']}; "
          f"statuses {sorted(statuses)}")
    print(f"per step (s), {args.n} evaluations each, {args.think:g} s apart:")
    for label, recs in (("default (cold child, in-parent check)", cold), ("warm checker", warm),
                        ("warm pool (checker + pre-started child)", pooled)):
        for i, r in enumerate(recs):
            print(f"  {label} #{i + 1}: {_fmt(r.latency)}")
        print(f"  {label}: median total {statistics.median(r.latency['total'] for r in recs):.3f} s, "
              f"child {statistics.median(r.latency['child'] for r in recs):.3f} s")
    print(f"  warm pool: {n_served} of {len(pooled)} steps ran in a pre-started child")
    print(f"  warm checker start (once, outside the steps): {start_s:.2f} s; processes started: {processes}")
    print(f"the check request ({kept.trials_checked} trials), {args.k} times each:")
    print(f"  fresh `python -m kernelgym_gap.judge.checker` process: median {statistics.median(fresh_s):.3f} s "
          f"(min {min(fresh_s):.3f}, max {max(fresh_s):.3f})")
    print(f"  warm server round trip:                       median {statistics.median(served_s):.3f} s "
          f"(min {min(served_s):.3f}, max {max(served_s):.3f})")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return 0 if statuses == {"ok"} else 1


if __name__ == "__main__":
    sys.exit(main())
