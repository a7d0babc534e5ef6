"""Results that last: every evaluation record in one SQLite database, the lookups a cache in front of the
evaluation service needs, and the data the leaderboard shows (SQL only: the evaluation with the store in front
is api/cached.py). This module is the `Store` (connections and transactions) and the stable
import path; the store's concerns live beside it:

  schema.py       the database file, connections (WAL, busy timeout), tables and migrations, JSON helpers
  results.py      sources, evaluations, submissions of measured records, cache lookups, reads of one submission
  queue.py        the web submissions' queue (enqueue, claim, finish, fail, requeue)
  devcache.py     the generic (kind, key) cache: device calibrations and library baselines
  cache_key.py    the cache key of an evaluation
  leaderboard.py  the leaderboard's queries (rankings, submission lists, screening points)
  bench.py        benchmark runs by label: episodes and steps (`kernelgym-gap bench`)

Every write is one `BEGIN IMMEDIATE` transaction, so several processes can write at once (WAL, busy
timeout) and a writer killed mid-write leaves the database as it was before that write.

Cache key of an evaluation (cache_key.py, re-exported here): (source sha256, task id, task version, dsl,
backend, device, settings hash, software hash). Records whose status can come from the machine rather than
the kernel (timeouts, crashes, protocol errors, unstable timings) are stored but never served from the cache.

Device-level cache (table `cache`): every stored cuda record also leaves its device ceilings (kind
`calibration`, keyed by device and software) and its library timings per shape (kind `library_baseline`,
keyed by task, version, shape, dtype, device and software). They are the per-device history the leaderboard
shows and that later runs can compare against; the reward itself always uses the library timed in the same
child as the kernel (DESIGN.md, step 5) and calibrate.py's own per-device cache of ceilings.

Stable API for other modules (batch runs, agents, the environment), kept backwards compatible:
  Store(path=None)                          open (None: $KERNELGYM_GAP_DB, else DEFAULT_DB_PATH), migrate
  Store.add_record(record, source, submitter, *, key=None, config=None, origin="api") -> submission id
      pass `config` (the EvalConfig used) or `key` so the record can later be served from the cache;
      without either it is stored for the leaderboard only
  cache_key_for(task, source, dsl, backend, config) -> CacheKey     (computed without starting anything)
  Store.lookup(key) -> (evaluation id, EvalRecord) | None
  (cached_evaluate and caching_evaluator moved to kernelgym_gap.api.cached in issue 33: they evaluate)
"""
from __future__ import annotations

import dataclasses  # noqa: F401  (tests reach dataclasses.replace through this module)
import sqlite3
import threading
from pathlib import Path

from kernelgym_gap.store.bench import BenchMixin
from kernelgym_gap.store.cache_key import (CPU_DEVICE, CacheKey, cache_device_key,  # noqa: F401
                                           cache_key_for, harness_fingerprint, key_from_record, settings_hash,
                                           software_hash, software_versions, source_bytes, source_sha256)
from kernelgym_gap.store.cache_key import canonical as canonical_json  # noqa: F401
from kernelgym_gap.store.devcache import DeviceCacheMixin
from kernelgym_gap.store.queue import LEASE_S, STATES, QueueMixin, new_owner  # noqa: F401
from kernelgym_gap.store.results import NOT_CACHED_STATUSES, ResultsMixin  # noqa: F401
from kernelgym_gap.store.schema import (DEFAULT_DB_PATH, ENV_DB, MIGRATIONS, SCHEMA_VERSION, StoreError,  # noqa: F401
                                        connect, current_version, default_db_path, dumps, is_busy, migrate,
                                        now_iso, resolve_db_path)


__all__ = ["CPU_DEVICE", "CacheKey", "cache_device_key", "cache_key_for", "harness_fingerprint",
           "key_from_record", "settings_hash", "software_hash", "software_versions", "source_bytes", "source_sha256",
           "canonical_json",
           "LEASE_S", "STATES", "new_owner", "NOT_CACHED_STATUSES", "DEFAULT_DB_PATH", "ENV_DB", "MIGRATIONS",
           "SCHEMA_VERSION", "StoreError", "connect", "current_version", "default_db_path", "dumps", "is_busy",
           "migrate", "now_iso", "resolve_db_path", "Store", "dataclasses"]


class Store(ResultsMixin, QueueMixin, DeviceCacheMixin, BenchMixin):
    """The results database. Thread-safe (a connection per thread) and picklable (by path). `timeout` is
    how long a statement waits for another connection's write lock before sqlite3 raises 'database is
    locked' (is_busy): a minute for batch writers, seconds for the web server, which answers 503."""

    def __init__(self, path: Path | str | None = None, *, timeout: float = 60.0):
        self.path = Path(path).expanduser() if path is not None else resolve_db_path(None)
        self.timeout = timeout
        self.owner = new_owner("store")        # the lease owner of claim_next() called without one
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        if str(self.path) != ":memory:":
            # the database holds every stored submission's source: its directory is made 0700 and the file
            # 0600 here (SQLite gives -wal/-shm the database's mode), never readable by a sandbox's uid
            from kernelgym_gap.store.private_files import create_private_dir, create_private_file
            create_private_dir(self.path.parent)
            create_private_file(self.path)
        try:
            self.schema_version = migrate(self.conn)
        except sqlite3.DatabaseError as e:
            raise StoreError(f"cannot open the results database {self.path}: {e}") from None

    def __getstate__(self):
        return {"path": self.path, "timeout": self.timeout}

    def __setstate__(self, state):
        self.__init__(state["path"], timeout=state["timeout"])

    def with_timeout(self, timeout: float) -> "Store":
        """The same database opened again with another lock wait (its own connections)."""
        if str(self.path) == ":memory:" or timeout == self.timeout:
            return self
        return Store(self.path, timeout=timeout)

    def __repr__(self) -> str:
        return f"Store({str(self.path)!r})"

    @property
    def conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = connect(self.path, self.timeout)
            with self._lock:
                self._all.append(conn)
        return conn

    def close(self) -> None:
        with self._lock:
            for conn in self._all:
                conn.close()
            self._all.clear()
        self._local = threading.local()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _write(self, fn):
        """Runs fn(conn) in one IMMEDIATE transaction: committed whole or not at all."""
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            result = fn(conn)
            conn.execute("COMMIT")
            return result
        except BaseException:
            conn.execute("ROLLBACK")
            raise
