"""The corpus's shape rules (issue 34), held for every built-in task and every task added later.

1. Every timed cuda case's roofline floor is >= 20 us on the H200: under that, launch overhead and the
   timer's own resolution are a large share of what is measured (LayerNorm 4096x1024 timed at 9-13 us,
   Softmax 6000x1000 at 16 us), so E and U there measure the harness, not the kernel.
2. The held-out cuda shapes differ in kind from the public ones: at least one held-out shape has a size that
   is not a multiple of 16 (an odd or unaligned inner size, a masked tail), so a kernel tuned to the public
   shapes' alignment (ClampedSwiGLU's D = 2880 in all four shapes, Gemv's K = 4096 in every held-out shape)
   is tested where its masks and tails matter.
3. The tasks issue 34 added (the quantization, indexing, MoE and backward categories, paged decode attention)
   each ship an optimized TileLang solution, or say in `dsl_gaps` what TileLang lacks for the op.
"""
import pytest

from kernelgym_gap.core.registry import default_registry
from kernelgym_gap.judge.calibrate import Calibration
from kernelgym_gap.judge.floor import floor_ms

# The H200's rates as measured for the committed corpus (results/h200_2026-12-04_corpus/gap_study_cuda.json,
# meta.calibration): copy 4.20 TB/s; dense matmul peaks per dtype. Copied here so that the rule does not
# move when a results file is regenerated; a faster device only lowers floors, so re-check when one is added.
H200 = Calibration(device_key="h200-corpus", device_name="NVIDIA H200", copy_bytes_per_s=4.2019e12,
                   matmul_flops_per_s={"bfloat16": 7.835e14, "float16": 7.481e14, "tf32": 4.056e14,
                                       "float32": 5.089e13},
                   source="measured")
MIN_FLOOR_MS = 0.020

TASKS = [t for t in default_registry() if "cuda" in t.workloads]


def _cases(task):
    w = task.workloads["cuda"]
    for kind, shapes in (("public", w.public), ("heldout", w.heldout)):
        for shape in shapes:
            for dtype in w.dtypes:
                yield kind, tuple(shape), dtype


def test_the_rules_see_the_whole_corpus():
    assert len(TASKS) >= 40


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.name)
def test_every_timed_cuda_case_has_a_floor_of_at_least_20_us(task):
    short = [(kind, shape, dtype, round(floor_ms(task, shape, dtype, H200)[0] * 1e3, 1))
             for kind, shape, dtype in _cases(task) if floor_ms(task, shape, dtype, H200)[0] < MIN_FLOOR_MS]
    assert not short, f"{task.name}: cases whose H200 floor is under 20 us (kind, shape, dtype, us): {short}"


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.name)
def test_held_out_cuda_shapes_include_an_unaligned_size(task):
    heldout = task.workloads["cuda"].heldout
    assert heldout, f"{task.name} has no held-out cuda shape"
    assert any(any(d % 16 for d in shape) for shape in heldout), (
        f"{task.name}: every held-out cuda shape {heldout} has only multiples of 16; add one with an odd or "
        "unaligned size so that the held-out set differs in kind from the public shapes")


def test_the_floor_rule_catches_a_short_case():
    """The rule is live: the pre-issue-34 LayerNorm public shape 4096x1024 is under it."""
    layernorm = next(t for t in TASKS if t.name == "LayerNorm")
    assert floor_ms(layernorm, (4096, 1024), "float16", H200)[0] < MIN_FLOOR_MS


# The level definition (core/task.py LEVELS): 1 one memory-bound op; 2 a fused op or a reduction with a
# numerical trap; 3 compute-bound or multi-stage (tiling, pipelining, online algorithms). Tags name the
# traits that decide it, so the rule is checked from them (issue 34 found RowArgmax, DecodeAttention and the
# level-1 fusions applied against the definition).
NOT_ONE_OP = {"fusion", "epilogue", "gated-mlp", "tie-break", "fused-activation", "residual"}
MULTI_STAGE = {"tensor-cores", "online-softmax", "split-k", "flash-attention", "compute-bound",
               "two-stage-reduction"}


@pytest.mark.parametrize("task", list(default_registry()), ids=lambda t: t.name)
def test_levels_follow_their_definition(task):
    tags = set(task.tags)
    if task.level == 1:
        assert "memory-bound" in tags and not tags & NOT_ONE_OP | MULTI_STAGE & tags, (
            f"{task.name} is level 1 (one memory-bound op) but tagged {sorted(tags & (NOT_ONE_OP | MULTI_STAGE))}")
        assert task.e_baseline == "torch", f"{task.name}: level 1 yet its eager reference is an unfused chain"
    if tags & MULTI_STAGE:
        assert task.level == 3, f"{task.name} is tagged {sorted(tags & MULTI_STAGE)} (multi-stage) but level {task.level}"


def test_the_level_rule_catches_a_fusion_at_level_1():
    import dataclasses
    add_relu = default_registry().get("AddReLU")
    wrong = dataclasses.replace(add_relu, level=1)
    with pytest.raises(AssertionError, match="level 1"):
        test_levels_follow_their_definition(wrong)


V2_CATEGORIES = ("quantization", "indexing", "moe", "backward")


@pytest.mark.parametrize("task", [t for t in TASKS if t.category in V2_CATEGORIES or t.name == "PagedDecodeAttention"],
                         ids=lambda t: t.name)
def test_the_v2_tasks_have_a_tilelang_solution_or_say_why_not(task):
    has = any(s.dsl == "tilelang" and s.kind == "optimized" for s in task.solutions)
    assert has or task.dsl_gaps.get("tilelang"), f"{task.name}: no TileLang solution and no dsl_gaps reason"


def test_a_dsl_gap_is_checked_like_the_rest_of_the_task():
    import dataclasses
    top_k = default_registry().get("TopK")
    assert any("dsl_gaps" in p for p in dataclasses.replace(top_k, dsl_gaps={"tilelang": ""}).validate())
    assert any("dsl_gaps" in p for p in dataclasses.replace(top_k, dsl_gaps={"cuda-c": "why"}).validate())
