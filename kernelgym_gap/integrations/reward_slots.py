"""The reward server's evaluation slots, fed fairly.

Each client (a trainer: the `X-Client-Id` header its RewardClient sends, else its address) has its own
queue of jobs; the slots take from the queues in turn (round robin, one job at a time), so a trainer's
batch of 256 slow items does not hold back another trainer's batch of 4: the second is interleaved with the
first from its arrival. Batches of different requests run at once, up to the slot count (cpu: the Scorer's
workers, default one per core; cuda: 4 per GPU through the GPU's lane, as evaluate_many does).

Each slot is a process (reward_slot_main.py) evaluating one job at a time, so that a job whose client went
away is cancelled for real: a queued one is dropped, a running one is ended with its process (and its
sandboxed child; the slot starts again for the next job). A job that hogs a slot is bounded by the
evaluation's own deadlines (the import, call and wall-clock deadlines of the config).

Records go through a cache in front (the Scorer's key: store.cache_key_for; in memory, and in the results
database with `--db`), looked up before a job is queued; new records are kept in both. A database locked by
another process makes a lookup or a write wait `lock_wait_s` at most: a lookup then fails the request with
503 (the app), a write is skipped (the reward still goes back: the store is a cache)."""
from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import logging
import os
import pickle
import select
import subprocess
import sys
import threading
from typing import Any

from kernelgym_gap.core.record import EvalRecord

log = logging.getLogger(__name__)


class Cancelled(Exception):
    """The job's client went away; it was not run, or its evaluation was ended."""


class SlotFailed(Exception):
    """The slot process died or raised: a harness error for this job only."""


@dataclasses.dataclass(eq=False)
class Job:
    task_id: str
    source: str
    dsl: str
    key: Any
    future: concurrent.futures.Future = dataclasses.field(default_factory=concurrent.futures.Future)
    cancelled: threading.Event = dataclasses.field(default_factory=threading.Event)


class SlotProcess:
    """One slot's process: started when first needed, again after it was ended."""

    def __init__(self, settings: dict, cancelled: threading.Event | None = None):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))   # the evaluator's module
        self.proc = subprocess.Popen([sys.executable, "-m", "kernelgym_gap.integrations.reward_slot_main"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        self.proc.stdin.write(pickle.dumps(settings))
        self.proc.stdin.flush()
        self._read(cancelled)                      # ("ready", None): the imports are done

    def _read(self, cancelled: threading.Event | None):
        while True:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.2)
            if ready:
                try:
                    return pickle.load(self.proc.stdout)
                except (EOFError, pickle.UnpicklingError) as e:
                    raise SlotFailed(f"the evaluation slot's process ended (exit {self.proc.poll()})") from e
            if cancelled is not None and cancelled.is_set():
                self.end()
                raise Cancelled("the client went away")
            if self.proc.poll() is not None:
                raise SlotFailed(f"the evaluation slot's process ended (exit {self.proc.returncode})")

    def run(self, job: Job) -> EvalRecord:
        try:
            self.proc.stdin.write(pickle.dumps((job.task_id, job.source, job.dsl)))
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as e:
            raise SlotFailed("the evaluation slot's process is gone") from e
        kind, payload = self._read(job.cancelled)
        if kind != "ok":
            raise SlotFailed(str(payload))
        return EvalRecord.from_dict(payload)

    def end(self) -> None:
        """SIGTERM: the slot kills its children and exits; SIGKILL if it does not within 5 s."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass


def _settle(future: concurrent.futures.Future, result=None, error: BaseException | None = None) -> None:
    """Sets a job's outcome unless it has one (a waiter that went away may have cancelled the future)."""
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
    except concurrent.futures.InvalidStateError:
        pass


class SlotPool:
    def __init__(self, scorer, *, lock_wait_s: float = 2.0, cache_size: int = 4096):
        from kernelgym_gap.api.result_cache import ResultCache
        from kernelgym_gap.api.service import plan_slots
        self.backend, self.config, self.registry = scorer.backend, scorer.config, scorer.registry
        self.store = scorer.store.with_timeout(lock_wait_s) if scorer.store is not None else None
        self.submitter = scorer.submitter
        # the slots load the server's task source (one directory or several: registry.TaskRegistry.source)
        source = getattr(self.registry, "source", None)
        self._settings = {"backend": self.backend, "evaluator": scorer.evaluator, "warm": bool(scorer.warm),
                          "tasks_dir": source() if callable(source) else None, "server_pid": os.getpid()}
        per_gpu = 4 if self.backend == "cuda" else 1
        # laid out by the evaluation service's rule; each slot process then holds a one-slot service on its
        # GPU (reward_slot_main.py), which places the evaluation there, as a Ray actor's does
        self.slots = plan_slots(self.backend, scorer.workers, scorer.gpus, per_gpu=per_gpu)
        # the one cache front (api/result_cache.py): in memory, and the results database with `--db`
        self.cache = ResultCache(cache_size, self.store, self.submitter, origin="trainer")
        self._queues: collections.OrderedDict[str, collections.deque] = collections.OrderedDict()
        self._cond = threading.Condition()
        self._closed = False
        self.running = 0
        self._procs: list[SlotProcess | None] = [None] * len(self.slots)
        self._threads = [threading.Thread(target=self._slot, args=(k, gpu), daemon=True, name=f"kgg-reward-slot-{k}")
                         for k, gpu in enumerate(self.slots)]
        for t in self._threads:
            t.start()

    # ---- the cache (called from a worker thread of the app, never the event loop) ----------------------

    def key(self, task_id: str, source: str, dsl: str):
        return self.cache.key(self.registry.get(task_id), source, dsl, self.backend, self.config)

    def cached(self, key) -> EvalRecord | None:
        """The record of an identical evaluation, or None. sqlite3.OperationalError: the database is locked."""
        hit = self.cache.get(key)
        return None if hit is None else hit.record

    # ---- queues ----------------------------------------------------------------------------------------

    def submit(self, client: str, items: list[tuple[str, str, str, Any]]) -> list[Job]:
        """Queues (task id, source, dsl, key) items under `client`; one Job (and future) per item."""
        jobs = [Job(t, s, d, k) for t, s, d, k in items]
        with self._cond:
            if self._closed:
                raise RuntimeError("the reward server is shutting down")
            self._queues.setdefault(client, collections.deque()).extend(jobs)
            self._cond.notify_all()
        return jobs

    def cancel(self, jobs: list[Job]) -> None:
        """Drops the queued jobs at once; a running one is ended by its slot (within 0.2 s)."""
        with self._cond:
            for j in jobs:
                j.cancelled.set()
            for client in list(self._queues):
                q = self._queues[client]
                for j in [j for j in q if j.cancelled.is_set()]:
                    q.remove(j)
                    _settle(j.future, error=Cancelled("the client went away"))
                if not q:
                    del self._queues[client]

    def ready(self) -> int:
        """Slots whose process is started (the first batch after a start waits for the imports)."""
        return sum(p is not None and p.proc.poll() is None for p in self._procs)

    def queued(self) -> int:
        with self._cond:
            return sum(len(q) for q in self._queues.values())

    def _take(self) -> Job | None:
        with self._cond:
            while True:
                if self._closed:
                    return None
                for client in list(self._queues):
                    q = self._queues[client]
                    while q and (q[0].cancelled.is_set() or q[0].future.cancelled()):
                        _settle(q.popleft().future, error=Cancelled("the client went away"))
                    if not q:
                        del self._queues[client]
                        continue
                    job = q.popleft()
                    if q:
                        self._queues.move_to_end(client)      # the next client's turn
                    else:
                        del self._queues[client]
                    self.running += 1
                    return job
                self._cond.wait()

    def _slot(self, index: int, gpu: int | None) -> None:
        settings = dict(self._settings, gpu=gpu, config=self.config)     # the slot's service places it on `gpu`
        try:
            self._procs[index] = SlotProcess(settings)        # started now: the first batch does not wait for it
        except Exception as e:  # noqa: BLE001 - tried again with the first job, which then fails with the reason
            log.error("evaluation slot %d did not start: %s", index, e)
        while True:
            job = self._take()
            if job is None:
                return
            try:
                if self._procs[index] is None:
                    self._procs[index] = SlotProcess(settings, job.cancelled)
                record = self._procs[index].run(job)
            except Cancelled as e:
                self._procs[index] = None                   # ended with its evaluation
                _settle(job.future, error=e)
            except BaseException as e:  # noqa: BLE001 - this job's failure, never the server's
                log.error("evaluation slot %d: %s", index, e)
                if self._procs[index] is not None and self._procs[index].proc.poll() is not None:
                    self._procs[index] = None
                _settle(job.future, error=e if isinstance(e, SlotFailed) else SlotFailed(str(e)))
            else:
                self._keep(job, record)
                _settle(job.future, record)
            finally:
                with self._cond:
                    self.running -= 1

    def _keep(self, job: Job, record: EvalRecord) -> None:
        self.cache.put(job.key, record, job.source)     # a store that fails is logged: the reward still goes back

    def close(self) -> None:
        with self._cond:
            self._closed = True
            for q in self._queues.values():
                for j in q:
                    _settle(j.future, error=Cancelled("the reward server is shutting down"))
            self._queues.clear()
            self._cond.notify_all()
        for p in self._procs:
            if p is not None:
                p.end()
