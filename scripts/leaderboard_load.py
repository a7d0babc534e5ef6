"""Load and faults on the served leaderboard (issue 19), bounded in count and time, loopback only.

    .venv/bin/python scripts/leaderboard_load.py [--submissions 200] [--clients 8] [--deadline 240]

What it does, on a fresh database in a temporary directory:
- server A: the leaderboard app under `leaderboard serve`'s uvicorn settings (web/server.py) with its worker
  (2 threads, 5 s leases), in a process of its own;
- 8 clients POST the submissions (each a distinct source) to /api/submissions, retrying 503 (Retry-After)
  and connection errors, alternating between the servers that are up;
- a writer in another thread holds the database's write lock again and again (0.3 to 2.5 s at a time; the
  web's lock wait is 2 s, so some writes are answered 503);
- a monitor asks A's /api/health every 0.1 s throughout and records each answer's time;
- server B, the same on the same database, is started once a third of the submissions are in and killed
  with SIGKILL once two thirds are in, in the middle of its evaluations: its claimed submissions must go
  back to the queue when their leases run out and be evaluated by A.
The evaluator is synthetic (it sleeps 50-400 ms and returns a record) so that the run measures the queue,
the leases and the server, not the kernels; each call is logged (start, end, by whom) to count evaluations.

It prints whether every accepted submission was evaluated and stored exactly once, nothing was lost, and
/api/health answered under 1 s throughout, and exits 0 only then.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
TOKEN = "load-token"
LEASE_S = 5.0


# ---- a server process (--role server) --------------------------------------------------------------------

def run_server(args) -> int:
    from kernelgym_gap.core.config import EvalConfig
    from kernelgym_gap.core.record import EvalRecord
    from kernelgym_gap.core.registry import default_registry
    from kernelgym_gap.core.status import Status
    from kernelgym_gap.engine import pipeline as engine
    from kernelgym_gap.store.db import Store, now_iso
    from kernelgym_gap.web.app import create_app
    from kernelgym_gap.web.server import serve
    from kernelgym_gap.web.worker import Worker

    log = open(args.eval_log, "a", buffering=1)
    lock = threading.Lock()

    def evaluate(task, source, dsl, backend, config):            # synthetic: the run measures the queue
        sid = bytes(source).split(b"#", 2)[1].strip().decode()
        with lock:
            log.write(f"start {sid} {args.name}\n")
        time.sleep(random.uniform(0.05, 0.4))
        with lock:
            log.write(f"end {sid} {args.name}\n")
        return EvalRecord(task=task.id, task_version=task.version, dsl=dsl, backend=backend, status=Status.OK,
                          correct=True, reward=1.0, reward_mode="correctness", terms={"correctness": 1.0},
                          message="synthetic (load test)", created_at=now_iso())
    engine.evaluate = evaluate
    registry = default_registry()
    store = Store(args.db)
    worker = Worker(store, registry, EvalConfig(), threads=2, poll_s=0.05, lease_s=LEASE_S)
    worker.start()
    serve(create_app(store, TOKEN, registry=registry, backend="cpu"), "127.0.0.1", args.port)
    return 0


# ---- the orchestrator ---------------------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 5.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read()


def start_server(name: str, db: Path, eval_log: Path) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, __file__, "--role", "server", "--name", name, "--db", str(db),
                             "--port", str(port), "--eval-log", str(eval_log)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server {name} exited: {proc.stderr.read()[-2000:]}")
        try:
            if _get(base + "/api/health", 2)[0] == 200:
                return proc, base
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"server {name} did not start")


class Run:
    def __init__(self, n: int):
        self.n = n
        self.lock = threading.Lock()
        self.accepted: dict[int, int] = {}          # submission id -> the client's sequence number
        self.retries_503 = self.retries_conn = 0
        self.health: list[float] = []
        self.health_failures = 0
        self.holds: list[float] = []
        self.stop = threading.Event()
        self.bases = []                             # servers taking submissions now

    def submit(self, seq: int, deadline: float) -> None:
        body = json.dumps({"task": "GELU", "name": f"client-{seq % 8}", "remeasure": False,
                           "source": f"# {seq} #\nimport triton\n# load-test submission {seq}\n"}).encode()
        attempt = 0
        while time.monotonic() < deadline:
            attempt += 1
            with self.lock:
                bases = list(self.bases)
            base = bases[(seq + attempt) % len(bases)]
            req = urllib.request.Request(base + "/api/submissions", data=body, method="POST", headers={
                "Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=15) as r:
                    sid = json.loads(r.read())["id"]
                with self.lock:
                    self.accepted[sid] = seq
                return
            except urllib.error.HTTPError as e:
                if e.code not in (429, 503):
                    raise SystemExit(f"submission {seq}: unexpected {e.code} {e.read()[:200]!r}")
                with self.lock:
                    self.retries_503 += 1
                time.sleep(min(float(e.headers.get("Retry-After") or 1), 2.0) * random.uniform(0.25, 0.75))
            except OSError:              # the server it asked was killed: ask another
                with self.lock:
                    self.retries_conn += 1
                time.sleep(0.2)
        raise SystemExit(f"submission {seq} was never accepted")

    def monitor(self, base: str) -> None:
        while not self.stop.is_set():
            t = time.monotonic()
            try:
                ok = _get(base + "/api/health", 5)[0] == 200
            except OSError:
                ok = False
            took = time.monotonic() - t
            with self.lock:
                self.health.append(took)
                self.health_failures += not ok
            self.stop.wait(0.1)

    def lock_holder(self, db: Path) -> None:
        conn = sqlite3.connect(str(db), timeout=30, isolation_level=None)
        durations = [0.3, 1.0, 2.5, 0.6, 1.5]
        i = 0
        while not self.stop.is_set():
            hold = durations[i % len(durations)]
            i += 1
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT OR REPLACE INTO cache VALUES ('load-test-lock', 'k', '{}', 'now')")
            self.stop.wait(hold)
            conn.execute("ROLLBACK")
            self.holds.append(hold)
            self.stop.wait(0.8)
        conn.close()


def orchestrate(args) -> int:
    t_start = time.monotonic()
    deadline = t_start + args.deadline
    tmp = Path(tempfile.mkdtemp(prefix="kgg-load-"))
    db, eval_log = tmp / "load.sqlite3", tmp / "evaluations.log"
    from kernelgym_gap.store.db import Store
    Store(db).close()
    run = Run(args.submissions)
    a, base_a = start_server("A", db, eval_log)
    run.bases = [base_a]
    b = None
    threads = [threading.Thread(target=run.monitor, args=(base_a,), daemon=True),
               threading.Thread(target=run.lock_holder, args=(db,), daemon=True)]
    for t in threads:
        t.start()
    seqs = list(range(args.submissions))
    next_seq = {"i": 0}
    b_started_at = b_killed_at = None
    third, two_thirds = args.submissions // 3, 2 * args.submissions // 3
    go = {third: threading.Event(), two_thirds: threading.Event()}     # clients wait at these for B's start, kill

    def client():
        while True:
            with run.lock:
                if next_seq["i"] >= len(seqs):
                    return
                seq = seqs[next_seq["i"]]
                next_seq["i"] += 1
            for mark in sorted(go):
                if seq >= mark:
                    go[mark].wait(max(0.0, deadline - time.monotonic()))
            run.submit(seq, deadline)
            time.sleep(random.uniform(0.2, 0.6))

    def b_in_flight() -> bool:
        starts: dict[str, int] = {}
        for line in eval_log.read_text().splitlines() if eval_log.exists() else []:
            kind, seq, who = line.split()
            if who == "B":
                starts[seq] = starts.get(seq, 0) + (1 if kind == "start" else -1)
        return any(v > 0 for v in starts.values())
    clients = [threading.Thread(target=client, daemon=True) for _ in range(args.clients)]
    try:
        for c in clients:
            c.start()
        while any(c.is_alive() for c in clients) and time.monotonic() < deadline:
            with run.lock:
                n = len(run.accepted)
            if b is None and b_started_at is None and n >= third:
                b, base_b = start_server("B", db, eval_log)
                b_started_at = n
                with run.lock:
                    run.bases = [base_a, base_b]
                go[third].set()
            if b is not None and b_killed_at is None and n >= two_thirds:
                with run.lock:
                    run.bases = [base_a]
                until = time.monotonic() + 10
                while not b_in_flight() and time.monotonic() < until:     # kill B in the middle of evaluations
                    time.sleep(0.01)
                b.send_signal(signal.SIGKILL)
                b.wait(30)
                with run.lock:
                    b_killed_at = len(run.accepted)
                go[two_thirds].set()
            time.sleep(0.05)
        for c in clients:
            c.join(max(0.0, deadline - time.monotonic()))
        s = Store(db)
        while s.pending() and time.monotonic() < deadline:         # A finishes the queue (B's leases expire)
            time.sleep(0.2)
        run.stop.set()
        for t in threads:
            t.join(10)
        return report(args, run, s, eval_log, time.monotonic() - t_start, b_started_at, b_killed_at, a, b)
    finally:
        run.stop.set()
        for p in (b, a):
            if p is not None and p.poll() is None:
                p.terminate()
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    p.kill()


def report(args, run: Run, s, eval_log: Path, took: float, b_started_at, b_killed_at, a, b) -> int:
    rows = {r["id"]: dict(r) for r in s.conn.execute("SELECT id, state, evaluation_id, lease_owner FROM submissions")}
    accepted = sorted(run.accepted)
    lost = [sid for sid in accepted if sid not in rows]
    states: dict[str, int] = {}
    for sid in accepted:
        st = rows.get(sid, {}).get("state", "missing")
        states[st] = states.get(st, 0) + 1
    eids = [rows[sid]["evaluation_id"] for sid in accepted if sid in rows]
    n_eval = s.count("evaluations")
    orphans = s.conn.execute("SELECT COUNT(*) FROM evaluations e WHERE NOT EXISTS (SELECT 1 FROM submissions x "
                             "WHERE x.evaluation_id = e.id)").fetchone()[0]
    starts: dict[str, list[str]] = {}
    ends: dict[str, list[str]] = {}
    for line in eval_log.read_text().splitlines():
        kind, seq, who = line.split()
        (starts if kind == "start" else ends).setdefault(seq, []).append(who)
    seq_of = run.accepted
    cut = sum(len(starts.get(str(seq_of[sid]), [])) - len(ends.get(str(seq_of[sid]), [])) for sid in accepted)
    moved = sum(1 for sid in accepted if "B" in starts.get(str(seq_of[sid]), []) and
                "A" in ends.get(str(seq_of[sid]), []))
    calls = sum(len(v) for v in starts.values())
    extra_completed = sum(max(0, len(ends.get(str(seq_of[sid]), [])) - 1) for sid in accepted)
    h = sorted(run.health)
    p99 = h[int(0.99 * (len(h) - 1))] if h else float("nan")
    exactly_once = (not lost and states.get("done", 0) == len(accepted) and None not in eids
                    and len(set(eids)) == len(eids) == n_eval and orphans == 0)
    health_ok = bool(h) and h[-1] < 1.0 and run.health_failures == 0
    print(f"leaderboard load: {args.submissions} submissions from {args.clients} concurrent clients in {took:.1f} s "
          f"(synthetic evaluator, cpu backend, leases {LEASE_S:g} s)")
    print(f"server A pid {a.pid}; server B pid {b.pid if b else '-'}: started after {b_started_at} accepted, "
          f"killed -9 after {b_killed_at}")
    print(f"accepted: {len(accepted)} (202); retried after 503/429: {run.retries_503}; after a connection error: "
          f"{run.retries_conn}")
    print(f"lock holder: {len(run.holds)} holds of the write lock, longest {max(run.holds or [0]):.1f} s")
    print(f"states of the accepted: {states}; lost: {len(lost)}")
    print(f"evaluation rows: {n_eval}; distinct evaluation per submission: {len(set(eids)) == len(eids)}; "
          f"orphan evaluations: {orphans}")
    print(f"evaluate() calls: {calls}; cut off by B's kill: {cut}; taken over by A after B's lease ran out: {moved}; "
          f"completed more than once: {extra_completed}")
    print(f"/api/health on A: {len(h)} probes, median {statistics.median(h) * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, "
          f"max {h[-1] * 1000:.1f} ms, failures {run.health_failures}")
    print(f"every accepted submission evaluated and stored exactly once, nothing lost: {exactly_once}")
    print(f"health under 1 s throughout: {health_ok}")
    print("RESULT: " + ("ok" if exactly_once and health_ok else "FAILED"))
    return 0 if exactly_once and health_ok else 1


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--role", default="orchestrator", choices=["orchestrator", "server"])
    p.add_argument("--submissions", type=int, default=200)
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--deadline", type=float, default=240.0, help="seconds for the whole run")
    p.add_argument("--name"), p.add_argument("--db"), p.add_argument("--port", type=int)
    p.add_argument("--eval-log")
    args = p.parse_args()
    return run_server(args) if args.role == "server" else orchestrate(args)


if __name__ == "__main__":
    sys.exit(main())
