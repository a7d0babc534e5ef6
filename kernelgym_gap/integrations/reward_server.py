"""A reward server for trainers on other machines: `kernelgym-gap serve-reward`, and its clients.

    kernelgym-gap serve-reward --backend cuda --port 8100 [--token T] [--max-pending 256] [--warm] [--db D]
                               [--tasks-dir DIR [--tasks-dir builtin ...]]

POST /score (the write token as `Authorization: Bearer T`, the only form taken) with a JSON batch:

    {"items": [{"task": "GELU", "dsl": "triton", "source": "..."},          # the kernel's source, or
               {"task": "GELU", "completion": "...a model reply..."}],      # a reply: its fenced code block
     "failure_reward": 0.0,                                                 # optional, a finite number
     "request_id": "a1b2..."}                                               # optional: retries are idempotent

answers {"rewards": [...], "terms": [...], "records": [...], "errors": [...]} in item order (records as their
public view, engine/feedback.public_view: no held-out shape, seed or reproduce call). A bad item (an
unknown task or dsl, no text, a text too large, not an object) is that item's failure: reward failure_reward,
terms {"status": "invalid_item", "reason": ...}, record null, and an entry in `errors` naming its index; the
other items are evaluated. A bad request is a 400 (not JSON, nested over 64 levels, NaN/Infinity, a lone
surrogate, no list of items, more than --max-items); 401/403 without the right token; 429 + Retry-After past
--max-pending items queued or running (--max-items may not exceed it); 503 + Retry-After when the database
is locked by another process (within 2 s: a lock wait of 1.5 s); 409 for a request id used before for another batch.

How it runs (reward_app.py, reward_slots.py, reward_requests.py; the serving layer it shares with the
leaderboard: kernelgym_gap/serving/): header and body deadlines, connection caps in all and per client, a
body over 64 MB refused from its Content-Length before it is read; parsing and code extraction off the event
loop; evaluation in slot processes fed round robin across clients (X-Client-Id), batches of different
requests at once up to the slot count; a client that disconnects has its queued items dropped and its
running ones ended; request ids and answers kept in SQLite (with --db: in the results database; else
--requests-db or a file beside the default results database), so a retry after a restart is answered from
there or evaluated again, never twice at once.

POST /openrlhf takes OpenRLHF's remote reward request ({"query": [...], "prompts": [...], "labels": [...]},
`--label_key task`) and answers {"rewards", "scores", "extra_logs", "errors"}. OpenRLHF's plain URL mode
sends no token: point `--remote_rm_url` at reward_client.py instead (its `reward_func` sends it).
The tasks an item may name are the server's task source: the built-in tasks, or --tasks-dir (repeatable; a
directory such as `import kernelbench`'s output, "builtin" for tasks/), which the slot processes load too. A
client names a task by id or name, never a directory.
GET /health (no token) says the backend, the slots and what is pending, from memory (never the database).

`RewardClient(url, token).score([...])` is the client; `compute_score` is verl's custom reward function
calling a server (url and token from reward_kwargs or $KERNELGYM_GAP_REWARD_URL / $KERNELGYM_GAP_TOKEN).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from kernelgym_gap.integrations.reward_client import (TOKEN_ENV, URL_ENV, RewardClient, RewardServerError,
                                                      compute_score, reward_func)
from kernelgym_gap.integrations.reward_items import MAX_SOURCE_CHARS, BadBatch, parse_batch

_SERVER_SIDE = ("MAX_BODY_BYTES", "RewardApp", "create_app")


def __getattr__(name: str):
    """The server's names, imported when asked for: a trainer that loads this file for `compute_score` (verl
    loads it by path) needs httpx only, not the web stack (starlette, anyio)."""
    if name in _SERVER_SIDE:
        from kernelgym_gap.integrations import reward_app
        return getattr(reward_app, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["MAX_BODY_BYTES", "MAX_SOURCE_CHARS", "TOKEN_ENV", "URL_ENV", "BadBatch", "RewardApp", "RewardClient",
           "RewardServerError", "add_commands", "compute_score", "create_app", "parse_batch", "reward_func"]


# ---- the command ------------------------------------------------------------------------------------

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
    s.add_argument("--gpu", type=int, help="GPU index for the cuda backend (default: the first visible GPU)")
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
                    registry=task_source(getattr(args, "tasks_dir", None)))
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
