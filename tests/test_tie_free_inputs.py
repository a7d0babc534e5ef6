"""Every task whose statement or make_inputs claims tie-free, distinct or permutation inputs keeps the claim at
every workload: cpu AND cuda shapes, every dtype and distribution, inputs generated on the cpu.

The first H100 run (2026-12-06) found MoeTopkRouting-v0's "tie-free by construction" logits tied in 10-100% of
the [131072, 256] bfloat16 rows (its spread by rank had no fixed point for 256 experts in 7 mantissa bits), and
a correct kernel failed. The claims are checked here on the cpu's generator: the cuda trials draw other values
from the device's generator, but the same construction, so a construction that can break shows on these draws.

Size: a cuda shape can be gigabytes (MoeTokenUnpermute's expert rows, EmbeddingGather's table). Each task's
SHRINK keeps the dimensions its claim depends on and cuts the others: token rows are capped at ROW_CAP (every
claim but FusedMoe's and GroupedGemm's expert coverage is a per-row law, and those two keep their token count)
and widths that only size a float tensor beside the one checked (H, D, F, N, K, the vocabulary of
CrossEntropyBackward's logits) are cut to a few columns. So a construction that depends on the number of rows
(v0's range-wide gap did, a little) is checked at ROW_CAP rows, not at the shape's; that is the limit of
this test. About 40 s on one loaded core.
"""
import re

import pytest
import torch

from kernelgym_gap.core.inputs import generator
from kernelgym_gap.core.registry import get_task, default_registry

ROW_CAP = 4096          # token rows generated per cuda shape (per-row laws; see the module docstring)
WIDTH = 8               # columns of a float tensor the claim does not read


def _rows(t):
    return min(int(t), ROW_CAP)


# task -> shape as generated here (from the workload's shape)
SHRINK = {
    "MoeTopkRouting": lambda s: (_rows(s[0]), s[1]),                          # (T, E): E kept
    "MoeTokenPermute": lambda s: (_rows(s[0]), min(s[1], WIDTH), s[2], s[3]),  # (T, H, E, K)
    "MoeTokenUnpermute": lambda s: (_rows(s[0]), min(s[1], WIDTH), s[2], s[3]),
    "MoeAlignBlockSize": lambda s: (_rows(s[0]), *s[1:]),                       # (T, E, K, B)
    # (T, D, F, E, K): T kept, the coverage of the experts depends on it; D and F only size hidden and weights
    "FusedMoe": lambda s: (s[0], min(s[1], WIDTH), min(s[2], WIDTH), s[3], s[4]),
    # (T, V, D): V and T kept (ids are drawn from V); D only sizes the table
    "EmbeddingGather": lambda s: (s[0], s[1], 1),
    # (T, V): T kept (the ignored count is a function of it); V only sizes the logits and the targets' range
    "CrossEntropyBackward": lambda s: (s[0], min(s[1], 64)),
    # (G, T, N, K): G and T kept (the group sizes); N and K only size x and the weights
    "GroupedGemm": lambda s: (s[0], s[1], min(s[2], WIDTH), min(s[3], WIDTH)),
}


def _distinct_rows(ids, e):
    assert ids.dtype == torch.int32, ids.dtype
    assert bool(((ids >= 0) & (ids < e)).all()), "an expert id outside [0, E)"
    s = ids.sort(dim=-1).values
    bad = (s[:, 1:] == s[:, :-1]).any(-1)
    assert not bool(bad.any()), f"{int(bad.sum())} of {ids.shape[0]} tokens route to one expert twice"


def check_topk_routing(task, shape, ins):
    (x,) = ins
    k = task_module(task).top_k(shape[1])
    assert bool(torch.isfinite(x).all())
    s = x.to(torch.float64).sort(dim=-1, descending=True).values
    tied = (s[:, 1:] == s[:, :-1]).any(-1)
    assert not bool(tied.any()), f"{int(tied.sum())} of {x.shape[0]} rows hold ties in {x.dtype}"
    if shape[1] > k:
        need = task_module(task).BOUNDARY_GAP * (1 + s[:, 0] - s[:, k - 1])
        short = (s[:, k - 1] - s[:, k]) < need
        assert not bool(short.any()), (f"{int(short.sum())} rows: the k-th and (k+1)-th logits closer than "
                                       "the margin a float32 softmax needs to agree on the set")


def check_token_permute(task, shape, ins):
    _, ids, e = ins
    _distinct_rows(ids, e)


def check_token_unpermute(task, shape, ins):
    expert_out, row_map, _ = ins
    t, _, _, k = shape
    assert row_map.dtype == torch.int32 and tuple(row_map.shape) == (t, k)
    got = row_map.reshape(-1).long().sort().values
    assert torch.equal(got, torch.arange(t * k)), "row_map is not a permutation of 0..T*K-1"


def check_align_block_size(task, shape, ins):
    ids, e, _ = ins
    _distinct_rows(ids, e)


def check_fused_moe(task, shape, ins):
    _, ids, weights, _, _ = ins
    e = shape[3]
    _distinct_rows(ids, e)
    used = int((torch.bincount(ids.reshape(-1).long(), minlength=e) > 0).sum())
    # min_bytes counts the weights of exactly E - empty_experts(E) experts
    assert used == e - task_module(task).empty_experts(e), (used, e)
    assert torch.allclose(weights.sum(-1), torch.ones(shape[0]), atol=1e-5)


def check_embedding_gather(task, shape, ins, distribution):
    ids, _ = ins
    v = shape[1]
    assert bool(((ids >= 0) & (ids < v)).all())
    if distribution == "normal":        # timed: distinct ids, each row read once, as min_bytes counts
        assert ids.unique().numel() == ids.numel(), "the timed ids repeat"


def check_cross_entropy_backward(task, shape, ins):
    _, targets, _ = ins
    ignored = int((targets == -100).sum())
    assert ignored == task_module(task).ignored_tokens(shape[0])      # min_bytes leaves exactly these out
    rest = targets[targets != -100]
    assert bool(((rest >= 0) & (rest < shape[1])).all())


def check_grouped_gemm(task, shape, ins):
    _, _, offsets = ins
    g, t = shape[0], shape[1]
    counts = torch.diff(offsets.long(), prepend=torch.zeros(1, dtype=torch.long))
    assert int(offsets[-1]) == t and bool((counts >= 0).all())
    assert int((counts > 0).sum()) == g - task_module(task).empty_experts(g)


CHECKS = {
    "MoeTopkRouting": check_topk_routing,
    "MoeTokenPermute": check_token_permute,
    "MoeTokenUnpermute": check_token_unpermute,
    "MoeAlignBlockSize": check_align_block_size,
    "FusedMoe": check_fused_moe,
    "EmbeddingGather": check_embedding_gather,
    "CrossEntropyBackward": check_cross_entropy_backward,
    "GroupedGemm": check_grouped_gemm,
}
# Tasks whose statement names ties, distinctness or a permutation without claiming tie-free inputs: why no
# check applies.
EXEMPT = {
    "RowArgsort": "the permutation is the output; ties are allowed and compared through output_view",
}
CLAIM = re.compile(r"no ties|tie-free|distinct|permutation", re.I)


def task_module(task):
    import sys
    return sys.modules[task.make_inputs.__module__]


def _cases():
    for name in CHECKS:
        task = get_task(name)
        for backend in ("cpu", "cuda"):
            w = task.workloads[backend]
            for split, shapes in (("public", w.public), ("heldout", w.heldout)):
                for shape in shapes:
                    gen_shape = tuple(shape) if backend == "cpu" else SHRINK[name](tuple(shape))
                    for dtype in w.dtypes:
                        for dist in task.distributions:
                            yield name, backend, tuple(shape), gen_shape, dtype, dist


def test_every_claimed_tie_free_input_holds_at_every_workload():
    """One test over every case (several hundred generations): a failure names every case that broke."""
    failures, n = [], 0
    for i, (name, backend, shape, gen_shape, dtype, dist) in enumerate(_cases()):
        task = get_task(name)
        ins = task.make_inputs(gen_shape, dtype, generator(1397871145 + i, "cpu"), dist, "cpu")
        n += 1
        try:
            if name == "EmbeddingGather":
                CHECKS[name](task, gen_shape, ins, dist)
            else:
                CHECKS[name](task, gen_shape, ins)
        except AssertionError as exc:
            failures.append(f"{name} {backend} {shape} (generated {gen_shape}) {dtype} {dist}: {exc}")
    assert not failures, f"{len(failures)} of {n} cases break their task's claim:\n" + "\n".join(failures[:40])
    assert n > 300, n       # every task's every case ran


def test_every_task_that_claims_distinct_or_tie_free_inputs_is_checked():
    """A task whose statement or make_inputs docstring claims ties away, distinct ids or a permutation is in
    CHECKS (the claim is asserted above) or EXEMPT with the reason; a new one fails here until it is."""
    claimed = set()
    for task in default_registry():
        text = task.statement + " " + (task.make_inputs.__doc__ or "")
        if CLAIM.search(text):
            claimed.add(task.name)
    assert {"MoeTopkRouting", "MoeTokenPermute", "MoeTokenUnpermute", "MoeAlignBlockSize",
            "FusedMoe"} <= claimed, claimed
    unchecked = claimed - set(CHECKS) - set(EXEMPT)
    assert not unchecked, f"tasks claiming tie-free/distinct inputs with no check here: {sorted(unchecked)}"
    for name in EXEMPT:
        assert get_task(name).output_view is not None, f"{name} is exempt but compares its output exactly"


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32", "float64"])
def test_topk_routing_repair_keeps_a_tie_free_row_unchanged_and_steps_ties_down(dtype):
    """The repair moves only what it must: a row with no ties and a wide top-k margin comes back bit-equal;
    a row of equal values becomes consecutive representable values below the first."""
    task = get_task("MoeTopkRouting")
    mod = task_module(task)
    dt = getattr(torch, dtype)
    key = mod._ordinal(torch.tensor([3.0, -2.0, 0.5, -0.0, 1.0], dtype=dt))
    back = mod._from_ordinal(mod._strictly_decreasing(key.sort(descending=True).values[None]), dtype)[0]
    assert back.tolist() == [3.0, 1.0, 0.5, 0.0, -2.0]
    ties = mod._ordinal(torch.full((1, 4), 1.0, dtype=dt))
    stepped = mod._from_ordinal(mod._strictly_decreasing(ties), dtype)[0]
    assert stepped[0] == 1.0 and bool((stepped[1:] < stepped[:-1]).all())
    # each the next representable value below the one before (keys one apart): no value of the dtype skipped
    assert torch.equal(torch.diff(mod._ordinal(stepped)), torch.full((3,), -1, dtype=torch.int64))


def test_topk_routing_refuses_a_dtype_it_cannot_order():
    task = get_task("MoeTopkRouting")
    with pytest.raises(ValueError, match="int8"):
        task.make_inputs((4, 8), "int8", generator(0, "cpu"), "normal", "cpu")
