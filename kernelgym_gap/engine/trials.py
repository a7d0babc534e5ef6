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


def make_timing_trials(task: TaskSpec, config: EvalConfig, rng: random.Random) -> tuple[Trial, ...]:
    """One timing trial per cuda case, on the task's declared timed distribution (what its users' data looks
    like; a library's speed can depend on the values, so stress inputs would skew E)."""
    return tuple(Trial(index=TIMING_INDEX_BASE + i, shape=shape, dtype=dtype, seed=rng.randrange(1, 2**31 - 1),
                       distribution=task.timed_distribution, split=split)
                 for i, (split, shape, dtype) in enumerate(cases(task, "cuda")))


def trial_rng(config: EvalConfig) -> random.Random:
    """Seeds fixed by `config.trial_seed`, else fresh from the OS (a submission cannot predict its inputs)."""
    return random.Random(config.trial_seed) if config.trial_seed is not None else random.SystemRandom()
