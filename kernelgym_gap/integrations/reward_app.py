"""The reward server's ASGI app (`create_app`): routes, admission and the answers. reward_server.py says
what it serves; this module says how a request goes:

1. the token (serving/auth.py: `Authorization: Bearer` only) before a byte of the body is read; the body
   under its limit and deadline (serving/limits.py: a Content-Length over the limit is a 413 before reading);
2. parsing in a worker thread, never on the event loop (serving/jsonbody.py, reward_items.py: code
   extraction is linear, but a 64 MB body still takes a while): a request-level fault is a 400;
3. a request id already answered is answered again from the request log; one in flight is joined (the same
   id never evaluates twice at once); a new one is written down (a locked database: 503 in lock_wait_s);
4. admission: past `max_pending` items queued or running, 429 + Retry-After (a batch can never be larger
   than max_pending: max_items <= max_pending, checked at start);
5. the cache, then the fair slots (reward_slots.py) for the rest; while it runs, the handler watches for the
   client's disconnect: when no one waits for the run any more, its jobs are cancelled;
6. the answer, in item order, with `errors` naming the bad items; written to the request log.
"""
from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import logging
import math
import re
import sqlite3

import anyio
import anyio.to_thread
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from kernelgym_gap.integrations.reward_items import (INVALID, BadBatch, Batch, invalid_terms, parse_batch,
                                                     parse_openrlhf)
from kernelgym_gap.integrations.reward_requests import RequestConflict, RequestLog
from kernelgym_gap.integrations.reward_slots import Cancelled, SlotPool
from kernelgym_gap.integrations.scorer import record_terms
from kernelgym_gap.serving.auth import TokenRefused, check_bearer
from kernelgym_gap.serving.jsonbody import BadJSON, parse
from kernelgym_gap.serving.limits import BodyLimit, BodyTimeout, BodyTooLarge, read_bounded
from kernelgym_gap.store.schema import is_busy
from kernelgym_gap.engine.feedback import public_view

log = logging.getLogger(__name__)
MAX_BODY_BYTES = 64 * 1024 * 1024
CLIENT_ID = re.compile(r"[A-Za-z0-9._:@/-]{1,64}")


class Refused(Exception):
    def __init__(self, status: int, message: str, retry_after: int | None = None):
        super().__init__(message)
        self.status, self.message, self.retry_after = status, message, retry_after


def _finite(value):
    """JSON-safe: a non-finite float (E of a kernel timed at 0) becomes null, as the results store does."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


class _Run:
    """One batch being evaluated, shared by every request that carries its id."""

    def __init__(self, digest: str):
        self.digest, self.jobs, self.waiters, self.task = digest, [], 0, None


class RewardService:
    def __init__(self, pool: SlotPool, token: str, requests: RequestLog, *, max_pending: int, max_items: int,
                 lock_wait_s: float, threads: int = 8):
        self.pool, self.token, self.requests = pool, token, requests
        self.max_pending, self.max_items, self.lock_wait_s = max_pending, max_items, lock_wait_s
        self.retry_after = max(1, math.ceil(lock_wait_s))
        self.limiter = anyio.CapacityLimiter(threads)
        self.pending, self.served = 0, 0
        self.inflight: dict[str, _Run] = {}

    async def thread(self, fn, *args, **kw):
        return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kw), limiter=self.limiter)

    def busy(self) -> Refused:
        return Refused(503, f"the results database is busy (another process holds its lock); try again in "
                            f"{self.retry_after} s", self.retry_after)

    # ---- one request -------------------------------------------------------------------------------------

    async def handle(self, request: Request, kind: str) -> Response:
        try:
            check_bearer(request.headers, self.token, "scoring")      # before a byte of the body is read
            raw = await read_bounded(request, MAX_BODY_BYTES)
            parser = parse_batch if kind == "score" else parse_openrlhf
            batch = await self.thread(self._parse, raw, parser)
            text = await self._answer(request, batch, kind + ":" + hashlib.sha256(raw).hexdigest())
        except TokenRefused as e:
            return _error(e.status, e.message, {"WWW-Authenticate": "Bearer"} if e.status == 401 else None)
        except Refused as e:
            return _error(e.status, e.message, {"Retry-After": str(e.retry_after)} if e.retry_after else None)
        except BodyTooLarge as e:
            return _error(413, str(e), {"Connection": "close"})
        except BodyTimeout as e:
            return _error(408, str(e), {"Connection": "close"})
        if text is None:                       # the client went away: nobody reads this
            return Response(status_code=499)
        return Response(text, media_type="application/json")

    def _parse(self, raw: bytes, parser) -> Batch:
        try:
            return parser(parse(raw), self.pool.registry, self.max_items)
        except (BadJSON, BadBatch) as e:
            raise Refused(400, str(e)) from None

    async def _answer(self, request: Request, batch: Batch, digest: str) -> str | None:
        rid = batch.request_id
        run = self.inflight.get(rid) if rid else None
        if run is not None and run.digest != digest:
            raise Refused(409, f"request id {rid!r} is in use for another batch")
        if run is not None and any(j.cancelled.is_set() for j in run.jobs):
            run = None                         # its clients went away: this one starts it again
        if run is None:
            if rid:
                try:
                    stored = await self.thread(self.requests.begin, rid, digest)
                except RequestConflict as e:
                    raise Refused(409, str(e)) from None
                except sqlite3.OperationalError as e:
                    if is_busy(e):
                        raise self.busy() from None
                    raise
                if stored is not None:
                    return stored              # answered before (this server or the one before a restart)
                run = self.inflight.get(rid)   # another request with this id got in while we waited
                if run is not None and any(j.cancelled.is_set() for j in run.jobs):
                    run = None
        if run is None:
            n = sum(it.error is None for it in batch.items)
            if self.pending + n > self.max_pending:
                raise Refused(429, f"the queue is full ({self.pending} of {self.max_pending} items pending); "
                                   "try again later", 5)
            self.pending += n                  # at once: two admissions never both pass the check
            run = _Run(digest)
            if rid:
                self.inflight[rid] = run
            run.task = asyncio.ensure_future(self._run(run, batch, _client_of(request), n))
            run.task.add_done_callback(lambda t: t.cancelled() or t.exception())
        run.waiters += 1
        try:
            waiter = asyncio.ensure_future(_disconnected(request.receive))
            done, _ = await asyncio.wait({run.task, waiter}, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
        finally:
            run.waiters -= 1
        if run.task in done:
            try:
                return run.task.result()      # Refused (503) and friends propagate
            except Cancelled:
                raise Refused(503, "this batch was cancelled (its first client went away); send it again",
                              1) from None
        if run.waiters == 0:
            self.pool.cancel(run.jobs)
        return None

    async def _run(self, run: _Run, batch: Batch, client: str, n: int) -> str:
        try:
            return await self._evaluate(run, batch, client)
        finally:
            self.pending -= n
            if batch.request_id and self.inflight.get(batch.request_id) is run:
                del self.inflight[batch.request_id]

    async def _evaluate(self, run: _Run, batch: Batch, client: str) -> str:
        valid = [it for it in batch.items if it.error is None]
        try:
            looked = await self.thread(self._lookup, valid)
        except sqlite3.OperationalError as e:
            if is_busy(e):
                raise self.busy() from None
            raise
        records: dict[int, object] = {}
        to_run: dict[object, list[int]] = {}
        for it, (key, rec) in zip(valid, looked):
            if rec is not None:
                records[it.index] = rec
            else:
                to_run.setdefault(key, []).append(it.index)   # duplicates in a batch: evaluated once
        first = {key: next(it for it in valid if it.index == idx[0]) for key, idx in to_run.items()}
        run.jobs = self.pool.submit(client, [(it.task_id, it.source, it.dsl, key) for key, it in first.items()])
        results = await asyncio.gather(*(asyncio.wrap_future(j.future) for j in run.jobs), return_exceptions=True)
        if any(isinstance(r, Cancelled) for r in results):
            raise Cancelled("the client went away")
        failures: dict[int, str] = {}
        for (key, idx), result in zip(to_run.items(), results):
            for i in idx:
                if isinstance(result, BaseException):
                    failures[i] = f"item {i}: the evaluation failed in the harness: {result}"
                else:
                    records[i] = result
        text = await self.thread(self._render, batch, records, failures)
        self.served += len(batch.items)
        if batch.request_id:
            try:
                await self.thread(self.requests.finish, batch.request_id, text)
            except sqlite3.OperationalError as e:     # the answer still goes back; a retry evaluates again
                log.warning("request %s was not written down: %s", batch.request_id, e)
        return text

    def _lookup(self, items) -> list[tuple[object, object]]:
        out = []
        for it in items:
            key = self.pool.key(it.task_id, it.source, it.dsl)
            out.append((key, self.pool.cached(key)))
        return out

    def _render(self, batch: Batch, records: dict, failures: dict) -> str:
        terms, recs, errors = [], [], []
        for it in batch.items:
            reason = it.error or failures.get(it.index)
            if reason is not None:
                t = invalid_terms(reason, batch.failure_reward)
                if it.error is None:
                    t["status"] = "harness_error"
                terms.append(t)
                recs.append(None)
                errors.append({"item": it.index, "status": t["status"], "reason": reason})
            else:
                terms.append(record_terms(records[it.index], batch.failure_reward))
                recs.append(public_view(records[it.index].to_dict()))   # trainer-facing: no held-out shapes
        rewards = [t["score"] for t in terms]
        if batch.kind == "openrlhf":
            body = {"rewards": rewards, "scores": rewards, "extra_logs": {"correct": [t["correct"] for t in terms],
                                                                         "status": [t["status"] for t in terms]},
                    "errors": errors}
        else:
            body = {"rewards": rewards, "terms": terms, "records": recs, "errors": errors}
        return json.dumps(_finite(body))

    def health(self) -> dict:
        return {"ok": True, "backend": self.pool.backend, "pending": self.pending, "max_pending": self.max_pending,
                "queued": self.pool.queued(), "running": self.pool.running, "slots": len(self.pool.slots),
                "slots_ready": self.pool.ready(),
                "max_items": self.max_items, "served": self.served, "requests_in_flight": len(self.inflight)}


async def _disconnected(receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


def _client_of(request: Request) -> str:
    given = request.headers.get("x-client-id", "")
    if CLIENT_ID.fullmatch(given):
        return given
    return request.client.host if request.client else "unknown"


def _error(status: int, message: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": message, "status": status}, status_code=status, headers=headers)


def create_app(scorer, token: str, *, max_pending: int = 256, max_items: int | None = None,
               requests_db=None, lock_wait_s: float = 1.5, body_timeout_s: float = 30.0):
    """The app. `scorer` gives the backend, config, registry, workers, warm and store (integrations.scorer);
    evaluations run in the app's own fair slots. `max_items` (default: max_pending) may not exceed
    max_pending. `requests_db`: where request ids and answers are kept (None: in memory)."""
    if not token:
        raise ValueError("the reward server needs a token")
    max_items = max_pending if max_items is None else max_items
    if not 1 <= max_items <= max_pending:
        raise ValueError(f"max_items ({max_items}) must be between 1 and max_pending ({max_pending}): a larger "
                         "batch could never be admitted")
    pool = SlotPool(scorer, lock_wait_s=lock_wait_s)
    service = RewardService(pool, token, RequestLog(requests_db, lock_wait_s), max_pending=max_pending,
                            max_items=max_items, lock_wait_s=lock_wait_s)

    async def score(request: Request):
        return await service.handle(request, "score")

    async def openrlhf(request: Request):
        return await service.handle(request, "openrlhf")

    async def health(request: Request):
        return JSONResponse(service.health())

    app = Starlette(routes=[Route("/score", score, methods=["POST"]), Route("/openrlhf", openrlhf, methods=["POST"]),
                            Route("/health", health, methods=["GET"])])
    app.state.service, app.state.pool, app.state.scorer = service, pool, scorer
    return RewardApp(app, service, body_timeout_s)


class RewardApp(BodyLimit):
    """The app behind its body limit, with the service (`.service`) and `close()` (ends the slots)."""

    def __init__(self, app, service: RewardService, body_timeout_s: float):
        super().__init__(app, MAX_BODY_BYTES, body_timeout_s)
        self.service, self.state = service, app.state

    def close(self) -> None:
        self.service.pool.close()
        self.service.requests.close()


__all__ = ["INVALID", "MAX_BODY_BYTES", "RewardApp", "RewardService", "create_app"]
