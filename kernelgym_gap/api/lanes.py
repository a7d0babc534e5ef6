"""What the batch path is made of: a request, the evaluator's shape, and the worker slots per backend (`per_gpu`
per GPU on cuda, one per core on cpu). The local pool (batch.py) and the Ray pool (ray_pool.py) both read them
here, so neither imports the other. Slots that share a GPU coordinate through its lane (core/lane.py,
`Placement.lane_dir`): correctness trials and checks side by side, timings one at a time."""
from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Sequence
from typing import Any

from kernelgym_gap.core.config import EvalConfig
from kernelgym_gap.core.errors import HarnessError, UnknownChoiceError
from kernelgym_gap.core.record import EvalRecord
from kernelgym_gap.core.task import BACKENDS, TaskSpec

log = logging.getLogger(__name__)

# (task, source, dsl, backend, config) -> record: engine.evaluate's shape, as in KernelEnv.
Evaluator = Callable[[TaskSpec, str, str, str, EvalConfig], EvalRecord]
Progress = Callable[[int, int, str], None]


@dataclasses.dataclass(frozen=True)
class EvalRequest:
    """One submission to evaluate. `config=None` takes the batch's config; `tag` is the caller's own label
    (a completion id, a prompt index) and is not used by the harness."""
    task_id: str
    source: str
    dsl: str = "triton"
    backend: str = "auto"
    config: EvalConfig | None = None
    tag: Any = None


def visible_gpus() -> list[int]:
    """Indices of this host's GPUs as the evaluation child names them (its CUDA_VISIBLE_DEVICES value).

    engine.evaluate builds the child's environment from scratch and sets CUDA_VISIBLE_DEVICES to
    `placement.gpu_index`, so that index is a host-level one. If the parent itself was restricted with
    integer CUDA_VISIBLE_DEVICES, only those are used."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        parts = [p.strip() for p in env.split(",") if p.strip()]
        if all(p.isdigit() for p in parts):
            return [int(p) for p in parts]
        log.warning("CUDA_VISIBLE_DEVICES=%r is not a list of indices; using every device torch sees", env)
    import torch
    return list(range(torch.cuda.device_count()))


def one_backend(requests: Sequence[EvalRequest]) -> str:
    """The backend of a Ray batch. "auto" is decided by the cluster (cuda when it has GPUs), not by this
    process, which may be a head node without one."""
    asked = {r.backend for r in requests} - {"auto"}
    if len(asked) > 1:
        raise ValueError(f"a Ray batch evaluates one backend at a time; this one mixes {sorted(asked)}")
    for b in asked:
        if b not in BACKENDS:
            raise UnknownChoiceError("backend", b, BACKENDS + ("auto",))
    return asked.pop() if asked else "auto"


def worker_slots(backends: Sequence[str], workers: int | None, gpus: Sequence[int] | None,
                 per_gpu: int = 1) -> dict[str, list[int | None]]:
    """Worker slots per backend: GPU indices for cuda (`per_gpu` slots per GPU, round robin, so that a
    smaller `workers` spreads over the GPUs first), None for each cpu worker."""
    if per_gpu < 1:
        raise ValueError("per_gpu must be at least 1")
    slots: dict[str, list[int | None]] = {}
    if "cpu" in backends:
        slots["cpu"] = [None] * (workers or os.cpu_count() or 1)
    if "cuda" in backends:
        host = list(gpus) if gpus is not None else visible_gpus()
        if not host:
            raise HarnessError("the cuda backend was asked for but no GPU is visible")
        cap = len(host) * per_gpu
        if workers is not None and workers > cap:
            log.warning("workers=%d capped to %d: %d evaluation(s) per GPU at a time (per_gpu)", workers, cap,
                        per_gpu)
        slots["cuda"] = [g for _ in range(per_gpu) for g in host][: workers or cap]
    return slots
