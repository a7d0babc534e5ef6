"""Load and faults on the reward server (issue 32), bounded in count and time, loopback only.

    .venv/bin/python scripts/load_fault.py [--clients 3] [--batches 2] [--workers 2] [--deadline 900]

What it does, in a temporary directory, against `kernelgym-gap serve-reward --backend cpu` (real
evaluations, the server's own processes):
1. a quiet run: one client scores every honest item once (a reference solution of each --tasks task and a
   wrong variant of it; each source made distinct by a comment) on a fresh server: the expected rewards;
2. the load run, on another fresh server with a results database: N trainer clients (threads, each its own
   X-Client-Id) send M batches each, every batch its honest items plus one hostile item in turn: an unknown
   task, a submission that writes a 100,000-deep report.json (tests/fixtures/hostile/report_deep_nesting.py)
   and, once in the run, one that loops forever at import (import_busy_loop.py: it holds a slot until the
   import deadline); each client also sends one request with a lone surrogate (a 400, not retried);
3. once a third of the batches are answered, the server is killed with SIGKILL in the middle of its
   evaluations and started again on the same databases: the clients retry (same request ids) and must get
   every answer, none twice evaluated;
4. a prober asks /health every 50 ms throughout and records each answer's time (while the server is down
   its refusals are counted apart).
It prints requests sent, answered, lost, duplicated (an item of a request evaluated and stored more than
once), the latency percentiles of the batches and /health's, and whether the honest rewards equal the
quiet run's; exits 0 only when nothing was lost or duplicated, /health stayed under 100 ms and the rewards
matched. The server's evaluations are real (cpu backend, Triton's interpreter): a few minutes on 2 cores.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from kernelgym_gap.integrations.reward_client import RewardClient, RewardServerError  # noqa: E402

TOKEN = "load-fault-" + uuid.uuid4().hex[:8]
HOSTILE = ROOT / "tests" / "fixtures" / "hostile"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, port: int, workdir: Path, workers: int, db: Path | None, requests_db: Path):
        self.port, self.url = port, f"http://127.0.0.1:{port}"
        self.cmd = [sys.executable, "-m", "kernelgym_gap.cli.main", "serve-reward", "--backend", "cpu",
                    "--host", "127.0.0.1", "--port", str(port), "--workers", str(workers), "--reward-mode",
                    "correctness", "--requests-db", str(requests_db)] + (["--db", str(db)] if db else [])
        self.log = open(workdir / f"server-{port}.log", "ab")
        self.proc = None

    def start(self, timeout: float = 300) -> None:
        env = dict(os.environ, KERNELGYM_GAP_TOKEN=TOKEN)
        self.proc = subprocess.Popen(self.cmd, cwd=ROOT, env=env, stdout=self.log, stderr=self.log)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                h = httpx.get(self.url + "/health", timeout=2).json()
                if h["slots_ready"] == h["slots"]:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise SystemExit("the reward server did not start (see its log)")

    def kill(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)          # no cleanup: the slots die with it (PDEATHSIG)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()


WRONG = {"AddReLU": ("tl.maximum(s, 0.0)", "s"), "GELU": ("0.5 *", "0.25 *")}


def honest_items(batch: str, tasks: list[str]) -> list[dict]:
    from kernelgym_gap.core.registry import default_registry
    reg = default_registry()
    out = []
    for name in tasks:
        task = reg.get(name)
        good = task.solution_path(task.solutions[0]).read_text()
        out.append({"task": name, "source": f"# {batch} good\n" + good})
        wrong = good.replace(*WRONG[name])
        out.append({"task": name, "source": f"# {batch} wrong\n" + wrong})
    return out


def hostile_item(k: int, busy_used: list) -> dict:
    if k % 3 == 2 and not busy_used:
        busy_used.append(True)
        return {"task": "LayerNorm", "source": (HOSTILE / "import_busy_loop.py").read_text()}
    if k % 3 == 1:
        return {"task": "LayerNorm", "source": (HOSTILE / "report_deep_nesting.py").read_text() + f"\n# {k}\n"}
    return {"task": "NoSuchTask-v9", "completion": "```python\ndef f(): pass\n```"}


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clients", type=int, default=3)
    ap.add_argument("--batches", type=int, default=2, help="batches per client")
    ap.add_argument("--workers", type=int, default=2, help="the server's evaluation slots")
    ap.add_argument("--deadline", type=float, default=900, help="seconds for the whole run at most")
    ap.add_argument("--tasks", default="AddReLU", help="honest items' tasks, comma-separated (AddReLU, GELU): "
                                                      "a reference solution and a wrong variant of each")
    args = ap.parse_args()
    if args.clients * args.batches > 40:
        raise SystemExit("at most 40 batches in all (this is a bounded run)")
    work = Path(tempfile.mkdtemp(prefix="kgg-load-fault-"))
    t_start = time.monotonic()

    # 1. the quiet run
    tasks = [t for t in args.tasks.split(",") if t]
    if not tasks or set(tasks) - set(WRONG):
        raise SystemExit(f"--tasks: one or more of {', '.join(WRONG)}")
    plan = {(c, b): honest_items(f"c{c}b{b}", tasks) for c in range(args.clients) for b in range(args.batches)}
    quiet = Server(_port(), work, args.workers, None, work / "quiet-requests.sqlite3")
    quiet.start()
    expected = {}
    try:
        every = [it for items in plan.values() for it in items]
        out = RewardClient(quiet.url, TOKEN, retry_for_s=args.deadline).score(every)
        for it, reward in zip(every, out["rewards"]):
            expected[it["source"]] = reward
    finally:
        quiet.stop()
    print(f"quiet run: {len(expected)} honest items in {time.monotonic() - t_start:.0f} s", flush=True)

    # 2-4. the load run
    db, requests_db = work / "results.sqlite3", work / "requests.sqlite3"
    server = Server(_port(), work, args.workers, db, requests_db)
    server.start()
    stop = threading.Event()
    health_ok, health_down = [], 0
    lock = threading.Lock()
    results: dict = {}
    latencies: list[float] = []
    busy_used: list = []
    sent = answered = lost = refused_400 = 0

    def probe():
        nonlocal health_down
        with httpx.Client(timeout=5) as c:
            try:
                c.get(server.url + "/health")     # the client's own connection set-up is not the server's time
            except httpx.HTTPError:
                pass
            while not stop.is_set():
                t0 = time.monotonic()
                try:
                    c.get(server.url + "/health")
                    health_ok.append(time.monotonic() - t0)
                except httpx.HTTPError:
                    health_down += 1
                time.sleep(0.05)

    def trainer(c: int):
        nonlocal sent, answered, lost, refused_400
        client = RewardClient(server.url, TOKEN, retry_for_s=args.deadline, client_id=f"trainer-{c}")
        for b in range(args.batches):
            with lock:
                items = plan[(c, b)] + [hostile_item(c * args.batches + b, busy_used)]
                sent += 1
            t0 = time.monotonic()
            try:
                out = client.score(items, request_id=f"load-{c}-{b}-{uuid.uuid4().hex[:6]}")
            except RewardServerError as e:
                with lock:
                    lost += 1
                print(f"trainer {c} batch {b} lost: {e}", flush=True)
                continue
            with lock:
                latencies.append(time.monotonic() - t0)
                answered += 1
                results[(c, b)] = out
        r = httpx.post(server.url + "/score", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30,
                       content=b'{"items": [{"task": "GELU", "source": "\\ud800"}]}')
        with lock:
            sent += 1
            refused_400 += r.status_code == 400

    prober = threading.Thread(target=probe, daemon=True)
    prober.start()
    t_load = time.monotonic()
    threads = [threading.Thread(target=trainer, args=(c,)) for c in range(args.clients)]
    for t in threads:
        t.start()
    total = args.clients * args.batches
    while answered < max(1, total // 3) and time.monotonic() - t_start < args.deadline:
        time.sleep(0.2)
    killed_at = time.monotonic() - t_load
    h = httpx.get(server.url + "/health", timeout=5).json()
    server.kill()
    print(f"killed the server at {killed_at:.0f} s ({h['running']} running, {h['queued']} queued)", flush=True)
    time.sleep(1.0)
    server.start()
    for t in threads:
        t.join(max(1.0, args.deadline - (time.monotonic() - t_start)))
    stop.set()
    server.stop()

    # duplicates: a source evaluated and stored more than once
    conn = sqlite3.connect(db)
    dup = conn.execute("SELECT COUNT(*) FROM (SELECT source_sha256, task_id FROM evaluations "
                       "GROUP BY source_sha256, task_id HAVING COUNT(*) > 1)").fetchone()[0]
    mismatched = []
    for (c, b), out in results.items():
        for it, reward in zip(plan[(c, b)], out["rewards"]):
            if expected.get(it["source"]) != reward:
                mismatched.append((c, b, it["task"], reward, expected.get(it["source"])))
    hostile_status = sorted({out["terms"][-1]["status"] for out in results.values()})
    rows = [("batches sent (+ surrogate requests)", f"{total} (+{args.clients})"),
            ("answered", str(answered)), ("lost", str(lost)), ("duplicated evaluations", str(dup)),
            ("surrogate requests answered 400", f"{refused_400} of {args.clients}"),
            ("hostile items' status", ", ".join(hostile_status)),
            ("batch latency p50 / p90 / max (s)",
             f"{pct(latencies, .5):.1f} / {pct(latencies, .9):.1f} / {max(latencies or [0]):.1f}"),
            ("/health answers; p50 / p99 / max (ms)",
             f"{len(health_ok)}; {1000 * pct(health_ok, .5):.1f} / {1000 * pct(health_ok, .99):.1f} / "
             f"{1000 * max(health_ok or [0]):.1f}"),
            ("/health refused while the server was down", str(health_down)),
            ("honest rewards equal to the quiet run", "yes" if not mismatched else f"no: {mismatched[:4]}"),
            ("server killed (SIGKILL) and restarted at", f"{killed_at:.0f} s into the load"),
            ("wall time (s)", f"{time.monotonic() - t_start:.0f}")]
    width = max(len(k) for k, _ in rows)
    print("\n| measure | value |\n|---|---|")
    for k, v in rows:
        print(f"| {k.ljust(width)} | {v} |")
    good = (lost == 0 and dup == 0 and answered == total and not mismatched and refused_400 == args.clients
            and max(health_ok or [1]) < 0.1)
    print(f"\n{'PASS' if good else 'FAIL'} (work files: {work})")
    json.dump({"rows": rows, "health_ms": [1000 * x for x in health_ok]}, open(work / "summary.json", "w"))
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
