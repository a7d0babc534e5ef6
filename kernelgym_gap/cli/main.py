"""`kernelgym-gap`: the command line maps flags onto the package's typed entry points and nothing more.

Exit codes: 0 when the command ran (an evaluation that failed its checks still ran), 2 for a usage error
(unknown task, dsl or backend), 3 when the harness itself could not run.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from kernelgym_gap.cli.options import eval_config
from kernelgym_gap.core.errors import BackendUnavailableError, HarnessError, KernelGymError

log = logging.getLogger("kernelgym_gap")


def _progress(done: int, total: int, what: str) -> None:
    print(f"[{done}/{total}] {what}", file=sys.stderr, flush=True)


def cmd_tasks(args) -> int:
    from kernelgym_gap.core.registry import default_registry
    tasks = list(default_registry())
    if args.json:
        print(json.dumps([{"id": t.id, "name": t.name, "version": t.version, "category": t.category,
                           "dsls": list(t.dsls), "entry_point": t.entry_point, "signature": t.signature,
                           "baselines": list(t.baselines),
                           "solutions": [{"file": s.file, "dsl": s.dsl, "kind": s.kind, "defect": s.defect}
                                         for s in t.solutions]} for t in tasks], indent=2))
        return 0
    for t in tasks:
        print(f"{t.id:40s} {t.category:14s} dsls={','.join(t.dsls):16s} {t.signature}")
    return 0


def cmd_eval(args) -> int:
    from kernelgym_gap.engine.pipeline import evaluate
    from kernelgym_gap.core.registry import get_task
    task = get_task(args.task)
    source = Path(args.file).read_bytes()
    record = evaluate(task, source, args.dsl, args.backend, eval_config(args))
    if args.json:
        out = record.to_dict()
        out["task"] = record.task
        print(json.dumps(out))
    else:
        print(f"{record.task}  dsl={record.dsl}  backend={record.backend}")
        print(f"status: {record.status.value}  correct: {record.correct}  reward: {record.reward:.4f}"
              f"  ({record.reward_mode})")
        if record.message:
            print(record.message)
        t = record.terms
        if t.get("E") is not None:
            print(f"E={t['E']:.4g}  U={t['U']:.4g}  performance={t['performance']:.4f}")
        if record.diagnosis:
            print(f"diagnosis: {record.diagnosis.get('verdict')}: {record.diagnosis.get('summary', '')}")
    return 0


def cmd_run(args) -> int:
    from kernelgym_gap.api.suite import format_table, run_suite
    dsls = ("triton", "tilelang") if args.dsl == "all" else (args.dsl,)
    rows = run_suite(backend=args.backend, dsls=dsls, task_ids=args.task or None, config=eval_config(args),
                     progress=_progress, workers=args.workers, warm=args.warm)
    if args.json:
        print(json.dumps([{k: v for k, v in r.__dict__.items() if k != "record"} for r in rows], indent=2))
    else:
        print(format_table(rows))
        bad = [r for r in rows if r.status not in ("ok", "unverified")]
        print(f"\n{len(rows)} reference solutions evaluated; {len(rows) - len(bad)} ok or unverified, "
              f"{len(bad)} failed")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kernelgym-gap", description=__doc__.splitlines()[0])
    p.add_argument("-v", "--verbose", action="store_true", help="log at debug level")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("tasks", help="list the registered tasks")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_tasks)

    s = sub.add_parser("eval", help="evaluate one kernel source file")
    s.add_argument("--task", required=True, help="task id (kernelgym_gap/LayerNorm-v0) or name (LayerNorm)")
    s.add_argument("--dsl", default="triton", choices=["triton", "tilelang"])
    s.add_argument("--backend", default="auto", choices=["cpu", "cuda", "auto"])
    s.add_argument("--reward-mode", choices=["full", "correctness"])
    s.add_argument("--seed", type=int, help="fix the trial seeds (default: fresh random seeds)")
    s.add_argument("--gpu", type=int, help="GPU index for the cuda backend")
    s.add_argument("--json", action="store_true", help="print exactly one JSON object (the record)")
    s.add_argument("file")
    s.set_defaults(func=cmd_eval)

    s = sub.add_parser("run", help="the main job: replay every reference solution through the environment")
    s.add_argument("--backend", default="auto", choices=["cpu", "cuda", "auto"])
    s.add_argument("--dsl", default="all", choices=["triton", "tilelang", "all"])
    s.add_argument("--task", action="append", help="restrict to these tasks (repeatable)")
    s.add_argument("--reward-mode", choices=["full", "correctness"])
    s.add_argument("--seed", type=int)
    s.add_argument("--workers", type=int, help="episodes at once (cuda: at most one per GPU, all GPUs by "
                                                "default; cpu: default 1)")
    s.add_argument("--warm", action="store_true", help="a warm pool per worker: one trusted checker process "
                                                        "kept alive, and each submission's fresh child started "
                                                        "(imports done) before its step")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_run)

    import importlib
    import importlib.util
    for name in _COMMAND_MODULES:
        if importlib.util.find_spec(name) is None:
            continue
        importlib.import_module(name).add_commands(sub)
    return p


# Modules that add subcommands: each exposes add_commands(subparsers) and keeps its imports lazy.
_COMMAND_MODULES = [
    "kernelgym_gap.judge.calibrate",      # calibrate
    "kernelgym_gap.cli.leaderboard",      # submit, leaderboard serve, results
    "kernelgym_gap.cli.agents",     # episode --agent NAME
    "kernelgym_gap.integrations.reward_server",   # serve-reward
]


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        return args.func(args)
    except (BackendUnavailableError, HarnessError) as e:
        print(f"kernelgym-gap: {e}", file=sys.stderr)
        return 3
    except (KernelGymError, FileNotFoundError) as e:
        print(f"kernelgym-gap: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
