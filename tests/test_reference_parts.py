"""The checker's float64 references in pieces (core/reference_parts.py): the same values as one call, for every
task that declares one, with the pieces forced small on the cpu shapes."""
import dataclasses
import random

import pytest
import torch

from kernelgym_gap.core import inputs as inputs_mod
from kernelgym_gap.core.config import EvalConfig
from kernelgym_gap.core.reference_parts import _head_parts, attention_in_parts
from kernelgym_gap.core.registry import default_registry
from kernelgym_gap.engine.trials import make_trials
from kernelgym_gap.judge import checker

IN_PARTS = [t for t in default_registry() if t.float64_reference is not None]


def test_the_attention_tasks_declare_one():
    assert {t.name for t in IN_PARTS} >= {"Attention", "CausalAttention", "GroupedQueryAttention"}


@pytest.mark.parametrize("task", IN_PARTS, ids=[t.name for t in IN_PARTS])
def test_pieces_give_the_values_of_one_call(task):
    for trial in make_trials(task, "cpu", EvalConfig(seeds_per_shape=1), random.Random(3)):
        ins = tuple(x.double() for x in inputs_mod.make_trial_inputs(task, trial, "cpu"))
        whole = task.reference(*ins)
        assert torch.equal(task.float64_reference(*ins), whole) or torch.allclose(
            task.float64_reference(*ins), whole, rtol=1e-12, atol=1e-12)
        # a budget of one score row: every batch element and every kv head apart
        tiny = attention_in_parts(task.reference, *ins, budget_bytes=8)
        assert tiny.shape == whole.shape and torch.allclose(tiny, whole, rtol=1e-12, atol=1e-12)


def test_query_heads_stay_with_their_kv_head():
    """GQA with 6 query heads over 2 kv heads, cut in 2: heads 0-2 read kv head 0, heads 3-5 kv head 1."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, h, 5, 4, generator=g, dtype=torch.float64) for h in (6, 2, 2))

    def gqa(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    budget = 6 * 5 * 5 * 8 // 2            # half of one batch element's scores: two slices of heads
    assert _head_parts(1, 6, 2, 5, 5, budget) == 2
    assert torch.allclose(attention_in_parts(gqa, q, k, v, budget_bytes=budget), gqa(q, k, v), rtol=1e-12, atol=1e-12)


def test_the_fewest_parts_that_fit():
    # 512 MiB of float64 scores per head at S = 8192: 16 GiB for 32 heads, 8 slices of 4 heads
    assert _head_parts(1, 32, 32, 8192, 8192, 2 << 30) == 8
    # GQA: at most one slice per kv head (8 query heads each, 4 GiB: over the budget, the least it can do)
    assert _head_parts(1, 64, 8, 8192, 8192, 2 << 30) == 8
    assert _head_parts(1, 4, 4, 8, 8, 1 << 30) == 1


def test_other_dtypes_go_to_the_function_whole():
    calls = []
    q = torch.zeros(4, 2, 8, 4, dtype=torch.float32)
    attention_in_parts(lambda *a: calls.append(a[0].shape) or a[0], q, q, q, budget_bytes=8)
    assert calls == [q.shape]


def test_the_checker_computes_the_float64_reference_with_it():
    task = default_registry().get("Attention")
    seen = []
    spy = dataclasses.replace(task, float64_reference=lambda *a: seen.append(a[0].dtype) or task.reference(*a))
    trial = make_trials(task, "cpu", EvalConfig(seeds_per_shape=1), random.Random(0))[0]
    ins = inputs_mod.make_trial_inputs(task, trial, "cpu")
    checker._reference(spy, ins)
    assert seen == [torch.float64]
