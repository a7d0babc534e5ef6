"""The leaderboard server (Starlette + Jinja2). Reads are open; writes (POST /api/submissions and the
submit form) need the server's token. Submissions are queued in the store and evaluated by a separate
worker process (`kernelgym_gap.web.worker`, started by `leaderboard serve`): this process never evaluates
anything, never imports submitted code and starts no child.

Pages: /  (overall ranking, tasks, recent submissions), /tasks/{Name-vN} (ranking and E-vs-U chart),
/submissions (all, paginated), /submissions/{id} (source, per-shape table, diagnosis), /submit (form).
JSON:  /api (index), /api/leaderboard, /api/tasks, /api/tasks/{Name-vN}, /api/tasks/{Name-vN}/screening,
/api/submissions (GET list, POST submit), /api/submissions/{id}, /api/health.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import logging
import sqlite3
from pathlib import Path

import anyio
import anyio.to_thread
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from kernelgym_gap.core.errors import KernelGymError
from kernelgym_gap.core.task import DSLS
from kernelgym_gap.store.db import SCHEMA_VERSION, Store, dumps, is_busy
from . import board
from .chart import screening_svg, screening_thresholds, verdict_class
from .intake import Rejected, bearer, check_token, read_body, read_form, validate
from .limits import BodyLimit, BodyTimeout, BodyTooLarge

log = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent


@dataclasses.dataclass
class Settings:
    store: Store
    token: str
    registry: object
    backend: str
    config: object
    max_source_bytes: int
    max_pending: int = 500
    lock_wait_s: float = 2.0         # a write waits this long for another process's lock, then 503
    retry_after_s: int = 2
    body_timeout_s: float = 30.0
    write_limiter: object = None     # threads that may wait on the write lock at once (reads keep the rest)

    @property
    def body_limit(self) -> int:     # JSON escaping can grow a source; the source itself is checked after
        return 8 * self.max_source_bytes + 65536


def _fmt_num(x, digits: int = 3) -> str:
    if x is None:
        return "—"
    try:
        x = float(x)
    except (TypeError, ValueError):
        return str(x)
    if x == 0:
        return "0"
    return f"{x:.{digits}g}" if 1e-4 <= abs(x) < 1e5 else f"{x:.{max(1, digits - 1)}e}"


def _fmt_time(ts) -> str:
    if not ts:
        return "—"
    return str(ts).replace("T", " ").replace("+00:00", " UTC")[:23]


def _templates() -> Jinja2Templates:
    t = Jinja2Templates(directory=str(HERE / "templates"))
    t.env.filters.update(num=_fmt_num, ts=_fmt_time, slug=board.task_slug, vclass=verdict_class,
                         reward=lambda x: "—" if x is None else f"{float(x):.4f}")
    t.env.globals.update(schema_version=SCHEMA_VERSION)
    return t


def _settings(request: Request) -> Settings:
    return request.app.state.settings


def _page_args(request: Request) -> tuple[int, int]:
    try:
        return board.clamp_page(request.query_params.get("page", 1), request.query_params.get("per_page", 25))
    except board.PageOutOfRange as e:
        raise HTTPException(400, str(e)) from None


def _submission_id(request: Request) -> int:
    sid = request.path_params["id"]
    if not 0 < sid <= board.MAX_ID:
        raise HTTPException(404, f"no submission #{sid}")
    return sid


def _backend(request: Request) -> str:
    b = request.query_params.get("backend")
    if b is not None and b not in ("cpu", "cuda"):
        raise HTTPException(422, f"unknown backend {b!r}: choose cpu or cuda")
    if b:
        return b
    s = _settings(request)
    return board.default_backend(s.store) if board.backends(s.store) else s.backend


def _task_ids(s: Settings) -> list[str]:
    return [t.id for t in s.registry] if s.registry is not None else []


def _task_id(s: Settings, slug: str) -> str:
    """A URL's task: `GELU-v0`, the full id, or a bare name (`GELU`: its newest registered version)."""
    task_id = board.task_from_slug(slug)
    if _task_spec(s, task_id) is None and s.registry is not None:
        try:
            return s.registry.get(slug).id
        except KernelGymError:
            pass
    return task_id


def _task_spec(s: Settings, task_id: str):
    try:
        return s.registry.get(task_id) if s.registry is not None else None
    except KernelGymError:
        return None


def _render(request: Request, name: str, status: int = 200, **ctx) -> HTMLResponse:
    s = _settings(request)
    ctx.setdefault("backend", s.backend)
    ctx.update(server_backend=s.backend, thresholds=screening_thresholds(),
               board_backends=sorted(set(board.backends(s.store)) | {ctx["backend"]}))
    return request.app.state.templates.TemplateResponse(request, name, ctx, status_code=status)


def _json(data, status: int = 200, **kw) -> JSONResponse:
    return JSONResponse(json.loads(dumps(data)), status_code=status, **kw)


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
    s = _settings(request)
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
        try:
            sid = await _in_thread(s, _validate_and_enqueue, s, data, "api")
        except sqlite3.OperationalError as e:
            if not is_busy(e):
                raise
            raise _busy(s) from None
    except Rejected as r:
        return _json({"error": r.message, "status": r.status}, r.status, headers=_refusal_headers(s, r.status))
    return _json({"id": sid, "state": "queued", "url": f"/submissions/{sid}", "api": f"/api/submissions/{sid}"},
                 202, headers={"Location": f"/api/submissions/{sid}"})


def _form_text(raw: dict) -> dict:
    """The form's fields to show again: text decoded for display; the token left out."""
    text = {k: raw.get(k, b"").decode("utf-8", "replace") for k in ("task", "name", "dsl")}
    if not raw.get("file"):
        text["source"] = raw.get("source", b"").decode("utf-8", "replace")
    return text


async def form_submit(request: Request):
    s = _settings(request)
    raw: dict = {}
    try:
        header_token = bearer(request)
        if header_token is not None:
            check_token(s, header_token)
        await read_form(request, s, s.body_limit, token_checked=header_token is not None, fields=raw)
        source = raw.get("file") or raw.get("source", b"")     # the bytes exactly as sent (the cache key)
        text = _form_text(raw)
        data = {"task": text["task"], "name": text["name"], "dsl": text["dsl"] or "triton", "source": source}
        try:
            sid = await _in_thread(s, _validate_and_enqueue, s, data, "form")
        except sqlite3.OperationalError as e:
            if not is_busy(e):
                raise
            raise _busy(s) from None
    except Rejected as r:                  # the form again, as far as it arrived (never the token)
        response = await _in_thread(s, _render, request, "submit.html", r.status, error=r.message, form=_form_text(raw),
                                    tasks=_task_ids(s), dsls=DSLS)
        response.headers.update(_refusal_headers(s, r.status) or {})
        return response
    return RedirectResponse(f"/submissions/{sid}", status_code=303)


# ---- pages -------------------------------------------------------------------------------------------

def index(request: Request):
    s = _settings(request)
    backend = _backend(request)
    page, per_page = _page_args(request)
    ranking = board.overall_ranking(s.store, backend, _task_ids(s), page, per_page)
    tasks = board.tasks_summary(s.store, backend, _task_ids(s))
    for t in tasks:
        spec = _task_spec(s, t["task_id"])
        t["category"] = spec.category if spec is not None else ""
    return _render(request, "index.html", backend=backend, ranking=ranking, tasks=tasks,
                   recent=board.submissions_list(s.store, 1, 8).items)


def task_page(request: Request):
    s = _settings(request)
    task_id = _task_id(s, request.path_params["name"])
    spec = _task_spec(s, task_id)
    backend = _backend(request)
    page, per_page = _page_args(request)
    ranking = board.task_ranking(s.store, task_id, backend, page, per_page)
    if spec is None and ranking.total == 0 and not board.has_submissions(s.store, task_id):
        raise HTTPException(404, f"no task {task_id!r}")
    points = board.screening_points(s.store, task_id, backend)
    chart = screening_svg(points, title=f"{task_id}: E versus U")
    return _render(request, "task.html", backend=backend, task_id=task_id, spec=spec, ranking=ranking,
                   chart=chart, n_points=len(points))


def submissions_page(request: Request):
    s = _settings(request)
    page, per_page = _page_args(request)
    task = request.query_params.get("task")
    submitter = request.query_params.get("submitter")
    result = board.submissions_list(s.store, page, per_page, task_id=_task_id(s, task) if task else None,
                                    submitter=submitter)
    return _render(request, "submissions.html", subs=result, task_filter=task, submitter_filter=submitter)


def submission_page(request: Request):
    s = _settings(request)
    sub = board.submission_view(s.store, _submission_id(request))
    if sub is None:
        raise HTTPException(404, f"no submission #{request.path_params['id']}")
    return _render(request, "submission.html", sub=sub, backend=sub["backend"],
                   spec=_task_spec(s, sub["task_id"]))


def submit_page(request: Request):
    s = _settings(request)
    return _render(request, "submit.html", form={"task": request.query_params.get("task", "")},
                   tasks=_task_ids(s), dsls=DSLS, error=None)


# ---- JSON reads ----------------------------------------------------------------------------------------

def api_index(request: Request):
    return _json({"endpoints": {
        "GET /api/leaderboard?backend=&page=&per_page=": "overall ranking of submitters",
        "GET /api/tasks?backend=": "tasks with submission counts and best results",
        "GET /api/tasks/{Name-vN}?backend=&page=": "ranking of one task (best submission per submitter)",
        "GET /api/tasks/{Name-vN}/screening?backend=": "E and U of every correct submission, and the thresholds",
        "GET /api/submissions?task=&submitter=&page=": "submissions, newest first",
        "POST /api/submissions": "submit {task, name, source, dsl?, backend?, remeasure?} with "
                                 "Authorization: Bearer TOKEN; 202 with the submission id (503 with "
                                 "Retry-After while the database is locked)",
        "GET /api/submissions/{id}": "state (queued, running, done, error), record and source",
        "GET /api/device-cache?task=": "per device: calibrated ceilings and library timings per shape",
    }, "schema_version": SCHEMA_VERSION})


def api_health(request: Request):
    s = _settings(request)
    counts = {t: s.store.count(t) for t in ("submissions", "evaluations")}
    return _json({"ok": True, "backend": s.backend, "schema_version": SCHEMA_VERSION, "pending": s.store.pending(),
                  **counts})


def api_leaderboard(request: Request):
    s = _settings(request)
    backend = _backend(request)
    page, per_page = _page_args(request)
    return _json({"backend": backend, **board.overall_ranking(s.store, backend, _task_ids(s), page, per_page).to_dict()})


def api_tasks(request: Request):
    s = _settings(request)
    backend = _backend(request)
    return _json({"backend": backend, "tasks": board.tasks_summary(s.store, backend, _task_ids(s))})


def api_task(request: Request):
    s = _settings(request)
    task_id = _task_id(s, request.path_params["name"])
    backend = _backend(request)
    page, per_page = _page_args(request)
    if _task_spec(s, task_id) is None and not board.has_submissions(s.store, task_id):
        raise HTTPException(404, f"no task {task_id!r}")
    return _json({"task": task_id, "backend": backend,
                  **board.task_ranking(s.store, task_id, backend, page, per_page).to_dict()})


def api_screening(request: Request):
    s = _settings(request)
    task_id = _task_id(s, request.path_params["name"])
    backend = _backend(request)
    if _task_spec(s, task_id) is None and not board.has_submissions(s.store, task_id):
        raise HTTPException(404, f"no task {task_id!r}")
    pts = [{"id": p["id"], "submitter": p["submitter"], "E": p["e"], "U": p["u"], "reward": p["reward"],
            "verdict": p["verdict"]} for p in board.screening_points(s.store, task_id, backend)]
    return _json({"task": task_id, "backend": backend, "thresholds": screening_thresholds(), "points": pts})


def api_submissions(request: Request):
    s = _settings(request)
    page, per_page = _page_args(request)
    task = request.query_params.get("task")
    return _json(board.submissions_list(s.store, page, per_page, task_id=_task_id(s, task) if task else None,
                                        submitter=request.query_params.get("submitter")).to_dict())


def api_submission(request: Request):
    s = _settings(request)
    sub = board.submission_view(s.store, _submission_id(request))
    if sub is None:
        raise HTTPException(404, f"no submission #{request.path_params['id']}")
    sub["url"] = f"/submissions/{sub['id']}"
    return _json(sub)


def api_device_cache(request: Request):
    """Per-device history: calibrated ceilings and library timings per shape, from stored cuda records."""
    s = _settings(request)
    task = request.query_params.get("task")
    task_id = _task_id(s, task) if task else None
    baselines = [b["value"] | {"updated_at": b["updated_at"]} for b in s.store.cache_items("library_baseline")
                 if task_id is None or b["value"].get("task") == task_id]
    calibrations = [{"device": json.loads(c["key"])[0], **c["value"], "updated_at": c["updated_at"]}
                    for c in s.store.cache_items("calibration")]
    return _json({"calibrations": calibrations, "library_baselines": baselines})


async def _submissions_collection(request: Request):
    if request.method == "POST":
        return await api_submit(request)
    return await anyio.to_thread.run_sync(api_submissions, request)


async def _http_error(request: Request, exc: HTTPException):
    detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
    if request.url.path.startswith("/api"):
        return _json({"error": detail, "status": exc.status_code}, exc.status_code, headers=exc.headers)
    return await anyio.to_thread.run_sync(functools.partial(
        _render, request, "error.html", exc.status_code, code=exc.status_code, message=detail))


def _plain_error(request: Request, status: int, message: str, headers: dict | None = None) -> Response:
    """An error answer that reads nothing from the store (it may be what failed)."""
    if request.url.path.startswith("/api"):
        return _json({"error": message, "status": status}, status, headers=headers)
    return PlainTextResponse(f"{status}: {message}\n", status, headers=headers)


async def _store_error(request: Request, exc: sqlite3.OperationalError):
    if not is_busy(exc):
        raise exc
    s = _settings(request)
    return _plain_error(request, 503, f"the results database is busy; try again in {s.retry_after_s} s",
                        {"Retry-After": str(s.retry_after_s)})


async def _body_error(request: Request, exc: Exception):
    status = 413 if isinstance(exc, BodyTooLarge) else 408
    return _plain_error(request, status, str(exc), {"Connection": "close"})


async def _server_error(request: Request, exc: Exception):
    log.error("%s %s failed: %s: %s", request.method, request.url.path, type(exc).__name__, exc)
    return _plain_error(request, 500, "internal server error")


SECURITY_HEADERS = [
    (b"content-security-policy", b"default-src 'self'; style-src 'self'; img-src 'self' data:; "
                                 b"script-src 'none'; form-action 'self'; frame-ancestors 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
]


class SecurityHeaders:
    """Pure ASGI middleware, outside everything else (500s, 413s and 503s included): every response forbids
    scripts, framing and MIME sniffing (pages show submitted source: it is escaped by Jinja2, and would not
    run even if it were not)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def send_with_headers(message):
            if message["type"] == "http.response.start":
                names = {k.lower() for k, _ in message.get("headers", [])}
                message["headers"] = list(message.get("headers", [])) + [
                    (k, v) for k, v in SECURITY_HEADERS if k not in names]
            await send(message)
        await self.app(scope, receive, send_with_headers)


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
    app.state.templates = _templates()
    return app
