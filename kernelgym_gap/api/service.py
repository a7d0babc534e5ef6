"""The evaluation service: the one runtime under every front end (the env and the vector env, evaluate_many,
the Ray actors, the suite runner, bench, the web worker and the trainers' Scorer).

    with EvalService("cuda", config, per_gpu=4) as service:
        future = service.submit(EvalRequest("GELU", source))      # a concurrent.futures.Future[EvalRecord]
        records = service.map(requests)                             # in request order

It owns, and nothing else builds:
  * slots and their placement: `slots` evaluations at once (cpu: one per core by default; cuda: `per_gpu`
    per GPU of this host, `gpus` or every visible one, lanes.worker_slots). Each evaluation runs where its
    slot's core.placement.Placement says (the service's `placement` with the slot's GPU and lanes), which the
    service passes to the engine beside the request's EvalConfig (`placement=`); the record's device says
    which GPU. The config carries no placement, so the cache key hashes it whole.
    A Ray actor holds a one-slot service for its GPU (ray_pool.py).
  * lane directories: slots that share a GPU coordinate through its lane (core/lane.py) in a directory made
    here (under placement.scratch_root) and removed by close(), unless the caller names one (`lane_dir`: a
    Ray node's, or "auto": this user's on the host); a `placement` that names a directory of its own keeps it.
  * one warm pool per slot (api/warm.WarmPool: a warm checker and pre-started children), started on the
    slot's first evaluation and kept across calls until close(). The `warm="auto"` rule is decided here
    only: warm on cuda with the built-in evaluator, cold otherwise (on cpu a pre-started child competes with
    the evaluations for the few cores).
  * the result cache and its store (result_cache.ResultCache: `cache` records in memory, `store` for the
    results database).
  * the order: the slots take requests first come, first served. With placement.prestart_for_next (on by
    default) a warm slot takes its next request as its submission's child ends (the pool's plan), so that the
    child it pre-starts is for that request (its DSL and its task's library warm-up) rather than for the one
    just evaluated; a slot that finds the queue empty runs a request a busy slot took ahead, so no slot idles
    while one waits.
  * cancellation: a request whose future was cancelled before a slot took it is never started; `map`
    cancels what it queued when its caller stops waiting (an interrupt, an error). An evaluation already
    running finishes under its own deadlines (its child holds the sandbox's wall deadline).
  * latency: every record's `latency` gains `service_queue_wait` (submitted to started) and `service_total`
    (submitted to done) beside the engine's stages.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import hashlib
import logging
import shutil
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from kernelgym_gap.api.lanes import EvalRequest, Progress, worker_slots
from kernelgym_gap.api.result_cache import ResultCache
from kernelgym_gap.core.config import EvalConfig
from kernelgym_gap.core.errors import HarnessError, UnknownChoiceError
from kernelgym_gap.core.placement import Placement
from kernelgym_gap.core.record import EvalRecord
from kernelgym_gap.core.task import BACKENDS, DSLS, TaskSpec

log = logging.getLogger(__name__)


def decide_warm(warm: Any, backend: str, evaluator: Callable | None) -> Any:
    """The `warm` rule, in one place: "auto" is warm on cuda with the built-in evaluator, else cold."""
    if isinstance(warm, str):
        if warm != "auto":
            raise ValueError(f"warm must be True, False or 'auto', not {warm!r}")
        return backend == "cuda" and evaluator is None
    return warm


@dataclasses.dataclass
class _Job:
    task: TaskSpec
    source: str | bytes
    dsl: str
    config: EvalConfig
    future: concurrent.futures.Future
    submitted: float
    key: Any = None


class EvalService:
    """See the module docstring. `backend` "auto" is resolved once, here (cuda when a GPU is visible)."""

    def __init__(self, backend: str = "auto", config: EvalConfig | None = None, slots: int | Sequence | None = None,
                 warm: Any = "auto", cache: int = 0, store: Any = None, *, gpus: Sequence[int] | None = None,
                 per_gpu: int = 1, lane_dir: str | None = None, evaluator: Callable | None = None,
                 registry=None, submitter: str = "service", origin: str = "service",
                 placement: Placement | None = None):
        if backend == "auto":
            from kernelgym_gap.core.backend import resolve_backend
            backend = resolve_backend(backend)
        elif backend not in BACKENDS:      # a named backend this host lacks is the engine's misuse to report
            raise UnknownChoiceError("backend", backend, BACKENDS + ("auto",))
        self.backend = backend
        self.config = config or EvalConfig()
        # where every slot runs but for its GPU and lanes (scratch root, cache paths, held outputs)
        self.base_placement = placement or Placement()
        self.registry = registry
        self.evaluator = evaluator
        self.warm = decide_warm(warm, self.backend, evaluator)
        if isinstance(slots, (int, type(None))):
            if slots is not None and slots < 1:
                raise ValueError("slots must be at least 1")
            self.slots: list[int | None] = plan_slots(self.backend, slots, gpus, per_gpu)
        else:      # explicit GPU indices (a Ray actor's one GPU), or None per cpu slot
            self.slots = list(slots)
            if not self.slots:
                raise ValueError("a service needs at least one slot")
        self._own_lanes: str | None = None
        shared = self.backend == "cuda" and len(self.slots) > len(set(self.slots))
        if lane_dir is None and shared:
            lane_dir = self._own_lanes = tempfile.mkdtemp(prefix="kgg-lanes-", dir=self.base_placement.scratch_root)
        self.lane_dir = lane_dir
        self._external_warm = None
        if self.warm not in (True, False):            # a WarmPool or WarmChecker the caller owns and closes
            if len(self.slots) != 1:
                raise ValueError("a warm pool of the caller's serves a one-slot service")
            self._external_warm = self.warm
        self.cache = ResultCache(cache, store, submitter, origin) if (cache or store is not None) else None
        # the requests no slot has taken, and those a slot took ahead (placement.prestart_for_next), under one
        # condition: a slot waits on it for either, or for close()
        self._jobs: deque[_Job] = deque()
        self._ahead: dict[int, _Job] = {}
        self._cv = threading.Condition()
        self._stopping = False
        self._pools: dict[int, Any] = {}
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._closed = False
        self.evaluated = 0              # evaluations run (cache hits excluded)

    # ---- placement -----------------------------------------------------------------------------------

    def placement(self, slot: int) -> Placement:
        """Where slot `slot` runs: the service's placement with the slot's GPU, and the service's lanes unless
        that placement names a lane directory of its own. Passed to the engine with each evaluation."""
        where = self.base_placement
        gpu = self.slots[slot]
        if gpu is not None:
            where = where.replace(gpu_index=gpu)
            if self.lane_dir is not None and where.lane_dir in (None, "auto"):
                where = where.replace(lane_dir=self.lane_dir)
        return where

    # ---- warm pools ----------------------------------------------------------------------------------

    def warm_parts(self, slot: int = 0) -> dict[str, Any]:
        """The checker= and children= of slot `slot`'s warm pool ({} when cold), started on first use."""
        if self._external_warm is not None:
            w = self._external_warm
            return {"checker": getattr(w, "checker", w), "children": getattr(w, "children", None)}
        if not self.warm:
            return {}
        with self._lock:
            pool = self._pools.get(slot)
            if pool is None:
                if self._closed:
                    raise HarnessError("this evaluation service is closed")
                from kernelgym_gap.api.warm import WarmPool
                gpu = self.slots[slot]
                try:
                    pool = WarmPool(device=self.backend, gpu_index=gpu if gpu is not None else 0,
                                    scratch_root=self.base_placement.scratch_root,
                                    plan=functools.partial(self._take_ahead, slot)
                                    if self.base_placement.prestart_for_next else None,
                                    start_early=self.base_placement.prestart_early,
                                    read_arena_bytes=self.base_placement.read_arena_bytes)
                except Exception as e:
                    raise HarnessError(f"the warm pool of slot {slot} did not start: {e}") from e
                self._pools[slot] = pool
        return {"checker": pool.checker, "children": pool.children}

    def child_spec(self, task: TaskSpec, dsl: str, config: EvalConfig, slot: int):
        """The spec of the child an evaluation of (task, dsl, config) needs on slot `slot` (sandbox/prestart.py's
        ChildSpec): its outputs' disk limits (disk.py) and its task's library warm-up included."""
        from kernelgym_gap.engine.trials import output_cases, warm_cases
        from kernelgym_gap.sandbox.launch import child_spec
        return child_spec(task, dsl, self.backend, config, self.placement(slot),
                          output_cases(task, self.backend, config), warm_cases(task, self.backend, config))

    def prestart(self, task: TaskSpec, dsl: str) -> None:
        """Lets each warm slot start a child for (task, dsl) now, so that its imports overlap the caller's
        own work (an agent writing its kernel)."""
        for slot in range(len(self.slots)):
            children = self.warm_parts(slot).get("children")
            if children is not None:
                children.refill(self.child_spec(task, dsl, self.config, slot))

    # ---- submitting ----------------------------------------------------------------------------------

    def _task(self, task_id: str) -> TaskSpec:
        if self.registry is None:
            from kernelgym_gap.core.registry import default_registry
            self.registry = default_registry()
        return self.registry.get(task_id)

    def submit(self, request: EvalRequest) -> concurrent.futures.Future:
        """Queues one request; raises at once for misuse (not an EvalRequest, unknown task, dsl or backend)."""
        if not isinstance(request, EvalRequest):
            raise TypeError(f"a request is an EvalRequest, not a {type(request).__name__}")
        if request.backend not in ("auto", self.backend):
            raise UnknownChoiceError("backend of this service", request.backend, ("auto", self.backend))
        return self.submit_task(self._task(request.task_id), request.source, request.dsl, request.config)

    def submit_task(self, task: TaskSpec, source: str | bytes, dsl: str = "triton",
                    config: EvalConfig | None = None, *, cached: bool = True, key: Any = None
                    ) -> concurrent.futures.Future:
        """`submit` for a TaskSpec the caller holds (an env's task, from whichever directory it came).
        cached=False: not looked up (the caller just missed `key`), still kept in the cache once evaluated."""
        if self._closed:
            raise HarnessError("this evaluation service is closed")
        if dsl not in DSLS:
            raise UnknownChoiceError("dsl", dsl, DSLS)
        job = _Job(task, source, dsl, config or self.config, concurrent.futures.Future(), time.perf_counter())
        if self.cache is not None:
            job.key = key or self.cache.key(task, source, dsl, self.backend, job.config, self.placement(0))
            hit = self.cache.get(job.key) if cached else None
            if hit is not None:
                job.future.set_result(hit.record)
                return job.future
        self._start()
        with self._cv:
            self._jobs.append(job)
            self._cv.notify()
        return job.future

    def evaluate(self, task: TaskSpec, source: str | bytes, dsl: str = "triton", backend: str | None = None,
                 config: EvalConfig | None = None) -> EvalRecord:
        """engine.evaluate's shape (task, source, dsl, backend, config) -> record, through this service: what
        KernelEnv and bench take as their evaluator."""
        if backend not in (None, "auto", self.backend):
            raise UnknownChoiceError("backend of this service", backend, ("auto", self.backend))
        return self.submit_task(task, source, dsl, config).result()

    def map(self, requests: Sequence[EvalRequest], progress: Progress | None = None) -> list[EvalRecord]:
        """Every request's record, in request order. All are checked before any runs; identical ones (same
        task, source, dsl and config) are evaluated once. A misuse found while evaluating, or the caller
        leaving (an interrupt), cancels what has not started and raises HarnessError (the interrupt itself)."""
        requests = list(requests)
        for i, r in enumerate(requests):
            if not isinstance(r, EvalRequest):
                raise TypeError(f"request {i} is a {type(r).__name__}, not an EvalRequest")
            if r.dsl not in DSLS:
                raise UnknownChoiceError("dsl", r.dsl, DSLS)
            if r.backend not in ("auto", self.backend):
                raise UnknownChoiceError("backend of this service", r.backend, ("auto", self.backend))
        tasks = [self._task(r.task_id) for r in requests]
        first: dict[tuple, int] = {}
        owner = [first.setdefault(_identity(r, t, self.config), i) for i, (r, t) in enumerate(zip(requests, tasks))]
        unique = sorted(set(owner))
        if len(unique) < len(requests):
            log.info("%d of %d requests were duplicates, evaluated once", len(requests) - len(unique), len(requests))
        futures = {i: self.submit_task(tasks[i], requests[i].source, requests[i].dsl, requests[i].config)
                   for i in unique}
        records: dict[int, EvalRecord] = {}
        try:
            by_future = {f: i for i, f in futures.items()}
            for done, f in enumerate(concurrent.futures.as_completed(by_future), 1):
                e = f.exception()
                if e is not None:
                    raise HarnessError(f"an evaluation raised: {e!r}") from e
                records[by_future[f]] = f.result()
                if progress:
                    progress(done, len(unique), f"{records[by_future[f]].task}: {records[by_future[f]].status.value}")
        finally:
            for f in futures.values():      # the caller is gone: what has not started never starts
                f.cancel()
        return [records[i] for i in owner]

    # ---- the slots -----------------------------------------------------------------------------------

    def _start(self) -> None:
        with self._lock:
            if self._threads or self._closed:
                return
            self._threads = [threading.Thread(target=self._work, args=(k,), daemon=True,
                                              name=f"kgg-service-{self.backend}-{k}" + (f"-gpu{g}" if g is not None else ""))
                             for k, g in enumerate(self.slots)]
            for t in self._threads:
                t.start()

    def _next_job(self, slot: int) -> _Job | None:
        """The slot's next request: the one it took ahead, else the queue's first, else one a busy slot took
        ahead (that slot's pre-started child then waits for whatever comes); None once the service closes."""
        with self._cv:
            while True:
                job = self._ahead.pop(slot, None)
                if job is None and self._jobs:
                    job = self._jobs.popleft()
                if job is None and self._ahead:
                    job = self._ahead.pop(next(iter(self._ahead)))
                if job is not None:
                    return job
                if self._stopping:
                    return None
                self._cv.wait()

    def _take_ahead(self, slot: int, ended_spec) -> Any:
        """The warm pool's plan (placement.prestart_for_next), called on the slot's own thread as its child ends:
        the queue's first live request becomes the slot's next, and the spec of the child it needs is returned
        for the pool to pre-start; None (the pool pre-starts for `ended_spec` again) when the queue is empty or
        the service closes. A request whose spec cannot be built stays taken: it runs next with a cold child."""
        with self._cv:
            if self._stopping or slot in self._ahead:
                return None
            while self._jobs:
                job = self._jobs.popleft()
                if not job.future.cancelled():
                    self._ahead[slot] = job
                    break
            else:
                return None
        try:
            return self.child_spec(job.task, job.dsl, job.config, slot)
        except Exception:  # noqa: BLE001 - its own evaluation meets (and reports) whatever this met
            log.exception("the next request's child spec could not be built; its child will start cold")
            return None

    def _work(self, slot: int) -> None:
        while True:
            job = self._next_job(slot)
            if job is None:
                return
            if not job.future.set_running_or_notify_cancel():
                continue                     # cancelled: its caller is gone
            started = time.perf_counter()
            try:
                record = self._run(slot, job)
            except BaseException as e:  # noqa: BLE001 - the caller's future carries it
                job.future.set_exception(e)
                continue
            now = time.perf_counter()
            record = dataclasses.replace(record, latency={**record.latency,
                                                          "service_queue_wait": started - job.submitted,
                                                          "service_total": now - job.submitted})
            if self.cache is not None and job.key is not None:
                self.cache.put(job.key, record, job.source)
            job.future.set_result(record)

    def _run(self, slot: int, job: _Job) -> EvalRecord:
        config = job.config
        evaluator = self.evaluator
        if evaluator is None:
            from kernelgym_gap.engine.pipeline import evaluate as evaluator
        # engine.evaluate takes placement=; a replacement written to the five-argument shape is called without
        where = {"placement": self.placement(slot)} if takes_placement(evaluator) else {}
        try:
            record = evaluator(job.task, job.source, job.dsl, self.backend, config, **where, **self.warm_parts(slot))
        except Exception as e:
            from kernelgym_gap.engine.evaluation import harness_failure_record, is_misuse
            if is_misuse(e) or isinstance(e, HarnessError):
                raise
            log.exception("an evaluation raised in the harness: its failure record, the others go on")
            record = harness_failure_record(job.task, job.source, job.dsl, self.backend, config, e)
        with self._lock:
            self.evaluated += 1
        gpu = self.slots[slot]
        if gpu is not None:
            record = dataclasses.replace(record, device={**record.device, "gpu_index": gpu})
        return record

    def close(self) -> None:
        """Cancels what no slot has taken, lets the running evaluations end, stops the warm pools and removes
        the lane directory this service made."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            threads = list(self._threads)
        with self._cv:
            for job in (*self._jobs, *self._ahead.values()):     # taken ahead is not started: cancelled too
                job.future.cancel()
            self._jobs.clear()
            self._ahead.clear()
            self._stopping = True
            self._cv.notify_all()
        for t in threads:
            t.join()
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()
        if self._own_lanes is not None:
            shutil.rmtree(self._own_lanes, ignore_errors=True)

    def __enter__(self) -> "EvalService":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"EvalService(backend={self.backend!r}, slots={self.slots}, warm={bool(self.warm)}, "
                f"lane_dir={self.lane_dir!r}, cache={self.cache is not None})")


def takes_placement(evaluator: Callable) -> bool:
    """Whether a custom evaluator takes `placement=` (a parameter of that name, or **kwargs), as engine.evaluate
    does: it then gets its slot's Placement. One written to the five-argument shape (task, source, dsl,
    backend, config: a Ray evaluator, whose actor places itself, or a test double) is called without it."""
    import inspect
    try:
        params = inspect.signature(evaluator).parameters.values()
    except (TypeError, ValueError):     # a builtin or C callable: no keywords beyond its five arguments
        return False
    return any(p.name == "placement" or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def plan_slots(backend: str, workers: int | None = None, gpus: Sequence[int] | None = None,
               per_gpu: int = 1) -> list[int | None]:
    """The slots of a service on this host: a GPU index per slot on cuda (`per_gpu` per GPU, `gpus` or every
    visible one), None per slot on cpu (`workers`, default one per core). The one rule: EvalService lays out
    its slots with it, and the reward server its slot processes, each of which then holds a one-slot
    service on its GPU."""
    return worker_slots([backend], workers, gpus, per_gpu)[backend]


def place_copies(n: int, placement: Placement | None = None, gpus: Sequence[int] | None = None
                 ) -> tuple[list[Placement], str | None]:
    """Placement for `n` copies that each hold a one-slot service in a process of their own (the vector
    env's copies): copy i is `placement` (default Placement()) on GPU gpus[i % len(gpus)] (default every
    visible GPU); copies that share a GPU share its lane, in a directory made here, unless `placement` names
    its own. Returns the copies' placements and that directory (None when no GPU is shared), which the
    caller removes when the copies are gone."""
    placement = placement or Placement()
    from kernelgym_gap.api.lanes import visible_gpus
    host = list(gpus) if gpus is not None else visible_gpus()
    if not host:
        raise HarnessError("the cuda backend was asked for but no GPU is visible")
    shared = n > len(host) and placement.lane_dir in (None, "auto")
    lane_dir = tempfile.mkdtemp(prefix="kgg-lanes-", dir=placement.scratch_root) if shared else None
    out = []
    for i in range(n):
        where = placement.replace(gpu_index=host[i % len(host)])
        if lane_dir is not None:
            where = where.replace(lane_dir=lane_dir)
        out.append(where)
    return out, lane_dir


def _identity(r: EvalRequest, task: TaskSpec, default: EvalConfig) -> tuple:
    raw = r.source.encode("utf-8", "surrogatepass") if isinstance(r.source, str) else r.source
    return (task.id, hashlib.sha256(raw).hexdigest(), r.dsl, r.config or default)
