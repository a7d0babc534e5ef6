"""How many evaluations at once per GPU a host can feed (issue 35's "slots per GPU sized to the host's cores").

A pure function of the host (cores, GPUs, memory), for the evaluation service (api/service.py) to call when it
is not told `per_gpu`; nothing here touches the machine (`host_slots` reads it). The rule, and why:
- RESERVED_CORES stay for the parent (the service's loop, the record's assembly, the store) and the OS; the
  rest are shared out per GPU;
- a slot needs about CORES_PER_SLOT of a core: most of an evaluation's wall time is spent waiting for its
  GPU's lane, not computing (docs/measurement.md: a lane is held 87% of a run, each evaluation waits most of
  its 30 s);
- at least 1 slot per GPU, at most MAX_PER_GPU.
The numbers come from the simulator (sim/, every lever on, the full mix, the laned stages holding a core as
well: Setup.laned_cores), evaluations per GPU-hour by slots per GPU:
  1 GPU, 16 cores:    1: 231  2: 371  3: 451  4: 499  6: 543  8: 526
  8 GPUs, 16 cores:   1: 226  2: 369  3: 428  4: 434  6: 445  8: 434
  8 GPUs, 32 cores:   1: 226  2: 365  3: 430  4: 469  6: 478  8: 490
  8 GPUs, 128 cores:  1: 226  2: 365  3: 435  4: 485  6: 493  8: 495
The gain flattens at 4-6 where cores bind and at 6 where they do not; past 6 the simulator keeps the measured
stage durations, so it cannot see the GPU-sharing slowdown more slots bring (its 6-8 slot figures are upper
bounds). Where host memory is known, each slot's child may use `child_memory_bytes` (SandboxConfig.memory_bytes)
and its checker as much again: no more slots than that memory holds.
This gives 6 on the H200 host of docs/measurement.md (16 cores, 1 GPU), 4 each on 8 GPUs with 16 cores, 6 each
on 8 GPUs with 32 or 128 cores. These are predictions: the throughput runs at these `--per-gpu` are owed."""
from __future__ import annotations

import math
import os

CORES_PER_SLOT = 0.5
RESERVED_CORES = 2
MAX_PER_GPU = 6


def slots_per_gpu(cores: int, gpus: int, host_memory_bytes: int | None = None,
                  child_memory_bytes: int | None = None) -> int:
    """Evaluations at once per GPU for a host of `cores` cores and `gpus` GPUs (see the module docstring)."""
    if not isinstance(cores, int) or cores < 1:
        raise ValueError(f"cores must be a positive integer, not {cores!r}")
    if not isinstance(gpus, int) or gpus < 1:
        raise ValueError(f"gpus must be a positive integer, not {gpus!r}")
    by_cores = math.ceil(max(cores - RESERVED_CORES, 0) / gpus / CORES_PER_SLOT)
    n = min(MAX_PER_GPU, by_cores)
    if host_memory_bytes is not None and child_memory_bytes:
        if host_memory_bytes < 0 or child_memory_bytes < 0:
            raise ValueError("memory sizes must be non-negative")
        n = min(n, host_memory_bytes // (2 * child_memory_bytes * gpus))
    return max(1, n)


def host_slots(gpus: int, child_memory_bytes: int | None = None) -> int:
    """slots_per_gpu for this host: the cores this process may use (its affinity, not the machine's count)
    and the memory the OS reports."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        memory = None
    return slots_per_gpu(cores, gpus, memory, child_memory_bytes)
