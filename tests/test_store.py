"""The results store: schema and migrations, round trips, concurrent writers, a writer killed mid-write,
and the cache in front of the engine (a repeated submission starts no child process)."""
from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kernelgym_gap.store import db as st
from kernelgym_gap.core.record import EvalRecord
from kernelgym_gap.core.status import Status

ROOT = Path(__file__).resolve().parent.parent
GELU_FAST = ROOT / "tasks" / "elementwise" / "gelu" / "solutions" / "triton_blocked.py"


def make_record(task="kernelgym_gap/GELU-v0", *, reward=0.8, E=0.9, U=0.6, status=Status.OK,
                backend="cuda", verdict="efficient") -> EvalRecord:
    """A synthetic record shaped like the engine's (test data only, never measured)."""
    ok = status is Status.OK
    if backend == "cpu":           # correctness only: no performance terms
        E = U = None
    per_shape = [{"shape": [4096, 4096], "dtype": "float16", "split": "public", "kernel_ms": 0.1,
                  "kernel_spread": 0.01, "library_ms": 0.1 * E, "library_spread": 0.01, "floor_ms": 0.1 * U,
                  "bound": "memory", "E": E, "U": U, "programs": 4096, "launches_per_call": 1}] if ok and E else None
    return EvalRecord(
        task=task, task_version=0, dsl="triton", backend=backend, status=status, correct=ok,
        reward=reward if ok else 0.0, reward_mode="full" if backend == "cuda" else "correctness",
        terms={"correctness": float(ok), "performance": reward if ok and E else None, "E": E if ok else None,
               "U": U if ok else None, "per_shape": per_shape, "flags": [],
               "calibration": {"source": "measured", "copy_bytes_per_s": 4.2e12, "device": "NVIDIA H200"}},
        message="synthetic", diagnosis={"verdict": verdict, "summary": f"E={E}"} if ok and E else None,
        device={"kind": backend, "name": "NVIDIA H200" if backend == "cuda" else "cpu"},
        versions={"python": "3", "torch": "2", "triton": "3"}, created_at=st.now_iso())


@pytest.fixture
def db(tmp_path) -> Path:
    return tmp_path / "results.sqlite3"


# ---- schema ------------------------------------------------------------------------------------------

def test_new_database_is_wal_and_current(db):
    s = st.Store(db)
    assert s.schema_version == st.SCHEMA_VERSION
    assert s.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    versions = [r[0] for r in s.conn.execute("SELECT version FROM schema_version ORDER BY version")]
    assert versions == [m[0] for m in st.MIGRATIONS]
    assert s.integrity() == "ok"


def test_migrates_a_v1_database_on_open(db):
    conn = st.connect(db)
    assert st.migrate(conn, target=1) == 1
    rec = make_record()
    conn.execute("INSERT INTO sources VALUES ('abc', x'7878', 2)")
    conn.execute("INSERT INTO evaluations (submitter, submitted_at, task_id, task_version, dsl, backend, device, "
                 "source_sha256, settings_hash, status, correct, reward, reward_mode, e, u, verdict, record_json, "
                 "created_at) VALUES ('old', '2026-01-01T00:00:00+00:00', ?, 0, 'triton', 'cuda', 'NVIDIA H200', "
                 "'abc', 'h', 'ok', 1, 0.8, 'full', 0.9, 0.6, 'efficient', ?, '2026-01-01T00:00:00+00:00')",
                 (rec.task, rec.to_json()))
    conn.close()
    s = st.Store(db)                                   # opening migrates
    assert s.schema_version == st.SCHEMA_VERSION == 4    # v1 -> v2 (queue) -> v3 (worker leases) -> v4 (bench)
    sub = s.submission(1)
    assert sub["submitter"] == "old" and sub["state"] == "done" and sub["origin"] == "v1"
    assert sub["record"]["terms"]["E"] == 0.9
    assert s.conn.execute("SELECT performance FROM evaluations").fetchone()[0] == pytest.approx(0.8)


def test_refuses_a_newer_schema(db):
    st.Store(db).close()
    conn = sqlite3.connect(db)
    conn.execute("INSERT INTO schema_version VALUES (99, 'from the future', 'now')")
    conn.commit()
    conn.close()
    with pytest.raises(st.StoreError, match="newer"):
        st.Store(db)


def test_default_path_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(st.ENV_DB, str(tmp_path / "env.sqlite3"))
    assert st.resolve_db_path(None) == tmp_path / "env.sqlite3"
    assert st.resolve_db_path(str(tmp_path / "flag.sqlite3")) == tmp_path / "flag.sqlite3"
    assert st.Store().path == tmp_path / "env.sqlite3"
    monkeypatch.delenv(st.ENV_DB)
    assert st.resolve_db_path(None) == st.DEFAULT_DB_PATH


# ---- records -----------------------------------------------------------------------------------------

def test_record_round_trip_with_every_field(db):
    s = st.Store(db)
    rec = make_record()
    sid = s.add_record(rec, b"def gelu(x): ...\n", "agent-1")
    sub = s.submission(sid)
    assert sub["submitter"] == "agent-1" and sub["state"] == "done" and not sub["cache_hit"]
    assert sub["source"] == "def gelu(x): ...\n"
    assert sub["source_sha256"] == st.source_sha256(b"def gelu(x): ...\n")
    assert EvalRecord.from_dict(sub["record"]) == rec
    assert (sub["reward"], sub["e"], sub["u"], sub["verdict"]) == (0.8, 0.9, 0.6, "efficient")
    row = s.conn.execute("SELECT task_version, dsl, backend, device, software_hash FROM evaluations").fetchone()
    assert tuple(row)[:4] == (0, "triton", "cuda", "NVIDIA H200") and row[4]
    # the device-level cache: ceilings and library timings per device
    assert s.count("cache") == 2
    base = s.conn.execute("SELECT value_json FROM cache WHERE kind='library_baseline'").fetchone()[0]
    assert json.loads(base)["library_ms"] == pytest.approx(0.09)
    with pytest.raises(ValueError):
        s.add_record(rec, "x", " ")


def test_infinite_terms_are_stored_as_null(db):
    s = st.Store(db)
    rec = make_record(status=Status.FASTER_THAN_FLOOR)
    rec = EvalRecord.from_dict({**rec.to_dict(), "terms": {"E": float("inf"), "per_shape": []}})
    sid = s.add_record(rec, "src", "a")
    assert s.submission(sid)["record"]["terms"]["E"] is None


def test_lookup_needs_the_whole_key_and_skips_machine_failures(db):
    s = st.Store(db)
    key = st.CacheKey(st.source_sha256("src"), "kernelgym_gap/GELU-v0", 0, "triton", "cuda", "NVIDIA H200", "settings", "sw")
    s.add_record(make_record(), "src", "a", key=key)
    assert s.lookup(key)[1].reward == 0.8
    for field, other in (("source_sha256", "x"), ("task_version", 1), ("dsl", "tilelang"), ("backend", "cpu"),
                         ("device", "NVIDIA H100"), ("settings_hash", "x"), ("software_hash", "x")):
        assert s.lookup(st.dataclasses.replace(key, **{field: other})) is None, field
    key2 = st.dataclasses.replace(key, source_sha256=st.source_sha256("t"))
    s.add_record(make_record(status=Status.TIMEOUT), "t", "a", key=key2)
    assert s.lookup(key2) is None                      # a timeout may be the machine's fault: measure again


def test_settings_hash_is_the_configs_and_paths_are_not_on_it():
    from kernelgym_gap.core.config import EvalConfig
    from kernelgym_gap.core.placement import PlacementFieldError
    base = EvalConfig()
    with pytest.raises(PlacementFieldError, match="scratch_root"):      # placement: core/placement.Placement
        base.replace(scratch_root="/x", keep_scratch=True)
    assert st.settings_hash(base) != st.settings_hash(base.replace(trial_seed=3))
    assert st.settings_hash(base) != st.settings_hash(base.replace(seeds_per_shape=5))


# ---- concurrency and crashes ---------------------------------------------------------------------------

WRITER = textwrap.dedent("""
    import os, signal, sys
    sys.path.insert(0, {root!r})
    from kernelgym_gap.store import db as st
    sys.path.insert(0, {tests!r})
    from test_store import make_record
    path, name, n, kill_at = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    s = st.Store(path, timeout=120)
    if kill_at:
        real = s._insert_submission
        def insert(conn, **kw):
            if s.count("submissions") + 1 >= kill_at:   # the evaluation row is written, the submission not yet
                os.kill(os.getpid(), signal.SIGKILL)
            return real(conn, **kw)
        s._insert_submission = insert
    for i in range(n):
        s.add_record(make_record(reward=i / n), f"{{name}} {{i}}", name)
        print(i, flush=True)
""")


def _writer(tmp_path: Path, db: Path, name: str, n: int, kill_at: int = 0) -> subprocess.Popen:
    script = tmp_path / "writer.py"
    if not script.exists():
        script.write_text(WRITER.format(root=str(ROOT), tests=str(ROOT / "tests")))
    return subprocess.Popen([sys.executable, str(script), str(db), name, str(n), str(kill_at)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _consistent(s: st.Store) -> None:
    assert s.integrity() == "ok"
    # every evaluation belongs to a finished submission, every submission's source exists
    orphans = s.conn.execute("SELECT COUNT(*) FROM evaluations e WHERE NOT EXISTS "
                             "(SELECT 1 FROM submissions s WHERE s.evaluation_id = e.id)").fetchone()[0]
    assert orphans == 0
    assert s.conn.execute("PRAGMA foreign_key_check").fetchall() == []


def test_concurrent_writers_lose_nothing(tmp_path, db):
    # they also create the database together (migrations under the write lock)
    n, names = 25, [f"writer-{i}" for i in range(4)]
    procs = [_writer(tmp_path, db, name, n) for name in names]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    s = st.Store(db)
    _consistent(s)
    assert s.count("submissions") == s.count("evaluations") == s.count("sources") == n * len(names)
    per = dict(s.conn.execute("SELECT submitter, COUNT(*) FROM submissions GROUP BY submitter").fetchall())
    assert per == {name: n for name in names}


def test_writer_killed_mid_write_leaves_a_consistent_database(tmp_path, db):
    st.Store(db).close()
    # 1. killed by SIGKILL inside the transaction of its 4th record (after its evaluation row was written)
    p = _writer(tmp_path, db, "victim", 10, kill_at=4)
    p.communicate(timeout=60)
    assert p.returncode == -signal.SIGKILL
    s = st.Store(db)
    _consistent(s)
    assert s.count("submissions") == s.count("evaluations") == 3   # the 4th write left no trace
    s.close()
    # 2. killed at an arbitrary moment while several processes write
    procs = [_writer(tmp_path, db, "w0", 20000), _writer(tmp_path, db, "w1", 400)]
    assert procs[0].stdout.readline()                  # it has committed at least one record
    time.sleep(0.3)
    procs[0].send_signal(signal.SIGKILL)
    procs[0].wait(30)
    procs[1].communicate(timeout=120)
    assert procs[1].returncode == 0
    s = st.Store(db)
    _consistent(s)
    counts = dict(s.conn.execute("SELECT submitter, COUNT(*) FROM submissions GROUP BY submitter").fetchall())
    assert counts["w1"] == 400 and 1 <= counts["w0"] < 20000
    s.add_record(make_record(), "after the crash", "survivor")   # and it is still writable


# ---- the store in front of an evaluation (api/cached.py) ---------------------------------------------------

@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")   # the probe thread's
def test_repeated_submission_is_served_from_the_cache_without_a_child(db, registry, monkeypatch):
    from kernelgym_gap.api import cached
    from kernelgym_gap.sandbox import child_io as child
    from kernelgym_gap.judge import trusted
    from kernelgym_gap.core.config import EvalConfig
    task, source, config = registry.get("GELU"), GELU_FAST.read_text(), EvalConfig()
    s = st.Store(db)
    first = cached.cached_evaluate_full(s, task, source, "triton", "cpu", config, "agent-a")
    assert not first.cache_hit and first.record.status is Status.OK, first.record.message

    started = []

    def no_child(*a, **kw):
        started.append(a)
        raise AssertionError("the cache should have answered: a child process was started")
    monkeypatch.setattr(child, "run_sandboxed", no_child)
    monkeypatch.setattr(trusted.subprocess, "run", no_child)
    monkeypatch.setattr(trusted.subprocess, "Popen", no_child)
    again = cached.cached_evaluate_full(s, task, source, "triton", "cpu", config, "agent-b")
    assert again.cache_hit and again.record == first.record and started == []
    assert again.evaluation_id == s.submission(first.submission_id)["evaluation_id"]
    assert cached.cached_evaluate(s, task, source.encode(), "triton", "cpu", config, "agent-c") == first.record
    assert s.count("evaluations") == 1 and s.count("submissions") == 3
    assert s.submission(again.submission_id)["cache_hit"] and s.submission(again.submission_id)["submitter"] == "agent-b"
    assert started == []
    # anything in the key that differs measures again (here: it starts a child, which the patch refuses:
    # the evaluation service turns that into the evaluation's failure record, stored as measured)
    for n, changed in enumerate((dict(source=source + "\n# changed\n"), dict(config=config.replace(trial_seed=7)),
                                 dict(remeasure=True)), 1):
        kw = dict(source=source, config=config, remeasure=False) | changed
        rec = cached.cached_evaluate(s, task, kw["source"], "triton", "cpu", kw["config"], "agent-d",
                                     remeasure=kw["remeasure"])
        assert started and rec.status is not Status.OK, rec.status
        started.clear()
        assert s.count("submissions") == 3 + n
