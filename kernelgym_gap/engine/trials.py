"""The trials of one evaluation: every (split, shape, dtype) a backend evaluates, several seeds and input
distributions each for correctness, and one trial per (shape, dtype) on the task's timed distribution."""
from __future__ import annotations

import random

from kernelgym_gap.core.config import EvalConfig
from kernelgym_gap.core.record import Trial
from kernelgym_gap.core.task import TaskSpec

TIMING_INDEX_BASE = 10_000       # timing trials are numbered apart from the correctness trials


def cases(task: TaskSpec, backend: str):
    """Every (split, shape, dtype) a backend evaluates, public shapes first."""
    w = task.workload(backend)
    for split, shapes in (("public", w.public), ("heldout", w.heldout)):
        for shape in shapes:
            for dtype in w.dtypes:
                yield split, tuple(shape), dtype


def make_trials(task: TaskSpec, backend: str, config: EvalConfig, rng: random.Random) -> tuple[Trial, ...]:
    """Correctness trials: `seeds_per_shape` per case, cycling through every distribution (stress ones
    included) so that each case sees several."""
    trials = []
    for split, shape, dtype in cases(task, backend):
        for _ in range(config.seeds_per_shape):
            dist = task.distributions[len(trials) % len(task.distributions)]
            trials.append(Trial(index=len(trials), shape=shape, dtype=dtype, seed=rng.randrange(1, 2**31 - 1),
                                distribution=dist, split=split))
    return tuple(trials)


def timed_cases(task: TaskSpec, config: EvalConfig) -> list[tuple[str, tuple[int, ...], str]]:
    """The cuda cases that are timed: all of them, or with `config.timed_shapes` = n that many shapes, evenly
    spaced over the task's public-then-held-out list (so with n >= 2 a held-out shape is among them), each in
    every dtype. The same shapes on every evaluation of a task: the same kernel gets the same E."""
    every = list(cases(task, "cuda"))
    n = config.timed_shapes
    shapes = list(dict.fromkeys((split, shape) for split, shape, _ in every))
    if n is None or n >= len(shapes):
        return every
    keep = {shapes[(i * (len(shapes) - 1)) // max(n - 1, 1)] for i in range(n)}
    return [c for c in every if (c[0], c[1]) in keep]


def make_timing_trials(task: TaskSpec, config: EvalConfig, rng: random.Random) -> tuple[Trial, ...]:
    """One timing trial per timed case (`timed_cases`), on the task's declared timed distribution (what its
    users' data looks like; a library's speed can depend on the values, so stress inputs would skew E)."""
    return tuple(Trial(index=TIMING_INDEX_BASE + i, shape=shape, dtype=dtype, seed=rng.randrange(1, 2**31 - 1),
                       distribution=task.timed_distribution, split=split)
                 for i, (split, shape, dtype) in enumerate(timed_cases(task, config)))


def trial_rng(config: EvalConfig) -> random.Random:
    """Seeds fixed by `config.trial_seed`, else fresh from the OS (a submission cannot predict its inputs)."""
    return random.Random(config.trial_seed) if config.trial_seed is not None else random.SystemRandom()
