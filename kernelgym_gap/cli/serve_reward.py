"""`kernelgym-gap serve-reward`: the flags of the batch reward server (integrations/reward_server.py says what
it serves and how). The command lives with the other commands, so that integrations/ imports nothing of cli/."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from kernelgym_gap.integrations.reward_client import TOKEN_ENV


def add_commands(sub) -> None:
    s = sub.add_parser("serve-reward", help="a batch reward endpoint for RL trainers on other machines")
    s.add_argument("--backend", default="auto", choices=["cpu", "cuda", "auto"],
                   help="where the submissions are evaluated (cpu: correctness only; cuda: E, U, the full reward)")
    s.add_argument("--host", default="127.0.0.1", help="the address to listen on (default: loopback only)")
    s.add_argument("--port", type=int, default=8100, help="the port to listen on")
    s.add_argument("--token", help=f"write token (default: ${TOKEN_ENV}, else a random one, printed; a chosen "
                                   "one is never printed, only its fingerprint)")
    s.add_argument("--max-pending", type=int, default=256, help="items queued or running at most (429 past it)")
    s.add_argument("--max-items", type=int, help="items per request at most (default and at most: --max-pending)")
    s.add_argument("--workers", type=int, help="evaluations at once (cpu: default the core count; cuda: 4 per GPU)")
    s.add_argument("--warm", action="store_true", help="keep a warm pool (checker, pre-started children) per slot")
    s.add_argument("--db", help="also look results up in, and keep them in, this results database (request ids "
                                "are kept there too)")
    s.add_argument("--requests-db", help="where request ids and answers are kept without --db (default: "
                                         "reward-requests.sqlite3 beside the default results database)")
    s.add_argument("--reward-mode", choices=["full", "correctness"],
                   help="full: correctness then speed; correctness: 1 for a correct kernel (default: full)")
    s.add_argument("--seed", type=int, help="seed the generator of the trial seeds (default: fresh random seeds)")
    s.add_argument("--gpu", type=int, action="append", metavar="N",
                   help="cuda: lay the slots out on this GPU only; repeat it for several (default: every visible "
                        "GPU, 4 slots each)")
    s.add_argument("--tasks-dir", action="append", metavar="DIR",
                   help="score the tasks of this directory (e.g. the output of `import kernelbench`) instead of "
                        "tasks/; repeat it for several, `builtin` naming tasks/")
    s.add_argument("--timed-shapes", type=int, help="cuda: time this many of each task's shapes (evenly spread, "
                                                    "held-out ones included from 2; default: all of them)")
    s.set_defaults(func=cmd_serve_reward)


def requests_db_path(args) -> Path:
    from kernelgym_gap.store.schema import default_db_path
    if args.db:
        return Path(args.db).expanduser()
    if args.requests_db:
        return Path(args.requests_db).expanduser()
    return default_db_path().parent / "reward-requests.sqlite3"


def cmd_serve_reward(args) -> int:
    from kernelgym_gap.cli.options import eval_config
    from kernelgym_gap.core.registry import task_source
    from kernelgym_gap.integrations.reward_app import create_app
    from kernelgym_gap.integrations.scorer import Scorer
    from kernelgym_gap.serving.auth import announce, new_token
    from kernelgym_gap.serving.protocol import serve
    max_items = args.max_pending if args.max_items is None else args.max_items
    if not 1 <= max_items <= args.max_pending:
        print(f"error: --max-items {max_items} must be between 1 and --max-pending {args.max_pending} (a larger "
              "batch could never be admitted)", file=sys.stderr)
        return 2
    token = args.token or os.environ.get(TOKEN_ENV) or ""
    generated = not token
    token = token or new_token()
    scorer = Scorer(args.backend, config=eval_config(args), workers=args.workers, warm=args.warm, store=args.db,
                    registry=task_source(getattr(args, "tasks_dir", None)), gpus=args.gpu)
    app = create_app(scorer, token, max_pending=args.max_pending, max_items=max_items,
                     requests_db=requests_db_path(args))
    print(f"reward server on http://{args.host}:{args.port}/score  backend={scorer.backend}  "
          f"slots={len(app.service.pool.slots)}", file=sys.stderr)
    for line in announce(token, generated, args.host, TOKEN_ENV):
        print(line, file=sys.stderr, flush=True)
    try:
        serve(app, host=args.host, port=args.port)
    finally:
        app.close()
        scorer.close()
    return 0
