"""Batched GEMM: C[b] = A[b] @ B[b] for every b, float32 accumulation (torch.bmm)."""
import math

import torch

from kernelgym_gap.core.inputs import sample
from kernelgym_gap.core.task import Solution, TaskSpec, Tolerance, Workload, itemsize

# as in Matmul: B follows A's distribution except for "large" (large A alone)
_B_DISTRIBUTION = {"normal": "normal", "uniform": "uniform", "offset": "offset", "sparse": "sparse",
                   "large": "normal"}


def reference(a, b):
    return torch.bmm(a, b)


def make_inputs(shape, dtype, gen, distribution, device):
    batch, m, n, k = shape
    a = sample((batch, m, k), dtype, gen, distribution, device)
    # 1/sqrt(K) keeps C of order one for normal inputs; "offset" (mean 8, all products positive) gives
    # C ~ 64 sqrt(K) (~4100 at K = 4096, inside float16's range) so that a float16 accumulator, a dropped
    # K tile or a wrong batch stride fails by far.
    b = sample((batch, k, n), dtype, gen, _B_DISTRIBUTION[distribution], device, scale=1.0 / math.sqrt(k))
    return a, b


TASK = TaskSpec(
    name="BatchedMatmul",
    version=0,
    category="gemm",
    statement=("Batched matrix multiplication C[b] = A[b] @ B[b] for b in [0, BATCH), with A of shape "
               "[BATCH, M, K] and B of shape [BATCH, K, N], both contiguous (row-major) and of one dtype: "
               "float16 or bfloat16 (float32 and float16 on the cpu backend). Accumulate in float32; return a "
               "new C of shape [BATCH, M, N] in the input dtype. The shape tuple is (BATCH, M, N, K)."),
    entry_point="batched_matmul",
    signature="batched_matmul(a: Tensor[BATCH, M, K], b: Tensor[BATCH, K, N]) -> Tensor[BATCH, M, N]",
    reference=reference,
    make_inputs=make_inputs,
    distributions=("normal", "offset", "uniform", "large", "sparse"),
    timed_distribution="normal",
    workloads={
        # Tiny for the interpreter: M = 200, 130, N = 72, 136, 260 and K = 80, 40, 96 are off the 128/64
        # block multiples (masked M, N and K edges), and several batches check the batch strides.
        "cpu": Workload(public=((2, 64, 64, 64), (3, 200, 72, 80)), heldout=((4, 48, 136, 40), (2, 130, 260, 96)),
                        dtypes=("float32", "float16")),
        # Unfused attention's probabilities @ V (batch x heads = 64, seq 2048 / 4096, head_dim 128) and
        # DeepSeek MLA's absorbed per-head projections (128 heads: [T, 128] @ [128, 512] and
        # [T, 512] @ [512, 128]), as vLLM runs them with torch.bmm. 68-140 GFLOP each.
        "cuda": Workload(public=((64, 2048, 128, 2048), (128, 4096, 512, 128)),
                         heldout=((32, 4096, 128, 4096), (128, 3000, 128, 512)),
                         dtypes=("float16", "bfloat16")),
    },
    # As Matmul's (float32 accumulation against a float64 reference, ~2^-24 sqrt(K / 6) |C|, then one
    # rounding to the output dtype, u = 2^-11 fp16 / 2^-8 bf16): rtol = 4u. Each batch is an independent
    # GEMM, so nothing adds up across the batch.
    tolerances={"float32": Tolerance(1e-4, 1e-4), "float16": Tolerance(1e-3, 2e-3),
                "bfloat16": Tolerance(8e-3, 1.6e-2)},
    flops=lambda s: 2 * s[0] * s[1] * s[2] * s[3],
    min_bytes=lambda s, d: s[0] * (s[1] * s[3] + s[3] * s[2] + s[1] * s[2]) * itemsize(d),
    level=3,
    tags=("gemm", "batched", "tensor-cores", "attention"),
    motivation=("Per-head matmuls run as one batched GEMM: unfused attention's P @ V, and DeepSeek-V2/V3 "
                "MLA's absorbed key/value up-projections, which vLLM and SGLang call through torch.bmm on "
                "every decode and prefill step."),
    solutions=(
        Solution("triton_batched_tiles.py", "triton", "optimized",
                 note="128x128x64 tl.dot tiles (wgmma), float32 accumulator, 3-stage pipeline, one program "
                      "per (tile, batch) with the batch on grid axis 1 and grouped tile order inside a batch"),
        Solution("triton_batch_loop.py", "triton", "slow", defect="too_few_programs",
                 note="the same tiles, but one program per tile of a single matrix looping over the batch "
                      "in sequence: 16 programs for 64 x 2048 x 128 on 132 SMs"),
        Solution("tilelang_pipelined.py", "tilelang", "optimized", cpu_status="unverified",
                 note="128x128x32 shared-memory tiles, T.gemm into a float32 fragment, T.Pipelined with 3 "
                      "stages, the batch as the kernel's third grid axis"),
    ),
)
