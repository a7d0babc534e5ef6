"""Results that last: every evaluation record in one SQLite database, a cache in front of the engine, and
the data the leaderboard shows.

Tables (schema version in `schema_version`, upgraded on open by `migrate`):
  sources       submission text by sha256 (bytes, exactly as submitted)
  evaluations   one row per measurement: the cache key, the headline numbers and the whole EvalRecord JSON
  submissions   who submitted what and when (agent or checkpoint name); a queue for the web worker
                (queued -> running -> done | error); a cache hit is a submission that points at an older
                evaluation instead of a new one
  cache         generic (kind, key) -> JSON value, for library baselines and device calibrations
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
  cached_evaluate(store, task, source, dsl, backend, config, submitter, remeasure=False) -> EvalRecord
  caching_evaluator(store, submitter) -> an `evaluator=` for KernelEnv
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import json
import math
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from kernelgym_gap.store.cache_key import (CPU_DEVICE, SETTINGS_NOT_HASHED, CacheKey, cache_key_for, device_key,  # noqa: F401
                        harness_fingerprint, key_from_record, settings_hash, software_hash, software_versions,
                        source_bytes, source_sha256)
from kernelgym_gap.store.cache_key import canonical as canonical_json
from kernelgym_gap.core.errors import KernelGymError, ProtocolError
from kernelgym_gap.core.record import EvalRecord

ENV_DB = "KERNELGYM_GAP_DB"            # Store(path=None) and the CLI's --db default
NOT_CACHED_STATUSES = frozenset({"timeout", "crash", "protocol_error", "unstable_timing"})
STATES = ("queued", "running", "done", "error")


class StoreError(KernelGymError):
    """The results database cannot be used (newer schema than this code, unreadable file)."""


def default_db_path() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "kernelgym_gap" / "results.sqlite3"


DEFAULT_DB_PATH = default_db_path()


def resolve_db_path(flag: str | None) -> Path:
    """The CLI's choice: --db, else $KERNELGYM_GAP_DB, else the default path."""
    return Path(flag or os.environ.get(ENV_DB) or DEFAULT_DB_PATH).expanduser()


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _finite(value: Any) -> Any:
    """JSON without NaN or infinities (a kernel timed at 0 ms has E = inf): those become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def dumps(value: Any) -> str:
    return json.dumps(_finite(value), allow_nan=False, default=str)


# ---- schema ----------------------------------------------------------------------------------------

_V1 = """
CREATE TABLE sources (sha256 TEXT PRIMARY KEY, content BLOB NOT NULL, bytes INTEGER NOT NULL);
CREATE TABLE evaluations (
  id INTEGER PRIMARY KEY, submitter TEXT NOT NULL, submitted_at TEXT NOT NULL,
  task_id TEXT NOT NULL, task_version INTEGER NOT NULL, dsl TEXT NOT NULL, backend TEXT NOT NULL,
  device TEXT NOT NULL, source_sha256 TEXT NOT NULL REFERENCES sources(sha256), settings_hash TEXT NOT NULL,
  status TEXT NOT NULL, correct INTEGER, reward REAL NOT NULL, reward_mode TEXT NOT NULL,
  e REAL, u REAL, verdict TEXT, record_json TEXT NOT NULL, created_at TEXT NOT NULL);
CREATE INDEX evaluations_key ON evaluations (source_sha256, task_id, task_version, dsl, backend, device,
                                             settings_hash);
"""

_V2 = """
ALTER TABLE evaluations ADD COLUMN software_hash TEXT NOT NULL DEFAULT '';
ALTER TABLE evaluations ADD COLUMN performance REAL;
ALTER TABLE evaluations ADD COLUMN diagnosis_summary TEXT;
UPDATE evaluations SET performance = json_extract(record_json, '$.terms.performance'),
                       diagnosis_summary = json_extract(record_json, '$.diagnosis.summary');
DROP INDEX evaluations_key;
CREATE INDEX evaluations_key ON evaluations (source_sha256, task_id, task_version, dsl, backend, device,
                                             settings_hash, software_hash);
CREATE TABLE submissions (
  id INTEGER PRIMARY KEY, submitter TEXT NOT NULL, submitted_at TEXT NOT NULL, task_id TEXT NOT NULL,
  dsl TEXT NOT NULL, backend TEXT NOT NULL, source_sha256 TEXT NOT NULL REFERENCES sources(sha256),
  state TEXT NOT NULL CHECK (state IN ('queued', 'running', 'done', 'error')),
  evaluation_id INTEGER REFERENCES evaluations(id), cache_hit INTEGER NOT NULL DEFAULT 0,
  remeasure INTEGER NOT NULL DEFAULT 0, origin TEXT NOT NULL DEFAULT 'api', error TEXT,
  started_at TEXT, finished_at TEXT,
  CHECK (state != 'done' OR evaluation_id IS NOT NULL));
INSERT INTO submissions (id, submitter, submitted_at, task_id, dsl, backend, source_sha256, state,
                         evaluation_id, origin, finished_at)
  SELECT id, submitter, submitted_at, task_id, dsl, backend, source_sha256, 'done', id, 'v1', created_at
  FROM evaluations;
CREATE INDEX submissions_board ON submissions (task_id, backend, state);
CREATE INDEX submissions_submitter ON submissions (submitter);
CREATE INDEX submissions_state ON submissions (state, id);
CREATE TABLE cache (kind TEXT NOT NULL, key TEXT NOT NULL, value_json TEXT NOT NULL, created_at TEXT NOT NULL,
                    PRIMARY KEY (kind, key));
"""

# (version, description, SQL script). Append only: a released step is never edited.
MIGRATIONS: list[tuple[int, str, str]] = [
    (1, "sources and evaluations", _V1),
    (2, "submissions (queue, submitters, cache hits), generic cache table, software hash", _V2),
]
SCHEMA_VERSION = MIGRATIONS[-1][0]


def _statements(script: str) -> list[str]:
    return [s.strip() for s in script.split(";") if s.strip()]


def current_version(conn: sqlite3.Connection) -> int:
    row = conn.execute("SELECT name FROM sqlite_master WHERE type='table' AND name='schema_version'").fetchone()
    if row is None:
        return 0
    return conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchone()[0]


def migrate(conn: sqlite3.Connection, target: int = SCHEMA_VERSION) -> int:
    """Brings the database up to `target` in one transaction (all steps or none); returns the version."""
    if current_version(conn) == target:
        return target
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, "
                     "description TEXT NOT NULL, applied_at TEXT NOT NULL)")
        version = current_version(conn)           # again, under the write lock
        if version > SCHEMA_VERSION:
            raise StoreError(f"the results database has schema v{version}, newer than this kernelgym_gap "
                             f"(v{SCHEMA_VERSION}): upgrade the package or use another --db")
        for step, description, script in MIGRATIONS:
            if version < step <= target:
                for statement in _statements(script):
                    conn.execute(statement)
                conn.execute("INSERT INTO schema_version VALUES (?, ?, ?)", (step, description, now_iso()))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return current_version(conn)


def connect(path: Path | str, timeout: float = 60.0) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), timeout=timeout, isolation_level=None, check_same_thread=False)
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
    for attempt in range(50):                     # switching to WAL takes a lock other openers may hold
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            break
        except sqlite3.OperationalError:
            time.sleep(0.05 * (attempt + 1))
    conn.execute("PRAGMA synchronous = NORMAL")   # with WAL: a crashed process loses no committed write
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


# ---- the store -------------------------------------------------------------------------------------

def _row_values(record: EvalRecord) -> dict:
    terms, diag = record.terms or {}, record.diagnosis or {}

    def num(x):
        ok = isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
        return float(x) if ok else None
    return {"status": record.status.value, "correct": None if record.correct is None else int(record.correct),
            "reward": float(record.reward), "reward_mode": record.reward_mode, "e": num(terms.get("E")),
            "u": num(terms.get("U")), "performance": num(terms.get("performance")),
            "verdict": diag.get("verdict"), "diagnosis_summary": diag.get("summary"),
            "record_json": dumps(record.to_dict())}


class Store:
    """The results database. Thread-safe (a connection per thread) and picklable (by path)."""

    def __init__(self, path: Path | str | None = None, *, timeout: float = 60.0):
        self.path = Path(path).expanduser() if path is not None else resolve_db_path(None)
        self.timeout = timeout
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        if str(self.path) != ":memory:":
            self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.schema_version = migrate(self.conn)
        except sqlite3.DatabaseError as e:
            raise StoreError(f"cannot open the results database {self.path}: {e}") from None

    def __getstate__(self):
        return {"path": self.path, "timeout": self.timeout}

    def __setstate__(self, state):
        self.__init__(state["path"], timeout=state["timeout"])

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

    # -- writes (each step a method, so a test can stop a writer between them) --

    def _put_source(self, conn, source: str | bytes) -> str:
        raw = source_bytes(source)
        sha = hashlib.sha256(raw).hexdigest()
        conn.execute("INSERT OR IGNORE INTO sources (sha256, content, bytes) VALUES (?, ?, ?)", (sha, raw, len(raw)))
        return sha

    def _insert_evaluation(self, conn, record: EvalRecord, key: CacheKey, submitter: str) -> int:
        v = _row_values(record)
        if record.backend == "cuda":
            _put_device_cache(conn, record, key)
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
        if not isinstance(submitter, str) or not submitter.strip():
            raise ValueError("submitter must be a non-empty name (agent or checkpoint)")
        key = key or key_from_record(record, source, config)

        def write(conn):
            sha = self._put_source(conn, source)
            eid = self._insert_evaluation(conn, record, dataclasses.replace(key, source_sha256=sha), submitter)
            return self._insert_submission(conn, submitter=submitter, task_id=key.task_id, dsl=key.dsl,
                                           backend=key.backend, sha=sha, state="done", evaluation_id=eid,
                                           origin=origin, submitted_at=submitted_at)
        return self._write(write)

    def add_cache_hit(self, evaluation_id: int, submitter: str, origin: str = "api") -> int:
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

    # -- the queue (web submissions) --

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

    # -- generic cache (library baselines, device calibrations) --

    def cache_get(self, kind: str, key: str) -> dict | None:
        row = self.conn.execute("SELECT value_json FROM cache WHERE kind=? AND key=?", (kind, _key(key))).fetchone()
        return json.loads(row["value_json"]) if row else None

    def cache_put(self, kind: str, key: str, value: dict) -> None:
        if not isinstance(value, dict):
            raise TypeError("cache values are JSON objects (dict)")
        text = json.dumps(value, allow_nan=False)
        self._write(lambda conn: conn.execute("INSERT OR REPLACE INTO cache VALUES (?, ?, ?, ?)",
                                              (kind, _key(key), text, now_iso())))

    def cache_items(self, kind: str, limit: int = 1000) -> list[dict]:
        """The values of one kind, newest first, each with its key and when it was written."""
        rows = self.conn.execute("SELECT key, value_json, created_at FROM cache WHERE kind=? "
                                 "ORDER BY created_at DESC, key LIMIT ?", (kind, limit))
        return [{"key": r["key"], "value": json.loads(r["value_json"]), "updated_at": r["created_at"]} for r in rows]

    def cache_delete(self, kind: str, key: str | None = None) -> int:
        if key is None:
            return self._write(lambda conn: conn.execute("DELETE FROM cache WHERE kind=?", (kind,)).rowcount)
        return self._write(lambda conn: conn.execute("DELETE FROM cache WHERE kind=? AND key=?",
                                                     (kind, _key(key))).rowcount)

    # -- reads --

    def submission(self, submission_id: int) -> dict | None:
        """One submission with its state, source and (when done) record."""
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

    def pending(self) -> int:
        """Submissions queued or being evaluated."""
        return self.conn.execute("SELECT COUNT(*) FROM submissions WHERE state IN ('queued', 'running')").fetchone()[0]

    def count(self, table: str) -> int:
        if table not in ("sources", "evaluations", "submissions", "cache"):
            raise ValueError(table)
        return self.conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]

    def integrity(self) -> str:
        return self.conn.execute("PRAGMA integrity_check").fetchone()[0]


def _key(key) -> str:
    return key if isinstance(key, str) else canonical_json(key)


def _put_device_cache(conn, record: EvalRecord, key: CacheKey) -> None:
    """The device ceilings and library timings a cuda record carries, kept per device and software."""
    terms, now = record.terms or {}, now_iso()
    cal = terms.get("calibration")
    if isinstance(cal, dict):
        conn.execute("INSERT OR REPLACE INTO cache VALUES ('calibration', ?, ?, ?)",
                     (_key([key.device, key.software_hash]), dumps(cal), now))
    for row in terms.get("per_shape") or []:
        if not isinstance(row, dict) or not isinstance(row.get("library_ms"), (int, float)):
            continue
        k = _key([key.task_id, key.task_version, row.get("shape"), row.get("dtype"), key.device, key.software_hash])
        value = {"task": key.task_id, "task_version": key.task_version, "shape": row.get("shape"),
                 "dtype": row.get("dtype"), "device": key.device, "library_ms": row["library_ms"],
                 "library_spread": row.get("library_spread"), "floor_ms": row.get("floor_ms"),
                 "measured_at": record.created_at or now}
        conn.execute("INSERT OR REPLACE INTO cache VALUES ('library_baseline', ?, ?, ?)",
                     (k, dumps(value), now))


# ---- the cache in front of the engine --------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class CachedResult:
    record: EvalRecord
    submission_id: int
    evaluation_id: int | None
    cache_hit: bool


def cached_evaluate_full(store: Store, task, source: str | bytes, dsl: str, backend: str, config,
                         submitter: str, remeasure: bool = False, origin: str = "cli") -> CachedResult:
    from kernelgym_gap.engine import pipeline as engine
    backend = engine.resolve_backend(backend)
    key = cache_key_for(task, source, dsl, backend, config)
    if not remeasure:
        hit = store.lookup(key)
        if hit is not None:
            return CachedResult(hit[1], store.add_cache_hit(hit[0], submitter, origin), hit[0], True)
    record = engine.evaluate(task, source, dsl, backend, config)
    sid = store.add_record(record, source, submitter, key=key, origin=origin)
    return CachedResult(record, sid, None, False)


def cached_evaluate(store: Store, task, source: str | bytes, dsl: str, backend: str, config, submitter: str,
                    remeasure: bool = False) -> EvalRecord:
    """engine.evaluate with the store in front: a key measured before returns the stored record without
    starting a child; every call is stored as a submission by `submitter`."""
    return cached_evaluate_full(store, task, source, dsl, backend, config, submitter, remeasure).record


def caching_evaluator(store: Store, submitter: str, remeasure: bool = False):
    """An `evaluator=` for KernelEnv: KernelEnv(task_id=..., evaluator=caching_evaluator(store, "my-agent"))."""
    def evaluator(task, source, dsl, backend, config) -> EvalRecord:
        return cached_evaluate_full(store, task, source, dsl, backend, config, submitter, remeasure,
                                    origin="env").record
    return evaluator
