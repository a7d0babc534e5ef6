"""Many evaluations at once, for trainers that score a batch of completions.

`evaluate_many(requests, workers)` evaluates a list of `EvalRequest`s and returns their `EvalRecord`s in
request order. Each evaluation already runs in its own sandboxed child process (engine.evaluate), so the
parent's pool is made of threads: a thread waits on its child and nothing of the submission runs in the
parent.

  * cpu backend: `workers` threads (default: the machine's CPU count) share the queue.
  * cuda backend: `per_gpu` workers (default 4) per GPU of the host (all visible GPUs unless `gpus=` names
    some), each evaluation pinned to its worker's GPU through `EvalConfig.gpu_index`. The workers of one GPU
    share it through its lane (core/lane.py; a lane directory made for the call, `SandboxConfig.lane_dir`):
    their correctness trials and checks run side by side, their timings one at a time, alone on the GPU
    (two timings on one GPU at once would disturb each other). per_gpu=1 is one evaluation per GPU at a
    time, without lanes. The GPU an evaluation used is written into its record's device info as
    `device["gpu_index"]`.
  * `ray="auto"` or `ray="host:port"`: the same requests go to a pool of Ray actors (kernelgym_gap.api.ray_pool)
    and come back as the same records.

Model replies to records: completions.py (`score_completions`). The vector environment: vector.py.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
import queue
import shutil
import tempfile
import threading
from collections.abc import Sequence
from typing import Any

from kernelgym_gap.api.lanes import EvalRequest, Evaluator, Progress, one_backend, with_lane, worker_slots
from kernelgym_gap.core.backend import resolve_backend
from kernelgym_gap.core.config import EvalConfig
from kernelgym_gap.core.errors import HarnessError, UnknownChoiceError
from kernelgym_gap.core.record import EvalRecord
from kernelgym_gap.core.task import DSLS, TaskSpec

log = logging.getLogger(__name__)

def _resolve(requests: Sequence[EvalRequest], registry) -> tuple[list[TaskSpec], list[str]]:
    """Checks every request before anything runs: a misuse fails the whole batch at once."""
    resolved: dict[str, str] = {}
    tasks, backends = [], []
    for i, r in enumerate(requests):
        if not isinstance(r, EvalRequest):
            raise TypeError(f"request {i} is a {type(r).__name__}, not an EvalRequest")
        if r.dsl not in DSLS:
            raise UnknownChoiceError("dsl", r.dsl, DSLS)
        if r.backend not in resolved:
            resolved[r.backend] = resolve_backend(r.backend)
        tasks.append(registry.get(r.task_id))
        backends.append(resolved[r.backend])
    return tasks, backends


def evaluate_many(requests: Sequence[EvalRequest], workers: int | None = None, *,
                  config: EvalConfig | None = None, gpus: Sequence[int] | None = None, ray: Any = None,
                  registry=None, evaluator: Evaluator | None = None,
                  progress: Progress | None = None, warm: bool | str = "auto",
                  tasks_dir: str | None = None, per_gpu: int = 4) -> list[EvalRecord]:
    """Evaluates every request; returns the records in request order.

    workers: parallel evaluations on the cpu backend (default os.cpu_count()); on the cuda backend at most
        per_gpu per GPU (a larger number is capped, a smaller one is spread over the GPUs of `gpus` first).
    per_gpu: evaluations at once per GPU on the cuda backend, through the GPU's lane (timings one at a time);
        1: one evaluation per GPU, no lanes. A request whose config names a lane_dir keeps it.
    config: the default for requests whose config is None.
    gpus: host GPU indices for the cuda backend (default: all, see visible_gpus()).
    ray: None for the local pool; "auto" or a cluster address for Ray actors started for this call and
        stopped after it (see ray_pool.RayPool); or a RayPool kept by the caller across batches (a trainer
        scoring batch after batch should keep one: actors start in about a second, Ray itself in several).
    evaluator: replaces engine.evaluate in the local pool (a store-backed cache, a test double).
    warm: True: each worker of the local pool holds one warm.WarmPool for the call (cuda: pinned to the
        worker's GPU; cpu: a cpu one) and passes its parts to the evaluator as `checker=` and `children=`
        (engine.evaluate takes them; a custom evaluator must too). "auto" (default): True for the cuda
        workers when the built-in evaluator is used, False otherwise (on the cpu backend a pre-started child
        competes with the evaluations for the few cores). Each submission still runs in a fresh, single-use
        child (pre-started by the pool or not).
    tasks_dir: look the requests' tasks up in this directory (e.g. `import kernelbench`'s output) instead of
        tasks/ (or pass registry=).
    Raises for misuse (unknown task, dsl or backend) before evaluating anything. An evaluation that raises
    in the harness (anything but misuse: engine.evaluation.is_misuse) becomes that request's own failure
    record (protocol_error, stage "harness", the exception named: engine.evaluation.harness_failure_record)
    and the batch goes on; HarnessError only for misuse found while evaluating, a warm pool that could not
    start, or an interrupt (the remaining requests are not started)."""
    from kernelgym_gap.core.registry import default_registry
    requests = list(requests)
    if not requests:
        return []
    if workers is not None and workers < 1:
        raise ValueError("workers must be at least 1")
    if tasks_dir is not None:
        if registry is not None:
            raise ValueError("pass registry= or tasks_dir=, not both")
        from kernelgym_gap.core.registry import TaskRegistry
        registry = TaskRegistry(tasks_dir)
    registry = registry or default_registry()
    default_config = config or EvalConfig()
    if warm == "auto":
        warm = "cuda" if evaluator is None and ray is None else False
    elif warm not in (True, False):
        raise ValueError(f"warm must be True, False or 'auto', not {warm!r}")
    if ray is not None:
        if warm:
            raise ValueError("warm= applies to the local pool; a Ray actor's evaluations use a fresh checker")
        if evaluator is not None or gpus is not None:
            raise ValueError("evaluator= and gpus= apply to the local pool; a Ray pool places its own actors")
        if not isinstance(ray, str):     # a RayPool the caller keeps across batches
            return ray.evaluate(requests, config=default_config, progress=progress, registry=registry)
        from kernelgym_gap.api.ray_pool import RayPool
        with RayPool(address=ray, backend=one_backend(requests), workers=workers, per_gpu=per_gpu) as pool:
            return pool.evaluate(requests, config=default_config, progress=progress, registry=registry)
    tasks, backends = _resolve(requests, registry)
    if evaluator is None:
        from kernelgym_gap.engine.pipeline import evaluate as evaluator
    # identical submissions (same task, source, dsl, backend and settings) are evaluated once; each caller
    # gets the record (a GRPO group often holds the same completion several times)
    first: dict[tuple, int] = {}
    owner = [first.setdefault(_identity(r, t, b, default_config), i)
             for i, (r, t, b) in enumerate(zip(requests, tasks, backends))]
    unique = sorted(set(owner))
    slots = worker_slots([backends[i] for i in unique], workers, gpus, per_gpu)
    shared = len(slots.get("cuda", ())) > len(set(slots.get("cuda", ())))
    lane_dir = tempfile.mkdtemp(prefix="kgg-lanes-", dir=default_config.scratch_root) if shared else None
    try:
        pool = _LocalPool(evaluator, slots, progress, len(unique), warm=warm,
                          scratch_root=default_config.scratch_root, lane_dir=lane_dir)
        for k, i in enumerate(unique):
            r = requests[i]
            pool.put(k, backends[i], tasks[i], r.source, r.dsl, r.config or default_config)
        records = dict(zip(unique, pool.join()))
    finally:
        if lane_dir is not None:
            shutil.rmtree(lane_dir, ignore_errors=True)
    if len(unique) < len(requests):
        log.info("%d of %d requests were duplicates, evaluated once", len(requests) - len(unique), len(requests))
    return [records[i] for i in owner]


def _identity(r: EvalRequest, task: TaskSpec, backend: str, default: EvalConfig) -> tuple:
    raw = r.source.encode("utf-8", "surrogatepass") if isinstance(r.source, str) else r.source
    return (task.id, hashlib.sha256(raw).hexdigest(), r.dsl, backend, r.config or default)


class _LocalPool:
    """Threads that each take (index, job) from their backend's queue and run the evaluator."""

    def __init__(self, evaluator: Evaluator, slots: dict[str, list[int | None]], progress: Progress | None,
                 total: int, warm: bool = False, scratch_root: str | None = None, lane_dir: str | None = None):
        self.evaluator, self.progress, self.total = evaluator, progress, total
        self.warm, self.scratch_root, self.lane_dir = warm, scratch_root, lane_dir
        self.results: dict[int, EvalRecord] = {}
        self.queues = {b: queue.Queue() for b in slots}
        self.lock = threading.Lock()
        self.failed: BaseException | None = None
        self.done = 0
        self.threads = [threading.Thread(target=self._work, args=(b, gpu), daemon=True,
                                         name=f"kgg-eval-{b}-{k}" + (f"-gpu{gpu}" if gpu is not None else ""))
                        for b, gs in slots.items() for k, gpu in enumerate(gs)]
        self.slots = slots

    def put(self, index: int, backend: str, *job) -> None:
        self.queues[backend].put((index, job))

    def join(self) -> list[EvalRecord]:
        for b, q in self.queues.items():
            for _ in self.slots[b]:
                q.put(None)
        for t in self.threads:
            t.start()
        for t in self.threads:
            t.join()
        if self.failed is not None:
            raise HarnessError(f"an evaluation raised: {self.failed!r}") from self.failed
        return [self.results[i] for i in range(self.total)]

    def _work(self, backend: str, gpu: int | None) -> None:
        if not self.warm or (self.warm == "cuda" and backend != "cuda"):
            return self._loop(backend, gpu, self.evaluator)
        from kernelgym_gap.api.warm import WarmPool
        try:
            warm = WarmPool(device=backend, gpu_index=gpu if gpu is not None else 0, scratch_root=self.scratch_root)
        except BaseException as e:  # noqa: BLE001 - reported after the pool drains
            log.exception("the warm pool of worker %s/%s did not start", backend, gpu)
            with self.lock:
                self.failed = self.failed or e
            return self._loop(backend, gpu, self.evaluator)     # drains the queue (failed is set)
        with warm:
            self._loop(backend, gpu, functools.partial(self.evaluator, checker=warm.checker,
                                                       children=warm.children))

    def _loop(self, backend: str, gpu: int | None, evaluator: Evaluator) -> None:
        q = self.queues[backend]
        while True:
            item = q.get()
            if item is None:
                return
            index, (task, source, dsl, config) = item
            if self.failed is not None:
                continue
            try:
                if gpu is not None:
                    config = with_lane(config.replace(gpu_index=gpu), self.lane_dir)
                record = evaluator(task, source, dsl, backend, config)
                if gpu is not None:
                    record = dataclasses.replace(record, device={**record.device, "gpu_index": gpu})
            except Exception as e:  # noqa: BLE001 - this request's own failure record, never the batch's
                from kernelgym_gap.engine.evaluation import harness_failure_record, is_misuse
                if is_misuse(e):
                    log.exception("evaluation %d raised", index)
                    with self.lock:
                        self.failed = self.failed or e
                    continue
                log.exception("evaluation %d raised in the harness: its failure record, the batch goes on", index)
                record = harness_failure_record(task, source, dsl, backend, config, e)
            except BaseException as e:  # noqa: BLE001 - KeyboardInterrupt and the like: the batch stops
                with self.lock:
                    self.failed = self.failed or e
                continue
            with self.lock:
                self.results[index] = record
                self.done += 1
                done = self.done
            if self.progress:
                self.progress(done, self.total, f"{task.name}: {record.status.value}")


__all__ = ["EvalRequest", "evaluate_many"]
