"""Reward stability (cuda): E over several separate evaluations of the same kernel.

    python scripts/stability.py [--tasks Softmax,LayerNorm,Matmul,GELU] [--runs 5] [--workload study|full]

Each task's optimized Triton reference solution is evaluated `--runs` times through the engine (one warm
pool: each evaluation is still a fresh child and a fresh timing), on the gap study's workload. Per task and
per shape it prints the kernel time's median, E's relative standard deviation (stdev / mean) over the runs,
and which reading the timing reported (stream or device-wide). Goal (issue 14): relative standard deviation
of E <= 2% for kernels of >= 40 us. Writes results/stability_<device>_<date>.json.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

GOAL_MIN_MS, GOAL_RSD = 0.040, 0.02


def rsd(xs: list[float]) -> float:
    return statistics.stdev(xs) / statistics.mean(xs) if len(xs) > 1 else 0.0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", default="Softmax,LayerNorm,Matmul,GELU")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--workload", choices=("study", "full"), default="study")
    ap.add_argument("--out", default=str(ROOT / "results"))
    args = ap.parse_args(argv)

    import gap_study
    from kernelgym_gap.api.service import EvalService
    from kernelgym_gap.core.config import EvalConfig
    from kernelgym_gap.core.registry import default_registry
    registry = default_registry()
    config = EvalConfig(compile_baseline="off")
    results = []
    with EvalService("cuda", config, slots=[0], warm=True) as service:     # one slot, GPU 0, its warm pool
        for name in args.tasks.split(","):
            task = gap_study.study_task(registry.get(name), "cuda", args.workload)
            sol = next(s for s in task.solutions if s.dsl == "triton" and s.kind == "optimized")
            source = task.solution_path(sol).read_text()
            runs = []
            for k in range(args.runs):
                rec = service.evaluate(task, source, "triton")
                runs.append(rec)
                print(f"{name} run {k + 1}: {rec.status.value} E={rec.terms.get('E')}", file=sys.stderr, flush=True)
            ok = [r for r in runs if r.ok]
            shapes = {}
            for r in ok:
                for p in r.terms["per_shape"]:
                    s = shapes.setdefault((tuple(p["shape"]), p["dtype"]), {"kernel_ms": [], "E": [], "reading": []})
                    s["kernel_ms"].append(p["kernel_ms"])
                    s["E"].append(p["E"])
                    s["reading"].append("device" if p.get("device_ms") and p["kernel_ms"] > p["stream_ms"] else "stream")
            results.append({
                "task": task.id, "solution": sol.file, "statuses": [r.status.value for r in runs],
                "E": [r.terms.get("E") for r in ok], "E_rsd": rsd([r.terms["E"] for r in ok]) if ok else None,
                "per_shape": [{"shape": list(k[0]), "dtype": k[1], "kernel_ms_median": statistics.median(v["kernel_ms"]),
                               "kernel_ms_rsd": rsd(v["kernel_ms"]), "E_rsd": rsd(v["E"]),
                               "device_readings": v["reading"].count("device"), "runs": len(v["E"])}
                              for k, v in shapes.items()],
                "device": ok[0].device if ok else {}, "versions": ok[0].versions if ok else {}})
    device = (results[0]["device"].get("name") or "cuda").split()[-1].lower() if results else "cuda"
    path = Path(args.out) / f"stability_{device}_{_dt.date.today().isoformat()}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                                "runs": args.runs, "workload": args.workload,
                                "goal": {"min_kernel_ms": GOAL_MIN_MS, "max_E_rsd": GOAL_RSD},
                                "results": results}, indent=1, default=str) + "\n")
    print(f"wrote {path}")
    print(f"\n== stability, {args.runs} separate evaluations each; E_rsd = stdev/mean of E over the runs")
    print(f"{'task':28} {'shape':>14} {'dtype':8} {'kernel ms':>10} {'k rsd':>7} {'E rsd':>7} {'dev rd':>6}")
    for r in results:
        print(f"{r['task'].split('/')[-1]:28} {'(all)':>14} {'':8} {'':>10} {'':>7} "
              f"{(r['E_rsd'] or 0):7.2%}        statuses {','.join(sorted(set(r['statuses'])))}")
        for p in r["per_shape"]:
            mark = "" if p["kernel_ms_median"] < GOAL_MIN_MS or p["E_rsd"] <= GOAL_RSD else "  *"
            print(f"{'':28} {'x'.join(map(str, p['shape'])):>14} {p['dtype']:8} {p['kernel_ms_median']:10.4f} "
                  f"{p['kernel_ms_rsd']:7.2%} {p['E_rsd']:7.2%} {p['device_readings']:>4}/{p['runs']}{mark}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
