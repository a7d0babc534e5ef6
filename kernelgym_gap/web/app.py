"""The leaderboard server (Starlette + Jinja2). Reads are open; writes (POST /api/submissions and the
submit form) need the server's token. Submissions are queued in the store and evaluated by a separate
worker process (`kernelgym_gap.web.worker`, started by `leaderboard serve`): this process never evaluates
anything, never imports submitted code and starts no child.

Pages: /  (overall ranking, tasks, recent submissions), /tasks/{Name-vN} (ranking and E-vs-U chart),
/submissions (all, paginated), /submissions/{id} (source, per-shape table, diagnosis), /submit (form),
/bench and /bench/compare?labels=a,b (benchmark runs side by side: web/bench.py).
JSON:  /api (index), /api/leaderboard, /api/tasks, /api/tasks/{Name-vN}, /api/tasks/{Name-vN}/screening,
/api/submissions (GET list, POST submit), /api/submissions/{id}, /api/health.
"""
from __future__ import annotations

import functools
import json
import logging
import sqlite3

import anyio
import anyio.to_thread
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from kernelgym_gap.core.task import DSLS
from kernelgym_gap.store.db import Store, is_busy
from kernelgym_gap.web import board
from kernelgym_gap.web.bench import api_bench, api_bench_compare, bench_compare_page, bench_page
from kernelgym_gap.web.api_reads import (api_device_cache, api_health, api_index, api_leaderboard, api_screening,
                                         api_submission, api_submissions, api_task, api_tasks)
from kernelgym_gap.web.chart import screening_svg
from kernelgym_gap.web.context import (HERE, Settings, backend_of, json_response, make_templates, page_args, render,
                                       settings_of, submission_id, task_id_of, task_ids, task_spec)
from kernelgym_gap.web.headers import SecurityHeaders
from kernelgym_gap.web.intake import Rejected, bearer, check_token, read_body, read_form, validate
from kernelgym_gap.serving.limits import BodyLimit, BodyTimeout, BodyTooLarge

log = logging.getLogger(__name__)


# ---- writes ------------------------------------------------------------------------------------------
# Reading the body happens on the event loop (bounded: limits.BodyLimit); validation and the store's write
# run in a worker thread (Settings.write_limiter of them at once), waiting at most lock_wait_s for another
# process's write lock: a locked database answers 503 + Retry-After instead of stalling the server.

async def _in_thread(s: Settings, fn, *args, **kw):
    return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kw), limiter=s.write_limiter)


def _validate_and_enqueue(s: Settings, data, origin: str) -> int:
    clean = validate(s, data)
    if s.store.pending() >= s.max_pending:
        raise Rejected(429, f"{s.max_pending} submissions are already waiting for the worker; try again later")
    return s.store.enqueue(clean.pop("source"), origin=origin, **clean)


async def _enqueue(s: Settings, data, origin: str) -> int:
    """Validates and queues a submission in a worker thread; a database locked past the wait is a 503."""
    try:
        return await _in_thread(s, _validate_and_enqueue, s, data, origin)
    except sqlite3.OperationalError as e:
        if not is_busy(e):
            raise
        raise _busy(s) from None


def _busy(s: Settings) -> Rejected:
    return Rejected(503, f"the results database is busy (another process holds its write lock); "
                         f"try again in {s.retry_after_s} s")


def _refusal_headers(s: Settings, status: int) -> dict | None:
    if status == 401:
        return {"WWW-Authenticate": "Bearer"}
    if status in (429, 503):
        return {"Retry-After": str(s.retry_after_s)}
    return None


async def api_submit(request: Request):
    s = settings_of(request)
    try:
        check_token(s, bearer(request))               # before a byte of the body is read
        ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype != "application/json":
            raise Rejected(415, "send the submission as application/json")
        body = await read_body(request, s.body_limit)
        try:
            data = json.loads(body)
        except (ValueError, UnicodeDecodeError) as e:
            raise Rejected(400, f"malformed JSON: {e}") from None
        except RecursionError:
            raise Rejected(400, "malformed JSON: nested too deeply") from None
        sid = await _enqueue(s, data, "api")
    except Rejected as r:
        return json_response({"error": r.message, "status": r.status}, r.status, headers=_refusal_headers(s, r.status))
    return json_response({"id": sid, "state": "queued", "url": f"/submissions/{sid}", "api": f"/api/submissions/{sid}"},
                 202, headers={"Location": f"/api/submissions/{sid}"})


def _form_text(raw: dict) -> dict:
    """The form's fields to show again: text decoded for display; the token left out."""
    text = {k: raw.get(k, b"").decode("utf-8", "replace") for k in ("task", "name", "dsl")}
    if not raw.get("file"):
        text["source"] = raw.get("source", b"").decode("utf-8", "replace")
    return text


async def form_submit(request: Request):
    s = settings_of(request)
    raw: dict = {}
    try:
        header_token = bearer(request)
        if header_token is not None:
            check_token(s, header_token)
        await read_form(request, s, s.body_limit, token_checked=header_token is not None, fields=raw)
        source = raw.get("file") or raw.get("source", b"")     # the bytes exactly as sent (the cache key)
        text = _form_text(raw)
        data = {"task": text["task"], "name": text["name"], "dsl": text["dsl"] or "triton", "source": source}
        sid = await _enqueue(s, data, "form")
    except Rejected as r:                  # the form again, as far as it arrived (never the token)
        response = await _in_thread(s, render, request, "submit.html", r.status, error=r.message, form=_form_text(raw),
                                    tasks=task_ids(s), dsls=DSLS)
        response.headers.update(_refusal_headers(s, r.status) or {})
        return response
    return RedirectResponse(f"/submissions/{sid}", status_code=303)


# ---- pages -------------------------------------------------------------------------------------------

def index(request: Request):
    s = settings_of(request)
    backend = backend_of(request)
    page, per_page = page_args(request)
    ranking = board.overall_ranking(s.store, backend, task_ids(s), page, per_page)
    tasks = board.tasks_summary(s.store, backend, task_ids(s))
    for t in tasks:
        spec = task_spec(s, t["task_id"])
        t["category"] = spec.category if spec is not None else ""
    return render(request, "index.html", backend=backend, ranking=ranking, tasks=tasks,
                   recent=board.submissions_list(s.store, 1, 8).items)


def task_page(request: Request):
    s = settings_of(request)
    task_id = task_id_of(s, request.path_params["name"])
    spec = task_spec(s, task_id)
    backend = backend_of(request)
    page, per_page = page_args(request)
    ranking = board.task_ranking(s.store, task_id, backend, page, per_page)
    if spec is None and ranking.total == 0 and not board.has_submissions(s.store, task_id):
        raise HTTPException(404, f"no task {task_id!r}")
    points = board.screening_points(s.store, task_id, backend)
    chart = screening_svg(points, title=f"{task_id}: E versus U")
    return render(request, "task.html", backend=backend, task_id=task_id, spec=spec, ranking=ranking,
                   chart=chart, n_points=len(points))


def submissions_page(request: Request):
    s = settings_of(request)
    page, per_page = page_args(request)
    task = request.query_params.get("task")
    submitter = request.query_params.get("submitter")
    result = board.submissions_list(s.store, page, per_page, task_id=task_id_of(s, task) if task else None,
                                    submitter=submitter)
    return render(request, "submissions.html", subs=result, task_filter=task, submitter_filter=submitter)


def submission_page(request: Request):
    s = settings_of(request)
    sub = board.submission_view(s.store, submission_id(request))
    if sub is None:
        raise HTTPException(404, f"no submission #{request.path_params['id']}")
    return render(request, "submission.html", sub=sub, backend=sub["backend"],
                   spec=task_spec(s, sub["task_id"]))


def submit_page(request: Request):
    s = settings_of(request)
    return render(request, "submit.html", form={"task": request.query_params.get("task", "")},
                   tasks=task_ids(s), dsls=DSLS, error=None)


async def _submissions_collection(request: Request):
    if request.method == "POST":
        return await api_submit(request)
    return await anyio.to_thread.run_sync(api_submissions, request)


async def _http_error(request: Request, exc: HTTPException):
    detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
    if request.url.path.startswith("/api"):
        return json_response({"error": detail, "status": exc.status_code}, exc.status_code, headers=exc.headers)
    return await anyio.to_thread.run_sync(functools.partial(
        render, request, "error.html", exc.status_code, code=exc.status_code, message=detail))


def _plain_error(request: Request, status: int, message: str, headers: dict | None = None) -> Response:
    """An error answer that reads nothing from the store (it may be what failed)."""
    if request.url.path.startswith("/api"):
        return json_response({"error": message, "status": status}, status, headers=headers)
    return PlainTextResponse(f"{status}: {message}\n", status, headers=headers)


async def _store_error(request: Request, exc: sqlite3.OperationalError):
    if not is_busy(exc):
        raise exc
    s = settings_of(request)
    return _plain_error(request, 503, f"the results database is busy; try again in {s.retry_after_s} s",
                        {"Retry-After": str(s.retry_after_s)})


async def _body_error(request: Request, exc: Exception):
    status = 413 if isinstance(exc, BodyTooLarge) else 408
    return _plain_error(request, status, str(exc), {"Connection": "close"})


async def _server_error(request: Request, exc: Exception):
    log.error("%s %s failed: %s: %s", request.method, request.url.path, type(exc).__name__, exc)
    return _plain_error(request, 500, "internal server error")


class LeaderboardApp(Starlette):
    """Starlette with SecurityHeaders and BodyLimit outside its own error middleware, so that its 500
    answers carry the headers too and no route reads a body past the limit."""

    def build_middleware_stack(self):
        s = self.state.settings
        return SecurityHeaders(BodyLimit(super().build_middleware_stack(), s.body_limit, s.body_timeout_s))


def create_app(store: Store, token: str, *, registry=None, backend: str = "cpu", config=None,
               max_pending: int = 500, lock_wait_s: float = 2.0, write_threads: int = 8) -> Starlette:
    """The ASGI app. `backend` is what the worker evaluates submissions on (resolved: cpu or cuda); the
    app itself only validates, queues and reads. It opens `store`'s database again with a lock wait of
    `lock_wait_s` (a write that cannot get the lock in time answers 503 + Retry-After)."""
    from kernelgym_gap.core.config import EvalConfig
    from kernelgym_gap.core.registry import default_registry
    if not token:
        raise ValueError("the server needs a token for writes")
    config = config or EvalConfig()
    settings = Settings(store=store.with_timeout(lock_wait_s), token=token,
                        registry=registry if registry is not None else default_registry(),
                        backend=backend, config=config, max_source_bytes=config.max_source_bytes,
                        max_pending=max_pending, lock_wait_s=lock_wait_s,
                        write_limiter=anyio.CapacityLimiter(write_threads))

    routes = [
        Route("/", index), Route("/tasks/{name:path}", task_page), Route("/submissions", submissions_page),
        Route("/submissions/{id:int}", submission_page), Route("/submit", submit_page, methods=["GET"]),
        Route("/submit", form_submit, methods=["POST"]),
        Route("/bench", bench_page), Route("/bench/compare", bench_compare_page),
        Route("/api/bench", api_bench), Route("/api/bench/compare", api_bench_compare),
        Route("/api", api_index), Route("/api/health", api_health), Route("/api/leaderboard", api_leaderboard),
        Route("/api/tasks", api_tasks), Route("/api/tasks/{name:path}/screening", api_screening),
        Route("/api/tasks/{name:path}", api_task),
        Route("/api/submissions", _submissions_collection, methods=["GET", "POST"]),
        Route("/api/submissions/{id:int}", api_submission), Route("/api/device-cache", api_device_cache),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    app = LeaderboardApp(routes=routes, exception_handlers={
        HTTPException: _http_error, sqlite3.OperationalError: _store_error, BodyTooLarge: _body_error,
        BodyTimeout: _body_error, Exception: _server_error})
    app.state.settings = settings
    app.state.templates = make_templates()
    return app
