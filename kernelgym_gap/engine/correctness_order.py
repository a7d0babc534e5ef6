"""The order the child runs the correctness trials in: the smallest shapes first (issue 38).

A kernel's correctness is settled on the task's small shapes within a fraction of a second, whatever its
speed; its large shapes are where a hopelessly slow kernel runs past a call's stage deadline
(sandbox/deadlines.py). Run smallest first, such a kernel has finished, and had checked, every smaller shape
before it is killed, so the parent can say "correct where checked, too slow" (Status.TOO_SLOW) instead of
a bare timeout, and a wrong kernel is told wrong on its first, cheapest trial.

Size is the task's work for the shape (flops, then its minimum bytes, then its element count), the same for
every dtype, public and held-out mixed by size. Within a size, the first seed of every dtype comes before
any second seed: a shape's first call gets the compile bound (60 s), a later one a small multiple of the
library's time (2 s at least), so a serial kernel is killed on the second call of the smallest shape, and
it must have run the smallest shape in every dtype by then. The order is stable otherwise (a tie keeps
make_trials' order) and each trial keeps its `index`, so records, reproduce lines and the checker's
matching by index are unchanged; only the position in Job.trials (the child's order and the call marks')
moves.
"""
from __future__ import annotations

import math

from kernelgym_gap.core.record import Trial
from kernelgym_gap.core.task import TaskSpec


def shape_size(task: TaskSpec, shape) -> tuple[float, float, int]:
    """How much work one call on `shape` is: (flops, minimum bytes in float32, elements of the shape). A task
    whose flops or bytes cannot be computed for a shape sorts it by its element count alone."""
    try:
        flops = float(task.flops(tuple(shape)))
    except Exception:       # noqa: BLE001 - a task's formula that fails on a shape: sort by the rest
        flops = math.inf
    try:
        moved = float(task.min_bytes(tuple(shape), "float32"))
    except Exception:       # noqa: BLE001
        moved = math.inf
    return flops, moved, math.prod(int(s) for s in shape)


def order_for_correctness(task: TaskSpec, trials: tuple[Trial, ...]) -> tuple[Trial, ...]:
    """`trials` smallest shape first, first seeds before repeats (see the module's docstring); indices
    untouched."""
    sizes = {tuple(t.shape): shape_size(task, t.shape) for t in trials}
    rank, seen = {}, {}
    for t in trials:        # the how-many-th trial of its (shape, dtype) each is
        key = (tuple(t.shape), t.dtype)
        rank[t.index] = seen[key] = seen.get(key, -1) + 1
    return tuple(sorted(trials, key=lambda t: (sizes[tuple(t.shape)], rank[t.index])))
