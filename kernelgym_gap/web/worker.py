"""The leaderboard's worker: a process of its own that evaluates queued web submissions.

    python -m kernelgym_gap.web.worker --db PATH [--backend cpu|cuda] [--threads N] [--parent-pid PID]

`kernelgym-gap leaderboard serve` starts one beside the web server (the web process only validates and
queues; it never evaluates, imports submitted code or starts a child). The queue lives in the store
(submissions in state 'queued'), so it survives a restart. Each thread claims one submission at a time
under this worker's lease (an IMMEDIATE transaction, so two threads or two workers never claim the same
one), serves it from the cache when it can, and otherwise submits it to the worker's api/service.EvalService,
which runs the submission in its own sandboxed child process. A heartbeat thread renews the leases of the submissions being
evaluated every lease/4 seconds; a submission whose lease ran out (its worker was killed) goes back to the
queue when any worker next looks for work, and one whose lease is alive is never taken, so a second server
on the same database leaves this worker's submissions alone. With --parent-pid the worker exits when that
process is gone (a server killed without cleaning up): at once on Linux (PR_SET_PDEATHSIG), within a
second elsewhere.
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading

from kernelgym_gap.store.db import LEASE_S, Store, cache_key_for, new_owner, resolve_db_path

log = logging.getLogger(__name__)

HEARTBEAT_S = 1.0        # one byte to --heartbeat-fd this often: the server's supervisor (web/supervise.py)


class Worker:
    def __init__(self, store: Store, registry, config, threads: int = 1, poll_s: float = 0.5,
                 gpu_count: int = 1, lease_s: float = LEASE_S, owner: str | None = None):
        self.store, self.registry, self.config = store, registry, config
        self.n_threads, self.poll_s, self.gpu_count = max(1, threads), poll_s, max(1, gpu_count)
        self.lease_s = max(1.0, float(lease_s))
        self.owner = owner or new_owner("worker")
        self._stop = threading.Event()
        self.signalled = False              # set by the signal handler; wait() turns it into a stop
        self._threads: list[threading.Thread] = []
        self.busy: dict[int, int] = {}          # thread index -> submission id being evaluated
        self._services: dict[str, object] = {}  # backend -> its api/service.EvalService, made on first use
        self._services_lock = threading.Lock()

    def service(self, backend: str):
        """The evaluation service of `backend`: one slot per thread, on cuda thread i's slot on GPU
        i % gpu_count (one evaluation per GPU: main() caps the threads), cold (no warm pools)."""
        from kernelgym_gap.api.service import EvalService
        with self._services_lock:
            svc = self._services.get(backend)
            if svc is None:
                slots = [i % self.gpu_count for i in range(self.n_threads)] if backend == "cuda" else self.n_threads
                svc = self._services[backend] = EvalService(backend, self.config, slots=slots, warm=False,
                                                            registry=self.registry)
            return svc

    def beat_to(self, fd: int) -> None:
        """Writes one byte to `fd` every HEARTBEAT_S until stop(): `leaderboard serve`'s supervisor reads
        them (its liveness in /api/health; a worker silent too long is restarted). A closed pipe (the
        server is gone) ends the beats, nothing else."""
        def beat() -> None:
            while True:
                try:
                    os.write(fd, b".")
                except OSError:
                    return
                if self._stop.wait(HEARTBEAT_S):
                    return
        t = threading.Thread(target=beat, name="kgg-worker-beat", daemon=True)
        t.start()
        self._threads.append(t)

    def start(self) -> None:
        requeued = self.store.requeue_interrupted()
        if requeued:
            log.warning("requeued %d submission(s) whose worker's lease ran out", requeued)
        for i in range(self.n_threads):
            t = threading.Thread(target=self._loop, args=(i,), name=f"kgg-worker-{i}", daemon=True)
            t.start()
            self._threads.append(t)
        t = threading.Thread(target=self._heartbeat, name="kgg-worker-heartbeat", daemon=True)
        t.start()
        self._threads.append(t)

    def _heartbeat(self) -> None:
        """Renews this worker's leases every lease/4 s while it evaluates (evaluations take minutes on
        cuda; the lease is seconds, so a killed worker's submissions are requeued soon)."""
        while not self._stop.wait(self.lease_s / 4):
            ids = set(self.busy.values())
            if not ids:
                continue
            try:
                held = self.store.heartbeat(self.owner, ids, self.lease_s)
            except Exception:            # a locked database: the next beat tries again, well within the lease
                log.exception("worker %s: cannot renew its leases", self.owner)
                continue
            for sid in ids - held:
                log.warning("submission %d: this worker's lease was lost; its result will not be stored", sid)

    def on_signal(self, signum, frame) -> None:
        """The SIGTERM/SIGINT handler: a flag, no lock. The handler runs in the main thread between bytecodes,
        possibly inside the stop Event's own lock (in wait()) or inside another handler. Calling Event.set()
        here deadlocked a worker in CI (2026-12-04): SIGTERM and the parent-death SIGTERM came back to back,
        the main thread's handlers waited on the Event's lock, and every thread queued behind them."""
        self.signalled = True

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout)
        with self._services_lock:
            services, self._services = list(self._services.values()), {}
        for svc in services:
            svc.close()

    def wait(self, parent_pid: int | None = None, poll_s: float = 0.2) -> None:
        """Blocks until stop(), a signal (`signalled`) or, with parent_pid, until that process is gone."""
        while not self._stop.wait(poll_s):
            if self.signalled:
                self._stop.set()
            elif parent_pid is not None and not _alive(parent_pid):
                log.warning("the server (pid %d) is gone: the worker stops", parent_pid)
                self._stop.set()

    def _loop(self, index: int) -> None:
        while not self._stop.is_set():
            try:
                job = self.store.claim_next(self.owner, self.lease_s)
            except Exception:
                log.exception("worker %d: cannot read the queue", index)
                job = None
            if job is None:
                self._stop.wait(self.poll_s)
                continue
            self.busy[index] = job["id"]
            try:
                self.run_one(job, index)
            finally:
                self.busy.pop(index, None)

    def run_one(self, job: dict, index: int = 0) -> None:
        sid = job["id"]
        try:
            task = self.registry.get(job["task_id"])
            service = self.service(job["backend"])
            source = bytes(job["content"])
            # the queue's own cache: a hit finishes this queued submission (store.finish), no new row
            key = cache_key_for(task, source, job["dsl"], service.backend, service.config, service.placement(0))
            owner = job.get("lease_owner") or self.owner
            hit = None if job["remeasure"] else self.store.lookup(key)
            if hit is not None:
                if self.store.finish(sid, evaluation_id=hit[0], owner=owner):
                    log.info("submission %d: served from the cache (evaluation %d)", sid, hit[0])
                return
            record = service.submit_task(task, source, job["dsl"]).result()
            if self.store.finish(sid, record=record, key=key, owner=owner):
                log.info("submission %d: %s, reward %.4f", sid, record.status.value, record.reward)
            else:
                log.warning("submission %d: evaluated after this worker's lease ran out; result dropped", sid)
        except Exception as e:   # the harness failed (not the submission): keep the worker alive
            log.exception("submission %d could not be evaluated", sid)
            self.store.fail(sid, f"{type(e).__name__}: {e}", owner=job.get("lease_owner") or self.owner)


def _gpu_count() -> int:
    import subprocess
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
        n = sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))
    except (OSError, subprocess.SubprocessError):
        n = 0
    if not n:
        import torch
        n = torch.cuda.device_count()
    return max(1, n)


def _die_with_parent() -> None:
    """Linux: the kernel sends this process SIGTERM when its parent exits (uvicorn re-raises the signal
    that stopped it, so the server may not get to clean up)."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)          # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _alive(pid: int) -> bool:
    """Whether the server that started this worker still runs (it is this process's parent)."""
    return os.getppid() == pid


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m kernelgym_gap.web.worker", description=__doc__.splitlines()[0])
    p.add_argument("--db", help="results database (default: $KERNELGYM_GAP_DB or the default path)")
    p.add_argument("--backend", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--threads", type=int, default=1, help="evaluations at once (cuda: one per GPU)")
    p.add_argument("--gpus", type=int, default=0, help="GPUs to spread cuda evaluations over (0: all visible)")
    p.add_argument("--parent-pid", type=int, help="exit when this process is gone")
    p.add_argument("--heartbeat-fd", type=int, help="write a byte to this pipe every second (the server's "
                                                      "supervisor watches it)")
    p.add_argument("--lease-s", type=float, default=LEASE_S,
                   help="seconds a claimed submission stays this worker's without a heartbeat")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="worker %(levelname)s %(name)s: %(message)s")
    from kernelgym_gap.core.config import EvalConfig
    from kernelgym_gap.core.registry import default_registry
    from kernelgym_gap.sandbox.exposure import ExposedFileError, check_private
    db_path = resolve_db_path(args.db)
    try:       # the submissions it runs must not be able to read the database (issue 32, L2)
        check_private(db_path)
        store = Store(db_path)
        check_private(db_path)
    except ExposedFileError as e:
        print(f"worker: {e}", file=sys.stderr, flush=True)
        return 2
    threads, gpus = max(1, args.threads), max(1, args.gpus)
    if args.backend == "cuda":
        gpus = args.gpus or _gpu_count()
        if threads > gpus:       # two evaluations timing on one GPU would disturb each other's numbers
            log.warning("%d threads for %d GPU(s): using %d (one evaluation per GPU)", threads, gpus, gpus)
            threads = gpus
    worker = Worker(store, default_registry(), EvalConfig(), threads=threads, gpu_count=gpus, lease_s=args.lease_s)

    signal.signal(signal.SIGTERM, worker.on_signal)
    signal.signal(signal.SIGINT, worker.on_signal)
    if args.parent_pid is not None:
        _die_with_parent()
        if not _alive(args.parent_pid):                 # it exited before the line above
            return 0
    print(f"worker: evaluating queued submissions of {store.path} on {args.backend} "
          f"({worker.n_threads} thread(s))", file=sys.stderr, flush=True)
    if args.heartbeat_fd is not None:
        worker.beat_to(args.heartbeat_fd)
    worker.start()
    worker.wait(args.parent_pid)
    worker.stop(timeout=2.0)
    return 0


if __name__ == "__main__":
    code = main()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    # Leave without the interpreter's finalisation, which nothing here needs: a daemon thread may still be
    # inside an evaluation or a SQLite call, and nothing it holds is wanted once stop() returned. A
    # submission claimed and not finished is requeued when its lease runs out, as after a kill.
    os._exit(code)
