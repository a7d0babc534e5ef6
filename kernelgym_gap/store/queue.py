"""The web submissions' queue: queued -> running -> done | error. A mixin of `Store` (store/db.py).

Leases: a worker claims a submission under its owner id for `lease_s` seconds (an IMMEDIATE transaction,
so two workers never claim the same one) and renews the lease while it evaluates (`heartbeat`). Only a
submission whose lease ran out (its worker was killed, or its host froze) goes back to the queue: a second
server on the same database never takes a live worker's submission. `finish` and `fail` only complete a
submission still held under the caller's lease, in the same transaction as the evaluation row they add, so
a worker that lost its lease stores nothing and no submission is ever completed twice.
"""
from __future__ import annotations

import os
import secrets
import socket
import time

from kernelgym_gap.core.record import EvalRecord
from kernelgym_gap.store.cache_key import CacheKey
from kernelgym_gap.store.names import require_nonempty
from kernelgym_gap.store.schema import now_iso

STATES = ("queued", "running", "done", "error")
LEASE_S = 30.0              # a worker renews its leases every LEASE_S / 4 (worker.py)

_EXPIRED = "state = 'running' AND (lease_expires_at IS NULL OR lease_expires_at < ?)"


def new_owner(role: str = "worker") -> str:
    """A lease owner id unique to this process and call: host, pid and a random part."""
    return f"{role}@{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


class QueueMixin:
    def enqueue(self, source: str | bytes, *, submitter: str, task_id: str, dsl: str, backend: str,
                remeasure: bool = False, origin: str = "api") -> int:
        require_nonempty(submitter)

        def write(conn):
            sha = self._put_source(conn, source)
            return self._insert_submission(conn, submitter=submitter, task_id=task_id, dsl=dsl, backend=backend,
                                           sha=sha, state="queued", remeasure=remeasure, origin=origin)
        return self._write(write)

    def claim_next(self, owner: str | None = None, lease_s: float = LEASE_S) -> dict | None:
        """Requeues running submissions whose lease ran out, then marks the oldest queued one running under
        `owner`'s lease and returns it (with its source and `lease_owner`), or None."""
        owner = owner or self.owner

        def write(conn):
            now = time.time()
            conn.execute(f"UPDATE submissions SET state='queued', started_at=NULL, lease_owner=NULL, "
                         f"lease_expires_at=NULL WHERE {_EXPIRED}", (now,))
            row = conn.execute("SELECT s.*, src.content FROM submissions s JOIN sources src ON "
                               "src.sha256 = s.source_sha256 WHERE state = 'queued' ORDER BY id LIMIT 1").fetchone()
            if row is None:
                return None
            conn.execute("UPDATE submissions SET state='running', started_at=?, lease_owner=?, lease_expires_at=? "
                         "WHERE id=?", (now_iso(), owner, now + lease_s, row["id"]))
            return dict(row) | {"lease_owner": owner, "lease_expires_at": now + lease_s, "state": "running"}
        return self._write(write)

    def heartbeat(self, owner: str, submission_ids, lease_s: float = LEASE_S) -> set[int]:
        """Renews `owner`'s leases on these running submissions; returns the ids it still holds."""
        ids = [int(i) for i in submission_ids]
        if not ids:
            return set()

        def write(conn):
            marks = ",".join("?" * len(ids))
            conn.execute(f"UPDATE submissions SET lease_expires_at=? WHERE id IN ({marks}) AND state='running' "
                         "AND lease_owner=?", (time.time() + lease_s, *ids, owner))
            return {r[0] for r in conn.execute(f"SELECT id FROM submissions WHERE id IN ({marks}) AND "
                                               "state='running' AND lease_owner=?", (*ids, owner))}
        return self._write(write)

    def _held(self, conn, submission_id: int, owner: str | None):
        row = conn.execute("SELECT submitter, state, lease_owner FROM submissions WHERE id=?",
                           (submission_id,)).fetchone()
        if row is None or row["state"] != "running" or (owner is not None and row["lease_owner"] != owner):
            return None
        return row

    def finish(self, submission_id: int, *, record: EvalRecord | None = None, key: CacheKey | None = None,
               evaluation_id: int | None = None, owner: str | None = None) -> bool:
        """Completes a running submission with a new record (and its key) or an existing evaluation. With
        `owner`, only while that owner holds its lease; False (and nothing written) when it does not."""
        def write(conn):
            row = self._held(conn, submission_id, owner)
            if row is None:
                return False
            eid, hit = evaluation_id, evaluation_id is not None
            if record is not None:
                eid = self._insert_evaluation(conn, record, key, row["submitter"])
            conn.execute("UPDATE submissions SET state='done', evaluation_id=?, cache_hit=?, finished_at=?, "
                         "lease_expires_at=NULL WHERE id=?", (eid, int(hit), now_iso(), submission_id))
            return True
        return self._write(write)

    def fail(self, submission_id: int, message: str, owner: str | None = None) -> bool:
        def write(conn):
            if self._held(conn, submission_id, owner) is None:
                return False
            conn.execute("UPDATE submissions SET state='error', error=?, finished_at=?, lease_expires_at=NULL "
                         "WHERE id=?", (message[:4000], now_iso(), submission_id))
            return True
        return self._write(write)

    def requeue_interrupted(self) -> int:
        """Running submissions whose lease ran out (their worker stopped) go back to the queue; a live
        worker's submissions (lease renewed) stay where they are."""
        return self._write(lambda conn: conn.execute(
            "UPDATE submissions SET state='queued', started_at=NULL, lease_owner=NULL, lease_expires_at=NULL "
            f"WHERE {_EXPIRED}", (time.time(),)).rowcount)

    def pending(self) -> int:
        """Submissions queued or being evaluated."""
        return self.conn.execute("SELECT COUNT(*) FROM submissions WHERE state IN ('queued', 'running')").fetchone()[0]
