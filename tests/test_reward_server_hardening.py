"""The reward server under abuse (issue 32 R2-R8, the restart finding; issue 31's lone surrogate; issue 37's
bad item), over loopback on the shared serving layer. Evaluations are tests/reward_fakes.py's (a source
"sleep:S" takes S seconds), run in the server's own slot processes."""
import socket
import subprocess
import sys
import threading
import time

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")
pytest.importorskip("starlette")

from kernelgym_gap.integrations.reward_server import RewardClient, create_app  # noqa: E402
from kernelgym_gap.integrations.scorer import Scorer  # noqa: E402
from test_integrations_server import Served  # noqa: E402

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _app(workers=1, **kw):
    from reward_fakes import fake_record
    return create_app(Scorer("cpu", workers=workers, evaluator=fake_record, store=kw.pop("store", None)), TOKEN, **kw)


@pytest.fixture
def fake_log(tmp_path, monkeypatch):
    path = tmp_path / "evaluations.log"
    monkeypatch.setenv("KGG_FAKE_LOG", str(path))      # read by the slot processes (started after this)
    return path


def _ready(srv, timeout=120):
    """Waits for the slot processes' imports (seconds on a loaded machine), so timings measure the server."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        h = httpx.get(srv.url + "/health").json()
        if h["slots_ready"] == h["slots"]:
            return
        time.sleep(0.2)
    raise AssertionError("the evaluation slots did not start")


def _lines(path, prefix):
    return [x for x in (path.read_text().splitlines() if path.exists() else []) if x.startswith(prefix)]


# ---- R2: extraction is linear and off the event loop ---------------------------------------------------

def test_fence_repeating_completion_is_extracted_in_linear_time():
    from kernelgym_gap.api.completions import extract_code
    for reply in ("```\n" * (32 * 1024), "```python\n" + "~~~~\n```py\n" * 12000, "<think>" * 18724,
                  "````\n" * 24000 + "```\n" * 8192):
        assert len(reply) >= 128 * 1024 - 64
        t = time.process_time()
        extract_code(reply, "gelu")
        assert time.process_time() - t < 1.0


def test_health_answers_while_a_big_completion_is_processed():
    reply = "```python\n" + "```\n" * (120 * 1024 // 4)
    with Served(_app()) as srv:
        done = {}

        def big():
            done["r"] = httpx.post(srv.url + "/score", headers=AUTH, timeout=120,
                                   json={"items": [{"task": "GELU", "completion": reply}] * 4})
        t = threading.Thread(target=big)
        t.start()
        worst = 0.0
        with httpx.Client(timeout=5) as probe:
            while t.is_alive():
                t0 = time.monotonic()
                assert probe.get(srv.url + "/health").status_code == 200
                worst = max(worst, time.monotonic() - t0)
                time.sleep(0.01)
        t.join()
        assert done["r"].status_code == 200 and worst < 0.5


# ---- R3: idle connections are capped per client and time out ------------------------------------------

def test_idle_connections_of_one_client_do_not_block_another():
    with Served(_app(), max_per_client=8, max_connections=64, header_timeout_s=2.0) as srv:
        port = int(srv.url.rsplit(":", 1)[1])
        idle = []
        for _ in range(12):                              # another client address: 127.0.0.2
            s = socket.socket()
            s.bind(("127.0.0.2", 0))
            s.connect(("127.0.0.1", port))
            idle.append(s)
        time.sleep(0.3)
        t0 = time.monotonic()
        assert httpx.get(srv.url + "/health", timeout=5).status_code == 200     # from 127.0.0.1
        assert time.monotonic() - t0 < 1.0
        answers = []
        for s in idle[8:]:                               # past its cap: 503 at once, closed
            s.settimeout(5)
            answers.append(s.recv(200))
        assert all(a.startswith(b"HTTP/1.1 503") for a in answers)
        idle[0].settimeout(5)
        assert idle[0].recv(200).startswith(b"HTTP/1.1 408")     # the header deadline closes an idle one
        for s in idle:
            s.close()


# ---- R4: a body over the limit is refused before it is read ------------------------------------------

def test_body_over_the_limit_is_refused_from_its_length():
    with Served(_app()) as srv:
        port = int(srv.url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(b"POST /score HTTP/1.1\r\nhost: x\r\nauthorization: Bearer " + TOKEN.encode() +
                      b"\r\ncontent-type: application/json\r\ncontent-length: 419430400\r\n\r\n")
            t0 = time.monotonic()
            head = s.recv(200)                           # not a byte of the 400 MB body was sent
        assert head.startswith(b"HTTP/1.1 413") and time.monotonic() - t0 < 2.0


# ---- R5: 400 for a bad request, an item failure for a bad item --------------------------------------

@pytest.mark.parametrize("body,why", [
    (b'{"items": ' + b"[" * 5000 + b"]" * 5000 + b"}", "nested"),
    (b'{"items": [{"task": "GELU", "source": "\\ud800"}]}', "surrogate"),
    (b'{"items": [{"task": "GELU", "source": "x"}], "failure_reward": NaN}', "NaN"),
    (b'{"items": [{"task": "GELU", "source": "x"}], "failure_reward": -Infinity}', "Infinity"),
    (b'{"items": [{"task": "GELU", "source": "x"}], "failure_reward": 1e999}', "finite"),
])
def test_malformed_requests_are_400(body, why):
    with Served(_app()) as srv:
        r = httpx.post(srv.url + "/score", content=body, headers=AUTH)
        assert r.status_code == 400 and why in r.json()["error"], r.text
        r = httpx.post(srv.url + "/openrlhf", headers=AUTH, json={"query": ["a"], "prompts": "a", "labels": ["GELU"]})
        assert r.status_code == 400 and "prompts" in r.json()["error"]
        assert httpx.get(srv.url + "/health").json()["ok"]


def test_one_bad_item_is_that_items_failure(fake_log):
    items = [{"task": "GELU", "source": "good"}, {"task": "NoSuchTask", "completion": "x"}, "not an object",
             {"task": "GELU", "completion": ""}, {"task": "GELU", "source": "wrong"}]
    with Served(_app()) as srv:
        out = RewardClient(srv.url, TOKEN).score(items, failure_reward=-0.5)
    assert out["rewards"][:3] == [1.0, -0.5, -0.5] and out["rewards"][4] == -0.5
    assert [e["item"] for e in out["errors"]] == [1, 2]
    assert "NoSuchTask" in out["terms"][1]["reason"] and out["terms"][2]["status"] == "invalid_item"
    assert out["records"][1] is None and out["records"][0]["status"] == "ok"


def test_the_item_limit_is_never_above_the_pending_limit():
    with pytest.raises(ValueError, match="max_pending"):
        _app(max_pending=4, max_items=8)
    with Served(_app(max_pending=4)) as srv:
        r = httpx.post(srv.url + "/score", headers=AUTH, json={"items": [{"task": "GELU", "source": "x"}] * 5})
        assert r.status_code == 400 and "at most 4" in r.json()["error"]       # never a 429 to retry forever


# ---- R7: one token rule ------------------------------------------------------------------------------

def test_token_only_as_bearer_and_never_printed():
    from kernelgym_gap.serving.auth import announce, fingerprint
    with Served(_app()) as srv:
        body = {"items": [{"task": "GELU", "source": "x"}]}
        assert httpx.post(srv.url + f"/score?token={TOKEN}", json=body).status_code == 401
        assert httpx.post(srv.url + "/score", json=body, headers={"X-Token": TOKEN}).status_code == 401
        assert httpx.post(srv.url + "/score", json=body, headers={"Authorization": "Bearer nope"}).status_code == 403
        assert httpx.post(srv.url + "/score", json=body, headers=AUTH, timeout=60).status_code == 200
    chosen = "\n".join(announce(TOKEN, False, "0.0.0.0", "KERNELGYM_GAP_TOKEN"))
    assert TOKEN not in chosen and fingerprint(TOKEN) in chosen and "warning" in chosen
    assert "warning" not in "\n".join(announce(TOKEN, False, "127.0.0.1", "X"))


# ---- R8: a locked database is a 503 within 2 s ---------------------------------------------------------

def test_locked_database_is_503_within_two_seconds(tmp_path):
    from kernelgym_gap.store.db import Store
    db = tmp_path / "results.sqlite3"
    Store(db)
    locker = subprocess.Popen([sys.executable, "-c", "import sqlite3, sys, time\n"
                               f"c = sqlite3.connect({str(db)!r}, isolation_level=None)\n"
                               "c.execute('BEGIN EXCLUSIVE'); print('locked', flush=True); time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert locker.stdout.readline().strip() == "locked"
        with Served(_app(store=str(db), requests_db=db)) as srv:
            t0 = time.monotonic()
            r = httpx.post(srv.url + "/score", headers=AUTH, timeout=30,
                           json={"items": [{"task": "GELU", "source": "x"}], "request_id": "locked-1"})
            assert r.status_code == 503 and r.headers["retry-after"] and time.monotonic() - t0 < 3.0
            with httpx.Client(timeout=5) as probe:
                probe.get(srv.url + "/health")           # the client's own set-up is not the server's time
                t0 = time.monotonic()
                assert probe.get(srv.url + "/health").status_code == 200 and time.monotonic() - t0 < 0.5
    finally:
        locker.kill()
        locker.wait()


# ---- idempotent retries, restarts, disconnects, fairness ----------------------------------------------

def test_request_id_is_answered_once_and_survives_a_restart(tmp_path, fake_log):
    requests_db = tmp_path / "requests.sqlite3"
    items = [{"task": "GELU", "source": "sleep:1 one"}, {"task": "GELU", "source": "two"}]
    with Served(_app(workers=2, requests_db=requests_db)) as srv:
        client = RewardClient(srv.url, TOKEN)
        out = {}
        threads = [threading.Thread(target=lambda k=k: out.__setitem__(k, client.score(items, request_id="r-1")))
                   for k in range(3)]                     # the same id three times at once
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert out[0] == out[1] == out[2] and out[0]["rewards"] == [1.0, 1.0]
        assert len(_lines(fake_log, "start")) == 2        # evaluated once
        r = httpx.post(srv.url + "/score", headers=AUTH, json={"items": items[:1], "request_id": "r-1"})
        assert r.status_code == 409
    from kernelgym_gap.integrations.reward_requests import RequestLog
    RequestLog(requests_db).begin("r-2", "score:never-finished")     # a run killed before its answer
    with Served(_app(workers=2, requests_db=requests_db)) as srv:   # a new server on the same log
        again = RewardClient(srv.url, TOKEN).score(items, request_id="r-1")
        assert again == out[0] and len(_lines(fake_log, "start")) == 2     # from the log, not evaluated
        assert httpx.get(srv.url + "/health").json()["served"] == 0


def test_client_retries_through_a_restart(tmp_path, fake_log):
    requests_db = tmp_path / "requests.sqlite3"
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    result = {}

    def call():
        result["out"] = RewardClient(f"http://127.0.0.1:{port}", TOKEN, retry_for_s=120).score(
            [{"task": "GELU", "source": "late"}], request_id="r-late")
    t = threading.Thread(target=call)
    t.start()                                           # nothing listens yet: connection refused, retried
    time.sleep(1.5)
    app = _app(requests_db=requests_db)
    from kernelgym_gap.serving.protocol import server_config
    import uvicorn
    server = uvicorn.Server(server_config(app, port=port))
    st = threading.Thread(target=server.run, daemon=True)
    st.start()
    t.join(120)
    server.should_exit = True
    st.join(10)
    app.close()
    assert result["out"]["rewards"] == [1.0]


def test_disconnected_client_has_its_evaluations_cancelled(fake_log):
    with Served(_app(workers=1)) as srv:
        _ready(srv)
        items = [{"task": "GELU", "source": "sleep:20 a"}, {"task": "GELU", "source": "sleep:20 b"}]
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(srv.url + "/score", headers=AUTH, json={"items": items}, timeout=4)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            h = httpx.get(srv.url + "/health").json()
            if h["pending"] == 0 and h["running"] == 0:
                break
            time.sleep(0.2)
        assert h["pending"] == 0 and h["running"] == 0
        assert _lines(fake_log, "start") == ["start sleep:20 a"]     # the second never ran
        assert _lines(fake_log, "end") == []                         # the first was ended
        out = RewardClient(srv.url, TOKEN).score([{"task": "GELU", "source": "after"}])   # the slot started again
        assert out["rewards"] == [1.0]


def test_one_trainers_slow_batch_does_not_starve_another(fake_log):
    with Served(_app(workers=1)) as srv:
        _ready(srv)
        slow = RewardClient(srv.url, TOKEN, client_id="trainer-a")
        quick = RewardClient(srv.url, TOKEN, client_id="trainer-b")
        took = {}

        def run(name, client, items):
            t0 = time.monotonic()
            client.score(items)
            took[name] = time.monotonic() - t0
        a = threading.Thread(target=run, args=("a", slow, [{"task": "GELU", "source": f"sleep:1 a{i}"}
                                                           for i in range(6)]))
        a.start()
        time.sleep(1.5)
        run("b", quick, [{"task": "GELU", "source": "sleep:0.1 b"}])
        a.join()
    assert took["b"] < 3.0 and took["a"] > took["b"] + 2.0, took
    starts = _lines(fake_log, "start")
    assert starts.index("start sleep:0.1 b") <= 3                  # behind at most two of a's items


def test_leaderboard_runs_on_the_shared_serving_layer():
    from kernelgym_gap.serving import protocol
    from kernelgym_gap.web import server
    assert server.server_config is protocol.server_config and server.MAX_PER_CLIENT == protocol.MAX_PER_CLIENT


def test_openrlhf_reward_func_sends_the_token_as_bearer(monkeypatch):
    from kernelgym_gap.integrations.reward_client import reward_func
    with Served(_app()) as srv:
        monkeypatch.setenv("KERNELGYM_GAP_REWARD_URL", srv.url)
        monkeypatch.setenv("KERNELGYM_GAP_TOKEN", TOKEN)
        out = reward_func(["P```python\ngood\n```", "Pwrong", "Pz"], ["P", "P", "P"], ["GELU", "GELU", "NoSuchTask"])
    assert [float(x) for x in out["rewards"]] == [1.0, 0.0, 0.0]
    assert [float(x) for x in out["extra_logs"]["correct"]] == [1.0, 0.0, 0.0]
