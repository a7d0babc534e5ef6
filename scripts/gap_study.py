"""The gap study: every declared reference solution through the real evaluation engine, on one backend.

    python scripts/gap_study.py --backend cuda [--only TOKENS] [--workload study|full] [--out results]
    python scripts/gap_study.py --merge part1.json part2.json --out results     # combine device calls
                                                 # (a later file's row replaces an earlier one of the same kernel)
    python scripts/gap_study.py --backend cpu --only AddReLU/triton_blocked     # correctness half only

Each solution named in a task's `solutions=` is evaluated with `kernelgym_gap.engine.pipeline.evaluate` (gate,
sandboxed child, trusted checker, timing, roofline, reward, diagnosis: the same path as `KernelEnv.step`).
Per kernel the table gives: the KernelBench-style check (the trusted checker's torch.allclose, atol = rtol
= 1e-2, against the torch reference in the kernel's own dtype, on every trial of the workload, the public
shape included: the correctness-only baseline the source paper criticises), E and U (geometric means over
the shapes), the full reward, the correctness-only reward (RewardConfig(mode="correctness") on the same
record) and the screening verdict.

Workloads. `--workload study` (the default on cuda) evaluates each task on its first public and its first
held-out cuda shape, in float16 (and bfloat16 too for GEMM tasks), two seeds each: the whole suite then fits
the device time of a few calls; every number in it is a real measurement of those shapes. `--workload full`
uses the task's whole cuda workload (what an agent is rewarded on). On the cpu backend the task's small cpu
workload is used and E, U and the full reward are absent: no CPU time is passed off as a GPU figure.

Verdicts. The diagnosis compares a slow kernel's E with the best E an *optimized* reference solution of its
DSL reaches on the device (kernelgym_gap/data/best_known.json, package data: a run writes <out>/best_known.json
and --update-best-known copies it in, PACKAGE_BEST_KNOWN). The run itself cannot read a
file it has not written yet, so the verdicts are recomputed at the end with `diagnosis.diagnose` on each
record's own E, U, library U and evidence, and the best-known E from this run: the verdict the environment
gives from now on. The record's verdict at run time is kept in the JSON (`verdict_at_run`).

Outputs under --out: gap_study_<backend>.csv, gap_study_<backend>.json (rows, device, date, versions,
calibration, workloads), gap_study_<backend>.png (E against U, log axes, thresholds drawn; only when
matplotlib is importable), best_known.json (cuda only). The table is printed last.
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime as _dt
import json
import math
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# what the diagnosis reads (judge/measure.py, through importlib.resources): shipped with the package, so that
# an installed one has it too; --update-best-known writes it
PACKAGE_BEST_KNOWN = ROOT / "kernelgym_gap" / "data" / "best_known.json"
sys.path.insert(0, str(ROOT))

CSV_FIELDS = ("task", "kernel", "dsl", "category", "kind", "defect", "status", "correct", "kernelbench_allclose",
              "E", "E_compile", "U", "library_U", "E_upper", "U_upper", "performance", "reward_full",
              "reward_correctness_only", "verdict",
              "verdict_at_run", "cpu_status", "seconds", "summary", "message")


def study_task(task, backend: str, workload: str):
    """The task as this study evaluates it: on cuda with --workload study, one public and one held-out
    shape, float16 (and bfloat16 for GEMM); otherwise the task's own workload for the backend."""
    from kernelgym_gap.core.task import Workload
    if backend != "cuda" or workload == "full":
        return task
    w = task.workload("cuda")
    wanted = ("float16", "bfloat16") if task.category == "gemm" else ("float16",)
    dtypes = tuple(d for d in wanted if d in w.dtypes) or w.dtypes[:1]
    study = Workload(public=w.public[:1], heldout=w.heldout[:1], dtypes=dtypes)
    return dataclasses.replace(task, workloads={**task.workloads, "cuda": study})


def select(registry, only: str | None, dsl: str | None):
    """(task, solution) pairs: a filter that names a category selects that category, any other filter the
    solutions whose 'Task/file.py' contains it (case-insensitive); in the order the filters were given."""
    from kernelgym_gap.core.task import CATEGORIES
    tokens = [t.strip().lower() for t in (only or "").split(",") if t.strip()]
    chosen = []
    for task in registry:
        for sol in task.solutions:
            if dsl and sol.dsl != dsl:
                continue
            name = f"{task.name}/{sol.file}".lower()
            hits = [k for k, t in enumerate(tokens) if (t == task.category if t in CATEGORIES else t in name)]
            if tokens and not hits:
                continue
            rank = min(hits, default=0)
            chosen.append((rank, task, sol))
    # in the order the filters were given (a stable sort keeps the registry's order within one filter)
    return [(task, sol) for _, task, sol in sorted(chosen, key=lambda c: c[0])]


def evaluate_one(task, sol, backend: str, config, checker=None, children=None, placement=None) -> dict:
    """`placement`: where it runs (None: Placement()'s defaults); scripts/fidelity.py's --variant sets its
    held_device_bytes and held_output_bytes."""
    from kernelgym_gap.engine.pipeline import evaluate
    from kernelgym_gap.judge.reward import RewardConfig, reward_for, too_slow_reward
    source = task.solution_path(sol).read_text()
    t0 = time.perf_counter()
    rec = evaluate(task, source, sol.dsl, backend, config, checker=checker, children=children, placement=placement)
    seconds = time.perf_counter() - t0
    terms = rec.terms or {}
    diag = rec.diagnosis or {}
    # too_slow (issue 38): correct on the shapes it finished, killed past a call's deadline on a larger one; a
    # slow solution measured with its bound (E_upper, U_upper), its reward the one the environment gives
    too_slow = rec.status.value == "too_slow"
    on_gpu = backend == "cuda" and (rec.correct is True or too_slow)
    per_shape = [{k: p.get(k) for k in ("shape", "dtype", "split", "bound", "kernel_ms", "kernel_spread",
                                        "kernel_reps", "library_ms", "compile_ms", "floor_ms", "E", "E_compile",
                                        "U", "library_U",
                                        "programs", "launches_per_call",
                                        # where the library's time came from ("cached": the parent's hint stood,
                                        # its check within library_tolerance; "measured"), the hint and the check:
                                        # a cached hint can bias E by up to the tolerance (docs/measurement.md 13)
                                        "library_source", "library_hint_ms", "library_check_ms")}
                 for p in (terms.get("per_shape") or [])]
    return {
        "task": task.id, "kernel": Path(sol.file).stem, "dsl": sol.dsl, "category": task.category,
        "kind": sol.kind, "defect": sol.defect, "cpu_status": sol.cpu_status, "status": rec.status.value,
        "correct": rec.correct, "kernelbench_allclose": terms.get("kernelbench_allclose"),
        "E": terms.get("E"), "U": terms.get("U"), "library_U": terms.get("library_U"),
        "E_compile": terms.get("E_compile"), "E_upper": terms.get("E_upper"), "U_upper": terms.get("U_upper"),
        "bound_s": terms.get("bound_s"), "reached_s": terms.get("reached_s"),
        "performance": terms.get("performance"),
        "reward_full": rec.reward if on_gpu else (0.0 if rec.correct is False else None),
        "reward_correctness_only": (too_slow_reward(RewardConfig(mode="correctness"), False) if too_slow else
                                    reward_for(rec.correct is True, None, RewardConfig(mode="correctness"))),
        "verdict_at_run": diag.get("verdict"), "verdict": diag.get("verdict"),
        "summary": diag.get("summary"), "evidence": diag.get("evidence") or [],
        "message": (rec.message or "")[:600], "seconds": round(seconds, 2), "per_shape": per_shape,
        "flags": terms.get("flags") or [], "calibration": terms.get("calibration"),
        "device": rec.device, "versions": rec.versions, "latency": rec.latency,
        "source_sha256": rec.source_sha256,
        "workload": {"shapes": [list(s) for s in task.workload(backend).all_shapes()],
                     "public": [list(s) for s in task.workload(backend).public],
                     "dtypes": list(task.workload(backend).dtypes)},
    }


# ------------------------------------------------------------------------------------ verdicts, goals

def best_known(rows: list[dict]) -> dict:
    """task id -> dsl -> the best E an optimized reference solution reached (correct rows only)."""
    best: dict = {}
    for r in rows:
        if r["kind"] == "optimized" and r["correct"] is True and r["E"] is not None:
            cur = best.setdefault(r["task"], {}).get(r["dsl"])
            if cur is None or r["E"] > cur:
                best[r["task"]][r["dsl"]] = r["E"]
    return best


def rediagnose(rows: list[dict], best: dict) -> None:
    from kernelgym_gap.judge.diagnosis import diagnose
    for r in rows:
        if r["correct"] is True and r["E"] is not None and r["U"] is not None and r["library_U"] is not None:
            d = diagnose(r["E"], r["U"], r["library_U"], best.get(r["task"], {}).get(r["dsl"]), r["evidence"])
            r["verdict"], r["summary"] = d["verdict"], d["summary"]
            r["best_known_E"] = d["best_known_E"]


def goals(rows: list[dict]) -> list[str]:
    """The issue's goals for the optimized solutions, checked against the measured numbers."""
    lines = []
    for r in rows:
        if r["kind"] != "optimized" or r["correct"] is not True or not r["per_shape"]:
            continue
        shapes = r["per_shape"]
        name = f"{r['task'].removeprefix('kernelgym_gap/')}/{r['kernel']}"
        if all(p["bound"] == "memory" for p in shapes) and r["category"] not in ("gemm", "convolution"):
            u_min = min(p["U"] for p in shapes)
            e_min = min(p["E"] for p in shapes)
            ok = r["U"] >= 0.8 and r["E"] >= 1.0
            lines.append(f"  memory-bound {name:38s} {r['dsl']:8s} U {r['U']:.2f} (min {u_min:.2f}), "
                         f"E {r['E']:.2f} (min {e_min:.2f}): {'met' if ok else 'NOT met'} (U >= 0.8 and E >= 1)")
        elif r["category"] == "gemm" and r["dsl"] == "triton":
            big = [p for p in shapes if min(p["shape"]) >= 4096 and p["dtype"] in ("float16", "bfloat16")]
            if big:
                worst = min(big, key=lambda p: p["E"])
                ok = worst["E"] >= 0.9
                lines.append(f"  Triton GEMM  {name:38s} E on large shapes "
                             + ", ".join(f"{'x'.join(map(str, p['shape']))} {p['dtype']} {p['E']:.2f}" for p in big)
                             + f": {'met' if ok else 'NOT met'} (>= 0.9 of cuBLAS)")
    return lines


# ------------------------------------------------------------------------------------------ outputs

def fmt(x, spec=".3g") -> str:
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, float):
        return format(x, spec)
    return str(x)


def table(rows: list[dict]) -> str:
    header = ("kernel", "DSL", "category", "kind", "status", "KB allclose", "E", "E_compile", "U", "full",
              "corr-only", "verdict")
    body = [(f"{r['task'].removeprefix('kernelgym_gap/')}/{r['kernel']}", r["dsl"], r["category"],
             r["kind"] + (f" ({r['defect']})" if r["defect"] else ""), r["status"], fmt(r["kernelbench_allclose"]),
             fmt(r["E"]) if r.get("E_upper") is None else f"<={fmt(r['E_upper'])}", fmt(r.get("E_compile")),
             fmt(r["U"]) if r.get("U_upper") is None else f"<={fmt(r['U_upper'])}", fmt(r["reward_full"], ".3f"),
             fmt(r["reward_correctness_only"], ".1f"),
             r["verdict"] or "-") for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *body)]
    out = ["  ".join(str(x).ljust(w) for x, w in zip(header, widths)), "  ".join("-" * w for w in widths)]
    out += ["  ".join(str(x).ljust(w) for x, w in zip(row, widths)) for row in body]
    return "\n".join(out)


def chart(rows: list[dict], meta: dict, path: Path) -> str:
    """E against U on log axes, the screening thresholds drawn, each kernel labelled."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not importable here: no chart written (pip install matplotlib, then --merge)"
    from kernelgym_gap.judge.diagnosis import DEFAULT
    pts = [r for r in rows if r["E"] is not None and r["U"] is not None]
    if not pts:
        return "no kernel has E and U (cpu backend?): no chart written"
    colors = {"efficient": "tab:green", "repairable_defect": "tab:red", "structural_residual": "tab:orange"}
    fig, ax = plt.subplots(figsize=(13, 9))
    placed: list[tuple[float, float]] = []
    for r in sorted(pts, key=lambda r: (-r["U"], r["E"])):
        marker = "o" if r["dsl"] == "triton" else "s"
        c = colors.get(r["verdict"], "tab:gray")
        ax.scatter(r["E"], r["U"], marker=marker, s=60, edgecolors=c,
                   facecolors=c if r["kind"] == "optimized" else "none", linewidths=1.6, zorder=3)
        # labels of points close together (in log space) are stacked downwards instead of overprinting
        x, y = math.log10(r["E"]), math.log10(r["U"])
        near = sum(1 for px, py in placed if abs(px - x) < 0.35 and abs(py - y) < 0.08)
        placed.append((x, y))
        ax.annotate(f"{r['task'].removeprefix('kernelgym_gap/').removesuffix('-v0')}/{r['kernel']}",
                    (r["E"], r["U"]), textcoords="offset points", xytext=(6, 3 - 9 * near), fontsize=6.5,
                    arrowprops=dict(arrowstyle="-", lw=0.3, color="gray") if near else None)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(right=max(3.0, 1.5 * max(r["E"] for r in pts)))
    ax.set_ylim(top=max(1.3, 1.3 * max(r["U"] for r in pts)))
    ax.axvline(DEFAULT.e_threshold, color="k", ls="--", lw=1)
    ax.axhline(DEFAULT.u_threshold, color="k", ls="--", lw=1)
    ax.axvline(1.0, color="gray", ls=":", lw=0.8)
    ax.axhline(1.0, color="gray", ls=":", lw=0.8)
    ax.text(DEFAULT.e_threshold, ax.get_ylim()[0] * 1.2, f" E = {DEFAULT.e_threshold}", fontsize=8)
    ax.text(ax.get_xlim()[0] * 1.2, DEFAULT.u_threshold * 1.08, f"U = {DEFAULT.u_threshold}", fontsize=8)
    from matplotlib.lines import Line2D
    handles = [Line2D([], [], ls="", marker="o", color=c, label=v) for v, c in colors.items()]
    handles += [Line2D([], [], ls="", marker="o", color="k", label="circle: Triton"),
                Line2D([], [], ls="", marker="s", color="k", label="square: TileLang"),
                Line2D([], [], ls="", marker="o", color="k", mfc="none", label="hollow: slow variant")]
    ax.legend(handles=handles, loc="lower right", fontsize=8)
    ax.set_xlabel("E = t_library / t_kernel (log)")
    ax.set_ylabel("U = t_floor / t_kernel (log)")
    ax.set_title(f"gap study on {meta.get('device', {}).get('name', '?')}, {meta.get('date', '')}: "
                 f"screening thresholds from DiagnosisConfig (E {DEFAULT.e_threshold}, U {DEFAULT.u_threshold})",
                 fontsize=10)
    ax.grid(True, which="both", alpha=0.25)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return f"chart written: {path}"


def update_best_known(src: Path, dst: Path) -> int:
    """`src`'s entries (device -> task id -> dsl -> E) copied into `dst`: each task's entry replaced whole,
    the tasks `src` does not name kept (an older version's, still read by records of that version). Returns
    how many task entries were copied."""
    new = json.loads(src.read_text())
    try:
        best = json.loads(dst.read_text())
    except FileNotFoundError:
        best = {}
    n = 0
    for device, tasks in new.items():
        best.setdefault(device, {}).update(tasks)
        n += len(tasks)
    dst.write_text(json.dumps(best, indent=2, sort_keys=True) + "\n")
    return n


def finalize(rows: list[dict], meta: dict, backend: str, out_dir: Path) -> list[str]:
    out_dir.mkdir(parents=True, exist_ok=True)
    notes = []
    if backend == "cuda":
        best = best_known(rows)
        rediagnose(rows, best)
        device_name = meta.get("device", {}).get("name") or "?"
        path = out_dir / "best_known.json"
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            data = {}
        data[device_name] = best
        path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        meta["best_known_E"] = best
        notes.append(f"best known E per task and DSL written to {path}")
        notes.append(chart(rows, meta, out_dir / f"gap_study_{backend}.png"))
    (out_dir / f"gap_study_{backend}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1,
                                                                  default=str) + "\n")
    with open(out_dir / f"gap_study_{backend}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in CSV_FIELDS})
    notes.append(f"wrote {out_dir / f'gap_study_{backend}.csv'} and .json ({len(rows)} kernels)")
    return notes


def run_meta(rows: list[dict], backend: str, workload: str, config) -> dict:
    from kernelgym_gap.judge.diagnosis import DEFAULT
    versions: dict = {}
    device: dict = {}
    calibration = None
    for r in rows:
        versions.update(r.get("versions") or {})
        device = device or (r.get("device") or {})
        calibration = calibration or r.get("calibration")
    return {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "backend": backend,
            "workload": workload if backend == "cuda" else "cpu (each task's small cpu workload)", "device": device, "versions": versions, "calibration": calibration,
            "host_python": platform.python_version(), "seeds_per_shape": config.seeds_per_shape,
            "reward": dataclasses.asdict(config.reward), "diagnosis": dataclasses.asdict(DEFAULT),
            "kernelbench_check": "torch.allclose(out.float(), ref.float(), atol=1e-2, rtol=1e-2), ref = the "
                                 "task's torch reference in the input dtype, on the correctness trials of the "
                                 "task's timed distribution, KernelBench's inputs (trusted checker; terms v2)"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", choices=("cpu", "cuda"), default="cuda")
    ap.add_argument("--only", help="comma-separated filters: a category, or a substring of Task/solution.py")
    ap.add_argument("--dsl", choices=("triton", "tilelang"))
    ap.add_argument("--workload", choices=("study", "full"), default="study")
    ap.add_argument("--seeds", type=int, default=2, help="trials per (shape, dtype)")
    ap.add_argument("--out", default=str(ROOT / "results"))
    ap.add_argument("--deadline-s", type=float, default=None,
                    help="start no new evaluation after this many seconds (the rest are listed as skipped)")
    ap.add_argument("--merge", nargs="+", metavar="JSON", help="combine the rows of earlier runs' JSON files")
    ap.add_argument("--update-best-known", nargs=2, metavar=("FROM", "INTO"),
                    help="copy a run's best_known.json entries into another (kernelgym_gap/data/best_known.json, "
                         "the package data the diagnosis reads): per device, each task's entry replaced, the "
                         "others kept")
    args = ap.parse_args(argv)
    out_dir = Path(args.out)
    if args.update_best_known:
        src, dst = (Path(p) for p in args.update_best_known)
        print(f"best known E: {update_best_known(src, dst)} task entries copied into {dst}")
        return 0

    from kernelgym_gap.core.config import EvalConfig
    config = EvalConfig(seeds_per_shape=args.seeds)
    if args.merge:
        by_kernel, metas = {}, []
        for p in args.merge:          # a later file's row replaces an earlier row of the same kernel
            data = json.loads(Path(p).read_text())
            for r in data["rows"]:
                by_kernel.pop((r["task"], r["kernel"]), None)
                by_kernel[(r["task"], r["kernel"])] = r
            metas.append(data["meta"])
        rows, superseded = latest_versions(list(by_kernel.values()))
        backend = metas[0]["backend"]
        # a merged file's own parts are kept: merging again never loses an earlier device call
        parts = [q for m in metas for q in (m.get("parts") or [{k: m.get(k) for k in ("date", "calibration",
                                                                                     "device")}])]
        meta = dict(metas[0], parts=parts)
        meta["date"] = max(m["date"] for m in metas)
        meta["versions"] = {k: v for m in metas for k, v in (m.get("versions") or {}).items()}
        # every merged file's earlier drops are kept, as its parts are
        superseded = sorted({d for m in metas for d in m.get("superseded", [])} | set(superseded))
        if superseded:
            meta["superseded"] = superseded
            print("superseded by a later version of their task: " + ", ".join(superseded), file=sys.stderr)
        notes = finalize(rows, meta, backend, out_dir)
        return report(rows, meta, notes)

    from kernelgym_gap.core.registry import default_registry
    chosen = select(default_registry(), args.only, args.dsl)
    if not chosen:
        print("no solution matches --only/--dsl", file=sys.stderr)
        return 2
    rows: list[dict] = []
    t_start = time.monotonic()
    part = out_dir / f"gap_study_{args.backend}.partial.json"
    out_dir.mkdir(parents=True, exist_ok=True)
    for i, (task, sol) in enumerate(chosen):
        if args.deadline_s is not None and time.monotonic() - t_start > args.deadline_s:
            print(f"[{i + 1}/{len(chosen)}] {task.name}/{sol.file}: skipped (deadline)", file=sys.stderr, flush=True)
            continue
        print(f"[{i + 1}/{len(chosen)}] {task.name}/{sol.file} ({sol.dsl}) ...", file=sys.stderr, flush=True)
        row = evaluate_one(study_task(task, args.backend, args.workload), sol, args.backend, config)
        rows.append(row)
        print(f"    {row['status']} E={fmt(row['E'])} U={fmt(row['U'])} reward={fmt(row['reward_full'], '.3f')} "
              f"{row['seconds']:.1f} s {row['message'][:160]!r}", file=sys.stderr, flush=True)
        part.write_text(json.dumps({"meta": run_meta(rows, args.backend, args.workload, config), "rows": rows},
                                   default=str))
    meta = run_meta(rows, args.backend, args.workload, config)
    notes = finalize(rows, meta, args.backend, out_dir)
    part.unlink(missing_ok=True)
    return report(rows, meta, notes)


def latest_versions(rows: list[dict]) -> tuple[list[dict], list[str]]:
    """Keep each solution's row of the newest version of its task measured: a row of LinearSwiGLU-v1 replaces
    one of LinearSwiGLU-v0 for the same kernel (a new version changes the task's contract, so the old row no
    longer describes the suite). Returns the rows kept and 'TASK-vN/KERNEL (STATUS)' for each dropped."""
    from kernelgym_gap.core import ids
    keyed = []                                  # ((task name, kernel), version, row)
    for r in rows:
        name, version = ids.parse(r["task"])
        keyed.append(((name, r["kernel"]), version or 0, r))
    newest: dict[tuple[str, str], int] = {}
    for key, version, _ in keyed:
        newest[key] = max(version, newest.get(key, version))
    kept = [r for key, version, r in keyed if version == newest[key]]
    dropped = [f"{ids.short(r['task'])}/{r['kernel']} ({r['status']})"
               for key, version, r in keyed if version < newest[key]]
    return kept, dropped


def copy_note(meta: dict) -> str:
    """The calibrated copy bandwidth the U column uses: one figure, or the range over merged device calls
    (each row's U uses its own call's calibration)."""
    cals = [p["calibration"] for p in meta.get("parts") or [] if p.get("calibration")]
    if len(cals) > 1:
        bw = sorted(c["copy_bytes_per_s"] / 1e12 for c in cals)
        return f", copy {bw[0]:.2f}-{bw[-1]:.2f} TB/s over {len(cals)} device calls (each row's U uses its own call's)"
    cal = meta.get("calibration") or {}
    return f", copy {cal['copy_bytes_per_s'] / 1e12:.2f} TB/s ({cal.get('source')})" if cal else ""


def report(rows: list[dict], meta: dict, notes: list[str]) -> int:
    v = meta.get("versions") or {}
    print()
    for n in notes:
        print(n)
    g = goals(rows) if meta["backend"] == "cuda" else []
    if g:
        print("goals for the optimized solutions:")
        print("\n".join(g))
    slow = [r for r in rows if r["kind"] == "slow"]
    if slow and meta["backend"] == "cuda":
        # a too_slow row passed the check on the shapes it finished and is measured by its bound
        passed = [r for r in slow if r["kernelbench_allclose"]]
        # None: no trial of the timed distribution (KernelBench's inputs) was checked, e.g. too slow before one
        unchecked = [r for r in slow if r["kernelbench_allclose"] is None]
        flagged = [r for r in passed if r["verdict"] in ("repairable_defect", "structural_residual")]
        print(f"slow variants: {len(passed)}/{len(slow)} pass the KernelBench-style check on KernelBench's inputs "
              f"(the timed distribution)" + (f", {len(unchecked)} not checked on them" if unchecked else "")
              + f"; {len(flagged)}/{len(passed)} of those are flagged by the screening")
        for r in (r for r in slow if r["status"] == "too_slow"):
            print(f"  too slow to time in full: {r['task'].removeprefix('kernelgym_gap/')}/{r['kernel']}: killed "
                  f"{fmt(r.get('reached_s'))} s into a call (bound {fmt(r.get('bound_s'))} s), E <= "
                  f"{fmt(r.get('E_upper'))}, U <= {fmt(r.get('U_upper'))}, {r['verdict'] or '-'}")
    print(f"\n== gap study, {meta['backend']}, {meta.get('device', {}).get('name', '?')}, {meta['date']}, "
          f"torch {v.get('torch', '?')}, triton {v.get('triton', '?')}, tilelang {v.get('tilelang', '-')}"
          + copy_note(meta)
          + f", workload {meta['workload']}")
    print(table(rows))
    # a slow solution that is too slow to time in full is what the study is about; an optimized one is not
    bad = [r for r in rows if r["status"] not in ("ok", "unverified")
           and not (r["status"] == "too_slow" and r["kind"] == "slow")]
    return 1 if bad else 0


if __name__ == "__main__":
    import time as _time
    _started = _time.time()
    _rc = main()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from results_index import record_run
    record_run("scripts/gap_study.py", ROOT / "results", _started)
    sys.exit(_rc)
