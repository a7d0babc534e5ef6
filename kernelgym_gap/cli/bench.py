"""`kernelgym-gap bench`: evaluate an agent checkpoint over the corpus, and compare runs.

    kernelgym-gap bench --agent replay --tasks all --backend cuda --samples 1 --steps 1 --name replay-h200
    kernelgym-gap bench --agent chat --base-url http://127.0.0.1:8000/v1 --model my-ckpt --tasks normalization \\
        --samples 4 --steps 4 --temperature 0.7 --name ckpt-1200
    kernelgym-gap bench report ckpt-1200 [--json]
    kernelgym-gap bench compare ckpt-1000 ckpt-1200 [--json]
    kernelgym-gap bench list

Results go to the SQLite store (--db, else $KERNELGYM_GAP_DB, else the default path) under the run's label;
the same command run again resumes the run (docs/benchmarking.md). Exit codes: 0 the run finished (failed
kernels are results), 2 usage, 3 some episodes ended in an error (the endpoint or the harness; they are in
the report and a rerun retries them), 130 interrupted (a rerun resumes).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kernelgym_gap.cli import options
from kernelgym_gap.core.errors import KernelGymError

DEFAULT_OUT = "results/bench"


def _store_args(p) -> None:
    p.add_argument("--db", help="results database (default $KERNELGYM_GAP_DB, else "
                                "~/.local/share/kernelgym_gap/results.sqlite3)")
    p.add_argument("--json", action="store_true", help=options.JSON_HELP)


def add_commands(subparsers) -> None:
    s = subparsers.add_parser(
        "bench", help="evaluate an agent over the corpus (K samples x S steps per task); compare runs",
        description="Run an agent (agents/NAME.py: replay, search, chat, ...) on every selected task, K "
                    "independent episodes of at most S steps each, store every step under the run's label, and "
                    "report correctness, fast_p, pass@k, fast_1@k, geometric-mean E and U, the diagnosis mix "
                    "and the failures. The same command resumes an interrupted run. Subcommands: report, "
                    "compare, list.")
    s.add_argument("--agent", help="agent name: a file agents/NAME.py (replay, search, chat); required for a run")
    s.add_argument("--agent-arg", action="append", default=[], metavar="KEY=VALUE",
                   help="extra keyword argument for the agent's make_agent (JSON values are parsed)")
    s.add_argument("--tasks", default="all", help="all, a category, a level (level2), task names, or a comma list")
    options.add_dsl(s)
    options.add_backend(s)
    s.add_argument("--samples", type=int, default=1, help="independent episodes per task (K)")
    s.add_argument("--steps", type=int, default=4, help="step budget of each episode (S)")
    s.add_argument("--seed", type=int, help="seeds the trials and each sample's agent (sample k gets seed + k; "
                                            "default: fresh trial seeds, agent seeds 0..K-1)")
    s.add_argument("--reward-mode", choices=["full", "correctness"], help=options.REWARD_MODE_HELP)
    options.add_compile_baseline(s)
    stop = s.add_mutually_exclusive_group()
    stop.add_argument("--keep-going", dest="stop_when_correct", action="store_false", default=None,
                      help="use the whole budget even after a correct kernel (the default where speed is scored)")
    stop.add_argument("--stop-when-correct", dest="stop_when_correct", action="store_true",
                      help="end an episode at its first correct kernel (the default on cpu / correctness mode)")
    s.add_argument("--workers", type=int, help="evaluations at once (default: cuda --per-gpu per visible GPU; cpu "
                                                "the CPU count)")
    s.add_argument("--per-gpu", type=int, default=4, help="cuda: evaluations at once per GPU, their timings one at a "
                                                          "time through the GPU's lane (default 4; 1: one per GPU)")
    s.add_argument("--parallel", type=int, help="episodes at once (default: twice the evaluation slots); bounds "
                                                 "the requests a chat endpoint sees at once")
    s.add_argument("--warm", action=argparse.BooleanOptionalAction, default=None,
                   help="a warm pool per evaluation slot (a kept trusted checker and pre-started children; default: "
                        "warm on cuda, cold on cpu)")
    s.add_argument("--name", help="the run's label (default AGENT[-MODEL]-DSL-BACKEND); the same label resumes")
    s.add_argument("--k", help="comma list of k for pass@k and fast_1@k (default 1, 5, 10 up to K, and K)")
    s.add_argument("--out", help=f"directory for report.json and the plots (default {DEFAULT_OUT}/LABEL)")
    s.add_argument("--format", choices=["svg", "png"], default="svg", help="plot file format")
    c = s.add_argument_group("chat agent (any OpenAI-compatible endpoint)")
    c.add_argument("--base-url", help="endpoint URL up to /v1 (default $OPENAI_BASE_URL)")
    c.add_argument("--model", help="model name sent to the endpoint (default $OPENAI_MODEL)")
    c.add_argument("--api-key-env", help="environment variable holding the API key (default OPENAI_API_KEY; "
                                         "unset: no key sent)")
    c.add_argument("--temperature", type=float, help="sampling temperature (default 0: greedy; use > 0 for pass@k)")
    c.add_argument("--max-tokens", type=int, help="completion token limit (default: none sent)")
    c.add_argument("--request-timeout", type=float, help="seconds per HTTP request (default 120)")
    c.add_argument("--max-retries", type=int, help="retries on 408/429/5xx/timeouts, honouring Retry-After "
                                                   "(default 4)")
    _store_args(s)
    options.add_tasks_dir(s)
    s.set_defaults(func=cmd_bench)

    sub = s.add_subparsers(dest="bench_command", title="subcommands", metavar="{report,compare,list}")
    r = sub.add_parser("report", help="print a stored run's report (and write its plots)")
    r.add_argument("label", help="the run's label")
    r.add_argument("--k", help="comma list of k for pass@k and fast_1@k (default 1, 5, 10 up to K, and K)")
    r.add_argument("--out", help="also write report.json and the plots into this directory")
    r.add_argument("--format", choices=["svg", "png"], default="svg", help="plot file format")
    _store_args(r)
    r.set_defaults(func=cmd_report)
    c = sub.add_parser("compare", help="two or more stored runs side by side, per task, with what changed")
    c.add_argument("labels", nargs="+", metavar="LABEL", help="run labels; changes are against the first")
    c.add_argument("--plot", metavar="FILE", help="also write the runs' fast_p curves overlaid (.svg or .png)")
    _store_args(c)
    c.set_defaults(func=cmd_compare)
    ls = sub.add_parser("list", help="the stored runs")
    _store_args(ls)
    ls.set_defaults(func=cmd_list)


def _ks(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        ks = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise KernelGymError(f"--k {text!r}: expected a comma list of integers") from None
    if not ks or ks[0] < 1:
        raise KernelGymError("--k: every k must be at least 1")
    return ks


def _store(args):
    from kernelgym_gap.store.db import Store
    from kernelgym_gap.store.schema import resolve_db_path
    return Store(resolve_db_path(args.db))


def _write_outputs(report: dict, out: Path, fmt: str) -> dict:
    from kernelgym_gap.bench.plots import write_run_plots
    out.mkdir(parents=True, exist_ok=True)
    plots = write_run_plots(report, out, fmt)
    report["plots"] = plots
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    return plots


def _print_report(report: dict, args, out: Path | None) -> None:
    from kernelgym_gap.bench.report import format_report
    if out is not None:
        _write_outputs(report, out, args.format)
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(format_report(report))
    if out is not None:
        plots = report["plots"]
        print(f"\nreport: {out / 'report.json'}" + ("; plots: " + ", ".join(v for k, v in plots.items() if k != "skipped")
                                                  if "skipped" not in plots else f"; no plots: {plots['skipped']}"))


def cmd_bench(args) -> int:
    if args.bench_command:              # argparse sends subcommands to their own func; this is a safeguard
        return args.func(args)
    from kernelgym_gap.api.agent import load_agent
    from kernelgym_gap.bench.report import build_report
    from kernelgym_gap.bench.runner import BenchSpec, check_label, default_label, run_bench, select_tasks
    from kernelgym_gap.cli.progress import Progress
    from kernelgym_gap.core.backend import resolve_backend
    if not args.agent:
        raise KernelGymError("bench needs --agent NAME (or a subcommand: report, compare, list)")
    registry = options.task_registry(args)
    task_ids = select_tasks(registry, args.tasks)
    kw = options.agent_kwargs(args, with_seed=False)   # each sample gets its own seed below
    try:
        probe = load_agent(args.agent, **({"registry": registry} if args.agent in ("replay", "search") else {}), **kw)
    except (TypeError, ValueError) as e:
        raise KernelGymError(f"agent {args.agent!r} cannot be made: {e}") from None
    skipped = []
    if args.agent == "replay":
        skipped = [t for t in task_ids if not probe.solutions(t, args.dsl)]
        task_ids = [t for t in task_ids if t not in skipped]
        if not task_ids:
            why = "; ".join(options.no_solution_reason(registry.get(t), args.dsl) for t in skipped[:3])
            raise KernelGymError(f"no selected task has a {args.dsl} reference solution to replay: {why}")
    backend = resolve_backend(args.backend)
    label = check_label(args.name or default_label(args.agent, args.dsl, backend, getattr(probe, "model", None)))
    spec = BenchSpec(label=label, agent=args.agent, task_ids=task_ids, agent_kwargs=kw, dsl=args.dsl,
                     backend=backend, samples=args.samples, steps=args.steps, seed=args.seed,
                     stop_when_correct=args.stop_when_correct, workers=args.workers, parallel=args.parallel,
                     warm=args.warm, per_gpu=args.per_gpu)
    store = _store(args)
    try:
        if not args.json:
            print(f"bench {label}: {len(task_ids)} task(s) x {args.samples} sample(s), at most {args.steps} step(s) "
                  f"each, backend {backend}; stored in {store.path} (the same command resumes)", file=sys.stderr)
            for t in skipped:
                print(f"skipped: {options.no_solution_reason(registry.get(t), args.dsl)}", file=sys.stderr)
        n_todo = len(task_ids) * args.samples - sum(
            1 for e in store.bench_episodes(label) if e["state"] == "done" and e["task_id"] in task_ids
            and e["sample"] < args.samples)
        try:
            with Progress(max(n_todo, 0), unit="episode", quiet=args.json) as bar:
                summary = run_bench(spec, store, config=options.eval_config(args), registry=registry, progress=bar)
        except KeyboardInterrupt:
            print(f"\nkernelgym-gap: interrupted; the finished steps are stored: run the same command to resume "
                  f"{label}", file=sys.stderr)
            return 130
        report = build_report(store, label, _ks(args.k))
        report["this_call"] = summary
        out = Path(args.out) if args.out else Path(DEFAULT_OUT) / label
        _print_report(report, args, out)
        if not args.json:
            print(f"this call: {summary['ran']} episode(s) run, {summary['already_done']} already done, "
                  f"{summary['evaluations']} evaluation(s), {summary['reused_steps']} stored step(s) reused")
    finally:
        store.close()
    if summary["errors"]:
        print(f"kernelgym-gap: {len(summary['errors'])} episode(s) ended in an error (first: "
              f"{summary['errors'][0]['error'][:300]}); run the same command to retry them", file=sys.stderr)
        return 3
    return 0


def cmd_report(args) -> int:
    from kernelgym_gap.bench.report import RunNotFound, build_report
    with _store(args) as store:
        try:
            report = build_report(store, args.label, _ks(args.k))
        except RunNotFound as e:
            raise KernelGymError(str(e)) from None
    _print_report(report, args, Path(args.out) if args.out else None)
    return 0


def cmd_compare(args) -> int:
    from kernelgym_gap.bench.compare import compare, format_compare
    from kernelgym_gap.bench.report import RunNotFound, build_report
    if len(args.labels) < 2:
        raise KernelGymError("compare needs at least two run labels")
    with _store(args) as store:
        try:
            reports = [build_report(store, lab) for lab in args.labels]
        except RunNotFound as e:
            raise KernelGymError(str(e)) from None
    result = compare(reports)
    if args.plot:
        from kernelgym_gap.bench.plots import available, fast_p_curve
        unmeasured = [r["label"] for r in reports if not r["speed_measured"]]
        if unmeasured:      # as `bench report` says it: a fast_p curve flat at 0 would read as a result
            result["plot_skipped"] = (f"no plot: {', '.join(unmeasured)} ran on a backend that measures no "
                                      "time (no E, no fast_p curve)")
            print(result["plot_skipped"], file=sys.stderr)
        else:
            why = available()
            if why:
                raise KernelGymError(f"--plot: {why}")
            result["plot"] = str(fast_p_curve(reports, args.plot))
    print(json.dumps(result, indent=2) if args.json else format_compare(result))
    return 0


def cmd_list(args) -> int:
    with _store(args) as store:
        runs = store.bench_runs()
    if args.json:
        print(json.dumps(runs, indent=2))
        return 0
    if not runs:
        print("no benchmark runs stored")
        return 0
    from kernelgym_gap.bench.report import text_table
    rows = [[r["label"], r["agent"], r["dsl"], r["backend"], str(len(r["config"].get("tasks", []))),
             str(r["config"].get("samples")), str(r["config"].get("steps")), str(r["done"]), str(r["errors"]),
             r["updated_at"]] for r in runs]
    print("\n".join(text_table(["label", "agent", "dsl", "backend", "tasks", "K", "S", "done", "errors", "updated"],
                               rows)))
    return 0
