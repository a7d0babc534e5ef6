"""Per-step latency with and without the warm checker (kernelgym_gap.warm), on the cpu backend.

    .venv/bin/python scripts/warm_latency.py [--task AddReLU] [--solution triton_blocked.py] [--n 2] [--k 5]

1. The per-step breakdown (record.latency) of `--n` evaluations with the default checker and `--n` through
   one WarmChecker(device="cpu"), started and warmed up before them (its start is printed apart). On the cpu
   backend the default checker runs inside the parent (no process), so here the warm checker removes no
   start: its `check` is the in-parent check plus a round trip (the spec written, one line each way).
2. What it removes on the cuda backend, where each evaluation starts `python -m kernelgym_gap.checker
   CHECK.json`: the same check request `--k` times as a fresh process (the engine's per-evaluation command
   and environment, device cpu) and `--k` times as a round trip to the warm server. On cuda the fresh process
   also creates a CUDA context, which this cpu figure does not include (gpu_check.py's latency section
   measures that on the device).
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

from kernelgym_gap.config import EvalConfig  # noqa: E402
from kernelgym_gap.engine import backend_env, evaluate  # noqa: E402
from kernelgym_gap.registry import get_task  # noqa: E402
from kernelgym_gap.sandbox import child_env  # noqa: E402
from kernelgym_gap.warm import WarmChecker  # noqa: E402

KEYS = ("gate", "child", "compile_probe", "check", "total")


def _fmt(lat: dict) -> str:
    return ", ".join(f"{k}={lat[k]:.3f}" for k in KEYS if k in lat)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", default="AddReLU")
    p.add_argument("--solution", default="triton_blocked.py")
    p.add_argument("--n", type=int, default=2, help="evaluations per mode")
    p.add_argument("--k", type=int, default=5, help="check requests per mode in part 2")
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args(argv)
    task = get_task(args.task)
    source = task.solution_path(next(s for s in task.solutions if s.file == args.solution)).read_text()
    dsl = "tilelang" if args.solution.startswith("tilelang") else "triton"
    out: dict = {"task": task.id, "solution": args.solution, "cpus": os.cpu_count(),
                 "load_before": round(os.getloadavg()[0], 2)}
    with tempfile.TemporaryDirectory(prefix="kgg-warm-latency-") as root:
        cfg = EvalConfig(trial_seed=0, scratch_root=root)
        cold = [evaluate(task, source, dsl, "cpu", cfg) for _ in range(args.n)]
        t0 = time.perf_counter()
        with WarmChecker(device="cpu", scratch_root=root) as chk:
            chk.warm_up()
            start_s = time.perf_counter() - t0
            warm = [evaluate(task, source, dsl, "cpu", cfg, checker=chk) for _ in range(args.n)]
            # part 2: one kept check request (its outputs, job, report and spec), asked both ways
            kept = evaluate(task, source, dsl, "cpu", cfg.replace(keep_scratch=True), checker=chk)
            spec = next(Path(root).glob("kgg-check-*/check_spec.json"))
            result = spec.parent / "check.json"
            env = child_env(spec.parent, backend_env("cpu"))
            fresh_s, served_s = [], []
            for _ in range(args.k):
                result.unlink(missing_ok=True)
                t = time.perf_counter()
                subprocess.run([sys.executable, "-m", "kernelgym_gap.checker", str(spec)], env=env, cwd=spec.parent,
                               capture_output=True, timeout=600, check=True)
                fresh_s.append(time.perf_counter() - t)
                fresh_result = result.read_text()
                result.unlink()
                t = time.perf_counter()
                served = chk.check_spec(spec, result, timeout=600)
                served_s.append(time.perf_counter() - t)
                assert served.to_json() == fresh_result, "the warm and the fresh checker disagree"
            processes = chk.starts
    statuses = {r.status.value for r in cold + warm + [kept]}
    out.update({"cold": [r.latency for r in cold], "warm": [r.latency for r in warm], "statuses": sorted(statuses),
                "warm_checker_start_s": start_s, "warm_checker_processes": processes,
                "fresh_checker_process_s": fresh_s, "warm_round_trip_s": served_s,
                "trials_checked": kept.trials_checked})
    print(f"{task.id} {args.solution}, cpu backend, {os.cpu_count()} CPUs, load {out['load_before']}; "
          f"statuses {sorted(statuses)}")
    print(f"per step (s), {args.n} evaluations each:")
    for label, recs in (("default (in-parent check)", cold), ("warm checker", warm)):
        for i, r in enumerate(recs):
            print(f"  {label} #{i + 1}: {_fmt(r.latency)}")
    print(f"  warm checker start (once, outside the steps): {start_s:.2f} s; processes started: {processes}")
    print(f"the check request ({kept.trials_checked} trials), {args.k} times each:")
    print(f"  fresh `python -m kernelgym_gap.checker` process: median {statistics.median(fresh_s):.3f} s "
          f"(min {min(fresh_s):.3f}, max {max(fresh_s):.3f})")
    print(f"  warm server round trip:                       median {statistics.median(served_s):.3f} s "
          f"(min {min(served_s):.3f}, max {max(served_s):.3f})")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return 0 if statuses == {"ok"} else 1


if __name__ == "__main__":
    sys.exit(main())
