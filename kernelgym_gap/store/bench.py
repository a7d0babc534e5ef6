"""Benchmark runs (`kernelgym-gap bench`): every SQL statement of a run, its episodes and their steps. A mixin
of `Store` (store/db.py), which supplies `conn`, `_write(fn)` and the results mixin's `_put_source` and
`_insert_evaluation`.

  bench_runs      one row per run label: the agent, DSL, backend and the run's settings (JSON)
  bench_episodes  one row per (label, task, sample): running, done or error (the agent or the harness could
                  not go on: an endpoint that kept failing); the agent's usage (tokens), wall time, why it
                  ended before its budget
  bench_steps     one row per evaluated step: the evaluation row that measured it (the `evaluations` table:
                  the whole record), the source's sha256, the agent's note (replay's file, search's change)

A step is written in one transaction with its evaluation, so a run killed at any point keeps every step it
finished and nothing half-written: `bench` run again under the same label evaluates only what is missing.
Bench evaluations are not leaderboard submissions (no `submissions` row): the board ranks submitters, a run
is compared with other runs (`bench compare`, /bench).
"""
from __future__ import annotations

import dataclasses
import json

from kernelgym_gap.core.record import EvalRecord
from kernelgym_gap.store.cache_key import CacheKey
from kernelgym_gap.store.schema import dumps, now_iso


def _run_row(r) -> dict:
    return {"label": r["label"], "agent": r["agent"], "dsl": r["dsl"], "backend": r["backend"],
            "config": json.loads(r["config_json"]), "created_at": r["created_at"], "updated_at": r["updated_at"]}


class BenchMixin:
    # -- runs --

    def bench_run(self, label: str) -> dict | None:
        row = self.conn.execute("SELECT * FROM bench_runs WHERE label = ?", (label,)).fetchone()
        return _run_row(row) if row is not None else None

    def bench_runs(self) -> list[dict]:
        """Every run, newest first, with its episode counts (done, error, running)."""
        rows = self.conn.execute(
            "SELECT r.*, (SELECT COUNT(*) FROM bench_episodes e WHERE e.label = r.label AND e.state = 'done') AS done, "
            "(SELECT COUNT(*) FROM bench_episodes e WHERE e.label = r.label AND e.state = 'error') AS errors, "
            "(SELECT COUNT(*) FROM bench_episodes e WHERE e.label = r.label AND e.state = 'running') AS running "
            "FROM bench_runs r ORDER BY r.created_at DESC, r.label").fetchall()
        return [dict(_run_row(r), done=r["done"], errors=r["errors"], running=r["running"]) for r in rows]

    def bench_put_run(self, label: str, agent: str, dsl: str, backend: str, config: dict) -> None:
        """Creates the run, or updates its settings (a resumed run may add tasks or samples)."""
        now = now_iso()
        self._write(lambda conn: conn.execute(
            "INSERT INTO bench_runs (label, agent, dsl, backend, config_json, created_at, updated_at) "
            "VALUES (?,?,?,?,?,?,?) ON CONFLICT(label) DO UPDATE SET config_json = excluded.config_json, "
            "updated_at = excluded.updated_at", (label, agent, dsl, backend, dumps(config), now, now)))

    # -- episodes --

    def bench_start_episode(self, label: str, task_id: str, sample: int, category: str = "",
                            level: int | None = None) -> None:
        self._write(lambda conn: conn.execute(
            "INSERT INTO bench_episodes (label, task_id, sample, category, level, state, started_at) "
            "VALUES (?,?,?,?,?, 'running', ?) ON CONFLICT(label, task_id, sample) DO UPDATE SET state = 'running', "
            "error = NULL, finished = NULL, started_at = excluded.started_at, finished_at = NULL",
            (label, task_id, sample, category, level, now_iso())))

    def bench_finish_episode(self, label: str, task_id: str, sample: int, *, state: str, steps: int,
                             error: str | None = None, finished: str | None = None, usage: dict | None = None,
                             seconds: float | None = None) -> None:
        """Closes an episode after `steps` steps; stored steps past it (from an earlier, longer attempt)
        are dropped so that the episode's steps are exactly this attempt's."""
        if state not in ("done", "error"):
            raise ValueError(f"an episode finishes done or error, not {state!r}")

        def write(conn):
            conn.execute("DELETE FROM bench_steps WHERE label=? AND task_id=? AND sample=? AND step>?",
                         (label, task_id, sample, steps))
            conn.execute("UPDATE bench_episodes SET state=?, error=?, finished=?, usage_json=?, seconds=?, "
                         "finished_at=? WHERE label=? AND task_id=? AND sample=?",
                         (state, error, finished, dumps(usage) if usage else None, seconds, now_iso(),
                          label, task_id, sample))
        self._write(write)

    def bench_episodes(self, label: str) -> list[dict]:
        rows = self.conn.execute("SELECT * FROM bench_episodes WHERE label = ? ORDER BY task_id, sample", (label,))
        out = []
        for r in rows:
            d = dict(r)
            d["usage"] = json.loads(d.pop("usage_json")) if d.get("usage_json") else None
            out.append(d)
        return out

    # -- steps --

    def bench_put_step(self, label: str, task_id: str, sample: int, step: int, record: EvalRecord,
                       source: str | bytes, key: CacheKey, submitter: str, *, note: str | None = None,
                       seconds: float | None = None) -> int:
        """Stores one evaluated step (source, evaluation row, step row) in one transaction, replacing this
        step and any later one of the episode (an attempt that diverged from a stored one); returns the
        evaluation id."""
        def write(conn):
            sha = self._put_source(conn, source)
            eid = self._insert_evaluation(conn, record, dataclasses.replace(key, source_sha256=sha), submitter)
            conn.execute("DELETE FROM bench_steps WHERE label=? AND task_id=? AND sample=? AND step>=?",
                         (label, task_id, sample, step))
            conn.execute("INSERT INTO bench_steps (label, task_id, sample, step, evaluation_id, source_sha256, "
                         "note, seconds, created_at) VALUES (?,?,?,?,?,?,?,?,?)",
                         (label, task_id, sample, step, eid, sha, note, seconds, now_iso()))
            return eid
        return self._write(write)

    def bench_episode_steps(self, label: str, task_id: str, sample: int) -> dict[int, dict]:
        """An episode's stored steps by step number: source sha256 and the stored record's JSON."""
        rows = self.conn.execute(
            "SELECT b.step, b.source_sha256, e.record_json FROM bench_steps b JOIN evaluations e "
            "ON e.id = b.evaluation_id WHERE b.label=? AND b.task_id=? AND b.sample=?", (label, task_id, sample))
        return {r["step"]: {"source_sha256": r["source_sha256"], "record_json": r["record_json"]} for r in rows}

    def bench_steps(self, label: str) -> list[dict]:
        """Every stored step of a run with the headline numbers of its evaluation (no record JSON)."""
        rows = self.conn.execute(
            "SELECT b.task_id, b.sample, b.step, b.note, b.seconds, b.source_sha256, b.evaluation_id, e.status, "
            "e.correct, e.reward, e.reward_mode, e.e, e.u, e.verdict, e.device, "
            "json_extract(e.record_json, '$.terms.E_compile') AS e_compile, "
            "json_extract(e.record_json, '$.message') AS message "
            "FROM bench_steps b JOIN evaluations e ON e.id = b.evaluation_id WHERE b.label = ? "
            "ORDER BY b.task_id, b.sample, b.step", (label,))
        out = []
        for r in rows:
            d = dict(r)
            d["correct"] = None if d["correct"] is None else bool(d["correct"])
            out.append(d)
        return out

    def bench_source(self, evaluation_id: int) -> str | None:
        row = self.conn.execute("SELECT s.content FROM evaluations e JOIN sources s ON s.sha256 = e.source_sha256 "
                                "WHERE e.id = ?", (evaluation_id,)).fetchone()
        return None if row is None else bytes(row["content"]).decode("utf-8", "replace")
