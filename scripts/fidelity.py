"""Reward fidelity (cuda): the environment's kernel and library times and E beside an independent measurement.

    python scripts/fidelity.py [--only TOKENS] [--kinds optimized,slow] [--workload study|full] [--out results]
                               [--gap-out DIR] [--variant KEY=VALUE[,KEY=VALUE] ...]

For every selected reference solution (all by default; a slow one whose kernel takes over --cap-ms per
call is evaluated but not re-measured), per timed shape:
  * the environment: the solution through `kernelgym_gap.engine.pipeline.evaluate` (the same path as
    `env.step`, through one warm pool), its per-shape kernel_ms, library_ms and E;
  * the independent measurement: a separate process that imports the same solution file and calls
    `triton.testing.do_bench` (its own warm-up, its own L2 clear, median) on the kernel and on the task's
    torch reference, on the same inputs: the same shape, dtype, timed distribution and seed as the
    environment's timing trial (regenerated with `core.inputs`, the generator the harness uses).
`ratio` = E_env / E_ref in each row. Beside it, `graph k` and `r_graph`: the same kernel and library replayed
from a CUDA graph (`triton.testing.do_bench_cudagraph`: no host launch work timed, no L2 flush), to tell
launch gaps that do_bench times (the environment hides them behind a queued spin) from a real difference. The table is printed with the worst ratios last; the JSON
(results/fidelity_<device>_<date>.json) holds device, date, versions and every row. With --gap-out the
same evaluations are also written as the gap study's outputs (gap_study_cuda.csv/.json/.png) into that
directory, so one device call serves both.

With --variant (repeatable; scripts/throughput.py's syntax and fields: '' for the defaults, 'levers' for the
defaults and every lever alone and together) each solution is evaluated once per variant, with that variant's
EvalConfig and Placement fields (issue 35's timing levers), one after the other on the same warm pool, and
compared with one independent measurement shared by every variant (do_bench does not depend on how the
environment times). The table and the JSON rows then carry a `variant` column, and a summary per variant is
printed last: the median and max |E_env / E_ref - 1| over the shapes compared, so a lever that moves E away from
do_bench shows beside the defaults. A task's first evaluation measures its library in full and fills the library
cache (library_time "cached"); the variants after it use the cached time with its short check, as production does.

Goal (issue 14): every shape whose kernel takes >= 20 us within 10% (|ratio - 1| <= 0.1).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

GOAL_MIN_MS = 0.020
GOAL_RATIO = 0.10

# the one definition of --variant's syntax and fields (throughput.py's): the two scripts' lever runs must mean
# the same thing by the same text
from throughput import apply_variant, expand_variants, parse_variant  # noqa: E402


def timing_cases(task, config) -> list[dict]:
    """The environment's timing trials for `task` under `config` (trial_seed fixed): the same rng draws as
    engine/trials.py makes, correctness trials first."""
    from kernelgym_gap.engine.trials import make_timing_trials, make_trials, trial_rng
    rng = trial_rng(config)
    make_trials(task, "cuda", config, rng)
    return [{"shape": list(t.shape), "dtype": t.dtype, "seed": t.seed, "distribution": t.distribution,
             "split": t.split} for t in make_timing_trials(task, config, rng)]


def independent(spec_path: str, out_path: str) -> int:
    """The separate process: do_bench on the solution and on the reference, per case."""
    import importlib.util

    import torch
    import triton
    from kernelgym_gap.core import inputs
    from kernelgym_gap.core.record import Trial
    from kernelgym_gap.core.registry import find_task
    spec = json.loads(Path(spec_path).read_text())
    task = find_task(spec["task"])
    mod_spec = importlib.util.spec_from_file_location("solution_under_test", spec["file"])
    module = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(module)
    from kernelgym_gap.core.lane import held
    fn = getattr(module, task.entry_point)
    lane_dir = spec.get("lane_dir")
    results = []
    for case in spec["cases"]:
        trial = Trial(index=0, shape=tuple(case["shape"]), dtype=case["dtype"], seed=case["seed"],
                      distribution=case["distribution"], split=case["split"])
        ins = inputs.make_trial_inputs(task, trial, "cuda")
        with torch.no_grad():
            with held(lane_dir, 0, "shared"):
                fn(*ins)        # compile outside the measurement
                torch.cuda.synchronize()
            with held(lane_dir, 0, "exclusive"):
                k = triton.testing.do_bench(lambda: fn(*ins), warmup=25, rep=200, return_mode="median")
                lib = triton.testing.do_bench(lambda: task.reference(*ins), warmup=25, rep=200,
                                              return_mode="median")
                graph_k, graph_lib = _graph_ms(lambda: fn(*ins)), _graph_ms(lambda: task.reference(*ins))
        results.append(dict(case, kernel_ms=k, library_ms=lib, graph_kernel_ms=graph_k, graph_library_ms=graph_lib))
        del ins
        torch.cuda.empty_cache()
    Path(out_path).write_text(json.dumps({"results": results, "triton": triton.__version__,
                                          "torch": torch.__version__}))
    return 0


def _graph_ms(fn) -> float | None:
    """triton.testing.do_bench_cudagraph: the calls replayed from a CUDA graph, so no host launch work is
    timed (do_bench times it whenever the GPU runs out of queued work between its events; the environment
    hides it behind a queued spin). No L2 flush between replays. None when the call cannot be captured (a
    host synchronisation inside it)."""
    import torch
    import triton
    try:
        return triton.testing.do_bench_cudagraph(fn, rep=100, return_mode="median")
    except Exception:  # noqa: BLE001 - a call that cannot be captured: no graph reading
        torch.cuda.synchronize()
        return None


def run_jobs(items: list, jobs: int, make_pool, work) -> None:
    """`work(item, pool)` for every item on `jobs` threads, each with its own pool (`make_pool()`, a context
    manager) taken from a shared queue in order. A worker whose pool cannot start, or whose work raises,
    stops the run: the first error is raised once every worker has stopped."""
    import queue
    import threading
    if not items:
        return
    q: queue.Queue = queue.Queue()
    for item in items:
        q.put(item)
    failed: list[BaseException] = []

    def worker() -> None:
        try:
            with make_pool() as pool:
                while not failed:
                    try:
                        item = q.get_nowait()
                    except queue.Empty:
                        return
                    work(item, pool)
        except BaseException as e:  # noqa: BLE001 - raised in the caller's thread below
            failed.append(e)

    threads = [threading.Thread(target=worker, name=f"fidelity-{k}", daemon=True)
               for k in range(max(1, min(jobs, len(items))))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failed:
        raise failed[0]


def measure_independently(task, sol, cases: list[dict], timeout_s: float,
                          lane_dir: str | None = None) -> list[dict] | str:
    """`lane_dir`: the environment's lanes, which the independent process also takes (exclusive for its
    timings), so that evaluations running beside it (--jobs) never share the GPU with a measurement."""
    from kernelgym_gap.core.lane import resolve
    with tempfile.TemporaryDirectory(prefix="kgg-fidelity-") as d:
        spec, out = Path(d) / "spec.json", Path(d) / "out.json"
        spec.write_text(json.dumps({"task": task.id, "file": str(task.solution_path(sol)), "cases": cases,
                                    "lane_dir": resolve(lane_dir)}))
        try:
            proc = subprocess.run([sys.executable, __file__, "--independent", str(spec), str(out)],
                                  capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return f"independent measurement ran past {timeout_s:.0f} s"
        if proc.returncode != 0 or not out.is_file():
            return "independent measurement failed: " + proc.stderr[-400:]
        return json.loads(out.read_text())["results"]


def compare(row: dict, independent_rows: list[dict]) -> list[dict]:
    """One fidelity row per shape both measured; a row evaluated under a --variant keeps its `variant`."""
    by_case = {(tuple(p["shape"]), p["dtype"]): p for p in row.get("per_shape") or []}
    out = []
    for ind in independent_rows:
        env = by_case.get((tuple(ind["shape"]), ind["dtype"]))
        if env is None or not env.get("kernel_ms"):
            continue
        e_env = env["library_ms"] / env["kernel_ms"]
        e_ref = ind["library_ms"] / ind["kernel_ms"]
        out.append({"task": row["task"], "kernel": row["kernel"], "dsl": row["dsl"], "shape": ind["shape"],
                    "dtype": ind["dtype"], "distribution": ind["distribution"],
                    "env_kernel_ms": env["kernel_ms"], "ref_kernel_ms": ind["kernel_ms"],
                    "env_library_ms": env["library_ms"], "ref_library_ms": ind["library_ms"],
                    "E_env": e_env, "E_ref": e_ref, "ratio": e_env / e_ref,
                    # the environment's library time: its cached hint standing ("cached") or timed afresh
                    # ("measured"); a cached hint within library_tolerance of the check moves E_env by that much
                    # whatever the timing levers do (docs/measurement.md item 13, RMSNorm 8192x4096)
                    "library_source": env.get("library_source"), "library_hint_ms": env.get("library_hint_ms"),
                    "library_check_ms": env.get("library_check_ms"),
                    # the same with CUDA-graph replays (no host launch work timed): where do_bench's kernel
                    # reads slower only because of launch gaps, this ratio is near 1
                    "graph_kernel_ms": ind.get("graph_kernel_ms"), "graph_library_ms": ind.get("graph_library_ms"),
                    "ratio_graph": (e_env / (ind["graph_library_ms"] / ind["graph_kernel_ms"])
                                    if ind.get("graph_kernel_ms") and ind.get("graph_library_ms") else None),
                    "in_goal": ind["kernel_ms"] < GOAL_MIN_MS or abs(e_env / e_ref - 1) <= GOAL_RATIO})
        if "variant" in row:
            out[-1]["variant"] = row["variant"]
    return out


def variant_label(text: str) -> str:
    return text or "defaults"


def variant_summary(rows: list[dict]) -> list[dict]:
    """Per variant, in the order first met: how many shapes were compared with do_bench, the median and max
    |E_env / E_ref - 1| over them, and how many are inside the goal. Rows without a variant count as the
    defaults' ('')."""
    import statistics
    by: dict[str, list[dict]] = {}
    for r in rows:
        by.setdefault(r.get("variant", ""), []).append(r)
    out = []
    for variant, rs in by.items():
        dev = [abs(r["ratio"] - 1) for r in rs]
        out.append({"variant": variant, "compared": len(rs), "median_abs_ratio_minus_1": statistics.median(dev),
                    "max_abs_ratio_minus_1": max(dev), "in_goal": sum(1 for r in rs if r["in_goal"])})
    return out


def summary_table(summary: list[dict]) -> str:
    """One line per variant, its fields last (ALL_NEW's are 170 characters)."""
    head = f"{'compared':>8} {'median |r-1|':>12} {'max |r-1|':>9} {'in goal':>9}  variant"
    lines = [head, "-" * len(head)]
    for s in summary:
        lines.append(f"{s['compared']:8d} {s['median_abs_ratio_minus_1']:12.2%} {s['max_abs_ratio_minus_1']:9.2%} "
                     f"{s['in_goal']:>4d}/{s['compared']:<4d}  {variant_label(s['variant'])}")
    return "\n".join(lines)


def _opt(v, spec: str) -> str:
    width = int(spec.split(".")[0])
    return "-".rjust(width) if v is None else format(v, spec)


def table(rows: list[dict]) -> str:
    """Worst ratios last. Rows evaluated under --variant get a last column, the variant's fields (long, so last)."""
    labelled = any("variant" in r for r in rows)
    head = (f"{'kernel':40} {'shape':>16} {'dtype':8} {'env k ms':>9} {'ref k ms':>9} {'env lib':>9} "
            f"{'ref lib':>9} {'E_env':>7} {'E_ref':>7} {'ratio':>6} {'graph k':>9} {'r_graph':>7}")
    if labelled:
        head += "    variant"
    lines = [head, "-" * len(head)]
    for r in sorted(rows, key=lambda r: abs(r["ratio"] - 1)):
        name = f"{r['task'].removeprefix('kernelgym_gap/')}/{r['kernel']}"[:40]
        goal = '' if r['in_goal'] else '  *'
        lines.append(f"{name:40} {'x'.join(map(str, r['shape'])):>16} {r['dtype']:8} {r['env_kernel_ms']:9.4f} "
                     f"{r['ref_kernel_ms']:9.4f} {r['env_library_ms']:9.4f} {r['ref_library_ms']:9.4f} "
                     f"{r['E_env']:7.3f} {r['E_ref']:7.3f} {r['ratio']:6.3f} {_opt(r.get('graph_kernel_ms'), '9.4f')} "
                     f"{_opt(r.get('ratio_graph'), '7.3f')}"
                     + (f"{goal:3} {variant_label(r.get('variant', ''))}" if labelled else goal))
    return "\n".join(lines)


def earlier_run(path: Path) -> tuple[list[dict], list[str], set[str]]:
    """An earlier run's rows, its skips (less those its deadline made) and the kernels it settled, as
    "Task/solution.py" names (the names `skipped` uses)."""
    from kernelgym_gap.core.registry import default_registry
    data = json.loads(path.read_text())
    names = {}
    for task in default_registry():
        for sol in task.solutions:
            names[(task.id, Path(sol.file).stem, sol.dsl)] = f"{task.name}/{sol.file}"
    rows = data.get("rows", [])
    skipped = [s for s in data.get("skipped", []) if not s.endswith(": deadline")]
    settled = {names[k] for r in rows if (k := (r["task"], r["kernel"], r["dsl"])) in names}
    settled |= {s.split(": ", 1)[0] for s in skipped}
    return rows, skipped, settled


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--independent"]:
        return independent(argv[1], argv[2])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="comma-separated filters: a category, or a substring of Task/solution.py")
    ap.add_argument("--kinds", default="optimized,slow", help="solution kinds to include")
    ap.add_argument("--workload", choices=("study", "full"), default="study")
    ap.add_argument("--cap-ms", type=float, default=50.0,
                    help="no independent measurement of a kernel slower than this per call")
    ap.add_argument("--deadline-s", type=float, default=None, help="start no new kernel after this many seconds")
    ap.add_argument("--resume", nargs="+", default=(), metavar="JSON",
                    help="fidelity JSONs of earlier runs (a run split over device calls): their kernels are not "
                         "evaluated again (but those a --deadline-s left out), and their rows and skips are kept "
                         "in this run's JSON and table")
    ap.add_argument("--jobs", type=int, default=1,
                    help="solutions evaluated at once, each worker with its own warm pool; they share the GPU "
                         "through its lane (timings, the independent do_bench included, one at a time). For "
                         "the slow solutions: do_bench times the host's launch gaps on kernels of tens of us, "
                         "and a host busy compiling for the other workers lengthens them")
    ap.add_argument("--out", default=str(ROOT / "results"))
    ap.add_argument("--gap-out", help="also write the gap study's outputs (csv, json, chart) here (with --variant: "
                                      "the first variant's evaluations)")
    ap.add_argument("--variant", action="append", default=None, metavar="KEY=VALUE[,KEY=VALUE]",
                    help="evaluate each solution once more with these EvalConfig or Placement fields, as "
                         "scripts/throughput.py's --variant takes them ('' for the defaults, 'levers' for the "
                         "defaults and every lever alone and together); repeatable. Every variant is compared with "
                         "the same do_bench measurement, and a summary per variant is printed last")
    ap.add_argument("--compile-for", default="all",
                    help="tasks (comma-separated names) whose torch.compile baseline is measured: all, none, or a "
                         "list (each task's first measurement compiles its reference: seconds per shape)")
    args = ap.parse_args(argv)
    # every variant parsed (a bad field refused) before anything is evaluated
    variants = [(text, parse_variant(text)) for text in expand_variants(args.variant)]
    repeated = sorted({t for t, _ in variants if [v for v, _ in variants].count(t) > 1})
    if repeated:
        raise SystemExit(f"--variant: {', '.join(repr(t) for t in repeated)} given more than once")
    labelled = args.variant is not None     # without --variant the output is as before: no variant column

    import gap_study
    from kernelgym_gap.api.service import EvalService
    from kernelgym_gap.core.config import EvalConfig
    from kernelgym_gap.core.registry import default_registry
    kinds = {k.strip() for k in args.kinds.split(",")}
    chosen = [(t, s) for t, s in gap_study.select(default_registry(), args.only, None) if s.kind in kinds]
    config = EvalConfig(seeds_per_shape=2, trial_seed=20261203)
    rows, fidelity, skipped = [], [], []
    done = set()
    for path in args.resume:
        fidelity_, skipped_, done_ = earlier_run(Path(path))
        fidelity += fidelity_
        skipped += skipped_
        done |= done_
    t_start = time.monotonic()
    todo = [(i, t, s) for i, (t, s) in enumerate(chosen) if f"{t.name}/{s.file}" not in done]
    from kernelgym_gap.core.placement import Placement
    lane_dir = Placement().lane_dir     # the environment's own lanes ("auto"): the independent process's too

    def one(item, pool) -> None:
        i, task, sol = item
        name = f"{task.name}/{sol.file}"
        if args.deadline_s is not None and time.monotonic() - t_start > args.deadline_s:
            skipped.append(f"{name}: deadline")
            return
        study = gap_study.study_task(task, "cuda", args.workload)
        wanted = args.compile_for == "all" or task.name in args.compile_for.split(",")
        cfg = config if wanted else config.replace(compile_baseline="cached")
        evaluated = []
        for text, overrides in variants:
            # the variant's timing fields on cfg, its held_device_bytes / held_output_bytes on the placement the
            # evaluation runs under (lane_dir "auto", as the independent process's)
            vcfg, where = apply_variant(cfg, overrides, Placement(lane_dir=lane_dir))
            row = gap_study.evaluate_one(study, sol, "cuda", vcfg, placement=where, **pool.warm_parts(0))
            if labelled:
                row["variant"] = text
                print(f"[{i + 1}/{len(chosen)}] {name} [{variant_label(text)}]: {row['status']} "
                      f"E={gap_study.fmt(row['E'])} {row['seconds']:.1f} s", file=sys.stderr, flush=True)
            rows.append(row)
            evaluated.append(row)
        ok = [r for r in evaluated if r["status"] == "ok"]
        slowest = max((p["kernel_ms"] or 0 for r in ok for p in r["per_shape"]), default=0)
        note = ""
        if ok and slowest <= args.cap_ms:
            # once per kernel, whatever the number of variants: do_bench does not depend on the environment's
            # timing config, and it is most of a solution's time (its own process, its own compile)
            ind = measure_independently(study, sol, timing_cases(study, config), timeout_s=300, lane_dir=lane_dir)
            if isinstance(ind, str):
                skipped.append(f"{name}: {ind}")
            else:
                for r in ok:
                    fidelity.extend(compare(r, ind))
        elif ok:
            note = f" (no independent measurement: {slowest:.1f} ms per call > --cap-ms)"
            skipped.append(f"{name}: {slowest:.1f} ms per call, over --cap-ms")
        for r in evaluated:
            if r["status"] != "ok":
                skipped.append(f"{name}: status {r['status']}" + (f" [{variant_label(r['variant'])}]" if labelled
                                                                  else ""))
        if labelled:
            if note:
                print(f"[{i + 1}/{len(chosen)}] {name}:{note}", file=sys.stderr, flush=True)
        else:
            print(f"[{i + 1}/{len(chosen)}] {name}: {row['status']} E={gap_study.fmt(row['E'])} "
                  f"{row['seconds']:.1f} s{note}", file=sys.stderr, flush=True)

    # each worker a one-slot evaluation service on GPU 0 (its warm pool: a warm checker and pre-started
    # children), the environment's own lanes between the workers
    run_jobs(todo, args.jobs, lambda: EvalService("cuda", config, slots=[0], warm=True, lane_dir=lane_dir), one)
    order = {(t.id, Path(s.file).stem, s.dsl): i for i, t, s in todo}
    place = {text: k for k, (text, _) in enumerate(variants)}
    rows.sort(key=lambda r: (order.get((r["task"], r["kernel"], r["dsl"]), -1), place.get(r.get("variant", ""), 0)))
    meta = gap_study.run_meta(rows, "cuda", args.workload, config)
    if labelled:
        meta["variants"] = [text for text, _ in variants]
    device = (meta.get("device") or {}).get("name", "cuda").split()[-1].lower()
    date = _dt.date.today().isoformat()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"fidelity_{device}_{date}.json"
    report = {"meta": meta, "goal": {"min_kernel_ms": GOAL_MIN_MS, "max_abs_ratio_minus_1": GOAL_RATIO},
              "rows": fidelity, "skipped": skipped}
    if labelled:
        report["variant_summary"] = variant_summary(fidelity)
    path.write_text(json.dumps(report, indent=1, default=str) + "\n")
    if args.gap_out:
        # the gap study holds one evaluation per kernel: the first variant's
        first = variants[0][0]
        gap_rows = [r for r in rows if r.get("variant", first) == first]
        for note in gap_study.finalize(gap_rows, meta, "cuda", Path(args.gap_out)):
            print(note)
    timed = [r for r in fidelity if r["ref_kernel_ms"] >= GOAL_MIN_MS]
    inside = [r for r in timed if abs(r["ratio"] - 1) <= GOAL_RATIO]
    print(f"\nwrote {path}; skipped: {len(skipped)}")
    for s in skipped:
        print("  " + s)
    v = meta.get("versions") or {}
    print(f"\n== fidelity, {meta.get('device', {}).get('name', '?')}, {meta['date']}, torch {v.get('torch')}, "
          f"triton {v.get('triton')}; ratio = E_env / E_ref (do_bench in a separate process); * outside the goal")
    print(table(fidelity))
    worst = sorted(fidelity, key=lambda r: abs(r["ratio"] - 1), reverse=True)[:5]
    print(f"\nshapes >= {GOAL_MIN_MS * 1e3:.0f} us within {GOAL_RATIO:.0%}: {len(inside)}/{len(timed)}; worst ratios: "
          + ", ".join(f"{r['task'].split('/')[-1]}/{r['kernel']} {'x'.join(map(str, r['shape']))} "
                      f"{r['dtype']} {r['ratio']:.3f}" for r in worst))
    if labelled:
        print("\n== E_env against do_bench, per variant (|E_env / E_ref - 1| over the shapes compared)")
        print(summary_table(report["variant_summary"]))
    return 0


if __name__ == "__main__":
    import time as _time
    _started = _time.time()
    _rc = main()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from results_index import record_run
    record_run("scripts/fidelity.py", ROOT / "results", _started)
    sys.exit(_rc)
