"""GEMV for decode: y = weight @ x, a [N, K] weight (nn.Linear layout) times one [K] activation vector."""
import math

import torch

from kernelgym_gap.core.inputs import sample
from kernelgym_gap.core.task import Solution, TaskSpec, Tolerance, Workload, itemsize

# The weight follows x's distribution except for "large" (large x alone), as in Matmul: both "large" would
# push float16 outputs towards 30 * 30 * sqrt(K) and test the output range rather than the kernel.
_W_DISTRIBUTION = {"normal": "normal", "uniform": "uniform", "offset": "offset", "sparse": "sparse",
                   "large": "normal"}


def reference(weight, x):
    return torch.mv(weight, x)


def make_inputs(shape, dtype, gen, distribution, device):
    n, k = shape
    # 1/sqrt(K) keeps y of order one for normal inputs whatever K; "offset" weights and x (mean 8, all
    # products positive) give y ~ 64 sqrt(K) (~7700 at K = 14336, inside float16's range): a float16
    # accumulator or a dropped K block fails by far.
    weight = sample((n, k), dtype, gen, _W_DISTRIBUTION[distribution], device, scale=1.0 / math.sqrt(k))
    x = sample((k,), dtype, gen, distribution, device)
    return weight, x


TASK = TaskSpec(
    name="Gemv",
    version=1,
    changelog=("v1: cuda shapes: held-out 11008x4096 -> 4096x11008 and 32000x4096 -> 32000x4100: K was 4096 in every held-out shape; now another K and an unaligned one (issue 34)",),
    category="gemm",
    statement=("Matrix-vector product y = weight @ x, with weight of shape [N, K] (row-major, as nn.Linear "
               "stores it) and x of shape [K], both contiguous and of one dtype: float16 or bfloat16 (float32 "
               "and float16 on the cpu backend). y[n] = sum_k weight[n, k] * x[k], accumulated in float32 and "
               "rounded once to the input dtype; return a new y of shape [N]. The shape tuple is (N, K)."),
    entry_point="gemv",
    signature="gemv(weight: Tensor[N, K], x: Tensor[K]) -> Tensor[N]",
    reference=reference,
    make_inputs=make_inputs,
    distributions=("normal", "offset", "uniform", "large", "sparse"),
    timed_distribution="normal",
    workloads={
        # Tiny for the interpreter; N = 203, 45 and 70 are off the 8-row blocks (masked last block), K = 300,
        # 1100 and 40 off the K blocks (1100 runs several K steps, the last one masked).
        "cpu": Workload(public=((64, 256), (203, 300)), heldout=((45, 1100), (70, 40)),
                        dtypes=("float32", "float16")),
        # Decode-time projections of Llama-3-8B (gate/up 14336 x 4096, down 4096 x 14336, fused gate+up
        # 28672 x 4096) and Llama-2-7B (11008 x 4096) and the Llama-2 LM head (32000 x 4096). Every weight
        # is >= 90 MB, larger than the H200's 60 MB L2, so each call streams it from HBM (~28 us and up).
        "cuda": Workload(public=((14336, 4096), (4096, 14336)),
                         heldout=((28672, 4096), (4096, 11008), (32000, 4100)),
                         dtypes=("float16", "bfloat16")),
    },
    # Float64 reference on the same rounded inputs: the products are exact, so a float32-accumulating kernel
    # errs by its float32 sum (~2^-24 sqrt(K / 6) |y|, under 1e-5 |y| at K = 14336) plus one rounding of y to
    # the output dtype (u = 2^-11 fp16, 2^-8 bf16). rtol = 4u and a small atol cover both, as in Matmul;
    # a float16 accumulator (error ~ u sqrt(K / 6) |y|, 4e-2 |y| on "offset" at K = 14336) fails.
    tolerances={"float32": Tolerance(1e-4, 1e-4), "float16": Tolerance(1e-3, 2e-3),
                "bfloat16": Tolerance(8e-3, 1.6e-2)},
    flops=lambda s: 2 * s[0] * s[1],
    min_bytes=lambda s, d: (s[0] * s[1] + s[1] + s[0]) * itemsize(d),
    level=1,
    tags=("gemv", "memory-bound", "decode"),
    motivation=("Batch-1 autoregressive decoding runs every linear layer of an LLM as a GEMV: the whole "
                "weight is streamed from HBM for one token, so decode speed is set by how close this "
                "kernel gets to memory bandwidth."),
    solutions=(
        Solution("triton_row_block.py", "triton", "optimized",
                 note="one program per 16 rows, [16, 512] coalesced K-contiguous tiles, a 2-D float32 "
                      "accumulator reduced once with tl.sum at the end; x read per tile from L2"),
        Solution("triton_column_walk.py", "triton", "slow", defect="uncoalesced_access",
                 note="one program per 64 rows walking K one column at a time: each load gathers 64 "
                      "elements K apart (one 32-byte sector per 2-byte element), so DRAM traffic is ~16x "
                      "the weight's size"),
        Solution("tilelang_row_block.py", "tilelang", "optimized", cpu_status="unverified",
                 note="one block of 128 threads per 8 rows, [8, 1024] K-contiguous tiles accumulated into a "
                      "float32 register fragment, one block-wide T.reduce_sum after the K loop"),
    ),
)
