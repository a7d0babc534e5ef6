"""The leaderboard's queries over the store: rankings, submission lists and screening points. Every SQL
statement the leaderboard runs is here; web/board.py only paginates and names things for pages.

Rankings are per backend (a cpu reward is the correctness gate alone and never mixes with GPU rewards).
Per task, each submitter is ranked by their best submission: highest reward, then the earliest one to reach
it. Overall, a submitter's score is the mean over the board's tasks of their best reward per task (a task
they never solved counts 0), then tasks solved, then who got there first.
"""
from __future__ import annotations

from statistics import geometric_mean as geomean   # judge.reward.geomean's arithmetic; the store imports core alone

from kernelgym_gap.core import ids


def backends(store) -> list[str]:
    rows = store.conn.execute("SELECT DISTINCT backend FROM submissions WHERE state='done' ORDER BY backend")
    return [r[0] for r in rows]


def default_backend(store) -> str:
    have = backends(store)
    return "cuda" if "cuda" in have or not have else have[0]


_ROW = ("s.id, s.submitter, s.submitted_at, s.task_id, s.dsl, s.backend, s.cache_hit, e.status, e.correct, "
        "e.reward, e.reward_mode, e.e, e.u, e.performance, e.verdict, e.diagnosis_summary, e.device")


def _row(r) -> dict:
    d = dict(r)
    d["correct"] = None if d.get("correct") is None else bool(d["correct"])
    if "cache_hit" in d:
        d["cache_hit"] = bool(d["cache_hit"])
    d["task"] = ids.short(d["task_id"])
    d.pop("rn", None)
    return d


def best_per_submitter(store, backend: str, task_id: str | None = None) -> list[dict]:
    """Each submitter's best done submission (per task), best first."""
    where, args = "s.state='done' AND s.backend=?", [backend]
    if task_id is not None:
        where += " AND s.task_id=?"
        args.append(task_id)
    sql = (f"SELECT * FROM (SELECT {_ROW}, COUNT(*) OVER (PARTITION BY s.submitter, s.task_id) AS attempts, "
           "ROW_NUMBER() OVER (PARTITION BY s.submitter, s.task_id ORDER BY e.reward DESC, s.submitted_at, s.id) "
           f"AS rn FROM submissions s JOIN evaluations e ON e.id = s.evaluation_id WHERE {where}) WHERE rn = 1 "
           "ORDER BY reward DESC, submitted_at, id")
    return [_row(r) for r in store.conn.execute(sql, args)]


def task_ranking(store, task_id: str, backend: str) -> list[dict]:
    rows = best_per_submitter(store, backend, task_id)
    for i, r in enumerate(rows, 1):
        r["rank"] = i
    return rows


def geomean_of_measured(xs: list) -> float | None:
    """judge.reward.geomean over the measured values (None and non-positive left out); None when none is."""
    xs = [x for x in xs if x is not None and x > 0]
    return geomean(xs) if xs else None


def overall_ranking(store, backend: str, task_ids: list[str] | None = None) -> list[dict]:
    best = best_per_submitter(store, backend)
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
            "E": geomean_of_measured([r["e"] for r in items]), "U": geomean_of_measured([r["u"] for r in items]),
            "submissions": sum(r["attempts"] for r in items),
            "reached_at": max(r["submitted_at"] for r in items),
            "per_task": {r["task"]: {"reward": r["reward"], "submission": r["id"]} for r in items},
        })
    rows.sort(key=lambda r: (-r["score"], -r["tasks_correct"], r["reached_at"], r["submitter"]))
    for i, r in enumerate(rows, 1):
        r["rank"] = i
    return rows


def tasks_summary(store, backend: str, task_ids: list[str] | None = None) -> list[dict]:
    rows = {r["task_id"]: dict(r) for r in store.conn.execute(
        "SELECT s.task_id, COUNT(*) AS submissions, COUNT(DISTINCT s.submitter) AS submitters, "
        "MAX(e.reward) AS best_reward, MAX(e.e) AS best_e, MAX(e.u) AS best_u, MAX(s.submitted_at) AS last "
        "FROM submissions s JOIN evaluations e ON e.id = s.evaluation_id WHERE s.state='done' AND s.backend=? "
        "GROUP BY s.task_id", (backend,))}
    out = []
    for tid in sorted(set(task_ids or []) | set(rows)):
        r = rows.get(tid, {"task_id": tid, "submissions": 0, "submitters": 0, "best_reward": None,
                           "best_e": None, "best_u": None, "last": None})
        r["task"] = ids.short(tid)
        out.append(r)
    return out


def submissions(store, offset: int, limit: int, task_id: str | None = None, submitter: str | None = None,
                backend: str | None = None) -> tuple[list[dict], int]:
    """(one page of submissions, newest first, with their evaluation's numbers; how many match)."""
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
        (*args, limit, offset))
    return [_row(r) for r in rows], total


def stored_task_ids(store) -> list[str]:
    """Every task id some submission names (a user's --tasks-dir tasks included)."""
    return [r[0] for r in store.conn.execute("SELECT DISTINCT task_id FROM submissions ORDER BY task_id")]


def has_submissions(store, task_id: str) -> bool:
    return store.conn.execute("SELECT 1 FROM submissions WHERE task_id=? LIMIT 1", (task_id,)).fetchone() is not None


def screening_points(store, task_id: str, backend: str, limit: int = 2000) -> list[dict]:
    """Every correct submission of a task with both E and U measured (the newest `limit`)."""
    rows = store.conn.execute(
        f"SELECT {_ROW} FROM submissions s JOIN evaluations e ON e.id = s.evaluation_id WHERE s.state='done' "
        "AND s.task_id=? AND s.backend=? AND e.correct=1 AND e.e > 0 AND e.u > 0 ORDER BY s.id DESC LIMIT ?",
        (task_id, backend, limit))
    return [_row(r) for r in rows]
