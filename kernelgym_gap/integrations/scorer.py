"""What every trainer adapter shares: a `Scorer` in front of the batch path.

    scorer = Scorer(backend="cpu")
    records = scorer.score([("GELU", source_a, "triton"), ("GELU", source_b, "triton")])

* Batches: `score(items)` sends all its items to `api.batch.evaluate_many` at once (threads waiting on
  sandboxed children: one per core on cpu, one per GPU on cuda, or a Ray pool with `ray=`). Single calls
  made concurrently from several threads or coroutines (`submit`, `score_one`, `ascore`: verl's reward
  managers call `compute_score` once per sample from an executor, verifiers scores a group's rollouts with
  `asyncio.gather`) are coalesced: a dispatcher thread collects what arrives within `window_s` and evaluates
  it as one batch, so there is never one blocking evaluation per completion.
* Cache: an identical submission (same source, task version, dsl, backend, device, settings and software:
  `store.cache_key_for`) is evaluated once. In memory (an LRU of `cache_size` records) and, with
  `store=` (a `store.Store` or a database path), in the results database, which also keeps every new
  record. Records whose status can come from the machine (timeouts, crashes) are never served again.
  Within one batch, duplicates are evaluated once.
* Warm: `warm=True` keeps one `api.warm.WarmPool` per worker (a trusted checker process and pre-started
  children) alive across batches; each submission still runs in a fresh, single-use child.

`completion_text` turns a trainer's completion (a string, or chat messages) into the reply text;
`record_terms` flattens a record into the numbers a trainer logs.

Per-sample failures, never the trainer's: `submit_replies` (what every trainer adapter calls) turns an item
it cannot evaluate (an unknown task, an unknown dsl, a reply that is not text) into a `RejectedItem`, a
record-shaped failure with status `invalid_item` and the reason, scored `failure_reward` like any failed
evaluation, while the batch's other items are evaluated as usual. An empty reply is evaluated (the static
gate fails it at no cost: no code, no entry point). `unverified` (a TileLang kernel the cpu backend could only
compile, docs/backends.md) is not scored: `reward_of` gives None for it (TRL ignores a None reward);
adapters that must return a number give `failure_reward` with status `unverified` in the terms.
"""
from __future__ import annotations

import asyncio
import atexit
import collections
import concurrent.futures
import dataclasses
import logging
import queue
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from kernelgym_gap.core.config import EvalConfig
from kernelgym_gap.core.errors import UnknownChoiceError
from kernelgym_gap.core.record import EvalRecord
from kernelgym_gap.core.task import DSLS, TaskSpec
from kernelgym_gap.integrations.terms import (  # noqa: F401 - the adapters' names, kept importable from here
    ItemStatus, RejectedItem, completion_text, number_reward, record_terms, reward_of, rejected_future)

log = logging.getLogger(__name__)

Item = tuple  # (task id or name, source, dsl)


@dataclasses.dataclass
class _Job:
    task: TaskSpec
    source: str
    dsl: str
    future: concurrent.futures.Future


class Scorer:
    """Scores (task, source, dsl) items through the batch path, with a cache in front (module docstring).

    backend: "cpu", "cuda" or "auto". config: the EvalConfig of every evaluation. workers, ray: as
    `evaluate_many` (ray: "auto", an address, or a RayPool kept by the caller). warm: keep a warm pool per
    worker across batches (local pool only; "auto": on cuda with the built-in evaluator). store: a `store.Store` or a database path: look records up there
    and keep new ones (submitter `submitter`). evaluator: replaces engine.evaluate (tests, a custom cache)."""

    def __init__(self, backend: str = "auto", *, config: EvalConfig | None = None, workers: int | None = None,
                 warm: bool | str = "auto", store: Any = None, submitter: str = "trainer", cache_size: int = 4096,
                 window_s: float = 0.02, ray: Any = None, registry=None, evaluator: Callable | None = None):
        from kernelgym_gap.core.backend import resolve_backend
        from kernelgym_gap.core.registry import default_registry
        self.backend = resolve_backend(backend)
        if warm == "auto":      # the warm path on cuda with the built-in local pool (api/batch.py says why)
            warm = self.backend == "cuda" and ray is None and evaluator is None
        if warm and (ray is not None or evaluator is not None):
            raise ValueError("warm= applies to the built-in evaluator on the local pool")
        self.config = config or EvalConfig()
        self._lane_dir = None
        if self.backend == "cuda" and ray is None and self.config.sandbox.lane_dir in (None, "auto"):
            # one lane directory across batches, so that a warm pool's pre-started children (whose spec holds
            # it) still fit the next batch
            from kernelgym_gap.api.lanes import with_lane
            self._lane_dir = tempfile.mkdtemp(prefix="kgg-lanes-", dir=self.config.scratch_root)
            self.config = with_lane(self.config, self._lane_dir)
        self.workers, self.warm, self.ray, self.window_s = workers, warm, ray, window_s
        self.registry = registry or default_registry()
        self.evaluator = evaluator
        if store is not None and not hasattr(store, "lookup"):
            from kernelgym_gap.store.db import Store
            store = Store(store)
        self.store, self.submitter = store, submitter
        self.cache_size = cache_size
        self._cache: collections.OrderedDict = collections.OrderedDict()
        self._lock = threading.Lock()
        self._queue: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None
        self._warm_pools: dict[tuple, list] = {}
        self._closed = False
        self.stats = {"requested": 0, "evaluated": 0, "cache_hits": 0, "batches": 0}

    # ---- submitting --------------------------------------------------------------------------------

    def _job(self, item: Item) -> _Job:
        if isinstance(item, dict):
            task_id, source, dsl = item.get("task"), item.get("source"), item.get("dsl", "triton")
        else:
            item = tuple(item)
            task_id, source, dsl = item[0], item[1], (item[2] if len(item) > 2 else "triton")
        if dsl not in DSLS:
            raise UnknownChoiceError("dsl", str(dsl), DSLS)
        if not isinstance(source, str):
            raise TypeError(f"a submission's source is a str, not {type(source).__name__}")
        return _Job(self.registry.get(str(task_id)), source, dsl, concurrent.futures.Future())

    def submit_many(self, items: Sequence[Item]) -> list[concurrent.futures.Future]:
        """Queues the items as one unit (never split across batches); returns one future per item. Raises
        at once for misuse (unknown task or dsl)."""
        if self._closed:
            raise RuntimeError("this Scorer is closed")
        jobs = [self._job(it) for it in items]
        if jobs:
            self._ensure_thread()
            self._queue.put(jobs)
        return [j.future for j in jobs]

    def submit_replies(self, items: Sequence[tuple]) -> list[concurrent.futures.Future]:
        """What the trainer adapters call: items (task, reply, dsl), the reply a completion's text whose code
        is extracted here (`api.completions.extract_code`). One future per item, in order; an item that
        cannot be evaluated (unknown task or dsl, a reply that is not text, a bad shape) is resolved at once
        with a RejectedItem saying why, and the others go to one batch (module docstring)."""
        from kernelgym_gap.api.completions import extract_code
        from kernelgym_gap.core.errors import KernelGymError
        futures: list = [None] * len(items)
        good, where = [], []
        for i, item in enumerate(items):
            task = dsl = None
            try:
                task, reply, dsl = tuple(item) + (("triton",) if len(item) == 2 else ())
                if dsl not in DSLS:
                    raise UnknownChoiceError("dsl", str(dsl), DSLS)
                if not isinstance(reply, str):
                    raise TypeError(f"a reply is text, not {type(reply).__name__}")
                spec = self.registry.get(str(task))
                good.append((spec.id, extract_code(reply, spec.entry_point), dsl))
                where.append(i)
            except (KernelGymError, TypeError, ValueError, KeyError) as e:
                futures[i] = rejected_future(task, dsl, f"not evaluated: {e}")
        for i, f in zip(where, self.submit_many(good) if good else []):
            futures[i] = f
        return futures

    def score_replies(self, items: Sequence[tuple], timeout: float | None = None) -> list:
        """submit_replies' records (EvalRecord or RejectedItem), in order."""
        return [f.result(timeout) for f in self.submit_replies(items)]

    def submit(self, task: str, source: str, dsl: str = "triton") -> concurrent.futures.Future:
        return self.submit_many([(task, source, dsl)])[0]

    def score(self, items: Sequence[Item], timeout: float | None = None) -> list[EvalRecord]:
        """One record per item, in order."""
        return [f.result(timeout) for f in self.submit_many(items)]

    def score_one(self, task: str, source: str, dsl: str = "triton", timeout: float | None = None) -> EvalRecord:
        return self.submit(task, source, dsl).result(timeout)

    async def ascore(self, items: Sequence[Item]) -> list[EvalRecord]:
        """`score` for coroutines: awaits the batch without blocking the event loop."""
        return list(await asyncio.gather(*(asyncio.wrap_future(f) for f in self.submit_many(items))))

    # ---- the dispatcher ----------------------------------------------------------------------------

    def _ensure_thread(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._dispatch, name="kgg-scorer", daemon=True)
                self._thread.start()

    def _dispatch(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch, stop = list(first), False
            deadline = time.monotonic() + self.window_s
            while True:
                try:
                    more = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
                if more is None:
                    stop = True
                    break
                batch.extend(more)
            try:
                self._run(batch)
            except BaseException as e:  # noqa: BLE001 - handed to every waiting caller
                for j in batch:
                    if not j.future.done():
                        j.future.set_exception(e)
            if stop:
                return

    def _key(self, job: _Job):
        from kernelgym_gap.store.cache_key import cache_key_for
        return cache_key_for(job.task, job.source, job.dsl, self.backend, self.config)

    def _cached(self, key) -> EvalRecord | None:
        with self._lock:
            rec = self._cache.get(key)
            if rec is not None:
                self._cache.move_to_end(key)
                return rec
        if self.store is not None:
            hit = self.store.lookup(key)
            if hit is not None:
                self._remember(key, hit[1])
                return hit[1]
        return None

    def _remember(self, key, record: EvalRecord) -> None:
        from kernelgym_gap.store.results import NOT_CACHED_STATUSES
        if record.status.value in NOT_CACHED_STATUSES or self.cache_size <= 0:
            return
        with self._lock:
            self._cache[key] = record
            self._cache.move_to_end(key)
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)

    def _run(self, batch: list[_Job]) -> None:
        from kernelgym_gap.api.batch import evaluate_many
        from kernelgym_gap.api.lanes import EvalRequest
        self.stats["requested"] += len(batch)
        pending: dict[Any, list[_Job]] = {}
        for job in batch:
            key = self._key(job)
            rec = None if key in pending else self._cached(key)
            if rec is not None:
                self.stats["cache_hits"] += 1
                job.future.set_result(rec)
            else:
                pending.setdefault(key, []).append(job)
        if not pending:
            return
        keys = list(pending)
        requests = [EvalRequest(pending[k][0].task.id, pending[k][0].source, pending[k][0].dsl, self.backend)
                    for k in keys]
        self.stats["batches"] += 1
        self.stats["evaluated"] += len(requests)
        if self.ray is not None:
            records = evaluate_many(requests, self.workers, config=self.config, ray=self.ray,
                                    registry=self.registry)
        else:
            records = evaluate_many(requests, self.workers, config=self.config, registry=self.registry,
                                    evaluator=self._evaluate)
        for key, record in zip(keys, records):
            self._remember(key, record)
            if self.store is not None:
                try:
                    self.store.add_record(record, pending[key][0].source, self.submitter, key=key, origin="trainer")
                except Exception:  # noqa: BLE001 - the reward still goes back; the store is a cache
                    log.exception("could not store a record in %s", self.store)
            for job in pending[key]:
                job.future.set_result(record)

    # ---- evaluation (local pool) -------------------------------------------------------------------

    def _evaluate(self, task, source, dsl, backend, config) -> EvalRecord:
        if not self.warm:
            if self.evaluator is not None:
                return self.evaluator(task, source, dsl, backend, config)
            from kernelgym_gap.engine.pipeline import evaluate
            return evaluate(task, source, dsl, backend, config)
        from kernelgym_gap.engine.pipeline import evaluate
        pool = self._take_warm(backend, config.gpu_index)
        try:
            return evaluate(task, source, dsl, backend, config, checker=pool.checker, children=pool.children)
        finally:
            with self._lock:
                self._warm_pools.setdefault((backend, config.gpu_index), []).append(pool)

    def _take_warm(self, backend: str, gpu_index: int):
        with self._lock:
            idle = self._warm_pools.setdefault((backend, gpu_index), [])
            if idle:
                return idle.pop()
        from kernelgym_gap.api.warm import WarmPool
        return WarmPool(device=backend, gpu_index=gpu_index, scratch_root=self.config.scratch_root)

    def close(self) -> None:
        """Stops the dispatcher (after the batches already queued) and the warm pools."""
        if self._closed:
            return
        self._closed = True
        if self._thread is not None and self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()
        with self._lock:
            pools = [p for ps in self._warm_pools.values() for p in ps]
            self._warm_pools.clear()
        for p in pools:
            p.close()
        if self._lane_dir is not None:
            shutil.rmtree(self._lane_dir, ignore_errors=True)

    def __enter__(self) -> "Scorer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Scorer(backend={self.backend!r}, warm={self.warm}, store={self.store!r}, stats={self.stats})"


_SHARED: dict[tuple, Scorer] = {}
_SHARED_LOCK = threading.Lock()


def shared_scorer(backend: str = "auto", **settings: Any) -> Scorer:
    """One Scorer per process and settings, for adapters a trainer loads by path (verl's compute_score):
    every call with the same settings shares its cache and its batches. Closed at exit."""
    key = (backend,) + tuple(sorted((k, repr(v)) for k, v in settings.items()))
    with _SHARED_LOCK:
        s = _SHARED.get(key)
        if s is None or s._closed:
            s = _SHARED[key] = Scorer(backend, **settings)
        return s


@atexit.register
def _close_shared() -> None:
    for s in list(_SHARED.values()):
        try:
            s.close()
        except Exception:  # noqa: BLE001
            pass
