"""The web submissions' queue: queued -> running -> done | error, claimed by the leaderboard's worker in
IMMEDIATE transactions (two workers never claim the same submission). A mixin of `Store` (store/db.py)."""
from __future__ import annotations

from kernelgym_gap.core.record import EvalRecord
from kernelgym_gap.store.cache_key import CacheKey
from kernelgym_gap.store.schema import now_iso

STATES = ("queued", "running", "done", "error")


class QueueMixin:
    def enqueue(self, source: str | bytes, *, submitter: str, task_id: str, dsl: str, backend: str,
                remeasure: bool = False, origin: str = "api") -> int:
        def write(conn):
            sha = self._put_source(conn, source)
            return self._insert_submission(conn, submitter=submitter, task_id=task_id, dsl=dsl, backend=backend,
                                           sha=sha, state="queued", remeasure=remeasure, origin=origin)
        return self._write(write)

    def claim_next(self) -> dict | None:
        """Marks the oldest queued submission running and returns it (with its source), or None."""
        def write(conn):
            row = conn.execute("SELECT s.*, src.content FROM submissions s JOIN sources src ON "
                               "src.sha256 = s.source_sha256 WHERE state = 'queued' ORDER BY id LIMIT 1").fetchone()
            if row is None:
                return None
            conn.execute("UPDATE submissions SET state='running', started_at=? WHERE id=?", (now_iso(), row["id"]))
            return dict(row)
        return self._write(write)

    def finish(self, submission_id: int, *, record: EvalRecord | None = None, key: CacheKey | None = None,
               evaluation_id: int | None = None) -> None:
        """Completes a running submission with a new record (and its key) or an existing evaluation."""
        def write(conn):
            eid, hit = evaluation_id, evaluation_id is not None
            if record is not None:
                row = conn.execute("SELECT submitter FROM submissions WHERE id=?", (submission_id,)).fetchone()
                eid = self._insert_evaluation(conn, record, key, row["submitter"])
            conn.execute("UPDATE submissions SET state='done', evaluation_id=?, cache_hit=?, finished_at=? "
                         "WHERE id=?", (eid, int(hit), now_iso(), submission_id))
        self._write(write)

    def fail(self, submission_id: int, message: str) -> None:
        self._write(lambda conn: conn.execute("UPDATE submissions SET state='error', error=?, finished_at=? "
                                              "WHERE id=?", (message[:4000], now_iso(), submission_id)))

    def requeue_interrupted(self) -> int:
        """Submissions left running by a server that stopped go back to the queue."""
        return self._write(lambda conn: conn.execute(
            "UPDATE submissions SET state='queued', started_at=NULL WHERE state='running'").rowcount)

    def pending(self) -> int:
        """Submissions queued or being evaluated."""
        return self.conn.execute("SELECT COUNT(*) FROM submissions WHERE state IN ('queued', 'running')").fetchone()[0]
