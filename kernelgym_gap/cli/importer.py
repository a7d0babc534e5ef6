"""`kernelgym-gap import kernelbench PATH... --out DIR`: problem files become task folders (docs/importing.md)."""
from __future__ import annotations

import json
import sys


def add_commands(sub) -> None:
    s = sub.add_parser("import", help="import problems from another format as task folders (--tasks-dir DIR)")
    kinds = s.add_subparsers(dest="format", required=True)
    k = kinds.add_parser("kernelbench", help="KernelBench-style problem files (class Model, get_inputs, "
                                             "get_init_inputs): each becomes DIR/<category>/<stem>/")
    k.add_argument("paths", nargs="+", metavar="PATH", help="problem files, or folders of them (searched "
                                                              "recursively)")
    k.add_argument("--out", required=True, help="the task directory to write (load it with --tasks-dir)")
    k.add_argument("--trust", action="store_true",
                   help="the problem files are trusted: their tasks' references (the files' own code) may then "
                        "run in the trusted checker, as this user, outside the sandbox. Without it the analysis "
                        "still runs sandboxed, and evaluating the tasks is refused (docs/importing.md)")
    k.add_argument("--keep-modelnew", action="store_true",
                   help="a problem file that defines its own ModelNew in Triton or TileLang keeps it as the "
                        "task's solution, so `bench --agent replay` replays it")
    k.add_argument("--timeout", type=float, default=300.0, metavar="S",
                   help="seconds one problem's analysis may take; over it, that problem is refused and the "
                        "import goes on (default 300)")
    k.add_argument("--json", action="store_true", help="one JSON object per problem: source, task dir, message")
    k.set_defaults(func=cmd_import_kernelbench)


def cmd_import_kernelbench(args) -> int:
    """Exit 0 when every problem was imported, 1 when some were refused (each refusal printed)."""
    import dataclasses

    from kernelgym_gap.core.config import EvalConfig
    from kernelgym_gap.importers.kernelbench import ImportOutError, iter_import
    if not args.timeout > 0:
        print("kernelgym-gap: --timeout must be a positive number of seconds", file=sys.stderr)
        return 2
    base = EvalConfig()
    config = dataclasses.replace(base, sandbox=dataclasses.replace(base.sandbox, wall_s=float(args.timeout)))
    results = []
    try:
        # each problem's line is printed as soon as it is known (flushed): a long import shows its progress,
        # and a problem that fails cannot take the others' results with it
        for r in iter_import(args.paths, args.out, trust=args.trust, config=config,
                             keep_modelnew=args.keep_modelnew):
            results.append(r)
            if args.json:
                print(json.dumps({"source": str(r.source), "task_dir": str(r.task_dir) if r.task_dir else None,
                                  "name": r.name, "ok": r.ok, "message": r.message}), flush=True)
            else:
                print(f"{'imported' if r.ok else 'REFUSED '} {_printable(str(r.source))}: {_printable(r.message)}",
                      flush=True)
    except ImportOutError as e:
        print(f"kernelgym-gap: {e}", file=sys.stderr)
        return 2
    if not results:
        print("kernelgym-gap: no problem files found", file=sys.stderr)
        return 2
    refused = sum(not r.ok for r in results)
    if not args.json:
        imported = len(results) - refused
        then = (" (the reasons are above)" if not imported
                else f"; evaluate with `kernelgym-gap eval --tasks-dir {args.out} --task NAME FILE`" if args.trust
                else "; imported without --trust, so evaluating them is refused: their references are the "
                     "files' own code, which the trusted checker runs as this user. Read each problem.py, then "
                     "import again with --trust (docs/importing.md)")
        print(f"\n{imported} imported into {args.out}, {refused} refused{then}")
    return 1 if refused else 0


def _printable(text: str) -> str:
    """A file name or message as one line of visible characters (a name can hold escapes or newlines)."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
