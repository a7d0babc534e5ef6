"""A reward server for trainers on other machines: `kernelgym-gap serve-reward` (its flags: cli/serve_reward.py),
and its clients.

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
           "RewardServerError", "compute_score", "create_app", "parse_batch", "reward_func"]
