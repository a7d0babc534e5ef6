"""Strided 2-D convolution, NCHW, kernel R x R, stride U, zero padding P, no bias (downsampling convs and
ViT patch embeddings)."""
import math

import torch

from kernelgym_gap.core.inputs import sample
from kernelgym_gap.core.task import Solution, TaskSpec, Tolerance, Workload, itemsize


def reference(x, weight):
    # The stride and padding are not arguments: the kernel size R fixes them (see _geometry).
    u, p = _geometry(weight.shape[-1])
    return torch.nn.functional.conv2d(x, weight, stride=u, padding=p)


def _geometry(r):
    """(stride, padding) of this task's two layer kinds: 3x3 stride-2 padding-1 downsampling, and patch
    embeddings with kernel = stride = R, no padding (R >= 4)."""
    return (2, 1) if r == 3 else (r, 0)


def _out(h, r, u, p):
    return (h + 2 * p - r) // u + 1


def make_inputs(shape, dtype, gen, distribution, device):
    n, c, h, w, k, r = shape
    x = sample((n, c, h, w), dtype, gen, distribution, device)
    # Weights scaled by 1/sqrt(C*R*R): each output is O(1) for zero-mean inputs (O(sqrt(C R^2)), at most
    # ~25 for C R^2 = 2304, for positive inputs and weights). Sparse inputs meet dense weights.
    w_dist = distribution if distribution in ("normal", "uniform", "positive") else "normal"
    weight = sample((k, c, r, r), dtype, gen, w_dist, device, scale=1.0 / math.sqrt(c * r * r))
    return x, weight


def flops(shape):
    n, c, h, w, k, r = shape
    u, p = _geometry(r)
    return 2 * n * k * _out(h, r, u, p) * _out(w, r, u, p) * c * r * r


def min_bytes(shape, dtype):
    n, c, h, w, k, r = shape
    u, p = _geometry(r)
    return (n * c * h * w + k * c * r * r + n * k * _out(h, r, u, p) * _out(w, r, u, p)) * itemsize(dtype)


TASK = TaskSpec(
    name="StridedConv2d",
    version=0,
    category="convolution",
    statement=("Strided 2-D convolution (cross-correlation, as torch.nn.functional.conv2d) of x [N, C, H, W] "
               "with weight [K, C, R, R], dilation 1, groups 1, no bias, in one of two geometries fixed by R: "
               "R = 3 is a downsampling conv with stride 2 and zero padding 1; R >= 4 is a patch embedding "
               "(ViT/CLIP/SigLIP) with stride R and no padding (non-overlapping R x R patches; rows/columns "
               "past the last whole patch are ignored). With stride U and padding P the output is [N, K, Ho, "
               "Wo], Ho = (H + 2P - R) // U + 1 (likewise Wo), in x's dtype (NCHW, contiguous inputs): "
               "out[n, k, oh, ow] = sum over c, r, s of x[n, c, oh U - P + r, ow U - P + s] * weight[k, c, "
               "r, s], taps outside the image counting as zero. Accumulate in float32; for float32 inputs "
               "TF32 tensor-core products are allowed (cuDNN's default) and the float32 tolerance admits "
               "them. The shape tuple is (N, C, H, W, K, R)."),
    entry_point="strided_conv2d",
    signature="strided_conv2d(x: Tensor[N, C, H, W], weight: Tensor[K, C, R, R]) -> Tensor[N, K, Ho, Wo]",
    reference=reference,
    make_inputs=make_inputs,
    # No "large"/"offset": they only scale the same sums up (with them a TF32 float32 kernel's error grows
    # past any fixed atol); "positive" makes every term positive, so a dropped tap or block shows.
    distributions=("normal", "uniform", "sparse", "positive"),
    timed_distribution="normal",
    level=3,
    tags=("implicit-gemm", "tensor-cores", "strided", "patch-embedding"),
    motivation=("Every vision-language model starts with a patch-embedding conv (CLIP/SigLIP: 14x14 "
                "stride 14 over 3 channels; SAM/ViT: 16x16), a GEMM with an awkward 3*R*R reduction and a "
                "strided gather; 3x3 stride-2 convs are the downsampling steps of VAE encoders and "
                "convolutional vision towers."),
    workloads={
        # Small for the Triton interpreter: reductions C*R*R = 27, 48, 54 and 75 are not multiples of the
        # 32-wide block, images that leave rows and columns past the last patch (H = 17, W = 13 for R = 4;
        # 11 x 12 for R = 5), odd 3x3 planes with padding taps on every border.
        "cpu": Workload(public=((1, 3, 9, 9, 5, 3), (2, 3, 17, 13, 8, 4)),
                        heldout=((1, 6, 11, 10, 20, 3), (1, 3, 11, 12, 7, 5)),
                        dtypes=("float32", "float16")),
        # A VAE-encoder 3x3/2 downsampling at 128x128 and CLIP-L/14's patch embedding at 224 on the H200;
        # held out: SigLIP-so400m/14 at 384 (27 x 27 patches, 6 px left over), a ResNet-style 3x3/2 stage,
        # and SAM's 16x16 patch embedding of 1024 x 1024 images (16-77 GFLOP).
        "cuda": Workload(public=((32, 128, 128, 128, 256, 3), (64, 3, 224, 224, 1024, 14)),
                         heldout=((16, 3, 384, 384, 1152, 14), (32, 256, 56, 56, 512, 3),
                                  (8, 3, 1024, 1024, 768, 16)),
                         dtypes=("float16", "bfloat16")),
    },
    # A GEMM-like sum of C*R*R <= 2304 products, outputs O(1) (<= ~25 for "positive"). The reference is
    # float64 on the same rounded inputs: a float32-accumulating kernel errs by the float32 sum
    # (negligible) plus one output rounding, at most u |out| (u = 2^-11 float16, 2^-8 bfloat16); rtol = 4u
    # and a small atol cover it (as for Matmul). float32: TF32 products give ~1e-3 |out| at worst, so 5e-3
    # (as Conv2d). A wrong stride, a shifted patch or a dropped reduction block errs by ~0.1-1.
    tolerances={"float32": Tolerance(5e-3, 5e-3), "float16": Tolerance(1e-3, 2e-3),
                "bfloat16": Tolerance(8e-3, 1.6e-2)},
    flops=flops,
    min_bytes=min_bytes,
    solutions=(
        Solution("triton_implicit_gemm.py", "triton", "optimized",
                 note="implicit GEMM: one program per (128 output pixels, 128 output channels), the "
                      "reduction over the flattened (c, r, s) index in 32-wide steps (no padding waste for "
                      "C = 3 patch embeddings), each a tl.dot of a gathered, padding-masked input tile and a "
                      "contiguous weight tile, fp32 accumulation, 3 stages; cuDNN is the bar, E ~0.5-1 "
                      "expected (the strided gather has no TMA path)"),
        Solution("triton_fp32_upcast.py", "triton", "slow", defect="needless_dtype_conversion",
                 note="the optimized kernel, but each input and weight tile is converted to float32 before "
                      "tl.dot: the product runs as TF32 at half the fp16/bf16 tensor-core rate, with twice "
                      "the registers per tile and a conversion pass per step"),
    ),
)
