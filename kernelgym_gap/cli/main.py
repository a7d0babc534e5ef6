"""`kernelgym-gap`: the command line maps flags onto the package's typed entry points and nothing more.

Exit codes: 0 when the command ran (an evaluation that failed its checks still ran), 2 for a usage error
(unknown task, dsl or backend; a kernel file that is missing, empty, a directory or unreadable; a submitter
name the leaderboard refuses), 3 when the harness itself could not run.

argparse, kept well (options.Parser: every option's help ends with its default; tests/test_cli.py checks
that every option has help): no new dependency, and the subcommands other modules add through
add_commands(subparsers) stay plain argparse.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys

from kernelgym_gap import __version__
from kernelgym_gap.cli import agents, bench, calibrate, importer, leaderboard, options, serve_reward
from kernelgym_gap.cli.options import add_tasks_dir, eval_config, read_source, task_registry
from kernelgym_gap.core.dsls import NAMES as DSL_NAMES
from kernelgym_gap.core.errors import BackendUnavailableError, HarnessError, KernelGymError
from kernelgym_gap.core.terms import Headline

log = logging.getLogger("kernelgym_gap")

DESCRIPTION = """\
Evaluate GPU kernels written in Triton or TileLang against the PyTorch operator they replace: each
submission runs in a sandboxed child process, a trusted checker judges its outputs on fresh inputs, and the
reward sees speed as well as correctness (E = t_library / t_kernel, U = t_roofline / t_kernel).

On a machine without a GPU the cpu backend checks correctness only (Triton interpreter, TileLang C target):
the reward is 1 for a correct kernel, 0 otherwise; E, U and the verdict need --backend cuda on a GPU.
The same environment is a Gymnasium env (import kernelgym_gap; gym.make("kernelgym_gap/LayerNorm-v1")).
"""

EPILOG = """\
examples:
  kernelgym-gap tasks                                   # what there is to write
  kernelgym-gap eval --task LayerNorm --backend cpu my_kernel.py
  kernelgym-gap run --backend cpu --task LayerNorm      # replay the reference solutions
  kernelgym-gap episode --agent search --task LayerNorm --steps 8

`kernelgym-gap COMMAND --help` documents each command's options. Exit codes: 0 the command ran (a kernel
that failed its checks still ran), 2 usage error, 3 the harness could not run (e.g. no GPU for cuda).
"""

CPU_NOTE = ("cpu backend: correctness only (Triton interpreter, TileLang C target): reward 1.000 = correct, "
            "0.000 = not; E, U and the verdict need --backend cuda on a GPU.")
UNVERIFIED_NOTE = ("unverified: a TileLang kernel that does not lower to the C target was compiled for the GPU "
                   "(sm_90a) but not run here: not scored (neither ok nor failed; left out of bench's rates and pass@k), its "
                   "correctness is checked on cuda. docs/backends.md, \"unverified\".")


def cmd_tasks(args) -> int:
    tasks = list(task_registry(args))
    if args.json:
        from kernelgym_gap.importers.runtime import per_shape
        print(json.dumps([dict(t.contract(), **({"origin": t.origin, "module_entry_point": t.module_entry_point,
                                                  "per_shape": per_shape(t)} if t.origin else {}))
                          for t in tasks], indent=2))
        return 0
    rows = [(t.id, t.category, str(t.level), t.summary()) for t in tasks]
    widths = [max(len(r[i]) for r in rows + [("id", "category", "level", "")]) for i in range(3)]
    print(f"{'id':{widths[0]}s}  {'category':{widths[1]}s}  {'level':{widths[2]}s}  statement")
    for r in rows:
        print(f"{r[0]:{widths[0]}s}  {r[1]:{widths[1]}s}  {r[2]:{widths[2]}s}  {r[3]}")
    print(f"\n{len(rows)} tasks. `tasks --json` gives each task's whole contract (signature, shapes, dtypes, "
          "tolerances, ...); --task takes the id or the name, in any case.")
    return 0


def cmd_eval(args) -> int:
    from kernelgym_gap.core.terminal import for_terminal
    from kernelgym_gap.engine.pipeline import evaluate
    source = read_source(args.file)
    task = task_registry(args).get(args.task)
    record = evaluate(task, source, args.dsl, args.backend, eval_config(args), placement=options.placement(args))
    if args.json:
        out = record.to_dict()
        out["task"] = record.task
        print(json.dumps(out))
    else:
        print(f"{record.task}  dsl={record.dsl}  backend={record.backend}")
        print(f"status: {record.status.value}  correct: {record.correct}  reward: {record.reward:.4f}"
              f"  ({record.reward_mode})")
        if record.message:              # the submission's own text: escaped (core/terminal.py, issue 32 L6)
            print(for_terminal(record.message))
        if record.failure and record.failure.reproduce and record.failure.reproduce not in record.message:
            print("inputs (a held-out case: shown to you, never in the agent's feedback): "
                  + for_terminal(record.failure.reproduce))
        t = Headline.of(record.terms)
        if t.E is not None:
            compiled = f"  E_compile={t.E_compile:.4g}" if t.E_compile is not None else ""
            print(f"E={t.E:.4g}{compiled}  U={t.U:.4g}  performance={t.performance:.4f}")
        elif record.backend == "cpu":
            print(CPU_NOTE)
        if record.diagnosis:
            print(f"diagnosis: {record.diagnosis.get('verdict')}: {for_terminal(record.diagnosis.get('summary', ''))}")
    return 0


def missing_dsls(dsls) -> dict[str, str]:
    """The DSLs among `dsls` whose package is not installed here, with why (a minimal install has no TileLang)."""
    import importlib.util
    why = {"tilelang": "tilelang is not installed (the minimal install leaves it out; "
                       "pip install -e '.[tilelang]' or bash scripts/setup.sh adds it)"}
    return {d: why.get(d, f"{d} is not installed") for d in dsls if importlib.util.find_spec(d) is None}


def suite_progress(bar):
    """run_suite's progress callback drawn on a cli.progress.Progress."""
    def report(finished: int, total: int, label: str) -> None:
        if finished > bar.finished:
            bar.done(label.rsplit(": ", 1)[-1])
        else:
            bar.start(label)
    return report


def cmd_run(args) -> int:
    from kernelgym_gap.api.agent import load_agent
    from kernelgym_gap.api.suite import format_table, run_suite
    from kernelgym_gap.cli.progress import Progress
    from kernelgym_gap.core.backend import resolve_backend
    dsls = DSL_NAMES if args.dsl == "all" else (args.dsl,)
    skipped = missing_dsls(dsls)
    if skipped and args.dsl != "all":
        raise BackendUnavailableError(f"--dsl {args.dsl}: {skipped[args.dsl]}")
    dsls = tuple(d for d in dsls if d not in skipped)
    backend = resolve_backend(args.backend)
    registry = task_registry(args)
    tasks = [registry.get(t) for t in args.task] if args.task else list(registry)
    replay = load_agent("replay", registry=registry)
    total, unplayable = options.replay_plan(tasks, dsls, replay)     # imported tasks ship no solution: say so
    for line in unplayable:
        print(line, file=sys.stderr)
    if total == 0:
        print("[]" if args.json else "no reference solution to replay", file=sys.stdout)
        return 0
    not_run = {d: sum(len(replay.solutions(t.id, d)) for t in tasks) for d in skipped}
    with Progress(total, unit="solution", quiet=args.json) as bar:
        rows = run_suite(backend=backend, dsls=dsls, task_ids=[t.id for t in tasks], config=eval_config(args),
                         registry=registry, progress=suite_progress(bar), workers=args.workers,
                         warm=args.warm)
    if args.json:
        print(json.dumps([{k: v for k, v in r.__dict__.items() if k != "record"} for r in rows], indent=2))
        return 0
    print(format_table(rows))
    bad = [r for r in rows if r.status not in ("ok", "unverified")]
    n_unv = sum(r.status == "unverified" for r in rows)
    print(f"\n{len(rows)} reference solutions evaluated; {len(rows) - len(bad) - n_unv} ok, {n_unv} "
          f"unverified (not scored), {len(bad)} failed")
    for dsl, n in not_run.items():
        print(f"skipped: {n} {dsl} solutions: {skipped[dsl]}")
    if backend == "cpu":
        print(CPU_NOTE)
        if any(r.status == "unverified" for r in rows):
            print(UNVERIFIED_NOTE)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = options.Parser(prog="kernelgym-gap", description=DESCRIPTION, epilog=EPILOG)
    p.add_argument("--version", action="version", version=f"kernelgym-gap {__version__}",
                   help="print the version and exit")
    p.add_argument("-v", "--verbose", action="store_true", help="log at debug level (default: warnings only)")
    sub = p.add_subparsers(dest="command", required=True, title="commands", metavar="COMMAND")

    s = sub.add_parser("tasks", help="list the tasks: id, category, level, what to compute",
                       description="List the registered tasks (tasks/<category>/<name>/task.py).")
    s.add_argument("--json", action="store_true",
                   help="print every task's whole contract as JSON (statement, signature, entry point, shapes "
                        "per backend with flops and min bytes, dtypes, tolerances, distributions, solutions)")
    add_tasks_dir(s)
    s.set_defaults(func=cmd_tasks)

    s = sub.add_parser("eval", help="evaluate one kernel source file on one task and print the verdict",
                       description="Evaluate one kernel source file: gate, sandboxed run, trusted check, score.")
    s.add_argument("--task", required=True,
                   help="task id (kernelgym_gap/LayerNorm-v1) or name (LayerNorm, any case); see `tasks`")
    options.add_dsl(s)
    options.add_backend(s)
    s.add_argument("--reward-mode", choices=["full", "correctness"], help=options.REWARD_MODE_HELP)
    s.add_argument("--seed", type=int, help=options.SEED_HELP)
    s.add_argument("--gpu", type=int, help=options.GPU_HELP)
    s.add_argument("--json", action="store_true",
                   help="print exactly one JSON object (the evaluation record) instead of text")
    s.add_argument("file", help="the kernel source file (Python defining the task's entry point)")
    add_tasks_dir(s)
    s.set_defaults(func=cmd_eval)

    s = sub.add_parser("run", help="the main job: replay every reference solution through the environment",
                       description="Replay every reference solution (tasks/*/*/solutions/) through the "
                                   "environment and print one table row per solution.")
    options.add_backend(s)
    s.add_argument("--dsl", default="all", choices=[*DSL_NAMES, "all"],
                   help="which reference solutions to replay (all: those of every installed DSL)")
    s.add_argument("--task", action="append",
                   help="restrict to this task (id or name; repeat the flag for several; default: every task)")
    s.add_argument("--reward-mode", choices=["full", "correctness"], help=options.REWARD_MODE_HELP)
    s.add_argument("--seed", type=int, help=options.SEED_HELP)
    s.add_argument("--workers", type=int, help="episodes at once (default: cuda one per visible GPU, all of "
                                                "them; cpu one per core)")
    s.add_argument("--warm", action="store_true", help="a warm pool per worker: one trusted checker process "
                                                        "kept alive, and each submission's fresh child started "
                                                        "(imports done) before its step (default: cold starts)")
    s.add_argument("--json", action="store_true", help=options.JSON_HELP)
    add_tasks_dir(s)
    s.set_defaults(func=cmd_run)

    for module in COMMAND_MODULES:
        module.add_commands(sub)
    return p


# Modules that add subcommands: each exposes add_commands(subparsers) and keeps its imports lazy. Imported by
# name, never loaded from a string: a string hides the import from every reader of the graph (it once hid an
# integrations <-> cli loop)
COMMAND_MODULES = (
    calibrate,            # calibrate
    leaderboard,          # submit, leaderboard serve, results
    agents,               # episode --agent NAME
    bench,                # bench (run, report, compare, list)
    importer,             # import kernelbench PATH... --out DIR
    serve_reward,         # serve-reward
)


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        return args.func(args)
    except BrokenPipeError:             # `kernelgym-gap tasks --json | head`: the reader has gone, not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (BackendUnavailableError, HarnessError) as e:
        print(f"kernelgym-gap: {e}", file=sys.stderr)
        return 3
    except (KernelGymError, FileNotFoundError) as e:
        print(f"kernelgym-gap: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
