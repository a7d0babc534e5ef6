"""The reward server's requests by id, kept in SQLite so that a restart loses nothing.

A client names each batch with a request id (the client makes one per batch and sends it again on every
retry). The server writes the id with the batch's digest when it admits the batch (state `running`), and the
whole answer when it is done (`done`). A retry of a done id is answered from here, without evaluating; a retry
of an id whose answer was never written (the server was killed while it ran) is evaluated again; the same id
with another batch is refused (409). Rows are bounded: past `max_rows`, the oldest are dropped.

With `--db`, the table lives in the results database itself (its own table, `reward_requests`): a database
locked by another process then stops admissions within the lock wait (503 + Retry-After), where it used to
stall every reward for a minute. Without `--db`, its own file (`reward-requests.sqlite3` beside the default
results database). Opened with a short lock wait (lock_wait_s): a lock held past it raises
sqlite3.OperationalError (store.schema.is_busy), which the app answers with 503."""
from __future__ import annotations

import os
import sqlite3
import threading
import time
from pathlib import Path

_SCHEMA = """CREATE TABLE IF NOT EXISTS reward_requests (
    id TEXT PRIMARY KEY, digest TEXT NOT NULL, state TEXT NOT NULL, response TEXT,
    created REAL NOT NULL, updated REAL NOT NULL)"""


class RequestConflict(Exception):
    """The id was used before for another batch."""


class RequestLog:
    def __init__(self, path: str | Path | None, lock_wait_s: float = 2.0, max_rows: int = 20000):
        """path None: in memory (tests; nothing survives a restart)."""
        self.path = str(path) if path is not None else ":memory:"
        self.lock_wait_s, self.max_rows = lock_wait_s, max_rows
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o600)   # never readable by others (submissions)
            os.close(fd)
        self._conn = sqlite3.connect(self.path, timeout=lock_wait_s, isolation_level=None, check_same_thread=False)
        self._conn.execute(f"PRAGMA busy_timeout = {int(lock_wait_s * 1000)}")
        self._lock = threading.Lock()
        self._writes = 0
        self._schema = False
        try:
            self._ensure()
        except sqlite3.OperationalError:     # locked by another process: tried again with the first request
            pass

    def _ensure(self) -> None:
        if not self._schema:
            self._conn.execute(_SCHEMA)
            self._schema = True

    def begin(self, request_id: str, digest: str) -> str | None:
        """Admits a batch: its stored answer (JSON text) when it was done before, else None after writing it
        down as running. RequestConflict: the id was used for another batch."""
        now = time.time()
        with self._lock:
            self._ensure()
            row = self._conn.execute("SELECT digest, state, response FROM reward_requests WHERE id = ?",
                                     (request_id,)).fetchone()
            if row is not None:
                if row[0] != digest:
                    raise RequestConflict(f"request id {request_id!r} was used for another batch")
                if row[1] == "done":
                    return row[2]
                self._conn.execute("UPDATE reward_requests SET updated = ? WHERE id = ?", (now, request_id))
                return None
            self._conn.execute("INSERT INTO reward_requests (id, digest, state, created, updated) "
                               "VALUES (?, ?, 'running', ?, ?)", (request_id, digest, now, now))
            self._writes += 1
            if self._writes % 256 == 0:
                self._prune()
        return None

    def finish(self, request_id: str, response: str) -> None:
        with self._lock:
            self._ensure()
            self._conn.execute("UPDATE reward_requests SET state = 'done', response = ?, updated = ? WHERE id = ?",
                               (response, time.time(), request_id))

    def state(self, request_id: str) -> str | None:
        with self._lock:
            self._ensure()
            row = self._conn.execute("SELECT state FROM reward_requests WHERE id = ?", (request_id,)).fetchone()
        return row[0] if row else None

    def _prune(self) -> None:
        self._conn.execute("DELETE FROM reward_requests WHERE id IN (SELECT id FROM reward_requests "
                           "ORDER BY updated DESC LIMIT -1 OFFSET ?)", (self.max_rows,))

    def close(self) -> None:
        with self._lock:
            self._conn.close()
