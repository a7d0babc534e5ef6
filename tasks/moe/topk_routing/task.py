"""MoE top-k softmax routing: gating logits [T, E] -> the dense [T, E] routing weights of each token's top-k."""
import torch

from kernelgym_gap.core.inputs import sample
from kernelgym_gap.core.task import Solution, TaskSpec, Tolerance, Workload, itemsize


def top_k(e: int) -> int:
    """Experts per token: Mixtral's top-2 of 8, Qwen1.5-MoE's top-4 of 60, DeepSeek-V2-Lite's top-6 of 64,
    Qwen3-MoE's / DeepSeek-V3's top-8 of 128 / 256."""
    return 2 if e <= 8 else 4 if e <= 60 else 6 if e <= 64 else 8


def reference(logits):
    f = torch.float64 if logits.dtype == torch.float64 else torch.float32
    x = logits.to(f)
    vals, idx = x.topk(top_k(x.shape[-1]), dim=-1)
    return torch.zeros_like(x).scatter_(-1, idx, torch.softmax(vals, dim=-1))


# Integer views of the float dtypes, for the order-preserving integer key of a value (_ordinal): stepping a
# key by one steps the value to its neighbour in that dtype.
_BITS = {"float16": (torch.int16, 0x7FFF), "bfloat16": (torch.int16, 0x7FFF), "float32": (torch.int32, 0x7FFFFFFF),
         "float64": (torch.int64, 0x7FFFFFFFFFFFFFFF)}
# The least gap between the k-th and (k+1)-th logits of a row, relative to 1 + (row max - k-th logit): a float32
# kernel that selects on exp(x - max) (softmax, then top-k) rounds x - max and the exponential by a few
# 2^-24 of that spread; 2^-16 leaves a factor of ~10 above a fast exp's (1.5 |x - max| + 8) 2^-24.
BOUNDARY_GAP = 2.0 ** -16


def _ordinal(x: torch.Tensor) -> torch.Tensor:
    """int64 keys with the order of the values: the bits for a positive value, minus the magnitude bits for a
    negative one (so -0 and +0 share key 0 and neighbouring values differ by one)."""
    ity, mag = _BITS[str(x.dtype).removeprefix("torch.")]
    b = x.view(ity).to(torch.int64)
    return torch.where(b < 0, -(b & mag), b)


def _from_ordinal(key: torch.Tensor, dtype: str) -> torch.Tensor:
    ity, mag = _BITS[dtype]
    sign = torch.tensor(-mag - 1, dtype=torch.int64, device=key.device)       # the sign bit, as int64
    b = torch.where(key < 0, (-key) | sign, key)
    return b.to(ity).view(getattr(torch, dtype))


def _strictly_decreasing(key: torch.Tensor) -> torch.Tensor:
    """The largest keys <= `key` that fall by at least one along the last dim: key'[i] = min(key[i],
    key'[i-1] - 1), i.e. cummin(key + i) - i. Each tie (or run of them) steps down to the next representable
    values below; a row already strictly decreasing is unchanged."""
    pos = torch.arange(key.shape[-1], device=key.device, dtype=torch.int64)
    return torch.cummin(key + pos, dim=-1).values - pos


def make_inputs(shape, dtype, gen, distribution, device):
    """Tie-free in the dtype, by repair: each row is drawn from the distribution and rounded to the dtype,
    sorted (stable, descending), and every value that equals or exceeds its larger neighbour is stepped down
    to the next representable value below it (a run of ties becomes consecutive representable values; the
    rest of the row is untouched). Then, where the k-th and (k+1)-th values lie closer than BOUNDARY_GAP x
    (1 + max - k-th), the (k+1)-th and any value it would reach are moved below that margin, so that a
    float32 kernel selecting on rounded softmax probabilities agrees on the set. The values return to their
    drawn positions. The order of the experts and the top-k set are unique in the dtype, and so in float32
    and float64 (every dtype here converts to them exactly). The previous construction (spread by rank x
    2 ulps of the range, iterated 3 times) had no fixed point for 256 experts in bfloat16 (7 mantissa bits:
    the gap doubled each round) and left ties in 23-100% of the rows (MoeTopkRouting-v0)."""
    if dtype not in _BITS:
        raise ValueError(f"MoeTopkRouting makes float16, bfloat16, float32 or float64 logits, not {dtype!r}")
    t, e = shape
    k = top_k(e)
    z = sample((t, e), dtype, gen, distribution, device)
    s, idx = z.sort(dim=-1, descending=True, stable=True)
    key = _strictly_decreasing(_ordinal(s))
    if e > k:
        v = _from_ordinal(key, dtype).to(torch.float64)
        limit = v[:, k - 1] - BOUNDARY_GAP * (1 + v[:, 0] - v[:, k - 1])
        below = limit.to(getattr(torch, dtype))
        need = _ordinal(below) - (below.to(torch.float64) > limit).to(torch.int64)   # rounded down
        key[:, k] = torch.minimum(key[:, k], need)
        key[:, k:] = _strictly_decreasing(key[:, k:])
    lowest = _ordinal(torch.tensor(-torch.finfo(getattr(torch, dtype)).max, dtype=getattr(torch, dtype)))
    if e and bool((key[:, -1] < int(lowest)).any()):
        raise ValueError(f"MoeTopkRouting: {e} distinct {dtype} logits below a row's maximum leave the finite range")
    return (torch.empty_like(z).scatter_(-1, idx, _from_ordinal(key, dtype)),)


def error_bound(ins, dtype):
    """The float32 softmax over the k selected logits: exp(x - max) errs by ~(|x - max| + 1) 2^-24 relative
    and the k-term sum by k 2^-24; twice that, relative to each weight."""
    (x,) = ins
    ref = reference(x)
    spread = x.max(-1, keepdim=True).values - x
    return 2 * ref * (spread + top_k(x.shape[-1]) + 2) * 2.0 ** -24


TASK = TaskSpec(
    name="MoeTopkRouting",
    version=1,
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
    # Tie-free in the dtype (make_inputs repairs ties; tests/test_tie_free_inputs.py checks every workload):
    # an index output compared with ties in the input would need a set comparison; a dense map of a unique
    # top-k has one right answer. "large" (std 30): exp overflows float32 without the max subtraction and the
    # weights span 1 to 1e-30; "small" (std 1e-2): near-equal logits (in 16 bits many neighbours one ulp
    # apart after the repair), so the selection itself is the test; "offset" (mean 8: in bfloat16 most of a
    # 256-wide row is stepped down, [8, 16) holding only 128 values).
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
    changelog=("v1: make_inputs repairs ties in the dtype (a tie steps to the next representable value below) "
               "and keeps a margin between the k-th and (k+1)-th logits: v0's spread by rank had no fixed point "
               "for 256 experts in bfloat16 and left ties in 10-100% of those rows (a correct 'below the previous "
               "pick' kernel failed on an H100); every trial's inputs change",),
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
