"""The trials of an evaluation (engine/trials.py): correctness covers every case and distribution; timing
uses each task's declared timed distribution, never a stress input (issue 14: torch's softmax is 2.4x slower
on std-30 inputs, which inflated Softmax's E when it was timed on them)."""
import random

import pytest

from kernelgym_gap.core.config import EvalConfig
from kernelgym_gap.core.registry import default_registry
from kernelgym_gap.engine.trials import TIMING_INDEX_BASE, cases, make_timing_trials, make_trials

TASKS = list(default_registry())


@pytest.mark.parametrize("task", TASKS, ids=[t.id for t in TASKS])
def test_timing_trials_use_the_declared_timed_distribution(task):
    trials = make_timing_trials(task, EvalConfig(), random.Random(1))
    assert trials, "a task with no cuda case is never timed"
    assert {t.distribution for t in trials} == {task.timed_distribution}
    assert [(t.split, t.shape, t.dtype) for t in trials] == list(cases(task, "cuda"))
    assert all(t.index >= TIMING_INDEX_BASE for t in trials)


@pytest.mark.parametrize("task", TASKS, ids=[t.id for t in TASKS])
def test_correctness_trials_cover_every_case_and_the_timed_distribution(task):
    trials = make_trials(task, "cpu", EvalConfig(seeds_per_shape=2), random.Random(1))
    assert {(t.split, t.shape, t.dtype) for t in trials} == set(cases(task, "cpu"))
    assert len({t.seed for t in trials}) == len(trials)
    # correctness must cover what is timed (the contract checks it is declared among the distributions)
    assert task.timed_distribution in task.distributions


def test_softmax_and_rowsum_moved_off_their_stress_inputs():
    registry = default_registry()
    for name in ("Softmax", "RowSum"):
        task = registry.get(name)
        assert task.version >= 1 and task.timed_distribution == "normal" and task.changelog
        assert task.distributions[0] != "normal"      # the first listed is a stress input: not what is timed


def test_trials_are_reproducible_with_a_fixed_seed():
    task = default_registry().get("LayerNorm")
    cfg = EvalConfig(trial_seed=7)
    from kernelgym_gap.engine.trials import trial_rng
    a, b = trial_rng(cfg), trial_rng(cfg)
    assert make_trials(task, "cpu", cfg, a) == make_trials(task, "cpu", cfg, b)
    assert make_timing_trials(task, cfg, a) == make_timing_trials(task, cfg, b)


def test_timed_shapes_spreads_a_subset_over_splits_and_keeps_every_dtype():
    task = default_registry().get("Softmax")          # 2 public and 2 held-out shapes, 2 dtypes
    every = list(cases(task, "cuda"))
    shapes = list(dict.fromkeys((s, sh) for s, sh, _ in every))
    for n, expect in ((1, [shapes[0]]), (2, [shapes[0], shapes[-1]]), (3, [shapes[0], shapes[1], shapes[3]])):
        trials = make_timing_trials(task, EvalConfig(timed_shapes=n), random.Random(1))
        assert list(dict.fromkeys((t.split, t.shape) for t in trials)) == expect
        assert len(trials) == n * len(task.workload("cuda").dtypes)
    assert len(make_timing_trials(task, EvalConfig(timed_shapes=99), random.Random(1))) == len(every)
    with pytest.raises(ValueError, match="timed_shapes"):
        EvalConfig(timed_shapes=0)


def test_the_timed_subset_is_the_same_on_every_evaluation():
    task = default_registry().get("LayerNorm")
    cfg = EvalConfig(timed_shapes=2)
    a = make_timing_trials(task, cfg, random.Random(1))
    b = make_timing_trials(task, cfg, random.Random(2))
    assert [(t.split, t.shape, t.dtype) for t in a] == [(t.split, t.shape, t.dtype) for t in b]
    assert {t.split for t in a} == {"public", "heldout"}


REGISTRY_CASES = [(task, spp) for task in TASKS for spp in (1, 2)]


@pytest.mark.parametrize("task,spp", REGISTRY_CASES, ids=[f"{t.id}-seeds{s}" for t, s in REGISTRY_CASES])
def test_every_dtype_sees_every_distribution_on_cuda(task, spp):
    """Issue 31: cycling over the whole trial list left 16 cuda task/dtype pairs without some distributions
    (DepthwiseConv2d float16 never met `large`, its stated trap). Now every dtype sees all of them on cuda;
    added trials go to the dtype's cheapest shape and keep the numbering consecutive."""
    trials = make_trials(task, "cuda", EvalConfig(seeds_per_shape=spp), random.Random(1))
    assert [t.index for t in trials] == list(range(len(trials)))
    regular = len(list(cases(task, "cuda"))) * spp
    assert [(t.split, t.shape, t.dtype) for t in trials[:regular]] == \
        [c for c in cases(task, "cuda") for _ in range(spp)]
    for dtype in task.workload("cuda").dtypes:
        assert {t.distribution for t in trials if t.dtype == dtype} == set(task.distributions), dtype
    for extra in trials[regular:]:
        mine = [c[1] for c in cases(task, "cuda") if c[2] == extra.dtype]
        assert task.flops(extra.shape) == min(task.flops(s) for s in mine)
    assert len(trials) - regular <= len(task.distributions) * len(task.workload("cuda").dtypes)


@pytest.mark.parametrize("task,spp", REGISTRY_CASES, ids=[f"{t.id}-seeds{s}" for t, s in REGISTRY_CASES])
def test_every_dtype_sees_as_many_distributions_as_its_cpu_trials_allow(task, spp):
    trials = make_trials(task, "cpu", EvalConfig(seeds_per_shape=spp), random.Random(1))
    assert len(trials) == len(list(cases(task, "cpu"))) * spp         # nothing added on the interpreter
    for dtype in task.workload("cpu").dtypes:
        mine = [t for t in trials if t.dtype == dtype]
        assert len({t.distribution for t in mine}) == min(len(task.distributions), len(mine)), dtype


def test_depthwise_conv_float16_meets_large_inputs_on_cuda():
    task = default_registry().get("DepthwiseConv2d")
    trials = make_trials(task, "cuda", EvalConfig(), random.Random(1))
    assert any(t.dtype == "float16" and t.distribution == "large" for t in trials)
    # the first case's trials are what they were before the change (a failure message's trial 0 stays put)
    assert trials[0].distribution == task.distributions[0]
