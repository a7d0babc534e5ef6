"""Leaderboard data from the results store: rankings, submission lists, screening points, with pagination.

Rankings are per backend (a cpu reward is the correctness gate alone and never mixes with GPU rewards).
Per task, each submitter is ranked by their best submission: highest reward, then the earliest one to reach
it. Overall, a submitter's score is the mean over the board's tasks of their best reward per task (a task
they never solved counts 0), then tasks solved, then who got there first.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

from kernelgym_gap.core import ids
from kernelgym_gap.store.db import Store

MAX_PER_PAGE = 200

task_slug = ids.short            # kernelgym_gap/LayerNorm-v0 <-> LayerNorm-v0 in URLs
task_from_slug = ids.full


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


def clamp_page(page: Any, per_page: Any, default_per_page: int = 25) -> tuple[int, int]:
    try:
        page = max(1, int(page))
    except (TypeError, ValueError):
        page = 1
    try:
        per_page = min(MAX_PER_PAGE, max(1, int(per_page)))
    except (TypeError, ValueError):
        per_page = default_per_page
    return page, per_page


def backends(store: Store) -> list[str]:
    rows = store.conn.execute("SELECT DISTINCT backend FROM submissions WHERE state='done' ORDER BY backend")
    return [r[0] for r in rows]


def default_backend(store: Store) -> str:
    have = backends(store)
    return "cuda" if "cuda" in have or not have else have[0]


_ROW = ("s.id, s.submitter, s.submitted_at, s.task_id, s.dsl, s.backend, s.cache_hit, e.status, e.correct, "
        "e.reward, e.reward_mode, e.e, e.u, e.performance, e.verdict, e.diagnosis_summary, e.device")


def _row(r) -> dict:
    d = dict(r)
    d["correct"] = None if d.get("correct") is None else bool(d["correct"])
    if "cache_hit" in d:
        d["cache_hit"] = bool(d["cache_hit"])
    d["task"] = task_slug(d["task_id"])
    d.pop("rn", None)
    return d


def _best_per_submitter(store: Store, backend: str, task_id: str | None = None) -> list[dict]:
    where, args = "s.state='done' AND s.backend=?", [backend]
    if task_id is not None:
        where += " AND s.task_id=?"
        args.append(task_id)
    sql = (f"SELECT * FROM (SELECT {_ROW}, COUNT(*) OVER (PARTITION BY s.submitter, s.task_id) AS attempts, "
           "ROW_NUMBER() OVER (PARTITION BY s.submitter, s.task_id ORDER BY e.reward DESC, s.submitted_at, s.id) "
           f"AS rn FROM submissions s JOIN evaluations e ON e.id = s.evaluation_id WHERE {where}) WHERE rn = 1 "
           "ORDER BY reward DESC, submitted_at, id")
    return [_row(r) for r in store.conn.execute(sql, args)]


def _paginate(items: list[dict], page: int, per_page: int) -> Page:
    return Page(items[(page - 1) * per_page: page * per_page], len(items), page, per_page)


def task_ranking(store: Store, task_id: str, backend: str, page: int = 1, per_page: int = 25) -> Page:
    rows = _best_per_submitter(store, backend, task_id)
    for i, r in enumerate(rows, 1):
        r["rank"] = i
    return _paginate(rows, page, per_page)


def geomean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x is not None and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def overall_ranking(store: Store, backend: str, task_ids: list[str] | None = None, page: int = 1,
                    per_page: int = 25) -> Page:
    best = _best_per_submitter(store, backend)
    tasks = sorted(set(task_ids or []) | {r["task_id"] for r in best})
    by_submitter: dict[str, list[dict]] = {}
    for r in best:
        by_submitter.setdefault(r["submitter"], []).append(r)
    rows = []
    for name, items in by_submitter.items():
        rows.append({
            "submitter": name,
            "score": sum(r["reward"] for r in items) / max(1, len(tasks)),
            "tasks_correct": sum(1 for r in items if r["correct"]),
            "tasks_attempted": len(items), "tasks_total": len(tasks),
            "E": geomean([r["e"] for r in items]), "U": geomean([r["u"] for r in items]),
            "submissions": sum(r["attempts"] for r in items),
            "reached_at": max(r["submitted_at"] for r in items),
            "per_task": {r["task"]: {"reward": r["reward"], "submission": r["id"]} for r in items},
        })
    rows.sort(key=lambda r: (-r["score"], -r["tasks_correct"], r["reached_at"], r["submitter"]))
    for i, r in enumerate(rows, 1):
        r["rank"] = i
    return _paginate(rows, page, per_page)


def tasks_summary(store: Store, backend: str, task_ids: list[str] | None = None) -> list[dict]:
    rows = {r["task_id"]: dict(r) for r in store.conn.execute(
        "SELECT s.task_id, COUNT(*) AS submissions, COUNT(DISTINCT s.submitter) AS submitters, "
        "MAX(e.reward) AS best_reward, MAX(e.e) AS best_e, MAX(e.u) AS best_u, MAX(s.submitted_at) AS last "
        "FROM submissions s JOIN evaluations e ON e.id = s.evaluation_id WHERE s.state='done' AND s.backend=? "
        "GROUP BY s.task_id", (backend,))}
    out = []
    for tid in sorted(set(task_ids or []) | set(rows)):
        r = rows.get(tid, {"task_id": tid, "submissions": 0, "submitters": 0, "best_reward": None,
                           "best_e": None, "best_u": None, "last": None})
        r["task"] = task_slug(tid)
        out.append(r)
    return out


def submissions_list(store: Store, page: int = 1, per_page: int = 25, task_id: str | None = None,
                     submitter: str | None = None, backend: str | None = None) -> Page:
    where, args = ["1=1"], []
    for col, val in (("s.task_id", task_id), ("s.submitter", submitter), ("s.backend", backend)):
        if val is not None:
            where.append(f"{col}=?")
            args.append(val)
    w = " AND ".join(where)
    total = store.conn.execute(f"SELECT COUNT(*) FROM submissions s WHERE {w}", args).fetchone()[0]
    rows = store.conn.execute(
        f"SELECT {_ROW.replace('s.cache_hit,', 's.cache_hit, s.state, s.error,')} FROM submissions s "
        f"LEFT JOIN evaluations e ON e.id = s.evaluation_id WHERE {w} ORDER BY s.id DESC LIMIT ? OFFSET ?",
        (*args, per_page, (page - 1) * per_page))
    return Page([_row(r) for r in rows], total, page, per_page)


def screening_points(store: Store, task_id: str, backend: str, limit: int = 2000) -> list[dict]:
    """Every correct submission of a task with both E and U measured (the newest `limit`)."""
    rows = store.conn.execute(
        f"SELECT {_ROW} FROM submissions s JOIN evaluations e ON e.id = s.evaluation_id WHERE s.state='done' "
        "AND s.task_id=? AND s.backend=? AND e.correct=1 AND e.e > 0 AND e.u > 0 ORDER BY s.id DESC LIMIT ?",
        (task_id, backend, limit))
    return [_row(r) for r in rows]


def per_shape(record: dict | None) -> list[dict]:
    """The record's per-shape table (cuda), each row with shape, dtype, kernel_ms, library_ms, floor_ms, E, U."""
    rows = ((record or {}).get("terms") or {}).get("per_shape") or []
    return [r for r in rows if isinstance(r, dict)]


def submission_view(store: Store, submission_id: int) -> dict | None:
    sub = store.submission(submission_id)
    if sub is None:
        return None
    sub["task"] = task_slug(sub["task_id"])
    sub["per_shape"] = per_shape(sub["record"])
    return sub


