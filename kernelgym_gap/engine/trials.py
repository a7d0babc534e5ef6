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


def _cost(task: TaskSpec, shape: tuple[int, ...], dtype: str) -> tuple[int, int]:
    """How expensive a trial of this shape is (flops, then bytes): added trials go to the cheapest shape."""
    return int(task.flops(shape)), int(task.min_bytes(shape, dtype))


def make_trials(task: TaskSpec, backend: str, config: EvalConfig, rng: random.Random) -> tuple[Trial, ...]:
    """Correctness trials: `seeds_per_shape` per case, each with its own seed and input distribution.

    The distribution rule (issue 31: cycling over the whole trial list let each dtype see only some
    distributions, e.g. DepthwiseConv2d float16 never met `large`, its stated trap): the k-th trial of a
    dtype, counted over that dtype's cases in order, gets distributions[(k + i * seeds_per_shape) % D], i
    being the dtype's position in the workload (so one shape meets different distributions in different
    dtypes). Every dtype thus sees min(D, its trial count) distinct distributions. On cuda every dtype must
    see all D: where its shapes x seeds fall short, one trial per missing distribution is added at the
    dtype's cheapest shape (fewest flops, then bytes), after the regular trials. On cpu (the interpreter is
    slow) no trial is added: a dtype sees min(D, shapes x seeds_per_shape) distributions."""
    dists = task.distributions
    dtypes = task.workload(backend).dtypes
    seen: dict[str, int] = {d: 0 for d in dtypes}
    trials = []

    def add(split: str, shape: tuple[int, ...], dtype: str, dist: str) -> None:
        trials.append(Trial(index=len(trials), shape=shape, dtype=dtype, seed=rng.randrange(1, 2**31 - 1),
                            distribution=dist, split=split))

    for split, shape, dtype in cases(task, backend):
        offset = dtypes.index(dtype) * config.seeds_per_shape
        for _ in range(config.seeds_per_shape):
            add(split, shape, dtype, dists[(seen[dtype] + offset) % len(dists)])
            seen[dtype] += 1
    if backend == "cuda":
        for dtype in dtypes:
            covered = {t.distribution for t in trials if t.dtype == dtype}
            mine = [(split, shape) for split, shape, d in cases(task, backend) if d == dtype]
            split, shape = min(mine, key=lambda c: _cost(task, c[1], dtype))
            for dist in dists:
                if dist not in covered:
                    add(split, shape, dtype, dist)
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


def output_cases(task: TaskSpec, backend: str, config: EvalConfig) -> tuple[tuple[tuple[int, ...], str], ...]:
    """(shape, dtype) of every output file a child of this job writes: one per correctness trial, and on
    cuda one per timed shape's recheck (child/timing.py). The trials' shapes and dtypes do not depend on
    their seeds, so every evaluation of (task, backend, config) gets the same, and so do the disk limits
    derived from them (sandbox/disk.py) that the pre-started children's spec holds."""
    from kernelgym_gap.core.backend import backend as backend_info
    rng = random.Random(0)
    trials = make_trials(task, backend, config, rng)
    timed = make_timing_trials(task, config, rng) if backend_info(backend).measures_time else ()
    return tuple((tuple(t.shape), t.dtype) for t in (*trials, *timed))


def warm_cases(task: TaskSpec, backend: str, config: EvalConfig) -> tuple[tuple[tuple[int, ...], str], ...]:
    """The (shape, dtype) of each timed case a pre-started child warms the task's library on while it waits
    (TimingConfig.library_warm_before_lane, sandbox/launch.child_spec): the timed cases on a backend that
    times, with the switch on; else none."""
    from kernelgym_gap.core.backend import backend as backend_info
    if not (backend_info(backend).measures_time and config.timing.library_warm_before_lane):
        return ()
    return tuple((tuple(shape), dtype) for _, shape, dtype in timed_cases(task, config))


def trial_rng(config: EvalConfig) -> random.Random:
    """Seeds fixed by `config.trial_seed`, else fresh from the OS (a submission cannot predict its inputs)."""
    return random.Random(config.trial_seed) if config.trial_seed is not None else random.SystemRandom()
