"""Pointwise (1x1) convolution, NCHW, no bias: a GEMM over channels, out[n] = W @ x[n]."""
import math

import torch

from kernelgym_gap.core.inputs import sample
from kernelgym_gap.core.task import Solution, TaskSpec, Tolerance, Workload, itemsize


def reference(x, weight):
    return torch.nn.functional.conv2d(x, weight)


def make_inputs(shape, dtype, gen, distribution, device):
    n, c, h, w, k = shape
    x = sample((n, c, h, w), dtype, gen, distribution, device)
    # Weights scaled by 1/sqrt(C): each output is O(1) for zero-mean inputs (O(sqrt(C)), at most ~13 for
    # C = 1280, for positive inputs and weights). Sparse inputs meet dense weights.
    w_dist = distribution if distribution in ("normal", "uniform", "positive") else "normal"
    weight = sample((k, c, 1, 1), dtype, gen, w_dist, device, scale=1.0 / math.sqrt(c))
    return x, weight


def flops(shape):
    n, c, h, w, k = shape
    return 2 * n * k * h * w * c


def min_bytes(shape, dtype):
    n, c, h, w, k = shape
    return (n * c * h * w + k * c + n * k * h * w) * itemsize(dtype)


TASK = TaskSpec(
    name="Conv1x1",
    version=1,
    changelog=("v1: cuda shapes: held-out batches doubled (4 -> 8, 64 -> 128): their compute floors were 14-18 us on an H200, under the 20 us a timing needs (issue 34)",),
    category="convolution",
    statement=("Pointwise (1x1) 2-D convolution, as torch.nn.functional.conv2d(x, weight): x [N, C, H, W] "
               "and weight [K, C, 1, 1], stride 1, no padding, no bias, groups 1; the output is "
               "[N, K, H, W] in x's dtype (NCHW, contiguous inputs). out[n, k, h, w] = sum over c of "
               "x[n, c, h, w] * weight[k, c, 0, 0]: for each image a GEMM [K, C] @ [C, H*W]. Accumulate in "
               "float32; for float32 inputs TF32 tensor-core products are allowed (cuDNN's default) and the "
               "float32 tolerance admits them. The shape tuple is (N, C, H, W, K)."),
    entry_point="conv1x1",
    signature="conv1x1(x: Tensor[N, C, H, W], weight: Tensor[K, C, 1, 1]) -> Tensor[N, K, H, W]",
    reference=reference,
    make_inputs=make_inputs,
    # No "large"/"offset": they only scale the same sums up (with them a TF32 float32 kernel's error grows
    # past any fixed atol); "positive" makes every term positive, so a dropped channel block shows.
    distributions=("normal", "uniform", "sparse", "positive"),
    timed_distribution="normal",
    level=3,
    tags=("gemm", "implicit-gemm", "tensor-cores", "nchw"),
    motivation=("1x1 convolutions are the channel-mixing layers of UNet/DiT diffusion backbones, VAE "
                "decoders, ConvNeXt/MobileNet vision towers and the projection layers of multimodal "
                "adapters; in NCHW each one is a batched GEMM whose pixel dimension is the contiguous one."),
    workloads={
        # Small for the Triton interpreter (the slow solution costs N * K * C vector steps): C = 40 and 33
        # are not multiples of the 32-wide channel block, K = 130 spills past one 128-wide output-channel
        # tile, H*W = 156 past one 128-wide pixel tile, and the odd planes leave partial pixel tiles.
        "cpu": Workload(public=((1, 8, 8, 8, 16), (2, 40, 5, 7, 6)),
                        heldout=((1, 33, 12, 13, 6), (1, 3, 3, 5, 130), (3, 5, 4, 3, 7)),
                        dtypes=("float32", "float16")),
        # Diffusion UNet / VAE and vision-tower layers on the H200 (13-26 GFLOP each); held out: a wide
        # 32x32 layer and a 14x14 one (196 pixels: a partial pixel tile per image).
        "cuda": Workload(public=((8, 512, 64, 64, 512), (16, 256, 56, 56, 1024)),
                         heldout=((8, 1280, 32, 32, 1280), (128, 1152, 14, 14, 384)),
                         dtypes=("float16", "bfloat16")),
    },
    # A GEMM with reduction length C <= 1280 and O(1) outputs (<= ~13 for "positive"). The reference is
    # float64 on the same rounded inputs, so a float32-accumulating kernel errs by the float32 sum
    # (~2^-24 sqrt(C) |out|, negligible) plus one rounding of the output: at most u |out|, u = 2^-11 for
    # float16 and 2^-8 for bfloat16. rtol = 4u and a small atol cover that (as for Matmul); a float16
    # accumulator errs by ~u sqrt(C / 6) |out| and fails. float32: TF32 products (10-bit mantissa) give
    # ~1e-3 |out| worst case here, so 5e-3 (as Conv2d); plain fp32 FMA is ~1e-6. A dropped channel block
    # errs by ~0.1-1.
    tolerances={"float32": Tolerance(5e-3, 5e-3), "float16": Tolerance(1e-3, 2e-3),
                "bfloat16": Tolerance(8e-3, 1.6e-2)},
    flops=flops,
    min_bytes=min_bytes,
    solutions=(
        Solution("triton_gemm.py", "triton", "optimized",
                 note="one program per (image, 128 output channels, 128 pixels): tl.dot of a [128, 32] "
                      "weight tile and a [32, 128] pixel-contiguous input tile per channel block, fp32 "
                      "accumulation, 3 pipeline stages, masked tails; the per-image GEMM cuDNN also runs, "
                      "so E around 0.7-1 is expected"),
        Solution("triton_channel_loop.py", "triton", "slow", defect="no_tiling",
                 note="one program per (image, output channel, pixel block), a loop over the C input "
                      "channels of vector multiply-adds: every input value is re-read K times, no tensor "
                      "cores"),
        Solution("tilelang_gemm.py", "tilelang", "optimized", cpu_status="unverified",
                 note="per image a [K, C] x [C, H*W] GEMM: 128x128x32 tiles in shared memory, T.gemm into a "
                      "float32 fragment, T.Pipelined with 3 stages (GPU-only: compiled for sm_90a on cpu)"),
    ),
)
