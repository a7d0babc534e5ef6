"""Leaderboard data for pages, the JSON API and the CLI: the store's queries (store/leaderboard.py, where
all the SQL is) cut into pages, with task slugs for URLs. Imports nothing from the web stack, so the CLI can
print rankings without it."""
from __future__ import annotations

import dataclasses
import math
from typing import Any

from kernelgym_gap.core import ids
from kernelgym_gap.core.terms import shape_rows
from kernelgym_gap.store import leaderboard as q
from kernelgym_gap.store.db import Store
from kernelgym_gap.store.results import MAX_ROWID
from kernelgym_gap.engine.feedback import public_view

MAX_PER_PAGE = 200
MAX_ID = MAX_ROWID               # ids are SQLite integers: a larger one names nothing (404, not 500)

task_slug = ids.short            # kernelgym_gap/LayerNorm-v1 <-> LayerNorm-v1 in URLs
task_from_slug = ids.full
backends = q.backends
default_backend = q.default_backend
tasks_summary = q.tasks_summary
screening_points = q.screening_points
has_submissions = q.has_submissions


@dataclasses.dataclass
class Page:
    items: list[dict]
    total: int
    page: int
    per_page: int

    @property
    def pages(self) -> int:
        return max(1, math.ceil(self.total / self.per_page))

    @property
    def has_prev(self) -> bool:
        return self.page > 1

    @property
    def has_next(self) -> bool:
        return self.page < self.pages

    def to_dict(self) -> dict:
        return {"items": self.items, "total": self.total, "page": self.page, "per_page": self.per_page,
                "pages": self.pages}


class PageOutOfRange(ValueError):
    """A page whose first row is past any offset SQLite can take (the web answers 400)."""


def clamp_page(page: Any, per_page: Any, default_per_page: int = 25) -> tuple[int, int]:
    """(page, per_page) within bounds: unreadable values fall back to the defaults, per_page to 1..200;
    a page beyond SQLite's 64-bit offsets raises PageOutOfRange."""
    try:
        page = max(1, int(page))
    except (TypeError, ValueError):
        page = 1
    try:
        per_page = min(MAX_PER_PAGE, max(1, int(per_page)))
    except (TypeError, ValueError):
        per_page = default_per_page
    if page * per_page > MAX_ID:
        raise PageOutOfRange(f"page {page} is out of range")
    return page, per_page


def _paginate(items: list[dict], page: int, per_page: int) -> Page:
    return Page(items[(page - 1) * per_page: page * per_page], len(items), page, per_page)


def task_ranking(store: Store, task_id: str, backend: str, page: int = 1, per_page: int = 25) -> Page:
    return _paginate(q.task_ranking(store, task_id, backend), page, per_page)


def overall_ranking(store: Store, backend: str, task_ids: list[str] | None = None, page: int = 1,
                    per_page: int = 25) -> Page:
    return _paginate(q.overall_ranking(store, backend, task_ids), page, per_page)


def submissions_list(store: Store, page: int = 1, per_page: int = 25, task_id: str | None = None,
                     submitter: str | None = None, backend: str | None = None) -> Page:
    items, total = q.submissions(store, (page - 1) * per_page, per_page, task_id, submitter, backend)
    return Page(items, total, page, per_page)


def per_shape(record: dict | None) -> list[dict]:
    """The record's per-shape table (cuda), each row with shape, dtype, kernel_ms, library_ms, floor_ms, E, U."""
    return shape_rows((record or {}).get("terms"))


def submission_view(store: Store, submission_id: int) -> dict | None:
    sub = store.submission(submission_id)
    if sub is None:
        return None
    sub["task"] = task_slug(sub["task_id"])
    if isinstance(sub.get("record"), dict):     # the public page: no held-out shape, seed or size (issue 31)
        sub["record"] = public_view(sub["record"])
    sub["per_shape"] = per_shape(sub["record"])
    return sub
