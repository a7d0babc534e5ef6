"""The leaderboard web app: pages, JSON API, pagination, the chart, the token, bad input (4xx, nothing
stored), the worker, and a real headless browser (Debian's chromium via Selenium) that opens the board,
submits a reference solution, and sees it ranked next to a CLI submission served from the cache."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="the web extra is not installed (pip install -e '.[web]')")
pytest.importorskip("jinja2", reason="the web extra is not installed (pip install -e '.[web]')")

import warnings  # noqa: E402

with warnings.catch_warnings():
    warnings.simplefilter("ignore")     # starlette 1.x deprecates httpx in its TestClient; it still works
    from starlette.testclient import TestClient  # noqa: E402

from kernelgym_gap.store import db as st  # noqa: E402
from kernelgym_gap.core.record import EvalRecord  # noqa: E402
from kernelgym_gap.core.status import Status  # noqa: E402
from kernelgym_gap.web import board, chart  # noqa: E402
from kernelgym_gap.web.app import create_app  # noqa: E402
from kernelgym_gap.web.worker import Worker  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

ROOT = Path(__file__).resolve().parent.parent
GELU_FAST = ROOT / "tasks" / "elementwise" / "gelu" / "solutions" / "triton_blocked.py"
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
TOKEN = "test-token-123"
GELU = "kernelgym_gap/GELU-v1"


def record(task=GELU, *, reward=0.8, E=0.9, U=0.6, status=Status.OK, backend="cuda",
           verdict="efficient") -> EvalRecord:
    """A synthetic record shaped like the engine's (test data for the pages, never a measurement)."""
    ok, cuda = status is Status.OK, backend == "cuda"
    per_shape = [{"shape": [4096, 4096], "dtype": "float16", "split": "public", "kernel_ms": 0.1,
                  "kernel_spread": 0.01, "library_ms": 0.1 * E, "library_spread": 0.01, "floor_ms": 0.1 * U,
                  "bound": "memory", "E": E, "U": U, "programs": 4096, "launches_per_call": 1}] if ok and cuda else None
    return EvalRecord(
        task=task, task_version=0, dsl="triton", backend=backend, status=status, correct=ok,
        reward=reward if ok else 0.0, reward_mode="full" if cuda else "correctness",
        terms={"correctness": float(ok), "performance": reward if ok and cuda else None,
               "E": E if ok and cuda else None, "U": U if ok and cuda else None, "per_shape": per_shape,
               "flags": [], **({"calibration": {"source": "measured", "copy_bytes_per_s": 4.3e12}} if cuda else {})},
        message="synthetic", diagnosis={"verdict": verdict, "summary": f"synthetic verdict E={E}",
                                        "evidence": ["too little parallelism"]} if ok and cuda else None,
        device={"kind": backend, "name": "NVIDIA H200" if cuda else "cpu"}, created_at=st.now_iso())


@pytest.fixture
def store(tmp_path):
    s = st.Store(tmp_path / "board.sqlite3")
    yield s
    s.close()


@pytest.fixture
def client(store, registry):
    return TestClient(create_app(store, TOKEN, registry=registry, backend="cpu"))


def _fill(store):
    verdicts = ["repairable_defect", "structural_residual", "efficient"]
    for i in range(3):
        store.add_record(record(reward=0.2 + 0.3 * i, E=0.05 + 0.4 * i, U=0.02 + 0.3 * i, verdict=verdicts[i]),
                         f"def gelu(x): return {i}  # <script>alert(1)</script>\n", f"agent-{i}")
    store.add_record(record(status=Status.MISMATCH), "bad", "agent-0")


def _nothing_stored(store):
    assert store.count("submissions") == store.count("sources") == store.count("evaluations") == 0


# ---- reads --------------------------------------------------------------------------------------------

def test_pages_and_json_api(client, store):
    _fill(store)
    html = client.get("/?backend=cuda").text
    order = [m for m in re.findall(r'data-submitter="([^"]+)"', html)]
    assert order == ["agent-2", "agent-1", "agent-0"]
    assert client.get("/api/leaderboard?backend=cuda").json()["items"][0]["submitter"] == "agent-2"
    for url in ("/tasks/GELU-v1", "/tasks/GELU", f"/tasks/{GELU}"):
        r = client.get(url + "?backend=cuda")
        assert r.status_code == 200 and "agent-2" in r.text, url
    page = client.get("/tasks/GELU-v1?backend=cuda").text
    assert page.count('class="point ') == 3 and 'data-threshold="E"' in page and 'data-threshold="U"' in page
    api = client.get("/api/tasks/GELU-v1?backend=cuda").json()
    assert [r["submitter"] for r in api["items"]] == ["agent-2", "agent-1", "agent-0"]
    assert api["items"][2]["reward"] == pytest.approx(0.2) and api["items"][2]["attempts"] == 2
    scr = client.get("/api/tasks/GELU-v1/screening?backend=cuda").json()
    assert len(scr["points"]) == 3 and scr["thresholds"] == {"E": 0.5, "U": 0.3}
    sub = client.get("/submissions/1")
    assert sub.status_code == 200
    assert "synthetic verdict" in sub.text and "4096×4096" in sub.text and "too little parallelism" in sub.text
    assert "&lt;script&gt;" in sub.text and "<script>" not in sub.text           # source shown, escaped
    assert "script-src 'none'" in sub.headers["content-security-policy"]
    j = client.get("/api/submissions/1").json()
    assert j["record"]["terms"]["E"] == pytest.approx(0.05) and j["source"].startswith("def gelu")
    assert client.get("/api/submissions?submitter=agent-0").json()["total"] == 2
    assert client.get("/submissions/99").status_code == 404
    assert client.get("/api/submissions/99").json()["status"] == 404
    assert client.get("/tasks/NoSuchTask-v3").status_code == 404
    assert client.get("/?backend=tpu").status_code == 422
    assert client.get("/api/health").json()["ok"]
    dev = client.get("/api/device-cache?task=GELU").json()
    assert len(dev["library_baselines"]) == 1                  # one shape, one device
    assert dev["library_baselines"][0]["device"] == "NVIDIA H200"
    assert [(c["device"], c["copy_bytes_per_s"]) for c in dev["calibrations"]] == [("NVIDIA H200", 4.3e12)]


def test_pagination(client, store):
    for i in range(23):
        store.add_record(record(reward=i / 100), f"src {i}", f"s{i:02d}")
    p3 = client.get("/api/leaderboard?backend=cuda&per_page=10&page=3").json()
    assert (p3["total"], p3["pages"], p3["page"], len(p3["items"])) == (23, 3, 3, 3)
    assert p3["items"][0]["rank"] == 21 and p3["items"][-1]["submitter"] == "s00"
    assert client.get("/api/leaderboard?backend=cuda&per_page=10&page=9").json()["items"] == []
    html = client.get("/?backend=cuda&per_page=10&page=2").text
    assert "page 2 of 3" in html and 'rel="next"' in html and 'rel="prev"' in html
    assert client.get("/api/tasks/GELU-v1?backend=cuda&per_page=5&page=5").json()["items"][0]["rank"] == 21
    subs = client.get("/api/submissions?per_page=7&page=4").json()
    assert subs["pages"] == 4 and len(subs["items"]) == 2
    assert "page 4 of 4" in client.get("/submissions?per_page=7&page=4").text
    assert client.get("/api/submissions?per_page=100000&page=-3").json()["per_page"] == board.MAX_PER_PAGE


def test_screening_svg_scales_and_escapes():
    pts = [{"id": 1, "submitter": "<b>x</b>", "e": 0.01, "u": 0.005, "verdict": "repairable_defect"},
           {"id": 2, "submitter": "y", "e": 1.0, "u": 0.8, "verdict": "efficient", "reward": 0.9}]
    svg = chart.screening_svg(pts, {"E": 0.5, "U": 0.3})
    xs = [float(x) for x in re.findall(r'<circle[^>]* cx="([\d.]+)"', svg)]
    ys = [float(y) for y in re.findall(r'<circle[^>]* cy="([\d.]+)"', svg)]
    assert xs[0] < xs[1] and ys[0] > ys[1]           # log-log, y grows upwards
    assert "<b>x</b>" not in svg and "&lt;b&gt;x&lt;/b&gt;" in svg
    assert "No correct submission" in chart.screening_svg([], {"E": 0.5, "U": 0.3})


# ---- writes -------------------------------------------------------------------------------------------

def _post(client, body, token=TOKEN, ctype="application/json", **headers):
    if token:
        headers["Authorization"] = f"Bearer {token}"
    headers["Content-Type"] = ctype
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return client.post("/api/submissions", content=data, headers=headers)


GOOD = {"task": "GELU", "name": "api-agent", "source": "def gelu(x):\n    return x\n"}


@pytest.mark.parametrize("body,kw,status,message", [
    (GOOD, {"token": None}, 401, "token is required"),
    (GOOD, {"token": "wrong"}, 403, "not valid"),
    ("{not json", {}, 400, "malformed JSON"),
    ("[1, 2]", {}, 400, "JSON object"),
    (GOOD, {"ctype": "text/plain"}, 415, "application/json"),
    ({**GOOD, "task": "NoSuchTask"}, {}, 422, "NoSuchTask"),
    ({**GOOD, "source": "x" * (256 * 1024 + 1)}, {}, 413, "limit"),
    ({**GOOD, "name": ""}, {}, 422, "name"),
    ({**GOOD, "name": "<script>"}, {}, 422, "name must be"),
    ({"task": "GELU", "name": "a"}, {}, 422, "source"),
    ({**GOOD, "dsl": "cuda-c"}, {}, 422, "dsl"),
    ({**GOOD, "backend": "cuda"}, {}, 422, "evaluates on cpu"),
    ({**GOOD, "remeasure": "yes"}, {}, 422, "remeasure"),
    ({**GOOD, "admin": True}, {}, 422, "unknown field"),
])
def test_bad_submissions_get_a_clear_4xx_and_store_nothing(client, store, body, kw, status, message):
    r = _post(client, body, **kw)
    assert r.status_code == status, r.text
    assert message in r.json()["error"] and r.json()["status"] == status
    _nothing_stored(store)


def test_oversized_body_is_refused_before_reading(client, store):
    r = client.post("/api/submissions", content=b"x" * (3 << 20),
                    headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
    assert r.status_code == 413
    _nothing_stored(store)


def test_form_needs_the_token_and_reads_stay_open(client, store):
    r = client.post("/submit", data={"task": GELU, "name": "form-agent", "source": GOOD["source"]})
    assert r.status_code == 401 and "token is required" in r.text and 'id="error"' in r.text
    r = client.post("/submit", data={"task": GELU, "name": "form-agent", "source": GOOD["source"], "token": "no"})
    assert r.status_code == 403
    _nothing_stored(store)
    for url in ("/", "/submit", "/submissions", "/api/leaderboard", "/api/tasks"):
        assert client.get(url).status_code == 200, url


def test_form_rejections_and_a_full_queue(store, registry):
    c = TestClient(create_app(store, TOKEN, registry=registry, backend="cpu", max_pending=1))
    r = c.post("/submit", content=b"--xx\r\nbroken", headers={"Content-Type": "multipart/form-data; boundary=xx"})
    assert r.status_code in (400, 401)
    big = {"file": ("k.py", b"x" * (256 * 1024 + 1), "text/x-python")}
    r = c.post("/submit", data={"task": GELU, "name": "n", "token": TOKEN}, files=big)
    assert r.status_code == 413 and "limit" in r.text
    r = c.post("/submit", data={"task": "Nope", "name": "n", "token": TOKEN, "source": "x"})
    assert r.status_code == 422 and "Nope" in r.text and TOKEN not in r.text    # the token is not echoed
    _nothing_stored(store)
    assert _post(c, GOOD).status_code == 202
    r = _post(c, GOOD)
    assert r.status_code == 429 and "waiting" in r.json()["error"]
    assert store.count("submissions") == 1


def test_a_valid_submission_is_queued_never_evaluated_in_the_web_process(client, store, monkeypatch):
    from kernelgym_gap.sandbox import child_io as child
    from kernelgym_gap.engine import pipeline as engine

    def forbidden(*a, **kw):
        raise AssertionError("the web process must not evaluate")
    monkeypatch.setattr(engine, "evaluate", forbidden)
    monkeypatch.setattr(child, "run_sandboxed", forbidden)
    r = _post(client, GOOD)
    assert r.status_code == 202 and r.json()["state"] == "queued"
    sid = r.json()["id"]
    assert r.headers["location"] == f"/api/submissions/{sid}"
    sub = client.get(f"/api/submissions/{sid}").json()
    assert sub["state"] == "queued" and sub["record"] is None and sub["task_id"] == GELU
    assert store.count("evaluations") == 0
    r = client.post("/submit", data={"task": GELU, "name": "form-agent", "dsl": "triton", "token": TOKEN},
                    files={"file": ("k.py", GOOD["source"].encode(), "text/x-python")}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == f"/submissions/{sid + 1}"
    page = client.get(f"/submissions/{sid + 1}").text
    assert 'data-state="queued"' in page and 'http-equiv="refresh"' in page


def test_worker_serves_the_cache_and_reports_harness_failures(store, registry, monkeypatch):
    from kernelgym_gap.sandbox import child_io as child
    from kernelgym_gap.core.config import EvalConfig

    def no_child(*a, **kw):
        raise AssertionError("a child process was started")
    monkeypatch.setattr(child, "run_sandboxed", no_child)
    config, source = EvalConfig(), GOOD["source"].encode()
    key = st.cache_key_for(registry.get(GELU), source, "triton", "cpu", config)
    store.add_record(record(backend="cpu", reward=1.0), source, "first", key=key)
    w = Worker(store, registry, config)
    hit = store.enqueue(source, submitter="again", task_id=GELU, dsl="triton", backend="cpu")
    w.run_one(store.claim_next())
    done = store.submission(hit)
    assert done["state"] == "done" and done["cache_hit"] and done["evaluation_id"] == 1
    broken = store.enqueue(source, submitter="x", task_id="kernelgym_gap/Gone-v9", dsl="triton", backend="cpu")
    w.run_one(store.claim_next())
    assert store.submission(broken)["state"] == "error" and "Gone" in store.submission(broken)["error"]
    assert store.claim_next() is None


def test_the_worker_signal_handler_takes_no_lock(store, registry):
    """The handler may run while the stop Event's lock is held (by wait() in the main thread, or another
    handler): it only sets a flag, and wait() turns that into a stop. Calling Event.set() there deadlocked a
    worker in CI (2026-12-04)."""
    import threading
    from kernelgym_gap.core.config import EvalConfig
    w = Worker(store, registry, EvalConfig())
    returned = threading.Event()
    with w._stop._cond:                     # the Event's own lock, held as wait() holds it between waits
        t = threading.Thread(target=lambda: (w.on_signal(signal.SIGTERM, None), returned.set()))
        t.start()
        assert returned.wait(2.0), "the handler blocked on the Event's lock"
    t.join()
    start = time.monotonic()
    w.wait(poll_s=0.05)
    assert w._stop.is_set() and time.monotonic() - start < 2.0


def test_cli_results_and_show(store, capsys):
    from kernelgym_gap.cli.main import main
    _fill(store)
    assert main(["results", "--db", str(store.path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["total"] == 4
    assert main(["leaderboard", "show", "--db", str(store.path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["items"][0]["submitter"] == "agent-2"
    assert main(["leaderboard", "show", "--task", "GELU", "--db", str(store.path)]) == 0
    assert "1. agent-2" in capsys.readouterr().out
    assert main(["results", "--name", "agent-0", "--task", "GELU", "--db", str(store.path)]) == 0
    assert "2 submission(s)" in capsys.readouterr().out


def test_cli_results_finds_a_users_task_by_name_and_refuses_an_unknown_one(store, capsys):
    """A task of a user's --tasks-dir is known to the store, not to tasks/: `results --task square` finds it
    by its name in any case (it printed 0 before), and a task nobody knows is an error, not an empty list."""
    from kernelgym_gap.cli.main import main
    store.add_record(record(task="kernelgym_gap/Square-v0"), "def square(x): return x\n", "author")
    store.add_record(record(task="kernelgym_gap/Square-v1"), "def square(x): return x  # v1\n", "author")
    for text in ("square", "Square-v0", "kernelgym_gap/Square-v1"):
        assert main(["results", "--task", text, "--db", str(store.path)]) == 0
        assert "1 submission(s)" in capsys.readouterr().out, text
    assert main(["results", "--task", "square", "--db", str(store.path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["items"][0]["task"].endswith("Square-v1")     # the newest version
    assert main(["results", "--task", "Sqare", "--db", str(store.path)]) == 2
    assert "Did you mean 'Square'" in capsys.readouterr().err


# ---- a real browser -------------------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_http(url: str, proc: subprocess.Popen, timeout: float = 60.0, log=None) -> None:
    """Until `url` answers 200; `log`: the file the server writes to (else its stderr pipe)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            said = log.read_text()[-4000:] if log is not None else proc.stderr.read()
            raise AssertionError(f"the server exited with {proc.returncode}: {said}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise AssertionError(f"{url} did not answer in {timeout} s")


def _children(pid: int, fields: str = "args=") -> list[str]:
    out = subprocess.run(["ps", "--ppid", str(pid), "-o", fields], capture_output=True, text=True).stdout
    return [line.strip() for line in out.splitlines() if line.strip()]


@pytest.fixture
def browser():
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} is absent (apt-get install chromium chromium-driver; scripts/setup.sh does)")
    pytest.importorskip("selenium", reason="selenium is not installed (the web extra)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              "--window-size=1280,1000"):
        opts.add_argument(a)
    service = Service(CHROMEDRIVER if os.path.exists(CHROMEDRIVER) else shutil.which("chromedriver"))
    driver = webdriver.Chrome(service=service, options=opts)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


@pytest.fixture
def server(tmp_path):
    db, port = tmp_path / "served.sqlite3", _free_port()
    cli = [sys.executable, "-m", "kernelgym_gap.cli.main"]
    # the server's and its worker's output to a file: a pipe nobody reads can fill and block either of them
    log = open(tmp_path / "server.log", "w")
    proc = subprocess.Popen(cli + ["leaderboard", "serve", "--port", str(port), "--backend", "cpu", "--db", str(db),
                                   "--token", TOKEN], stdout=log, stderr=subprocess.STDOUT, text=True, cwd=tmp_path)
    log.close()
    base = f"http://127.0.0.1:{port}"
    workers: list[int] = []
    try:
        _wait_http(base + "/api/health", proc, log=tmp_path / "server.log")
        workers = [int(line.split()[0]) for line in _children(proc.pid, "pid=,args=")
                   if "kernelgym_gap.web.worker" in line]
        yield {"base": base, "db": db, "proc": proc, "cli": cli, "workers": workers}
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    deadline = time.monotonic() + 15
    while any(_running(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in workers:                                # stopping the server stops its worker
        assert not _running(pid), f"worker {pid} outlived the server (state {_state(pid)}, 15 s after it)"


def _state(pid: int) -> str | None:
    """The process's state letter (R, S, D, Z, ...), None when there is no such process."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return None


def _running(pid: int) -> bool:
    """Whether the process exists and has not exited. A worker that exited after its server (uvicorn may end
    the server by re-raising the signal, before it reaps the worker) stays a zombie where nothing reaps
    orphans (a container whose init does not): it is gone all the same."""
    return _state(pid) not in (None, "Z", "X")


def test_browser_submits_a_reference_solution_and_sees_it_ranked(browser, server, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import Select, WebDriverWait

    def find(by, what, timeout=30):        # after a click the next page may not have loaded yet
        return WebDriverWait(d, timeout).until(EC.presence_of_element_located((by, what)))
    shots = Path(os.environ.get("KGG_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    base, d = server["base"], browser
    # the web server evaluates nothing itself: its worker is a separate process
    assert len(server["workers"]) == 1

    d.get(base + "/")
    assert "No evaluated submissions" in d.find_element(By.ID, "overall").text
    d.find_element(By.LINK_TEXT, "Submit").click()
    # without the token: refused with a clear message, nothing stored
    Select(find(By.ID, "task")).select_by_visible_text("GELU-v1")
    d.find_element(By.ID, "name").send_keys("browser-agent")
    d.find_element(By.ID, "file").send_keys(str(GELU_FAST))
    d.find_element(By.ID, "submit").click()
    assert "token is required" in find(By.ID, "error").text
    assert st.Store(server["db"]).count("submissions") == 0
    # with it: queued, evaluated by the worker in the sandboxed engine, shown with its source
    Select(d.find_element(By.ID, "task")).select_by_visible_text("GELU-v1")
    d.find_element(By.ID, "file").send_keys(str(GELU_FAST))
    d.find_element(By.ID, "token").send_keys(TOKEN)
    d.find_element(By.ID, "submit").click()
    WebDriverWait(d, 20).until(lambda d: re.search(r"/submissions/\d+$", d.current_url))
    sub_url = d.current_url

    def done(d):
        d.get(sub_url)
        state = d.find_element(By.ID, "state").get_attribute("data-state")
        assert state != "error", d.find_element(By.TAG_NAME, "main").text
        return state == "done"
    WebDriverWait(d, 150, poll_frequency=1.0).until(done)
    assert d.find_element(By.ID, "submitter").text == "browser-agent"
    assert "ok" in d.find_element(By.ID, "status").text
    assert d.find_element(By.ID, "reward").text.startswith("1.0000")
    assert "def gelu" in d.find_element(By.ID, "source").text
    assert "correctness only" in d.find_element(By.ID, "diagnosis").text
    d.save_screenshot(str(shots / "submission.png"))

    # the same kernel from the CLI: served from the cache, no second evaluation
    out = subprocess.run(server["cli"] + ["submit", "--task", "GELU", "--name", "cli-agent", "--backend", "cpu",
                                          "--db", str(server["db"]), "--json", str(GELU_FAST)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["cache_hit"] is True
    s = st.Store(server["db"])
    assert s.count("evaluations") == 1 and s.count("submissions") == 2

    d.get(base + "/?backend=cpu")
    rows = d.find_elements(By.CSS_SELECTOR, "#overall tbody tr")
    assert [r.get_attribute("data-submitter") for r in rows] == ["browser-agent", "cli-agent"]
    assert rows[0].find_element(By.CSS_SELECTOR, "td.rank").text == "1"
    d.save_screenshot(str(shots / "overview.png"))
    d.find_element(By.LINK_TEXT, "GELU-v1").click()
    find(By.ID, "task-ranking")
    ranked = d.find_elements(By.CSS_SELECTOR, "#task-ranking tbody tr")
    assert [r.get_attribute("data-submitter") for r in ranked] == ["browser-agent", "cli-agent"]
    assert d.find_elements(By.CSS_SELECTOR, "#screening-chart svg")
    d.save_screenshot(str(shots / "task.png"))
    d.find_element(By.LINK_TEXT, "JSON API").click()
    WebDriverWait(d, 30).until(lambda d: d.current_url.endswith("/api"))
    assert "/api/leaderboard" in find(By.TAG_NAME, "body").text


def _health(base: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(base + "/api/health", timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_a_killed_worker_is_reaped_reported_and_restarted_and_the_queue_drains(server):
    """Issue 32 L1: SIGKILL the leaderboard's worker. It is reaped (no zombie), /api/health says so (its
    restarts, its last exit), a new worker is started, and a submission queued afterwards is evaluated."""
    base, proc = server["base"], server["proc"]
    code, h = _health(base)
    assert code == 200 and h["ok"] is True and h["worker"]["alive"] is True and h["worker"]["restarts"] == 0
    old = h["worker"]["pid"]
    assert old == server["workers"][0]
    os.kill(old, signal.SIGKILL)
    deadline, seen = time.monotonic() + 60, None
    while time.monotonic() < deadline:
        code, h = _health(base)
        if h["worker"]["restarts"] >= 1 and h["worker"]["alive"] and h["worker"]["pid"] != old:
            seen = h
            break
        time.sleep(0.2)
    assert seen is not None, f"no restart within 60 s: {h}"
    assert "signal 9" in seen["worker"]["last_exit"] and code == 200 and seen["ok"] is True
    assert _state(old) is None, f"the killed worker is left as {_state(old)} (a zombie: never reaped)"
    server["workers"].append(seen["worker"]["pid"])          # the fixture checks it ends with the server
    assert [int(line.split()[0]) for line in _children(proc.pid, "pid=,args=")
            if "kernelgym_gap.web.worker" in line] == [seen["worker"]["pid"]]
    body = json.dumps({"task": "GELU", "name": "after-restart", "dsl": "triton",
                       "source": GELU_FAST.read_text()}).encode()
    req = urllib.request.Request(base + "/api/submissions", data=body, method="POST",
                                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(req, timeout=10) as r:
        sid = json.loads(r.read())["id"]
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"{base}/api/submissions/{sid}", timeout=10) as r:
            sub = json.loads(r.read())
        if sub["state"] in ("done", "error"):
            break
        time.sleep(1)
    assert sub["state"] == "done" and sub["status"] == "ok", sub


def test_health_is_degraded_while_the_worker_is_down(tmp_path):
    """The supervisor's status while no worker beats: /api/health answers 503, ok false, degraded."""
    from starlette.testclient import TestClient
    from kernelgym_gap.web.app import create_app
    from kernelgym_gap.web.supervise import WorkerSupervisor
    sup = WorkerSupervisor([sys.executable, "-c", "import sys; sys.exit(7)"], backoff_min_s=30)
    sup.start()
    try:
        deadline = time.monotonic() + 20
        while sup.last_exit is None and time.monotonic() < deadline:
            time.sleep(0.05)
        app = create_app(st.Store(tmp_path / "h.sqlite3"), TOKEN, backend="cpu")
        app.state.settings.worker = sup
        r = TestClient(app).get("/api/health")
        assert r.status_code == 503 and r.json()["status"] == "degraded" and r.json()["ok"] is False
        assert r.json()["worker"]["alive"] is False and r.json()["worker"]["last_exit"] == "exit status 7"
    finally:
        sup.stop()


def test_terminal_views_escape_a_stored_name_with_control_characters(store, capsys):
    """Issue 32 L6: `leaderboard show` and `results` print stored names through core/terminal.py. The web's
    name rule keeps escapes out of new names, but a database written by older code or by Python
    (Store.add_record checks only that a name is non-empty) may hold one."""
    from kernelgym_gap.cli.main import main
    evil = "\x1b[2J\x1b[Hwinner\r"
    store.add_record(record(reward=0.9), "def gelu(x):\n    return x\n", evil)
    for argv in (["leaderboard", "show", "--task", "GELU"], ["leaderboard", "show"], ["results"]):
        assert main(argv + ["--db", str(store.path)]) == 0
        out = capsys.readouterr().out
        assert "\x1b" not in out and "\r" not in out, argv
        assert "\\x1b[2J" in out, (argv, out)
