"""A decode-time linear layer: y = x @ weight^T for a handful of tokens (M <= 64) and a large weight."""
import math

import torch

from kernelgym_gap.core.inputs import sample
from kernelgym_gap.core.task import Solution, TaskSpec, Tolerance, Workload, itemsize

# as in Matmul: the weight follows x's distribution except for "large" (large x alone)
_W_DISTRIBUTION = {"normal": "normal", "uniform": "uniform", "offset": "offset", "sparse": "sparse",
                   "large": "normal"}


def reference(x, weight):
    return torch.nn.functional.linear(x, weight)


def make_inputs(shape, dtype, gen, distribution, device):
    m, n, k = shape
    x = sample((m, k), dtype, gen, distribution, device)
    # 1/sqrt(K) keeps y of order one for normal inputs; "offset" (mean 8, all products positive) gives
    # y ~ 64 sqrt(K) (~7700 at K = 14336, inside float16's range) so that a float16 accumulator, a lost
    # split-K partial or a dropped K tile fails by far.
    weight = sample((n, k), dtype, gen, _W_DISTRIBUTION[distribution], device, scale=1.0 / math.sqrt(k))
    return x, weight


TASK = TaskSpec(
    name="SmallMLinear",
    version=0,
    category="gemm",
    statement=("A bias-free linear layer on a few tokens: y = x @ weight^T, with x of shape [M, K] "
               "(1 <= M <= 64 tokens), weight of shape [N, K] (as nn.Linear stores it), both contiguous and "
               "of one dtype: float16 or bfloat16 (float32 and float16 on the cpu backend). y[m, n] = "
               "sum_k x[m, k] * weight[n, k], accumulated in float32 and rounded once to the input dtype; "
               "return a new y of shape [M, N]. The shape tuple is (M, N, K). With M this small the op is "
               "bound by reading the weight once, not by the multiply-adds."),
    entry_point="small_m_linear",
    signature="small_m_linear(x: Tensor[M, K], weight: Tensor[N, K]) -> Tensor[M, N]",
    reference=reference,
    make_inputs=make_inputs,
    distributions=("normal", "offset", "uniform", "large", "sparse"),
    timed_distribution="normal",
    workloads={
        # Tiny for the interpreter, with M = 5 and 1 (masked token tails), N = 72, 136, 40 off the column
        # blocks, K = 200, 300, 1000 off the K blocks; K = 512 and 1000 make the optimized solution split K.
        "cpu": Workload(public=((16, 96, 512), (5, 72, 200)), heldout=((32, 136, 300), (1, 40, 1000)),
                        dtypes=("float32", "float16")),
        # Decode / small-batch projections: Llama-3-8B gate or up (14336 x 4096) and down (4096 x 14336),
        # Llama-2-7B up (11008 x 4096), Llama-3-70B o_proj (8192 x 8192). Every weight is >= 90 MB, larger
        # than the 60 MB L2, so each call streams it from HBM (~28 us and up at 4.2 TB/s).
        "cuda": Workload(public=((16, 14336, 4096), (32, 4096, 14336)),
                         heldout=((24, 11008, 4096), (8, 8192, 8192), (64, 14336, 4096)),
                         dtypes=("float16", "bfloat16")),
    },
    # As Matmul's: float32 accumulation (in any K order, split or not) against a float64 reference errs by
    # ~2^-24 sqrt(K / 6) |y|, then one rounding to the output dtype (u = 2^-11 fp16, 2^-8 bf16): rtol = 4u.
    # A float16 accumulator errs by ~u sqrt(K / 6) |y| (~8e-2 |y| at K = 14336) and fails.
    tolerances={"float32": Tolerance(1e-4, 1e-4), "float16": Tolerance(1e-3, 2e-3),
                "bfloat16": Tolerance(8e-3, 1.6e-2)},
    flops=lambda s: 2 * s[0] * s[1] * s[2],
    min_bytes=lambda s, d: (s[0] * s[2] + s[1] * s[2] + s[0] * s[1]) * itemsize(d),
    level=3,   # multi-stage: split-K partial products reduced in a second pass (core/task.py LEVELS; re-applied in issue 34)
    tags=("gemm", "skinny", "split-k", "memory-bound", "decode"),
    motivation=("Decoding with a small batch (or speculative decoding's few draft tokens) runs every linear "
                "layer with M = 1-64 rows: the weight read dominates, and a GEMM tiled for large M launches "
                "too few tiles along N to keep 132 SMs streaming, which split-K fixes."),
    solutions=(
        Solution("triton_split_k.py", "triton", "optimized",
                 note="16-64 x 64 x 128 tl.dot tiles over the K-contiguous weight, K split across programs "
                      "until there are >= 2 programs per SM, float32 partials reduced by a second small "
                      "kernel (deterministic, no atomics); one pass when the N tiles alone fill the GPU"),
        Solution("triton_wide_tiles.py", "triton", "slow", defect="too_few_programs",
                 note="a large-M GEMM recipe (64 x 128 tiles, whole K per program): N / 128 programs, 32 for "
                      "N = 4096 on 132 SMs, each streaming a 128-row weight panel alone"),
    ),
)
