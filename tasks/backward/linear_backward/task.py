"""Linear-layer backward: dX and dW of Y = X W^T from the upstream gradient dY, stacked as [M + N, K]."""
import math

import torch

from kernelgym_gap.core.inputs import sample
from kernelgym_gap.core.task import Solution, TaskSpec, Tolerance, Workload, itemsize

# W and X follow dY's distribution except for "large" (large dY alone), as in Matmul: "large" on two
# operands would push 16-bit outputs so high that the float32 accumulation error itself reaches the tolerance
_OPERAND_DISTRIBUTION = {"normal": "normal", "uniform": "uniform", "offset": "offset", "sparse": "sparse",
                         "large": "normal"}


def reference(x, weight, dy):
    # what autograd of F.linear(x, weight) runs for (dX, dW): two GEMMs, dX = dY W and dW = dY^T X
    return torch.cat([dy @ weight, dy.t() @ x])


def make_inputs(shape, dtype, gen, distribution, device):
    m, n, k = shape
    # 1/sqrt(N) and 1/sqrt(M) keep dX = dY W (a sum over N) and dW = dY^T X (a sum over M) of order one for
    # normal inputs; "offset" (mean 8, all terms positive) gives ~64 sqrt(N) and ~64 sqrt(M), inside float16's
    # range at these sizes, and makes a 16-bit accumulator or a dropped tile fail by far.
    other = _OPERAND_DISTRIBUTION[distribution]
    x = sample((m, k), dtype, gen, other, device, scale=1.0 / math.sqrt(m))
    weight = sample((n, k), dtype, gen, other, device, scale=1.0 / math.sqrt(n))
    dy = sample((m, n), dtype, gen, distribution, device)
    return x, weight, dy


TASK = TaskSpec(
    name="LinearBackward",
    version=0,
    category="backward",
    statement=("The backward of a linear layer Y = X W^T (X of shape [M, K], W [N, K], no bias) for an upstream "
               "gradient dY [M, N], all the same dtype: dX = dY W (shape [M, K], a sum over N) and "
               "dW = dY^T X (shape [N, K], a sum over M). Return ONE new tensor of shape [M + N, K] in the input "
               "dtype: rows 0..M-1 hold dX, rows M..M+N-1 hold dW. Accumulate in float32. The shape tuple is "
               "(M, N, K)."),
    entry_point="linear_backward",
    signature="linear_backward(x: Tensor[M, K], weight: Tensor[N, K], dy: Tensor[M, N]) -> Tensor[M + N, K]",
    reference=reference,
    make_inputs=make_inputs,
    distributions=("normal", "offset", "uniform", "large", "sparse"),
    workloads={
        # Tiny for the interpreter (the slow solution ran past the 300 s deadline at 64 x 48 x 40 on a loaded
        # machine); no size is a multiple of the 32-wide cpu blocks, so every edge mask runs in both GEMMs
        # (dW's reduction runs over M, dX's over N) and 36, 40 span two blocks. No bfloat16 on cpu: the
        # interpreter's bf16 tl.dot is silently wrong (tasks/gemm/matmul).
        "cpu": Workload(public=((24, 20, 40), (36, 40, 24)), heldout=((20, 36, 33),),
                        dtypes=("float32", "float16")),
        # The projections of a 7B model in training: 8192 tokens x 4096 x 4096 (0.55 ms at the H200's ~990
        # TFLOP/s dense fp16), the MLP's 4096 x 11008 x 4096; held out: odd sizes (3000, 5000, 4000) and many
        # tokens through a narrow layer (65536 x 1024 x 1024: dW reduces over 65536 rows, another regime).
        "cuda": Workload(public=((8192, 4096, 4096), (4096, 11008, 4096)),
                         heldout=((3000, 5000, 4000), (65536, 1024, 1024)),
                         dtypes=("float16", "bfloat16")),
    },
    # As in Matmul: the reference is float64 on the same rounded inputs; a float32-accumulating kernel errs
    # by the float32 sum (~2^-24 |C| sqrt(L / 6) over a reduction of length L: ~2e-5 |C| at L = 65536) plus
    # one rounding to the output dtype (u = 2^-11 fp16, 2^-8 bf16): rtol = 4u, atol 1e-3 / 8e-3 with room for
    # Hopper's truncating tensor-core accumulation. A 16-bit accumulator errs by ~u sqrt(L / 6) |C| and fails.
    tolerances={"float32": Tolerance(1e-4, 1e-4), "float16": Tolerance(1e-3, 2e-3),
                "bfloat16": Tolerance(8e-3, 1.6e-2)},
    flops=lambda s: 4 * s[0] * s[1] * s[2],                 # two GEMMs of 2 M N K each
    # X, W and dY read once; dX and dW written once
    min_bytes=lambda s, d: (2 * s[0] * s[2] + 2 * s[1] * s[2] + s[0] * s[1]) * itemsize(d),
    written_bytes=lambda s, d: (s[0] + s[1]) * s[2] * itemsize(d),
    level=3,
    tags=("gemm", "backward", "training", "transposed-operand", "compute-bound"),
    motivation=("Two thirds of a transformer's training flops are the backward GEMMs of its linear layers; "
                "dW reads dY transposed (a column-major operand) and reduces over all tokens, the case a "
                "forward-only GEMM kernel never meets."),
    solutions=(
        Solution("triton_tiled.py", "triton", "optimized",
                 note="one strided tiled tl.dot kernel (float32 accumulator, grouped program order) launched "
                      "twice: dX = dY W and dW = dY^T X, the transpose read through strides, each written "
                      "straight into its rows of the output"),
        Solution("triton_row_broadcast.py", "triton", "slow", defect="no_tiling",
                 note="one program per output row, each re-reading the whole second operand in small tiles "
                      "and reducing with broadcast multiply + tl.sum: no reuse across rows, no tensor cores"),
        Solution("tilelang_pipelined.py", "tilelang", "optimized", cpu_status="unverified",
                 note="two pipelined tensor-core GEMMs (128x128x32 tiles, 3 stages, T.gemm into a float32 "
                      "fragment, swizzled block order), dX = dY W and dW = dY^T X with dY's tile read "
                      "transposed by T.gemm, each stored into its rows of the output; GPU-style, so the cpu "
                      "backend only compiles it (sm_90a)"),
    ),
)
