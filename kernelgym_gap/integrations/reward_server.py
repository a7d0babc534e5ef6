"""A reward server for trainers on other machines: `kernelgym-gap serve-reward`, and its client.

    kernelgym-gap serve-reward --backend cuda --port 8100 [--token T] [--max-pending 256] [--warm]

POST /score (the write token: `Authorization: Bearer T`, `X-Token: T`, or `?token=T` for clients that cannot
set headers) with a JSON batch:

    {"items": [{"task": "GELU", "dsl": "triton", "source": "..."},          # the kernel's source, or
               {"task": "GELU", "completion": "...a model reply..."}],      # a reply: its fenced code block
     "failure_reward": 0.0}                                                 # optional

answers {"rewards": [...], "records": [EvalRecord as JSON, ...], "terms": [scorer.record_terms, ...]} in
item order. All items of all requests in flight go through one Scorer (the batch path, the result cache,
`--warm`). At most `--max-pending` items are queued or running at once: a batch that would go past it is
refused whole with 429 (Retry-After), nothing evaluated. A request without the token gets 401, a wrong
token 403, a malformed batch 400 (with what is wrong); the server keeps serving either way.

POST /openrlhf takes OpenRLHF's remote reward request ({"query": [...], "prompts": [...], "labels": [...]};
`--remote_rm_url http://HOST:PORT/openrlhf?token=T` with `--label_key task`: the label is the task, the
reply is the query less its prompt) and answers {"rewards": [...], "scores": [...], "extra_logs": {...}}.
GET /health (no token) says the backend, capacity and what is pending.

`RewardClient(url, token).score([...])` is the client; `compute_score` is verl's custom reward function
calling a server (url and token from reward_kwargs or $KERNELGYM_GAP_REWARD_URL / $KERNELGYM_GAP_TOKEN).
"""
from __future__ import annotations

import hmac
import json
import os
import secrets
import sys
import threading
from collections.abc import Sequence
from typing import Any

from kernelgym_gap.api.completions import extract_code
from kernelgym_gap.core.task import DSLS
from kernelgym_gap.integrations.scorer import Scorer, record_terms

TOKEN_ENV, URL_ENV = "KERNELGYM_GAP_TOKEN", "KERNELGYM_GAP_REWARD_URL"
MAX_BODY_BYTES = 64 * 1024 * 1024
MAX_SOURCE_CHARS = 256 * 1024


class BadBatch(ValueError):
    """A batch the server refuses with 400."""


def parse_items(data: Any, registry, max_items: int) -> tuple[list[tuple[str, str, str]], float]:
    """(task, source, dsl) per item and the failure reward, or BadBatch saying what is wrong."""
    if not isinstance(data, dict) or not isinstance(data.get("items"), list):
        raise BadBatch('the body must be a JSON object with a list "items"')
    items = data["items"]
    if not items:
        raise BadBatch('"items" is empty')
    if len(items) > max_items:
        raise BadBatch(f"{len(items)} items; this server takes at most {max_items} per request")
    failure = data.get("failure_reward", 0.0)
    if isinstance(failure, bool) or not isinstance(failure, (int, float)):
        raise BadBatch('"failure_reward" must be a number')
    out = []
    for i, it in enumerate(items):
        if not isinstance(it, dict):
            raise BadBatch(f"item {i} is not an object")
        task, dsl = it.get("task"), it.get("dsl") or "triton"
        if not isinstance(task, str) or not task:
            raise BadBatch(f'item {i}: "task" must be a task id or name')
        try:
            spec = registry.get(task)
        except Exception as e:  # noqa: BLE001 - UnknownTaskError and friends
            raise BadBatch(f"item {i}: {e}") from None
        if dsl not in DSLS:
            raise BadBatch(f"item {i}: unknown dsl {dsl!r}; one of {', '.join(DSLS)}")
        source, completion = it.get("source"), it.get("completion")
        if (source is None) == (completion is None):
            raise BadBatch(f'item {i}: give exactly one of "source" and "completion"')
        text = source if source is not None else completion
        if not isinstance(text, str):
            raise BadBatch(f"item {i}: the source or completion must be a string")
        if len(text) > MAX_SOURCE_CHARS:
            raise BadBatch(f"item {i}: {len(text)} characters; the limit is {MAX_SOURCE_CHARS}")
        out.append((spec.id, text if source is not None else extract_code(text, spec.entry_point), dsl))
    return out, float(failure)


def create_app(scorer: Scorer, token: str, *, max_pending: int = 256, max_items: int = 1024):
    """The Starlette app. The scorer evaluates; `max_pending` bounds the items queued or running."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    if not token:
        raise ValueError("the reward server needs a token")
    state = {"pending": 0, "served": 0}
    lock = threading.Lock()

    def refuse(status: int, message: str, **headers) -> JSONResponse:
        return JSONResponse({"error": message}, status_code=status, headers=headers or None)

    def given_token(request: Request) -> str | None:
        auth = request.headers.get("authorization", "")
        if auth.lower().startswith("bearer "):
            return auth[7:].strip() or None
        return request.headers.get("x-token") or request.query_params.get("token") or None

    async def body_json(request: Request):
        raw = await request.body()
        if len(raw) > MAX_BODY_BYTES:
            raise BadBatch(f"the body is over {MAX_BODY_BYTES} bytes")
        try:
            return json.loads(raw)
        except (ValueError, UnicodeDecodeError) as e:
            raise BadBatch(f"the body is not JSON: {e}") from None

    async def run(items: list[tuple[str, str, str]]):
        with lock:
            if state["pending"] + len(items) > max_pending:
                return None
            state["pending"] += len(items)
        try:
            return await scorer.ascore(items)
        finally:
            with lock:
                state["pending"] -= len(items)
                state["served"] += len(items)

    async def guarded(request: Request, handler):
        given = given_token(request)
        if not given:
            return refuse(401, "a token is required (Authorization: Bearer TOKEN, X-Token, or ?token=)")
        if not hmac.compare_digest(given.encode(), token.encode()):
            return refuse(403, "the token is not valid for this server")
        try:
            return await handler(await body_json(request))
        except BadBatch as e:
            return refuse(400, str(e))

    async def score(request: Request):
        async def handle(data):
            items, failure = parse_items(data, scorer.registry, max_items)
            records = await run(items)
            if records is None:
                return refuse(429, f"the queue is full ({max_pending} items pending at most)", **{"Retry-After": "5"})
            terms = [record_terms(r, failure) for r in records]
            return JSONResponse({"rewards": [t["score"] for t in terms], "terms": terms,
                                 "records": [r.to_dict() for r in records]})
        return await guarded(request, handle)

    async def openrlhf(request: Request):
        async def handle(data):
            if not isinstance(data, dict) or not isinstance(data.get("query"), list):
                raise BadBatch('OpenRLHF sends {"query": [...], "prompts": [...], "labels": [...]}')
            queries = data["query"]
            prompts = data.get("prompts") or [None] * len(queries)
            labels = data.get("labels")
            if not isinstance(labels, list) or len(labels) != len(queries) or len(prompts) != len(queries):
                raise BadBatch('"labels" (the task of each query: --label_key) and "prompts" must match "query"')
            items = []
            for q, p, label in zip(queries, prompts, labels):
                reply = q[len(p):] if isinstance(q, str) and isinstance(p, str) and q.startswith(p) else q
                items.append({"task": label, "completion": reply})
            parsed, failure = parse_items({"items": items, "failure_reward": data.get("failure_reward", 0.0)},
                                          scorer.registry, max_items)
            records = await run(parsed)
            if records is None:
                return refuse(429, f"the queue is full ({max_pending} items pending at most)", **{"Retry-After": "5"})
            terms = [record_terms(r, failure) for r in records]
            rewards = [t["score"] for t in terms]
            return JSONResponse({"rewards": rewards, "scores": rewards,
                                 "extra_logs": {"correct": [t["correct"] for t in terms]}})
        return await guarded(request, handle)

    async def health(request: Request):
        return JSONResponse({"ok": True, "backend": scorer.backend, "pending": state["pending"],
                             "max_pending": max_pending, "served": state["served"], "cache": scorer.stats})

    app = Starlette(routes=[Route("/score", score, methods=["POST"]), Route("/openrlhf", openrlhf, methods=["POST"]),
                            Route("/health", health, methods=["GET"])])
    app.state.scorer, app.state.counters = scorer, state
    return app


class RewardClient:
    """The client: `RewardClient("http://host:8100", token).score([{"task": "GELU", "completion": reply}])`
    returns the server's JSON (rewards, terms, records). Retries a 429 after its Retry-After."""

    def __init__(self, url: str | None = None, token: str | None = None, timeout: float = 3600.0,
                 retries_on_full: int = 60):
        self.url = (url or os.environ.get(URL_ENV) or "").rstrip("/")
        if not self.url:
            raise ValueError(f"no reward server url (url= or ${URL_ENV})")
        self.token = token or os.environ.get(TOKEN_ENV)
        self.timeout, self.retries = timeout, retries_on_full

    def score(self, items: Sequence[dict], failure_reward: float = 0.0) -> dict:
        import time

        import httpx
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        body = {"items": list(items), "failure_reward": failure_reward}
        for attempt in range(self.retries + 1):
            r = httpx.post(self.url + "/score", json=body, headers=headers, timeout=self.timeout)
            if r.status_code == 429 and attempt < self.retries:
                time.sleep(float(r.headers.get("retry-after", "5")))
                continue
            if r.status_code != 200:
                raise RuntimeError(f"reward server answered {r.status_code}: {r.text[:500]}")
            return r.json()
        raise AssertionError("unreachable")

    def rewards(self, items: Sequence[dict], failure_reward: float = 0.0) -> list[float]:
        return self.score(items, failure_reward)["rewards"]


def compute_score(data_source: Any, solution_str: str, ground_truth: Any = None, extra_info: dict | None = None,
                  *, url: str | None = None, token: str | None = None, dsl: str | None = None,
                  failure_reward: float = 0.0, **kwargs: Any) -> dict:
    """verl's custom reward function, scored by a reward server (see integrations.verl for the local one).
    The task and DSL are read as there; the server's backend is the server's."""
    info = extra_info if isinstance(extra_info, dict) else {}
    item = {"task": str(info.get("task") or data_source), "dsl": str(info.get("dsl") or dsl or "triton"),
            "completion": solution_str or ""}
    return RewardClient(url, token).score([item], failure_reward)["terms"][0]


# ---- the command ------------------------------------------------------------------------------------

def add_commands(sub) -> None:
    s = sub.add_parser("serve-reward", help="a batch reward endpoint for RL trainers on other machines")
    s.add_argument("--backend", default="auto", choices=["cpu", "cuda", "auto"],
                   help="where the submissions are evaluated (cpu: correctness only; cuda: E, U, the full reward)")
    s.add_argument("--host", default="127.0.0.1", help="the address to listen on")
    s.add_argument("--port", type=int, default=8100, help="the port to listen on")
    s.add_argument("--token", help=f"write token (default: ${TOKEN_ENV}, else a random one, printed)")
    s.add_argument("--max-pending", type=int, default=256, help="items queued or running at most (429 past it)")
    s.add_argument("--max-items", type=int, default=1024, help="items per request at most")
    s.add_argument("--workers", type=int, help="evaluations at once (cpu: default the core count; cuda: one per GPU)")
    s.add_argument("--warm", action="store_true", help="keep a warm pool (checker, pre-started children) per worker")
    s.add_argument("--db", help="also look results up in, and keep them in, this results database")
    s.add_argument("--reward-mode", choices=["full", "correctness"],
                   help="full: correctness then speed; correctness: 1 for a correct kernel (default: full)")
    s.add_argument("--seed", type=int, help="seed the generator of the trial seeds (default: fresh random seeds)")
    s.add_argument("--gpu", type=int, help="GPU index for the cuda backend (default: the first visible GPU)")
    s.add_argument("--timed-shapes", type=int, help="cuda: time this many of each task's shapes (evenly spread, "
                                                    "held-out ones included from 2; default: all of them)")
    s.set_defaults(func=cmd_serve_reward)


def cmd_serve_reward(args) -> int:
    import uvicorn

    from kernelgym_gap.cli.options import eval_config
    token = args.token or os.environ.get(TOKEN_ENV) or ""
    generated = not token
    token = token or secrets.token_urlsafe(18)
    scorer = Scorer(args.backend, config=eval_config(args), workers=args.workers, warm=args.warm, store=args.db)
    app = create_app(scorer, token, max_pending=args.max_pending, max_items=args.max_items)
    print(f"reward server on http://{args.host}:{args.port}/score  backend={scorer.backend}", file=sys.stderr)
    print(f"write token: {token}" + (f"  (generated; set --token or ${TOKEN_ENV})" if generated else ""),
          file=sys.stderr, flush=True)
    try:
        uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    finally:
        scorer.close()
    return 0
