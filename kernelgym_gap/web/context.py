"""What every route of the leaderboard app shares: the server's settings, the templates and their filters, and
the reading of a request's common parameters (page, backend, task, submission id)."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse
from starlette.templating import Jinja2Templates

from kernelgym_gap.core.errors import KernelGymError
from kernelgym_gap.store.db import SCHEMA_VERSION, Store, dumps
from kernelgym_gap.web import board
from kernelgym_gap.web.chart import screening_thresholds, verdict_class

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
    worker: object = None            # `leaderboard serve`'s WorkerSupervisor (web/supervise.py): /api/health

    @property
    def body_limit(self) -> int:     # JSON escaping can grow a source; the source itself is checked after
        return 8 * self.max_source_bytes + 65536


def fmt_num(x, digits: int = 3) -> str:
    if x is None:
        return "—"
    try:
        x = float(x)
    except (TypeError, ValueError):
        return str(x)
    if x == 0:
        return "0"
    return f"{x:.{digits}g}" if 1e-4 <= abs(x) < 1e5 else f"{x:.{max(1, digits - 1)}e}"


def fmt_time(ts) -> str:
    if not ts:
        return "—"
    return str(ts).replace("T", " ").replace("+00:00", " UTC")[:23]


def make_templates() -> Jinja2Templates:
    t = Jinja2Templates(directory=str(HERE / "templates"))
    t.env.filters.update(num=fmt_num, ts=fmt_time, slug=board.task_slug, vclass=verdict_class,
                         reward=lambda x: "—" if x is None else f"{float(x):.4f}",
                         pct=lambda x: "—" if x is None else f"{100 * float(x):.0f}%")
    t.env.globals.update(schema_version=SCHEMA_VERSION)
    return t


def settings_of(request: Request) -> Settings:
    return request.app.state.settings


def page_args(request: Request) -> tuple[int, int]:
    try:
        return board.clamp_page(request.query_params.get("page", 1), request.query_params.get("per_page", 25))
    except board.PageOutOfRange as e:
        raise HTTPException(400, str(e)) from None


def submission_id(request: Request) -> int:
    sid = request.path_params["id"]
    if not 0 < sid <= board.MAX_ID:
        raise HTTPException(404, f"no submission #{sid}")
    return sid


def backend_of(request: Request) -> str:
    b = request.query_params.get("backend")
    if b is not None and b not in ("cpu", "cuda"):
        raise HTTPException(422, f"unknown backend {b!r}: choose cpu or cuda")
    if b:
        return b
    s = settings_of(request)
    return board.default_backend(s.store) if board.backends(s.store) else s.backend


def task_ids(s: Settings) -> list[str]:
    return [t.id for t in s.registry] if s.registry is not None else []


def task_id_of(s: Settings, slug: str) -> str:
    """A URL's task: `GELU-v0`, the full id, or a bare name (`GELU`: its newest registered version)."""
    task_id = board.task_from_slug(slug)
    if task_spec(s, task_id) is None and s.registry is not None:
        try:
            return s.registry.get(slug).id
        except KernelGymError:
            pass
    return task_id


def task_spec(s: Settings, task_id: str):
    try:
        return s.registry.get(task_id) if s.registry is not None else None
    except KernelGymError:
        return None


def render(request: Request, name: str, status: int = 200, **ctx) -> HTMLResponse:
    s = settings_of(request)
    ctx.setdefault("backend", s.backend)
    ctx.update(server_backend=s.backend, thresholds=screening_thresholds(),
               board_backends=sorted(set(board.backends(s.store)) | {ctx["backend"]}))
    return request.app.state.templates.TemplateResponse(request, name, ctx, status_code=status)


def json_response(data, status: int = 200, **kw) -> JSONResponse:
    return JSONResponse(json.loads(dumps(data)), status_code=status, **kw)
