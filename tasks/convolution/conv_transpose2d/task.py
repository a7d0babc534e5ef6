"""Transposed 2-D convolution, stride 2 (2x upsampling), NCHW, kernel R x R (R even), no bias."""
import math

import torch

from kernelgym_gap.core.inputs import sample
from kernelgym_gap.core.task import Solution, TaskSpec, Tolerance, Workload, itemsize


def reference(x, weight):
    r = weight.shape[-1]
    return torch.nn.functional.conv_transpose2d(x, weight, stride=2, padding=(r - 2) // 2)


def make_inputs(shape, dtype, gen, distribution, device):
    n, c, h, w, k, r = shape
    x = sample((n, c, h, w), dtype, gen, distribution, device)
    # Each output sums C * (R/2)^2 products (one tap per filter row/column parity): weights scaled by
    # 1/sqrt(C * R * R / 4) keep outputs O(1) (O(sqrt(C R^2 / 4)), at most ~20 for C = 512, R = 4, for
    # positive inputs and weights). Sparse inputs meet dense weights.
    w_dist = distribution if distribution in ("normal", "uniform", "positive") else "normal"
    weight = sample((c, k, r, r), dtype, gen, w_dist, device, scale=1.0 / math.sqrt(c * r * r / 4))
    return x, weight


def flops(shape):
    n, c, h, w, k, r = shape
    # Every input pixel meets every (k, r, s) tap once (those landing in the cropped border included: with
    # padding (R - 2) / 2 the crop is at most one row/column per side, and the count stays this product).
    return 2 * n * c * h * w * k * r * r


def min_bytes(shape, dtype):
    n, c, h, w, k, r = shape
    return (n * c * h * w + c * k * r * r + n * k * 4 * h * w) * itemsize(dtype)


TASK = TaskSpec(
    name="ConvTranspose2d",
    version=0,
    category="convolution",
    statement=("Transposed 2-D convolution, as torch.nn.functional.conv_transpose2d(x, weight, stride=2, "
               "padding=(R - 2) // 2), of x [N, C, H, W] with weight [C, K, R, R] (PyTorch's transposed "
               "layout: input channels first; R even, 2 or 4), dilation 1, groups 1, no bias, no output "
               "padding. The output is [N, K, 2H, 2W] in x's dtype (NCHW, contiguous inputs): out[n, k, oh, "
               "ow] = sum over c, r, s with oh = 2 ih - P + r, ow = 2 iw - P + s (P = (R - 2) // 2, 0 <= ih "
               "< H, 0 <= iw < W) of x[n, c, ih, iw] * weight[c, k, r, s]. Accumulate in float32; for "
               "float32 inputs TF32 tensor-core products are allowed (cuDNN's default) and the float32 "
               "tolerance admits them. The shape tuple is (N, C, H, W, K, R)."),
    entry_point="conv_transpose2d",
    signature="conv_transpose2d(x: Tensor[N, C, H, W], weight: Tensor[C, K, R, R]) -> Tensor[N, K, 2H, 2W]",
    reference=reference,
    make_inputs=make_inputs,
    # No "large"/"offset": they only scale the same sums up (with them a TF32 float32 kernel's error grows
    # past any fixed atol); "positive" makes every term positive, so a dropped tap or channel block shows.
    distributions=("normal", "uniform", "sparse", "positive"),
    timed_distribution="normal",
    level=3,
    tags=("implicit-gemm", "tensor-cores", "upsampling", "sub-pixel"),
    motivation=("Learned 2x upsampling: SAM's mask decoder and ViTDet-style feature pyramids of vision "
                "towers (kernel 2, stride 2), UNet decoders and GAN/VAE generators (kernel 4, stride 2, "
                "padding 1). Done well it splits into four sub-pixel convolutions, one per output parity, "
                "each a dense implicit GEMM."),
    workloads={
        # Small for the Triton interpreter (the slow solution costs N * K * R^2 * C / 32 steps): C = 34 is
        # not a multiple of the 32-wide channel block, odd planes leave partial pixel tiles and put taps on
        # every border, R = 2 and 4.
        "cpu": Workload(public=((1, 4, 4, 5, 3, 4), (2, 3, 3, 3, 5, 2)),
                        heldout=((1, 34, 3, 3, 4, 4), (2, 3, 5, 2, 9, 2)),
                        dtypes=("float32", "float16")),
        # UNet / generator decoder stages (kernel 4) and SAM/ViTDet-style kernel-2 upsampling on the H200
        # (17-69 GFLOP); held out: a narrower kernel-4 stage, a wide kernel-2 one and an odd 45x45 plane.
        "cuda": Workload(public=((16, 512, 32, 32, 256, 4), (8, 256, 64, 64, 256, 2)),
                         heldout=((32, 256, 32, 32, 128, 4), (4, 1024, 32, 32, 512, 2),
                                  (8, 320, 45, 45, 160, 4)),
                         dtypes=("float16", "bfloat16")),
    },
    # Each output sums C (R/2)^2 <= 2048 products, outputs O(1) (<= ~20 for "positive"). The reference
    # is float64 on the same rounded inputs: a float32-accumulating kernel errs by the float32 sum
    # (negligible) plus one output rounding, at most u |out| (u = 2^-11 float16, 2^-8 bfloat16); rtol = 4u
    # and a small atol cover it (as for Matmul). float32: TF32 products give ~1e-3 |out| at worst, so 5e-3
    # (as Conv2d). A wrong parity (tap) or a dropped channel block errs by ~0.1-1.
    tolerances={"float32": Tolerance(5e-3, 5e-3), "float16": Tolerance(1e-3, 2e-3),
                "bfloat16": Tolerance(8e-3, 1.6e-2)},
    flops=flops,
    min_bytes=min_bytes,
    solutions=(
        Solution("triton_subpixel.py", "triton", "optimized",
                 note="sub-pixel decomposition: one program per (output parity, 128 input-grid pixels, 128 "
                      "output channels), an implicit GEMM over only the (R/2)^2 taps of that parity and "
                      "32-channel blocks with tl.dot, fp32 accumulation; the weight is permuted once per "
                      "call to [R, R, C, K] so its tiles are contiguous (a small extra copy); E ~0.5-1 vs "
                      "cuDNN expected, the stride-2 output stores are half-coalesced"),
        Solution("triton_direct_gather.py", "triton", "slow", defect="no_tiling",
                 note="direct gather: one program per (image, output channel, block of output pixels), all "
                      "R*R taps (three quarters masked off by the stride parity), channels reduced in "
                      "32-wide blocks with tl.sum: no output-channel tile (inputs re-read K times), no "
                      "tensor cores"),
    ),
)
