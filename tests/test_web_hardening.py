"""The served leaderboard and the CLI under hostile and careless use (issue 19), one test (or more) per item.

Web tests talk to a real uvicorn server on loopback: either the real `kernelgym-gap leaderboard serve`
command (a subprocess, as tests/test_web.py does) or, where the test must reach inside (a monkeypatched
failure, a small connection cap), the same app and uvicorn settings run in a thread of this process.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="the web extra is not installed (pip install -e '.[web]')")
pytest.importorskip("uvicorn", reason="the web extra is not installed (pip install -e '.[web]')")

import uvicorn  # noqa: E402

from kernelgym_gap.store import db as st  # noqa: E402
from kernelgym_gap.web.app import create_app  # noqa: E402

try:
    from kernelgym_gap.web.server import server_config
except ImportError:                     # before issue 19: uvicorn's defaults
    def server_config(app, host="127.0.0.1", port=8000, **kw):
        return uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="off")

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

ROOT = Path(__file__).resolve().parent.parent
GELU_FAST = ROOT / "tasks" / "elementwise" / "gelu" / "solutions" / "triton_blocked.py"
TOKEN = "hardening-token-42"
GELU = "kernelgym_gap/GELU-v1"
GOOD = {"task": "GELU", "name": "api-agent", "source": "def gelu(x):\n    return x\n"}
MB = 1 << 20


# ---- servers -------------------------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Live:
    """The app under uvicorn (with serve's settings) in a thread of this process, on a loopback port."""

    def __init__(self, app, **config):
        self.port = _free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(server_config(app, "127.0.0.1", self.port, **config))
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        asyncio.run(self.server.serve())

    def __enter__(self):
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "the server did not start"
            time.sleep(0.02)
        return self

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(15)


@pytest.fixture
def store(tmp_path):
    s = st.Store(tmp_path / "board.sqlite3")
    yield s
    s.close()


@pytest.fixture
def live(store, registry):
    with Live(create_app(store, TOKEN, registry=registry, backend="cpu")) as server:
        yield server


def _env() -> dict:
    """This checkout first on the path of the subprocesses (an editable install may point elsewhere)."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p])}


def _serve(tmp_path: Path, db: Path, *extra: str, env: dict | None = None) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "kernelgym_gap.cli.main", "leaderboard", "serve", "--port",
                             str(port), "--backend", "cpu", "--db", str(db), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                            env={**_env(), **(env or {})})
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the server exited with {proc.returncode}: {proc.stderr.read()}")
        try:
            with urllib.request.urlopen(base + "/api/health", timeout=2) as r:
                if r.status == 200:
                    return proc, base
        except OSError:
            time.sleep(0.3)
    proc.kill()
    raise AssertionError("the server did not answer")


def _stop(proc: subprocess.Popen) -> str:
    proc.terminate()
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    return err


def _request(base: str, path: str, *, data: bytes | None = None, headers: dict | None = None,
             method: str | None = None, timeout: float = 30):
    """(status, headers, body) of one request; 4xx and 5xx are answers, not exceptions."""
    req = urllib.request.Request(base + path, data=data, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def _post_json(base: str, body, token: str | None = TOKEN, **headers):
    if token:
        headers["Authorization"] = f"Bearer {token}"
    headers["Content-Type"] = "application/json"
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return _request(base, "/api/submissions", data=data, headers=headers, method="POST")


def _multipart(parts: list[tuple[str, bytes, str | None]], boundary: str = "kggboundary") -> bytes:
    out = b""
    for name, value, filename in parts:
        disp = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
        out += f"--{boundary}\r\nContent-Disposition: {disp}\r\n\r\n".encode() + value + b"\r\n"
    return out + f"--{boundary}--\r\n".encode()


def _stream_upload(port: int, head: bytes, chunks, total: int) -> dict:
    """Sends `head`, then `chunks` (bytes, chunked transfer encoding) from a thread while this one reads the
    answer; returns the status line, how much was sent when the answer came, in all, and whether the server
    closed the connection."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sent = {"n": 0, "error": None}

    def pump():
        try:
            sock.sendall(head)
            for chunk in chunks:
                sock.sendall(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
                sent["n"] += len(chunk)
            sock.sendall(b"0\r\n\r\n")
        except OSError as e:               # the server closed the connection: what a refusal should do
            sent["error"] = e
    t = threading.Thread(target=pump, daemon=True)
    t.start()
    data = b""
    while b"\r\n\r\n" not in data:
        try:
            more = sock.recv(65536)
        except OSError:
            break
        if not more:
            break
        data += more
    at_answer = sent["n"]
    t.join(60)
    closed = False
    try:
        sock.settimeout(5)
        while True:
            more = sock.recv(65536)
            if not more:
                closed = True
                break
            data += more
    except socket.timeout:
        closed = False                     # still open, waiting for more
    except OSError:
        closed = True
    sock.close()
    status = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/") else None
    return {"status": status, "sent_at_answer": at_answer, "sent": sent["n"], "closed": closed, "raw": data,
            "total": total}


def _chunks_of(total: int, size: int = 64 * 1024):
    block = b"x" * size
    for _ in range(total // size):
        yield block


def _nothing_stored(store):
    assert store.count("submissions") == store.count("sources") == store.count("evaluations") == 0


# ---- 1. bodies: auth before reading, a limit while streaming, nothing spooled ----------------------------------

def test_1_unauthenticated_chunked_json_upload_is_refused_without_being_read(live, store):
    total = 50 * MB
    head = (b"POST /api/submissions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n")
    r = _stream_upload(live.port, head, _chunks_of(total), total)
    assert r["status"] == 401, r["raw"][:300]
    assert r["closed"], "the server kept the connection open to read the refused upload"
    assert r["sent"] < total // 2, f"the server read {r['sent']} bytes of an upload it refused"
    _nothing_stored(store)


@pytest.mark.parametrize("token,status", [(b"", 401), (b"wrong", 403)])
def test_1_form_upload_without_a_valid_token_is_refused_before_the_file_is_read(live, store, token, status):
    total = 50 * MB
    prefix = _multipart([("task", GELU.encode(), None), ("name", b"form-agent", None), ("token", token, None)])
    prefix = prefix[:prefix.rindex(b"--kggboundary--")]         # the file part follows, streamed
    prefix += b'--kggboundary\r\nContent-Disposition: form-data; name="file"; filename="k.py"\r\n\r\n'
    head = (b"POST /submit HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=kggboundary\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n")
    r = _stream_upload(live.port, head, [prefix, *_chunks_of(total)], total)
    assert r["status"] == status, r["raw"][:300]
    assert r["sent_at_answer"] < 8 * MB, "the answer came only after the upload was read"
    assert r["closed"] and r["sent"] < total // 2
    _nothing_stored(store)


def test_1_chunked_upload_with_the_token_gets_413_once_past_the_limit(live, store):
    total = 50 * MB
    head = ("POST /api/submissions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Authorization: Bearer {TOKEN}\r\nTransfer-Encoding: chunked\r\n\r\n").encode()
    r = _stream_upload(live.port, head, _chunks_of(total), total)
    assert r["status"] == 413 and r["closed"] and r["sent"] < total // 2
    prefix = _multipart([("task", GELU.encode(), None), ("name", b"n", None), ("token", TOKEN.encode(), None)])
    prefix = prefix[:prefix.rindex(b"--kggboundary--")]
    prefix += b'--kggboundary\r\nContent-Disposition: form-data; name="file"; filename="k.py"\r\n\r\n'
    head = (b"POST /submit HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=kggboundary\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n")
    r = _stream_upload(live.port, head, [prefix, *_chunks_of(total)], total)
    assert r["status"] == 413 and r["sent_at_answer"] < 8 * MB and r["closed"]
    _nothing_stored(store)


# ---- 2. the event loop never waits on the database; a held lock answers 503 ----------------------------------

LOCKER = textwrap.dedent("""
    import sqlite3, sys, time
    conn = sqlite3.connect(sys.argv[1], isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("INSERT INTO cache VALUES ('lock-test', 'k', '{}', 'now')")
    print("locked", flush=True)
    time.sleep(float(sys.argv[2]))
    conn.execute("ROLLBACK")
""")


def test_2_health_answers_fast_and_writes_get_503_while_another_process_holds_the_write_lock(live, store):
    hold_s = 8.0
    locker = subprocess.Popen([sys.executable, "-c", LOCKER, str(store.path), str(hold_s)], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert locker.stdout.readline().strip() == "locked"
        t0 = time.monotonic()
        answers: dict = {}

        def submit(kind):
            t = time.monotonic()
            if kind == "api":
                answers[kind] = (*_post_json(live.base, GOOD), time.monotonic() - t)
            else:
                body = _multipart([("task", GELU.encode(), None), ("name", b"form-agent", None),
                                   ("token", TOKEN.encode(), None), ("source", GOOD["source"].encode(), None)])
                answers[kind] = (*_request(live.base, "/submit", data=body, method="POST", headers={
                    "Content-Type": "multipart/form-data; boundary=kggboundary"}), time.monotonic() - t)
        writers = [threading.Thread(target=submit, args=(k,)) for k in ("api", "form")]
        for w in writers:
            w.start()
        health = []
        while time.monotonic() - t0 < hold_s - 2:
            t = time.monotonic()
            status, _, body = _request(live.base, "/api/health", timeout=hold_s + 5)
            health.append(time.monotonic() - t)
            assert status == 200 and json.loads(body)["ok"]
            time.sleep(0.2)
        for w in writers:
            w.join(hold_s + 10)
        assert health and max(health) < 1.0, f"/api/health took {max(health):.2f} s while the lock was held"
        for kind in ("api", "form"):
            status, headers, body, took = answers[kind]
            assert status == 503, (kind, status, body[:300])
            assert headers["Retry-After"] and took < hold_s - 2, (kind, took)
            assert b"busy" in body
        assert time.monotonic() - t0 < hold_s, "the refusals came only after the lock was released"
    finally:
        locker.wait(30)
    _nothing_stored(store)
    assert _post_json(live.base, GOOD)[0] == 202          # the lock is gone: the same request is accepted


# ---- 3. worker leases --------------------------------------------------------------------------------------

def _fake_record(task, backend="cpu"):
    from kernelgym_gap.core.record import EvalRecord
    from kernelgym_gap.core.status import Status
    return EvalRecord(task=task.id, task_version=task.version, dsl="triton", backend=backend, status=Status.OK,
                      correct=True, reward=1.0, reward_mode="correctness", terms={"correctness": 1.0},
                      message="synthetic", created_at=st.now_iso())


def test_3_a_second_worker_never_takes_a_live_workers_submission_and_an_expired_lease_is_requeued(
        store, registry, monkeypatch):
    from kernelgym_gap.core.config import EvalConfig
    from kernelgym_gap.engine import pipeline as engine
    from kernelgym_gap.web.worker import Worker
    release, calls = threading.Event(), []

    def slow_evaluate(task, source, dsl, backend, config):     # a synthetic evaluation that waits to be told
        calls.append(threading.current_thread().name)
        release.wait(30)
        return _fake_record(task)
    monkeypatch.setattr(engine, "evaluate", slow_evaluate)
    sid = store.enqueue(b"# one\n", submitter="a", task_id=GELU, dsl="triton", backend="cpu", remeasure=True)
    first = Worker(store, registry, EvalConfig(), lease_s=1.0, poll_s=0.05)
    first.start()
    deadline = time.monotonic() + 10
    while store.submission(sid)["state"] != "running":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    second = Worker(st.Store(store.path), registry, EvalConfig(), lease_s=1.0, poll_s=0.05)
    second.start()                               # what a second `leaderboard serve` does on the same database
    time.sleep(3.0)                              # three lease lengths: the first worker's heartbeat keeps it
    assert len(calls) == 1 and store.submission(sid)["state"] == "running"
    release.set()
    deadline = time.monotonic() + 10
    while store.submission(sid)["state"] != "done":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    first.stop()
    second.stop()
    assert store.count("evaluations") == 1 and len(calls) == 1

    # a worker that stopped renewing (killed) loses its submission once the lease runs out; its late result
    # is dropped, so the submission is completed once, by the worker that took it over
    sid2 = store.enqueue(b"# two\n", submitter="b", task_id=GELU, dsl="triton", backend="cpu", remeasure=True)
    job = store.claim_next("dead-worker", lease_s=0.5)
    assert job["id"] == sid2
    assert store.requeue_interrupted() == 0      # not yet expired
    time.sleep(0.7)
    taker = store.claim_next("live-worker", lease_s=30)
    assert taker["id"] == sid2 and taker["lease_owner"] == "live-worker"
    assert store.heartbeat("dead-worker", [sid2]) == set()
    assert store.finish(sid2, record=_fake_record(registry.get(GELU)), key=st.CacheKey("x", GELU, 0, "triton", "cpu",
                        "cpu", "s"), owner="dead-worker") is False
    assert store.count("evaluations") == 1
    assert store.finish(sid2, evaluation_id=1, owner="live-worker") is True
    assert store.submission(sid2)["state"] == "done"


SLOW_GELU = "import time\ntime.sleep(10)   # a slow import: the evaluation runs long enough to be disturbed\n"


def test_3_two_leaderboard_servers_on_one_database_evaluate_a_submission_once(tmp_path):
    db = tmp_path / "shared.sqlite3"
    a, base_a = _serve(tmp_path, db, "--token", TOKEN)
    b = None
    try:
        source = SLOW_GELU + GELU_FAST.read_text()
        status, _, body = _post_json(base_a, {"task": "GELU", "name": "slow-agent", "source": source})
        assert status == 202, body
        sid = json.loads(body)["id"]
        deadline = time.monotonic() + 60
        while json.loads(_request(base_a, f"/api/submissions/{sid}")[2])["state"] != "running":
            assert time.monotonic() < deadline, "the first server's worker did not start the submission"
            time.sleep(0.2)
        started = json.loads(_request(base_a, f"/api/submissions/{sid}")[2])["started_at"]
        b, base_b = _serve(tmp_path, db, "--token", TOKEN)     # its worker starts while the first evaluates
        deadline = time.monotonic() + 240
        while (sub := json.loads(_request(base_b, f"/api/submissions/{sid}")[2]))["state"] != "done":
            assert sub["state"] == "running" and time.monotonic() < deadline, sub
            time.sleep(0.5)
        time.sleep(15)                           # time for a second evaluation, if one had been started
        s = st.Store(db)
        assert s.count("evaluations") == 1, "the submission was evaluated twice"
        assert s.submission(sid)["started_at"] == started
        orphans = s.conn.execute("SELECT COUNT(*) FROM evaluations e WHERE NOT EXISTS (SELECT 1 FROM submissions "
                                 "x WHERE x.evaluation_id = e.id)").fetchone()[0]
        assert orphans == 0
    finally:
        for p in (b, a):
            if p is not None:
                _stop(p)


# ---- 4. out-of-range ids and pages, hostile JSON, headers on every answer -------------------------------------

SECURITY = ("content-security-policy", "x-content-type-options", "referrer-policy")


def test_4_out_of_range_ids_and_pages_are_4xx_not_500(live, store):
    for path, status in [("/api/submissions/9223372036854775808", 404), ("/submissions/99999999999999999999", 404),
                         ("/api/submissions/9223372036854775807", 404), ("/submissions/0", 404),
                         ("/api/submissions?page=9223372036854775807", 400), ("/?page=9223372036854775807", 400),
                         ("/submissions?page=99999999999999999999999", 400),
                         ("/api/leaderboard?page=9223372036854775807", 400)]:
        got, headers, body = _request(live.base, path)
        assert got == status, (path, got, body[:200])
        assert all(headers[h] for h in SECURITY), path


def test_4_deeply_nested_json_is_400(live, store):
    deep = b"[" * 100_000 + b"]" * 100_000
    status, _, body = _post_json(live.base, deep)
    assert status == 400 and b"malformed JSON" in body
    status, _, body = _post_json(live.base, b'{"task": "GELU", "name": "n", "source": ' + deep + b"}")
    assert status == 400
    _nothing_stored(store)


def test_4_a_500_carries_the_security_headers(live, monkeypatch):
    from kernelgym_gap.web import board

    def broken(*a, **kw):
        raise RuntimeError("a bug")
    monkeypatch.setattr(board, "overall_ranking", broken)
    for path in ("/api/leaderboard", "/"):
        status, headers, body = _request(live.base, path)
        assert status == 500, path
        assert all(headers[h] for h in SECURITY), (path, dict(headers))
        assert b"a bug" not in body and b"Traceback" not in body


# ---- 5. timeouts and a connection cap --------------------------------------------------------------------------

def _closed_within(sock: socket.socket, bound: float) -> tuple[bool, float, bytes]:
    t0, data = time.monotonic(), b""
    sock.settimeout(0.5)
    while time.monotonic() - t0 < bound:
        try:
            more = sock.recv(4096)
        except socket.timeout:
            continue
        except OSError:
            return True, time.monotonic() - t0, data
        if not more:
            return True, time.monotonic() - t0, data
        data += more
    return False, time.monotonic() - t0, data


def test_5_serve_closes_a_connection_with_incomplete_headers_and_never_prints_a_chosen_token(tmp_path):
    proc, base = _serve(tmp_path, tmp_path / "t.sqlite3", env={"KERNELGYM_GAP_TOKEN": "env-secret-token-7"})
    try:
        port = int(base.rsplit(":", 1)[1])
        idle = socket.create_connection(("127.0.0.1", port))
        idle.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")                     # never finished
        trickle = socket.create_connection(("127.0.0.1", port))
        trickle.sendall(b"GET / HTTP/1.1\r\n")
        stop = threading.Event()

        def drip():                              # a header byte a second: slow, never complete
            while not stop.wait(1.0):
                try:
                    trickle.sendall(b"X")
                except OSError:
                    return
        threading.Thread(target=drip, daemon=True).start()
        closed, took, data = _closed_within(idle, 16.0)
        assert closed and took < 16.0, "a connection with incomplete headers stayed open"
        closed2, took2, _ = _closed_within(trickle, 6.0)
        stop.set()
        assert closed2, "a connection trickling its headers stayed open"
        assert data.startswith(b"HTTP/1.1 408") or data == b""
        idle.close()
        trickle.close()
        assert _request(base, "/api/health")[0] == 200                    # and the server still answers
    finally:
        err = _stop(proc)
    assert "env-secret-token-7" not in err and "KERNELGYM_GAP_TOKEN" in err


def test_5_connections_beyond_the_cap_are_refused_at_once(store, registry):
    with Live(create_app(store, TOKEN, registry=registry, backend="cpu"), max_connections=4) as server:
        held = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(4)]
        time.sleep(0.3)
        # past the cap only the health reserve is left (issue 32, L4): anything but a health path is 503
        extra = socket.create_connection(("127.0.0.1", server.port))
        extra.sendall(b"GET /api/leaderboard HTTP/1.1\r\nHost: x\r\n\r\n")
        closed, took, data = _closed_within(extra, 5.0)
        assert closed and took < 2.0 and data.startswith(b"HTTP/1.1 503"), data[:100]
        for s in held:
            s.close()
        time.sleep(0.3)
        assert _request(server.base, "/api/health")[0] == 200


def test_5_a_body_that_trickles_is_cut_off(store, registry):
    app = create_app(store, TOKEN, registry=registry, backend="cpu")
    app.state.settings.body_timeout_s = 2.0
    with Live(app) as server:
        sock = socket.create_connection(("127.0.0.1", server.port))
        sock.sendall(f"POST /api/submissions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
                     "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{".encode())
        closed, took, data = _closed_within(sock, 8.0)
        assert closed and data.startswith(b"HTTP/1.1 408"), data[:100]
    _nothing_stored(store)


# ---- 6. one name rule, checked before evaluating --------------------------------------------------------------

def _no_evaluation(monkeypatch):
    from kernelgym_gap.engine import pipeline as engine
    from kernelgym_gap.sandbox import child_io as child

    def forbidden(*a, **kw):
        raise AssertionError("evaluated before the name was checked")
    monkeypatch.setattr(engine, "evaluate", forbidden)
    monkeypatch.setattr(child, "run_sandboxed", forbidden)


@pytest.mark.parametrize("name", ["", "   ", "<b>x</b>", "-starts-with-a-dash"])
def test_6_cli_submit_applies_the_webs_name_rule_before_evaluating(live, store, registry, monkeypatch, capsys, name):
    from kernelgym_gap.cli.main import main
    from kernelgym_gap.core.config import EvalConfig
    web = _post_json(live.base, {**GOOD, "name": name})
    assert web[0] == 422
    web_message = json.loads(web[2])["error"]
    source = GELU_FAST.read_bytes()               # cached: the CLI would have stored the name without evaluating
    store.add_record(_fake_record(registry.get(GELU)), source, "first",
                     key=st.cache_key_for(registry.get(GELU), source, "triton", "cpu", EvalConfig()))
    _no_evaluation(monkeypatch)
    before = store.count("submissions")
    for path in (GELU_FAST, ROOT / "tests" / "test_web_hardening.py"):    # a cached source, a fresh one
        rc = main(["submit", "--task", "GELU", f"--name={name}", "--backend", "cpu", "--db", str(store.path),
                   str(path)])
        err = capsys.readouterr().err.strip()
        assert rc == 2 and web_message in err and len(err.splitlines()) == 1, err
    assert store.count("submissions") == before


# ---- 7. usage errors for bad paths ---------------------------------------------------------------------------

def test_7_eval_and_submit_of_a_bad_path_are_usage_errors(tmp_path, monkeypatch, capsys):
    from kernelgym_gap.cli.main import main
    _no_evaluation(monkeypatch)
    loop = tmp_path / "loop.py"
    os.symlink(loop, loop)                       # reading it fails (ELOOP) even as root
    unreadable = tmp_path / "secret.py"
    unreadable.write_text("x")
    real_read = Path.read_bytes

    def read_bytes(self):
        if self.name == "secret.py":
            raise PermissionError(13, "Permission denied", str(self))
        return real_read(self)
    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    db = str(tmp_path / "r.sqlite3")
    for path, words in [(str(tmp_path), "directory"), ("", "empty"), (str(tmp_path / "nope.py"), "nope.py"),
                        (str(loop), "loop.py"), (str(unreadable), "secret.py"), ("/dev/null", "regular")]:
        for argv in (["eval", "--task", "GELU", "--backend", "cpu", path],
                     ["submit", "--task", "GELU", "--name", "n", "--backend", "cpu", "--db", db, path]):
            rc = main(argv)
            err = capsys.readouterr().err.strip()
            assert rc == 2 and words in err and len(err.splitlines()) == 1, (argv, err)


def test_7_a_directory_is_a_one_line_usage_error_from_the_console(tmp_path):
    p = subprocess.run([sys.executable, "-m", "kernelgym_gap.cli.main", "submit", "--task", "GELU", "--name", "n",
                        "--backend", "cpu", "--db", str(tmp_path / "r.sqlite3"), str(tmp_path)],
                       capture_output=True, text=True, timeout=120, env=_env())
    assert p.returncode == 2 and "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr


# ---- 8. the textarea's bytes, X-Token, the screening 404 -------------------------------------------------------

def test_8_the_textarea_keeps_its_bytes_and_gets_the_file_inputs_answer(live, store, registry):
    raw = b"# caf\xe9 in Latin-1, not UTF-8\n" + GELU_FAST.read_bytes()
    ids = []
    for field, filename in (("source", None), ("file", "k.py")):
        body = _multipart([("task", GELU.encode(), None), ("name", b"form-agent", None),
                           ("token", TOKEN.encode(), None), (field, raw, filename)])
        req = urllib.request.Request(live.base + "/submit", data=body, method="POST", headers={
            "Content-Type": "multipart/form-data; boundary=kggboundary"})
        opener = urllib.request.build_opener(type("NoRedirect", (urllib.request.HTTPRedirectHandler,),
                                                  {"redirect_request": lambda *a, **k: None}))
        try:
            opener.open(req, timeout=30)
            raise AssertionError("expected a redirect")
        except urllib.error.HTTPError as e:
            assert e.code == 303, e.read()[:300]
            ids.append(int(e.headers["location"].rsplit("/", 1)[1]))
    subs = [json.loads(_request(live.base, f"/api/submissions/{i}")[2]) for i in ids]
    assert [s["source_sha256"] for s in subs] == [hashlib.sha256(raw).hexdigest()] * 2
    from kernelgym_gap.core.config import EvalConfig
    from kernelgym_gap.web.worker import Worker
    w = Worker(store, registry, EvalConfig())
    for _ in ids:
        w.run_one(store.claim_next())
    done = [store.submission(i) for i in ids]
    assert [d["status"] for d in done] == ["source_not_utf8"] * 2
    assert done[0]["evaluation_id"] == done[1]["evaluation_id"]       # the same bytes: the same answer


def test_8_x_token_is_not_a_way_in(live, store):
    status, headers, _ = _post_json(live.base, GOOD, token=None, **{"X-Token": TOKEN})
    assert status == 401 and headers["WWW-Authenticate"] == "Bearer"
    _nothing_stored(store)


def test_8_an_unknown_tasks_screening_is_404_like_its_sibling(live):
    for path in ("/api/tasks/Unknown-v0/screening", "/api/tasks/Unknown-v0"):
        assert _request(live.base, path)[0] == 404, path
    assert _request(live.base, "/api/tasks/GELU-v1/screening")[0] == 200


# ---- issue 32: the leaderboard on the serving layer it shares with the reward server ------------------

def test_32_one_clients_idle_connections_leave_room_for_another(store, registry):
    """300 idle connections from one address used to make /api/health 503 (the cap was shared by all
    clients); the cap per client address keeps the others served."""
    with Live(create_app(store, TOKEN, registry=registry, backend="cpu"), max_connections=64,
              max_per_client=8) as server:
        held = []
        for _ in range(12):
            s = socket.socket()
            s.bind(("127.0.0.2", 0))
            s.connect(("127.0.0.1", server.port))
            held.append(s)
        time.sleep(0.3)
        assert _request(server.base, "/api/health")[0] == 200          # from 127.0.0.1
        extra = held[-1]
        closed, took, data = _closed_within(extra, 5.0)
        assert closed and data.startswith(b"HTTP/1.1 503"), data[:100]
        for s in held:
            s.close()


# ---- issue 32 L2: a results database a submission could read is refused; a new one is private -------------

def test_a_new_database_is_created_0600_in_a_0700_directory(tmp_path):
    import stat as _stat
    path = tmp_path / "fresh" / "deeper" / "results.sqlite3"
    store = st.Store(path)
    store.enqueue(b"def f(): pass\n", task_id="kernelgym_gap/GELU-v1", dsl="triton", backend="cpu",
                  submitter="someone", origin="api")
    assert _stat.S_IMODE(path.stat().st_mode) == 0o600
    assert _stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    for side in (Path(f"{path}-wal"), Path(f"{path}-shm")):      # SQLite copies the database's mode
        if side.exists():
            assert _stat.S_IMODE(side.stat().st_mode) & 0o077 == 0, side
    store.close()


@pytest.fixture
def open_dir():
    """A directory inside the checkout (which every sandbox layer binds in), open to all (0755 all the way)."""
    import shutil
    import tempfile
    from kernelgym_gap.core.registry import PROJECT_ROOT
    d = Path(tempfile.mkdtemp(prefix=".kgg-exposure-", dir=PROJECT_ROOT))
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_a_world_readable_database_where_the_sandbox_reaches_is_refused_with_the_fix(open_dir, capsys):
    from kernelgym_gap.cli.main import main
    from kernelgym_gap.core.config import SandboxConfig
    from kernelgym_gap.sandbox.exposure import ExposedFileError, check_private
    db = open_dir / "results.sqlite3"
    st.Store(db).close()
    os.chmod(db, 0o644)                      # as the old code made it (umask 022)
    if os.geteuid() == 0:                    # submissions run as a fresh uid: "other" bits decide
        with pytest.raises(ExposedFileError, match=r"readable by every user.*chmod 600"):
            check_private(db)
    # submissions that run as this user (not root, or uid None) see whatever the sandbox binds in: the
    # checkout, whatever the mode
    os.chmod(db, 0o600)
    with pytest.raises(ExposedFileError, match=r"inside .*which the sandbox binds in"):
        check_private(db, config=SandboxConfig(uid=None))
    os.chmod(db, 0o644)
    src = Path(__file__).parent.parent / "tasks" / "elementwise" / "gelu" / "solutions" / "triton_blocked.py"
    for argv in (["leaderboard", "worker", "--backend", "cpu", "--db", str(db)],
                 ["submit", "--task", "GELU", "--name", "x", "--backend", "cpu", "--db", str(db), str(src)]):
        if os.geteuid() != 0:
            break
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert str(db) in err and "chmod 600" in err and "other submissions' sources" in err
    assert st.Store(db).count("submissions") == 0           # nothing was evaluated or stored


def test_a_private_database_is_accepted(tmp_path):
    from kernelgym_gap.sandbox.exposure import check_private
    db = tmp_path / "private" / "results.sqlite3"
    st.Store(db).close()
    check_private(db)                        # 0600 in 0700, outside the checkout: no error


def test_32_health_answers_when_every_connection_is_taken_by_many_addresses(store, registry):
    """Issue 32 L4: idle connections spread over many client addresses fill the server's cap (the cap per
    client does not stop them); /api/health still answers from the reserve above the cap, and the reserve
    serves nothing else."""
    from kernelgym_gap.serving.protocol import HEALTH_RESERVE
    with Live(create_app(store, TOKEN, registry=registry, backend="cpu"), max_connections=32,
              max_per_client=8) as server:
        held = []
        for i in range(4):                                   # 4 addresses x 8: the whole cap, no client over its own
            for _ in range(8):
                s = socket.socket()
                s.bind((f"127.0.0.{10 + i}", 0))
                s.connect(("127.0.0.1", server.port))
                held.append(s)
        time.sleep(0.3)
        t0 = time.monotonic()
        assert _request(server.base, "/api/health")[0] == 200       # from 127.0.0.1, a reserved connection
        assert time.monotonic() - t0 < 1.0
        assert _request(server.base, "/api/leaderboard")[0] == 503  # the reserve is for health only
        extra = []
        for i in range(HEALTH_RESERVE + 1):                  # the reserve itself is bounded
            s = socket.socket()
            s.bind((f"127.0.1.{1 + i}", 0))
            s.connect(("127.0.0.1", server.port))
            extra.append(s)
        closed, took, data = _closed_within(extra[-1], 5.0)
        assert closed and data.startswith(b"HTTP/1.1 503"), data[:100]
        for s in held + extra:
            s.close()
