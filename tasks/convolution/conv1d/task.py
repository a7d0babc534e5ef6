"""1-D convolution, NCL, stride 1, 'same' zero padding R // 2, no bias, groups = 1 (audio front-ends)."""
import math

import torch

from kernelgym_gap.core.inputs import sample
from kernelgym_gap.core.task import Solution, TaskSpec, Tolerance, Workload, itemsize


def reference(x, weight):
    return torch.nn.functional.conv1d(x, weight, stride=1, padding=weight.shape[-1] // 2)


def make_inputs(shape, dtype, gen, distribution, device):
    n, c, length, k, r = shape
    x = sample((n, c, length), dtype, gen, distribution, device)
    # Weights scaled by 1/sqrt(C*R): each output is O(1) for zero-mean inputs (O(sqrt(C*R)), at most ~20
    # for C*R = 3840, for positive inputs and weights). Sparse inputs meet dense weights.
    w_dist = distribution if distribution in ("normal", "uniform", "positive") else "normal"
    weight = sample((k, c, r), dtype, gen, w_dist, device, scale=1.0 / math.sqrt(c * r))
    return x, weight


def flops(shape):
    n, c, length, k, r = shape
    return 2 * n * k * length * c * r


def min_bytes(shape, dtype):
    n, c, length, k, r = shape
    return (n * c * length + k * c * r + n * k * length) * itemsize(dtype)


TASK = TaskSpec(
    name="Conv1d",
    version=0,
    category="convolution",
    statement=("1-D convolution (cross-correlation, as torch.nn.functional.conv1d) of x [N, C, L] with "
               "weight [K, C, R] (R odd), stride 1, dilation 1, groups 1, no bias, zero padding R // 2 on "
               "each side, so the output is [N, K, L] in x's dtype (contiguous inputs). out[n, k, l] = sum "
               "over c, r of x[n, c, l + r - R//2] * weight[k, c, r], taps outside [0, L) counting as zero. "
               "Accumulate in float32; for float32 inputs TF32 tensor-core products are allowed (cuDNN's "
               "default) and the float32 tolerance admits them. The shape tuple is (N, C, L, K, R)."),
    entry_point="conv1d",
    signature="conv1d(x: Tensor[N, C, L], weight: Tensor[K, C, R]) -> Tensor[N, K, L]",
    reference=reference,
    make_inputs=make_inputs,
    # No "large"/"offset": they only scale the same sums up (with them a TF32 float32 kernel's error grows
    # past any fixed atol); "positive" makes every term positive, so a dropped tap or block shows.
    distributions=("normal", "uniform", "sparse", "positive"),
    timed_distribution="normal",
    level=3,
    tags=("implicit-gemm", "tensor-cores", "audio", "padding"),
    motivation=("The audio front-end of speech LLMs: Whisper's encoder (and the audio towers of Qwen-Audio "
                "and similar models built on it) runs Conv1d(n_mels, d_model, 3, padding=1) over 3000 mel "
                "frames before the transformer; TTS/codec models stack kernel-3/5 'same' conv1d layers."),
    workloads={
        # Small for the Triton interpreter: C*R = 57 is not a multiple of the 32-wide reduction block,
        # K = 130 and L = 150 spill past one 128-wide tile, odd lengths leave partial tiles, R = 1 and 5
        # move the padding.
        "cpu": Workload(public=((1, 4, 16, 8, 3), (2, 7, 37, 5, 5)),
                        heldout=((1, 19, 150, 130, 3), (3, 2, 9, 3, 1)),
                        dtypes=("float32", "float16")),
        # Whisper-large's first conv (128 mel bins -> 1280, 3000 frames) and a 512-channel TTS layer;
        # held out: a 1280-wide layer over 1500 frames and an odd-length kernel-5 layer (47-118 GFLOP).
        "cuda": Workload(public=((32, 128, 3000, 1280, 3), (16, 512, 2048, 512, 3)),
                         heldout=((8, 1280, 1500, 1280, 3), (16, 384, 999, 768, 5)),
                         dtypes=("float16", "bfloat16")),
    },
    # A GEMM-like sum of C*R <= 3840 products with O(1) outputs (<= ~20 for "positive"). The reference is
    # float64 on the same rounded inputs: a float32-accumulating kernel errs by the float32 sum (~2^-24
    # sqrt(C*R) |out|, negligible) plus one output rounding, at most u |out| (u = 2^-11 float16, 2^-8
    # bfloat16). rtol = 4u plus a small atol cover that (as for Matmul); a float16 accumulator errs by
    # ~u sqrt(C*R / 6) |out| and fails. float32: TF32 products give ~1e-3 |out| at worst, so 5e-3 (as
    # Conv2d); plain fp32 FMA is ~1e-6. A missed border tap errs by ~0.1-1.
    tolerances={"float32": Tolerance(5e-3, 5e-3), "float16": Tolerance(1e-3, 2e-3),
                "bfloat16": Tolerance(8e-3, 1.6e-2)},
    flops=flops,
    min_bytes=min_bytes,
    solutions=(
        Solution("triton_implicit_gemm.py", "triton", "optimized",
                 note="implicit GEMM: one program per (image, 128 output channels, 128 positions), the "
                      "reduction over the flattened (channel, tap) index in 32-wide steps, each a tl.dot of "
                      "a contiguous weight tile and a gathered, padding-masked input tile, fp32 "
                      "accumulation, 3 stages; cuDNN's implicit GEMM is the bar, E ~0.6-1 expected"),
        Solution("triton_channel_panel.py", "triton", "slow", defect="too_few_programs",
                 note="the same tl.dot tiles, but one program per 128-output-channel panel that walks every "
                      "image and every position tile in sequence: K / 128 programs (4-10) on 132 SMs"),
    ),
)
