"""MoE top-k softmax routing: gating logits [T, E] -> the dense [T, E] routing weights of each token's top-k."""
import torch

from kernelgym_gap.core.inputs import sample
from kernelgym_gap.core.task import Solution, TaskSpec, Tolerance, Workload, itemsize

_MANTISSA = {"float32": 23, "float16": 10, "bfloat16": 7}


def top_k(e: int) -> int:
    """Experts per token: Mixtral's top-2 of 8, Qwen1.5-MoE's top-4 of 60, DeepSeek-V2-Lite's top-6 of 64,
    Qwen3-MoE's / DeepSeek-V3's top-8 of 128 / 256."""
    return 2 if e <= 8 else 4 if e <= 60 else 6 if e <= 64 else 8


def reference(logits):
    f = torch.float64 if logits.dtype == torch.float64 else torch.float32
    x = logits.to(f)
    vals, idx = x.topk(top_k(x.shape[-1]), dim=-1)
    return torch.zeros_like(x).scatter_(-1, idx, torch.softmax(vals, dim=-1))


def _ulp(v: float, dtype: str) -> float:
    import math
    return 2.0 ** (math.floor(math.log2(max(v, 1e-30))) - _MANTISSA[dtype])


def make_inputs(shape, dtype, gen, distribution, device):
    """Tie-free by construction: each row's values, drawn from the distribution in float32, are spread by
    adding gap * rank (rank of the value within its row), which makes every gap between neighbours at
    least `gap`; gap is two ulps of the largest magnitude in the dtype, so the rounded values stay distinct
    and in the same order. The top-k set and its order are then unique, in every dtype and in float64."""
    t, e = shape
    z = sample((t, e), "float32", gen, distribution, device)
    rank = z.argsort(dim=-1).argsort(dim=-1).to(torch.float32)
    gap = 0.0
    for _ in range(3):      # the gap widens the range, which may widen the ulp: iterate to a fixed point
        gap = 2 * _ulp(float(z.abs().max()) + gap * e, dtype)
    return ((z + gap * rank).to(getattr(torch, dtype)),)


def error_bound(ins, dtype):
    """The float32 softmax over the k selected logits: exp(x - max) errs by ~(|x - max| + 1) 2^-24 relative
    and the k-term sum by k 2^-24; twice that, relative to each weight."""
    (x,) = ins
    ref = reference(x)
    spread = x.max(-1, keepdim=True).values - x
    return 2 * ref * (spread + top_k(x.shape[-1]) + 2) * 2.0 ** -24


TASK = TaskSpec(
    name="MoeTopkRouting",
    version=0,
    category="moe",
    statement=("Top-k softmax routing of a mixture-of-experts layer. For gating logits x of shape [T, E] "
               "(float32/float16/bfloat16), k = top_k(E) (2 for E <= 8, 4 for E <= 60, 6 for E <= 64, else 8): "
               "for every token t select the k experts with the largest logits and give them the weights "
               "softmax over those k logits (= their full-softmax probabilities renormalized to sum to 1). "
               "Return a new float32 tensor of shape [T, E]: the weight at each selected expert's column, 0.0 "
               "everywhere else (the dense routing-probability map Megatron-Core's router hands to its token "
               "dispatcher). Compute in float32, subtracting the maximum. The inputs hold no ties within a row "
               "(the order of the experts, and so the selected set, is unique)."),
    entry_point="moe_topk_routing",
    signature="moe_topk_routing(logits: Tensor[T, E]) -> Tensor[T, E] (float32)",
    reference=reference,
    make_inputs=make_inputs,
    # Tie-free by construction (make_inputs): an index output compared with ties in the input would need a
    # set comparison; a dense map of a unique top-k has one right answer. "large" (std 30): exp overflows
    # float32 without the max subtraction and the weights span 1 to 1e-30; "small" (std 1e-2): near-equal
    # logits (neighbours two ulps apart), so the selection itself is the test; "offset" (mean 8).
    distributions=("normal", "large", "small", "offset"),
    workloads={
        # Tiny for the interpreter: 8 experts (top-2), 60 (top-4, not a power of two) and 20 (top-4).
        "cpu": Workload(public=((8, 8), (5, 60)), heldout=((7, 20),), dtypes=("float32", "float16")),
        # The router of a training micro-batch (256k and 128k tokens) for 128 (Qwen3-MoE) and 256 experts
        # (DeepSeek-V3): 200 MB moved in bf16 (~42 us at 4.8 TB/s); held out: 60 experts (Qwen1.5-MoE, an
        # unaligned row) and Mixtral's 8 (2.5M tokens of 8: a different regime, rows of 16 bytes).
        "cuda": Workload(public=((262144, 128), (131072, 256)), heldout=((300000, 60), (2500000, 8)),
                         dtypes=("bfloat16", "float32")),
    },
    # The reference is float64 on the same values (the selection is the same: no ties). float32 weights
    # from a float32 softmax over k values err by a few ulps times the spread (error_bound) plus rtol 1e-5;
    # atol 1e-37 only absorbs float32's flush of subnormal weights (< 1.2e-38) to zero, so a weight at a wrong
    # expert fails however small it is (above that), and so does a missing one. The output's dtype is float32
    # for every input dtype: no 16-bit rounding.
    tolerances={"float32": Tolerance(1e-37, 1e-5), "float16": Tolerance(1e-37, 1e-5),
                "bfloat16": Tolerance(1e-37, 1e-5)},
    error_bound=error_bound,
    output_dtype=lambda dtype: "float32",
    # per logit: k compares for the selection; per selected: subtract, exp, add, divide
    flops=lambda s: s[0] * s[1] * top_k(s[1]) + 4 * s[0] * top_k(s[1]),
    min_bytes=lambda s, d: s[0] * s[1] * itemsize(d) + s[0] * s[1] * 4,    # logits read, float32 map written
    written_bytes=lambda s, d: s[0] * s[1] * 4,
    # E against torch.compile of the reference: eager runs topk, softmax and scatter as separate kernels,
    # which no user would ship
    e_baseline="torch.compile",
    level=2,
    tags=("moe", "routing", "top-k", "softmax", "memory-bound"),
    motivation=("Every MoE layer (Mixtral, DeepSeek-V3, Qwen3-MoE) starts with this router; it runs on every "
                "token of every layer, and unfused (softmax, topk, scatter) it is several passes and kernel "
                "launches where one pass at memory bandwidth suffices."),
    solutions=(
        Solution("triton_rows.py", "triton", "optimized",
                 note="a block of rows per program, each row in registers; k rounds of tl.max / first "
                      "arg-position mark the selected experts; the softmax of the selected logits and the "
                      "dense row written in one masked store"),
        Solution("triton_scalar_loop.py", "triton", "slow", defect="scalar_loop",
                 note="one program per token; each of the k selections rescans the row one scalar at a time "
                      "(the next largest below the previous one), twice (weights, then stores)"),
        Solution("tilelang_rows.py", "tilelang", "optimized",
                 note="one thread per token row, 128 rows per block; k selection rounds over the row in float32 "
                      "registers (the largest logit below the previous pick), the softmax of the k picks, then "
                      "a zero pass and k weight stores; plain registers, so it lowers to the C target and runs "
                      "on the cpu backend"),
    ),
)
