"""Dense GEMM: C = A @ B with float32 accumulation, output in the input dtype."""
import math

import torch

from kernelgym_gap.core.inputs import sample
from kernelgym_gap.core.task import Solution, TaskSpec, Tolerance, Workload, itemsize

# B is drawn from this distribution for each of A's (B "large" too would push fp16 outputs past 1000 and
# make the float32 accumulation error itself reach the tolerance; A "large" alone tests large inputs).
_B_DISTRIBUTION = {"normal": "normal", "uniform": "uniform", "offset": "offset", "sparse": "sparse",
                   "large": "normal"}


def reference(a, b):
    return torch.matmul(a, b)


def make_inputs(shape, dtype, gen, distribution, device):
    m, n, k = shape
    a = sample((m, k), dtype, gen, distribution, device)
    # 1/sqrt(K) keeps C of order one (normal inputs: C ~ N(0, 1)), whatever K; "offset" inputs (mean 8,
    # all terms positive) give C ~ 64 sqrt(K), at most ~5800 for K = 8192, inside float16's range, and make
    # a float16 accumulator or a dropped K tile fail by far.
    b = sample((k, n), dtype, gen, _B_DISTRIBUTION[distribution], device, scale=1.0 / math.sqrt(k))
    return a, b


TASK = TaskSpec(
    name="Matmul",
    version=0,
    level=3,
    tags=('compute-bound', 'tensor-cores', 'tiling'),
    motivation=("Dense GEMM is most of an LLM's FLOPs (QKV, output and MLP projections); cuBLAS sets a high bar that tiling, pipelining and tensor cores must reach."),
    category="gemm",
    statement=("Matrix multiplication C = A @ B, with A of shape [M, K] and B of shape [K, N], both "
               "contiguous (row-major) and of the same dtype: float16 or bfloat16 (float32 and float16 on the "
               "cpu backend). Accumulate in float32; return a new C of shape [M, N] in the input dtype. "
               "The shape tuple is (M, N, K)."),
    entry_point="matmul",
    signature="matmul(a: Tensor[M, K], b: Tensor[K, N]) -> Tensor[M, N]",
    reference=reference,
    make_inputs=make_inputs,
    distributions=("normal", "offset", "uniform", "large", "sparse"),
    workloads={
        # Small for the interpreter (fp32 matmul 128^3 takes 0.05 s there). 200, 72, 80, 48, 136 and 40 are not
        # multiples of the 32- or 64-wide blocks: the M, N and K edge masks all run. No bfloat16 on cpu: the
        # interpreter's bf16 tl.dot is silently wrong.
        "cpu": Workload(public=((64, 64, 64), (200, 72, 80)), heldout=((48, 136, 40),),
                        dtypes=("float32", "float16")),
        # No float32 on cuda: tl.dot's default TF32 would need a TF32-sized tolerance (another task).
        "cuda": Workload(public=((4096, 4096, 4096), (8192, 8192, 8192)),
                         heldout=((3000, 5000, 4000), (8192, 1024, 8192)),
                         dtypes=("float16", "bfloat16")),
    },
    # The reference is float64 on the same rounded inputs, so the products are exact and the error of a
    # float32-accumulating kernel is (1) the float32 sum, std ~ 2^-24 * |C| * sqrt(K / 6) for round-off
    # that grows like a random walk: ~2e-6 |C| at K = 8192 (|C| <= ~150 for "large", ~5800 for "offset",
    # so at most ~4e-4 absolute, against atol + rtol |C|), plus (2) one rounding of C to the output dtype,
    # at most u |C| with u = 2^-11 (fp16), 2^-8 (bf16). rtol = 4u, atol = 1e-3 (fp16) covers both with room
    # for Hopper's truncating tensor-core accumulation. A float16 accumulator errs by ~u * sqrt(K / 6)
    # * |C| (~5e-3 |C| at K = 128 already) and fails; a bfloat16 one fails the bf16 tolerance likewise.
    tolerances={"float32": Tolerance(1e-4, 1e-4), "float16": Tolerance(1e-3, 2e-3),
                "bfloat16": Tolerance(8e-3, 1.6e-2)},
    flops=lambda s: 2 * s[0] * s[1] * s[2],
    min_bytes=lambda s, d: (s[0] * s[2] + s[2] * s[1] + s[0] * s[1]) * itemsize(d),
    solutions=(
        Solution("triton_blocked.py", "triton", "optimized",
                 note="tiled tl.dot (wgmma), float32 accumulator, grouped program order, autotuned Hopper "
                      "configs"),
        Solution("triton_row_panel.py", "triton", "slow", defect="too_few_programs",
                 note="tiled tl.dot, but one program per 128-row panel walking all its column tiles in "
                      "sequence: M / 128 programs (64 for M = 8192) on 132 SMs"),
        Solution("tilelang_pipelined.py", "tilelang", "optimized",
                 note="128x128x32 tiles in shared memory, T.gemm into a float32 fragment, T.Pipelined with 3 "
                      "stages", cpu_status="unverified"),
        Solution("tilelang_naive.py", "tilelang", "slow", defect="no_tiling",
                 note="one block per 128 columns of one row of C, a float32 fragment accumulator and a serial "
                      "K loop: no shared-memory tiles, no reuse, no tensor cores (runs on the C target)"),
    ),
)
