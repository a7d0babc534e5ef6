"""Many evaluations at once, for trainers that score a batch of completions.

`evaluate_many(requests, workers)` evaluates a list of `EvalRequest`s and returns their `EvalRecord`s in
request order. Each evaluation already runs in its own sandboxed child process (engine.evaluate), so the
parent's pool is made of threads: a thread waits on its child and nothing of the submission runs in the
parent.

  * cpu backend: `workers` threads (default: the machine's CPU count) share the queue.
  * cuda backend: `per_gpu` workers (default 4) per GPU of the host (all visible GPUs unless `gpus=` names
    some), each evaluation pinned to its worker's GPU through its core.placement.Placement. The workers of one GPU
    share it through its lane (core/lane.py; a lane directory made for the call, `Placement.lane_dir`):
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
import logging
from collections.abc import Sequence
from typing import Any

from kernelgym_gap.api.lanes import EvalRequest, Evaluator, Progress, one_backend
from kernelgym_gap.core.backend import resolve_backend
from kernelgym_gap.core.config import EvalConfig
from kernelgym_gap.core.errors import UnknownChoiceError
from kernelgym_gap.core.record import EvalRecord
from kernelgym_gap.core.task import DSLS

log = logging.getLogger(__name__)

def _backends(requests: Sequence[EvalRequest]) -> list[str]:
    """Checks every request's type, dsl and backend before anything runs: a misuse fails the whole batch."""
    resolved: dict[str, str] = {}
    out = []
    for i, r in enumerate(requests):
        if not isinstance(r, EvalRequest):
            raise TypeError(f"request {i} is a {type(r).__name__}, not an EvalRequest")
        if r.dsl not in DSLS:
            raise UnknownChoiceError("dsl", r.dsl, DSLS)
        if r.backend not in resolved:
            resolved[r.backend] = resolve_backend(r.backend)
        out.append(resolved[r.backend])
    return out


def evaluate_many(requests: Sequence[EvalRequest], workers: int | None = None, *,
                  config: EvalConfig | None = None, gpus: Sequence[int] | None = None, ray: Any = None,
                  registry=None, evaluator: Evaluator | None = None,
                  progress: Progress | None = None, warm: bool | str = "auto",
                  tasks_dir: str | None = None, per_gpu: int = 4, placement=None) -> list[EvalRecord]:
    """Evaluates every request; returns the records in request order.

    workers: parallel evaluations on the cpu backend (default os.cpu_count()); on the cuda backend at most
        per_gpu per GPU (a larger number is capped, a smaller one is spread over the GPUs of `gpus` first).
    per_gpu: evaluations at once per GPU on the cuda backend, through the GPU's lane (timings one at a time);
        1: one evaluation per GPU, no lanes. A `placement` that names a lane_dir keeps it.
    config: the default for requests whose config is None (what is measured; hashed whole by the cache key).
    placement: where the local pool's evaluations run but for each slot's GPU (core.placement.Placement:
        scratch root, cache paths, lane directory, held outputs); default Placement().
    gpus: host GPU indices for the cuda backend (default: all, see visible_gpus()).
    ray: None for the local pool; "auto" or a cluster address for Ray actors started for this call and
        stopped after it (see ray_pool.RayPool); or a RayPool kept by the caller across batches (a trainer
        scoring batch after batch should keep one: actors start in about a second, Ray itself in several).
    evaluator: replaces engine.evaluate in the local pool (a store-backed cache, a test double).
    warm: True: each slot of the call's service.EvalService holds one warm.WarmPool (cuda: pinned to the
        slot's GPU; cpu: a cpu one) and passes its parts to the evaluator as `checker=` and `children=`
        (engine.evaluate takes them; a custom evaluator must too). "auto" (default): the service's rule
        (service.decide_warm: warm on cuda with the built-in evaluator). Each submission still runs in a
        fresh, single-use child (pre-started by the pool or not).
    tasks_dir: look the requests' tasks up in this directory (e.g. `import kernelbench`'s output) instead of
        tasks/ (or pass registry=).
    Raises for misuse (unknown task, dsl or backend) before evaluating anything. An evaluation that raises
    in the harness (anything but misuse: engine.evaluation.is_misuse) becomes that request's own failure
    record (protocol_error, stage "harness", the exception named: engine.evaluation.harness_failure_record)
    and the batch goes on; HarnessError only for misuse found while evaluating, a warm pool that could not
    start, or an interrupt (the remaining requests are not started).

    A thin user of api/service.EvalService: one service per backend of the batch, for this call."""
    from kernelgym_gap.api.service import EvalService
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
    if warm not in (True, False, "auto"):
        raise ValueError(f"warm must be True, False or 'auto', not {warm!r}")
    if ray is not None:
        if warm is True:
            raise ValueError("warm= applies to the local pool; a Ray actor's evaluations use a fresh checker")
        if evaluator is not None or gpus is not None or placement is not None:
            raise ValueError("evaluator=, gpus= and placement= apply to the local pool; a Ray pool places its "
                             "own actors")
        if not isinstance(ray, str):     # a RayPool the caller keeps across batches
            return ray.evaluate(requests, config=default_config, progress=progress, registry=registry)
        from kernelgym_gap.api.ray_pool import RayPool
        with RayPool(address=ray, backend=one_backend(requests), workers=workers, per_gpu=per_gpu) as pool:
            return pool.evaluate(requests, config=default_config, progress=progress, registry=registry)
    backends = _backends(requests)
    for r in requests:                   # an unknown task fails the batch before anything runs
        registry.get(r.task_id)
    groups: dict[str, list[int]] = {}
    for i, b in enumerate(backends):
        groups.setdefault(b, []).append(i)
    records: dict[int, EvalRecord] = {}
    offset = [0]
    total = len(requests)

    def tick(done: int, _n: int, label: str) -> None:
        if progress:
            progress(offset[0] + done, total, label)

    for b, where in groups.items():
        with EvalService(b, default_config, slots=workers, warm=warm, gpus=gpus, per_gpu=per_gpu,
                         evaluator=evaluator, registry=registry, placement=placement) as service:
            got = service.map([dataclasses.replace(requests[i], backend=b) for i in where], progress=tick)
        records.update(zip(where, got))
        offset[0] += len(where)
    return [records[i] for i in range(total)]


__all__ = ["EvalRequest", "evaluate_many"]
