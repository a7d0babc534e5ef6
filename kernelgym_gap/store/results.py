"""Measured results: sources by sha256, one evaluation row per measurement, the submission that asked for
it, cache lookups, and the reads of one submission. A mixin of `Store` (store/db.py), which supplies
`conn` (this thread's connection) and `_write(fn)` (one IMMEDIATE transaction)."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math

from kernelgym_gap.core.errors import ProtocolError
from kernelgym_gap.core.record import EvalRecord
from kernelgym_gap.core.status import Status
from kernelgym_gap.core.terms import Headline
from kernelgym_gap.store.cache_key import CacheKey, key_from_record, source_bytes
from kernelgym_gap.store.devcache import put_device_cache
from kernelgym_gap.store.names import require_nonempty
from kernelgym_gap.store.schema import dumps, now_iso

# Statuses that no longer exist but may still stand in rows written before they were removed: such a row is
# never served (it would not parse back into a Status)
RETIRED_STATUSES = frozenset({"unstable_timing"})
# what a result cache never serves: Status.cacheable says which, and why
NOT_CACHED_STATUSES = frozenset(s.value for s in Status if not s.cacheable) | RETIRED_STATUSES
MAX_ROWID = 2 ** 63 - 1          # SQLite's integers are 64-bit: a larger id names no row


def _row_values(record: EvalRecord) -> dict:
    head, diag = Headline.of(record.terms), record.diagnosis or {}

    def num(x):
        ok = isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
        return float(x) if ok else None
    return {"status": record.status.value, "correct": None if record.correct is None else int(record.correct),
            "reward": float(record.reward), "reward_mode": record.reward_mode, "e": num(head.E),
            "u": num(head.U), "performance": num(head.performance),
            "verdict": diag.get("verdict"), "diagnosis_summary": diag.get("summary"),
            "record_json": dumps(record.to_dict())}


class ResultsMixin:
    # -- writes (each step a method, so a test can stop a writer between them) --

    def _put_source(self, conn, source: str | bytes) -> str:
        raw = source_bytes(source)
        sha = hashlib.sha256(raw).hexdigest()
        conn.execute("INSERT OR IGNORE INTO sources (sha256, content, bytes) VALUES (?, ?, ?)", (sha, raw, len(raw)))
        return sha

    def _insert_evaluation(self, conn, record: EvalRecord, key: CacheKey, submitter: str) -> int:
        v = _row_values(record)
        if record.backend == "cuda":
            put_device_cache(conn, record, key)
        cur = conn.execute(
            "INSERT INTO evaluations (submitter, submitted_at, task_id, task_version, dsl, backend, device, "
            "source_sha256, settings_hash, software_hash, status, correct, reward, reward_mode, e, u, "
            "performance, verdict, diagnosis_summary, record_json, created_at) "
            "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (submitter, now_iso(), key.task_id, key.task_version, key.dsl, key.backend, key.device,
             key.source_sha256, key.settings_hash, key.software_hash, v["status"], v["correct"], v["reward"],
             v["reward_mode"], v["e"], v["u"], v["performance"], v["verdict"], v["diagnosis_summary"],
             v["record_json"], record.created_at or now_iso()))
        return cur.lastrowid

    def _insert_submission(self, conn, *, submitter: str, task_id: str, dsl: str, backend: str, sha: str,
                           state: str, evaluation_id: int | None = None, cache_hit: bool = False,
                           remeasure: bool = False, origin: str = "api", submitted_at: str | None = None) -> int:
        done = now_iso() if state == "done" else None
        cur = conn.execute(
            "INSERT INTO submissions (submitter, submitted_at, task_id, dsl, backend, source_sha256, state, "
            "evaluation_id, cache_hit, remeasure, origin, started_at, finished_at) "
            "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (submitter, submitted_at or now_iso(), task_id, dsl, backend, sha, state, evaluation_id,
             int(cache_hit), int(remeasure), origin, done, done))
        return cur.lastrowid

    def add_record(self, record: EvalRecord, source: str | bytes, submitter: str, *, key: CacheKey | None = None,
                   config=None, origin: str = "api", submitted_at: str | None = None) -> int:
        """Stores one measured record, its source and the submission that asked for it, in one transaction;
        returns the submission id. Give the EvalConfig that produced the record (`config`) or its `key`
        so that a later identical evaluation is served from the cache."""
        if not isinstance(record, EvalRecord):
            raise TypeError(f"add_record takes an EvalRecord, not {type(record).__name__}")
        require_nonempty(submitter)
        key = key or key_from_record(record, source, config)

        def write(conn):
            sha = self._put_source(conn, source)
            eid = self._insert_evaluation(conn, record, dataclasses.replace(key, source_sha256=sha), submitter)
            return self._insert_submission(conn, submitter=submitter, task_id=key.task_id, dsl=key.dsl,
                                           backend=key.backend, sha=sha, state="done", evaluation_id=eid,
                                           origin=origin, submitted_at=submitted_at)
        return self._write(write)

    def add_cache_hit(self, evaluation_id: int, submitter: str, origin: str = "api") -> int:
        require_nonempty(submitter)
        def write(conn):
            e = conn.execute("SELECT task_id, dsl, backend, source_sha256 FROM evaluations WHERE id = ?",
                             (evaluation_id,)).fetchone()
            return self._insert_submission(conn, submitter=submitter, task_id=e["task_id"], dsl=e["dsl"],
                                           backend=e["backend"], sha=e["source_sha256"], state="done",
                                           evaluation_id=evaluation_id, cache_hit=True, origin=origin)
        return self._write(write)

    def lookup(self, key: CacheKey) -> tuple[int, EvalRecord] | None:
        """The newest cacheable evaluation under this key."""
        row = self.conn.execute(
            "SELECT id, record_json FROM evaluations WHERE source_sha256=? AND task_id=? AND task_version=? "
            "AND dsl=? AND backend=? AND device=? AND settings_hash=? AND software_hash=? "
            f"AND status NOT IN ({','.join('?' * len(NOT_CACHED_STATUSES))}) ORDER BY id DESC LIMIT 1",
            (*dataclasses.astuple(key), *sorted(NOT_CACHED_STATUSES))).fetchone()
        if row is None:
            return None
        try:
            return row["id"], EvalRecord.from_json(row["record_json"])
        except ProtocolError:        # stored by another version of the record schema: measure again
            return None

    # -- reads --

    def submission(self, submission_id: int) -> dict | None:
        """One submission with its state, source and (when done) record; None for an id no row can have."""
        if not isinstance(submission_id, int) or not 0 < submission_id <= MAX_ROWID:
            return None
        row = self.conn.execute(
            "SELECT s.*, e.record_json, e.device, e.reward, e.e, e.u, e.verdict, e.status, e.correct, "
            "src.content FROM submissions s JOIN sources src ON src.sha256 = s.source_sha256 "
            "LEFT JOIN evaluations e ON e.id = s.evaluation_id WHERE s.id = ?", (submission_id,)).fetchone()
        if row is None:
            return None
        out = {k: row[k] for k in row.keys() if k not in ("record_json", "content")}
        out["cache_hit"] = bool(out["cache_hit"])
        out["remeasure"] = bool(out["remeasure"])
        out["correct"] = None if out["correct"] is None else bool(out["correct"])
        out["source"] = bytes(row["content"]).decode("utf-8", "replace")
        out["record"] = json.loads(row["record_json"]) if row["record_json"] else None
        return out

    def count(self, table: str) -> int:
        if table not in ("sources", "evaluations", "submissions", "cache"):
            raise ValueError(table)
        return self.conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]

    def integrity(self) -> str:
        return self.conn.execute("PRAGMA integrity_check").fetchone()[0]
