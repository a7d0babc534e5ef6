"""What every trainer adapter shares: a `Scorer` in front of the batch path.

    scorer = Scorer(backend="cpu")
    records = scorer.score([("GELU", source_a, "triton"), ("GELU", source_b, "triton")])

* Batches: `score(items)` sends all its items at once to the Scorer's `api.service.EvalService`, kept
  across batches (slots waiting on sandboxed children: one per core on cpu, 4 per GPU on cuda), or to a Ray
  pool with `ray=`. Single calls
  made concurrently from several threads or coroutines (`submit`, `score_one`, `ascore`: verl's reward
  managers call `compute_score` once per sample from an executor, verifiers scores a group's rollouts with
  `asyncio.gather`) are coalesced: a dispatcher thread collects what arrives within `window_s` and evaluates
  it as one batch, so there is never one blocking evaluation per completion.
* Cache: an identical submission (same source, task version, dsl, backend, device, settings and software:
  `store.cache_key_for`) is evaluated once. In memory (an LRU of `cache_size` records) and, with
  `store=` (a `store.Store` or a database path), in the results database, which also keeps every new
  record. Records whose status can come from the machine (timeouts, crashes) are never served again.
  Within one batch, duplicates are evaluated once.
* Warm: `warm=True` keeps one `api.warm.WarmPool` per slot of the service (a trusted checker process and
  pre-started children) alive across batches; each submission still runs in a fresh, single-use child.
  The cache and the store are the service's (api/result_cache.py).

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
import concurrent.futures
import dataclasses
import logging
import queue
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
    and keep new ones (submitter `submitter`). evaluator: replaces engine.evaluate (tests, a custom cache).
    placement: a core.placement.Placement for every slot but its GPU (scratch root, cache paths, lanes).
    gpus: the GPUs the slots are laid out on (cuda; default every visible one)."""

    def __init__(self, backend: str = "auto", *, config: EvalConfig | None = None, workers: int | None = None,
                 warm: bool | str = "auto", store: Any = None, submitter: str = "trainer", cache_size: int = 4096,
                 window_s: float = 0.02, ray: Any = None, registry=None, evaluator: Callable | None = None,
                 placement: Any = None, gpus: Sequence[int] | None = None):
        from kernelgym_gap.api.service import EvalService
        from kernelgym_gap.core.backend import resolve_backend
        from kernelgym_gap.core.registry import default_registry
        self.backend = resolve_backend(backend)
        if warm is True and (ray is not None or evaluator is not None):
            raise ValueError("warm= applies to the built-in evaluator on the local pool")
        self.config = config or EvalConfig()
        self.registry = registry or default_registry()
        self.workers, self.ray, self.window_s = workers, ray, window_s
        self.gpus = list(gpus) if gpus is not None else None
        self.evaluator = evaluator
        # every evaluation, the cache and the store go through one api/service.EvalService, kept across
        # batches: its slots (4 per GPU on cuda, as evaluate_many), its lane directory (one for the Scorer's
        # life, so that a warm pool's pre-started children, whose spec holds it, fit the next batch), one
        # warm pool per slot (the service's warm rule) and the result cache in front. With ray=, the Ray
        # actors evaluate (each holds a one-slot service) and this service is the cache in front of them.
        self.service = EvalService(self.backend, self.config, slots=workers, warm=False if ray is not None else warm,
                                   cache=cache_size, store=store, per_gpu=4, evaluator=evaluator,
                                   registry=self.registry, submitter=submitter, origin="trainer",
                                   placement=placement, gpus=self.gpus)
        self.warm = self.service.warm
        self.store, self.submitter = self.service.cache.store, submitter
        self.cache_size = cache_size
        self._lock = threading.Lock()
        self._queue: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None
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

    def _run(self, batch: list[_Job]) -> None:
        """One batch: answered from the service's cache where it can, the rest evaluated by the service (or
        the Ray pool) once per distinct submission."""
        from kernelgym_gap.api.lanes import EvalRequest
        cache = self.service.cache
        self.stats["requested"] += len(batch)
        pending: dict[Any, list[_Job]] = {}
        for job in batch:
            key = cache.key(job.task, job.source, job.dsl, self.backend, self.service.config,
                            self.service.placement(0))
            hit = None if key in pending else cache.get(key, origin="trainer")
            if hit is not None:
                self.stats["cache_hits"] += 1
                job.future.set_result(hit.record)
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
            from kernelgym_gap.api.batch import evaluate_many
            records = evaluate_many(requests, self.workers, config=self.config, ray=self.ray,
                                    registry=self.registry)
        else:
            records = self._evaluate_local(requests, keys, pending)
        for key, record in zip(keys, records):
            if self.ray is not None:
                cache.put(key, record, pending[key][0].source, origin="trainer")
            for job in pending[key]:
                job.future.set_result(record)

    def _evaluate_local(self, requests, keys, pending) -> list[EvalRecord]:
        """Through the service, which keeps each new record in its cache and store (no second lookup: the
        keys were missed just now)."""
        from kernelgym_gap.core.errors import HarnessError
        futures = [self.service.submit_task(pending[k][0].task, r.source, r.dsl, None, cached=False, key=k)
                   for k, r in zip(keys, requests)]
        try:
            out = []
            for f in futures:
                e = f.exception()
                if e is not None:
                    raise HarnessError(f"an evaluation raised: {e!r}") from e
                out.append(f.result())
            return out
        finally:
            for f in futures:
                f.cancel()

    def close(self) -> None:
        """Stops the dispatcher (after the batches already queued) and the warm pools."""
        if self._closed:
            return
        self._closed = True
        if self._thread is not None and self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()
        self.service.close()

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
