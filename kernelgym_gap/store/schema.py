"""The database itself: where it lives, how a connection is opened (WAL, busy timeout), the schema and its
append-only migrations, and the JSON helpers every table uses.

Tables (schema version in `schema_version`, upgraded on open by `migrate`):
  sources       submission text by sha256 (bytes, exactly as submitted)
  evaluations   one row per measurement: the cache key, the headline numbers and the whole EvalRecord JSON
  submissions   who submitted what and when (agent or checkpoint name); a queue for the web worker
                (queued -> running -> done | error); a cache hit is a submission that points at an older
                evaluation instead of a new one
  cache         generic (kind, key) -> JSON value, for library baselines and device calibrations
A running submission carries its worker's lease (owner, expiry; v3).
  bench_runs, bench_episodes, bench_steps   benchmark runs by label (v4; store/bench.py)
"""
from __future__ import annotations

import datetime as _dt
import json
import math
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from kernelgym_gap.core.errors import KernelGymError

ENV_DB = "KERNELGYM_GAP_DB"            # Store(path=None) and the CLI's --db default


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

# Worker leases: a running submission belongs to the worker that claimed it (lease_owner) until its lease
# runs out (lease_expires_at, unix seconds); the worker renews it while it evaluates (a heartbeat), and only
# a submission whose lease ran out goes back to the queue. Rows left running by v2 have no lease: expired.
_V3 = """
ALTER TABLE submissions ADD COLUMN lease_owner TEXT;
ALTER TABLE submissions ADD COLUMN lease_expires_at REAL;
"""

# Benchmark runs (`kernelgym-gap bench`, store/bench.py): a run per label, its episodes (task x sample) and
# each episode's steps, each step pointing at the evaluation row that measured it.
_V4 = """
CREATE TABLE bench_runs (label TEXT PRIMARY KEY, agent TEXT NOT NULL, dsl TEXT NOT NULL, backend TEXT NOT NULL,
  config_json TEXT NOT NULL, created_at TEXT NOT NULL, updated_at TEXT NOT NULL);
CREATE TABLE bench_episodes (
  label TEXT NOT NULL REFERENCES bench_runs(label), task_id TEXT NOT NULL, sample INTEGER NOT NULL,
  category TEXT NOT NULL DEFAULT '', level INTEGER,
  state TEXT NOT NULL CHECK (state IN ('running', 'done', 'error')), error TEXT, finished TEXT,
  usage_json TEXT, seconds REAL, started_at TEXT, finished_at TEXT, PRIMARY KEY (label, task_id, sample));
CREATE TABLE bench_steps (
  label TEXT NOT NULL, task_id TEXT NOT NULL, sample INTEGER NOT NULL, step INTEGER NOT NULL,
  evaluation_id INTEGER NOT NULL REFERENCES evaluations(id), source_sha256 TEXT NOT NULL, note TEXT,
  seconds REAL, created_at TEXT NOT NULL, PRIMARY KEY (label, task_id, sample, step));
"""

# (version, description, SQL script). Append only: a released step is never edited.
MIGRATIONS: list[tuple[int, str, str]] = [
    (1, "sources and evaluations", _V1),
    (2, "submissions (queue, submitters, cache hits), generic cache table, software hash", _V2),
    (3, "worker leases on running submissions (owner, expiry)", _V3),
    (4, "benchmark runs, episodes and steps (kernelgym-gap bench)", _V4),
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


def is_busy(error: BaseException) -> bool:
    """Whether an sqlite3 error means another connection holds the lock (waited busy_timeout in vain)."""
    if not isinstance(error, sqlite3.OperationalError):
        return False
    text = str(error).lower()
    return "locked" in text or "busy" in text


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
