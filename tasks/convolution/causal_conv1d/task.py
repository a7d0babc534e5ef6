"""Causal depthwise conv1d + bias + SiLU over [B, D, L] (Mamba's short convolution, kernel width 4)."""
import math

import torch

from kernelgym_gap.core.inputs import sample
from kernelgym_gap.core.task import Solution, TaskSpec, Tolerance, Workload, itemsize


def reference(x, weight, bias):
    # causal_conv1d_fn(x, weight, bias, activation="silu") of the causal-conv1d package, as its reference
    # implementation computes it: left zero padding W - 1, then the first L outputs.
    d, w = weight.shape
    y = torch.nn.functional.conv1d(x, weight.unsqueeze(1), bias, padding=w - 1, groups=d)
    return torch.nn.functional.silu(y[..., : x.shape[-1]])


def make_inputs(shape, dtype, gen, distribution, device):
    b, d, length, w = shape
    x = sample((b, d, length), dtype, gen, distribution, device)
    # Weights and bias uniform in +-1/sqrt(W), PyTorch's default Conv1d initialisation (fan_in = W), which
    # Mamba keeps.
    bound = 1.0 / math.sqrt(w)
    weight = sample((d, w), dtype, gen, "uniform", device, scale=bound)
    bias = sample((d,), dtype, gen, "uniform", device, scale=bound)
    return x, weight, bias


def flops(shape):
    b, d, length, w = shape
    # W multiply-adds and the bias per output, plus SiLU (x * sigmoid(x), counted as 4 operations).
    return b * d * length * (2 * w + 1 + 4)


def min_bytes(shape, dtype):
    b, d, length, w = shape
    return (2 * b * d * length + d * w + d) * itemsize(dtype)


TASK = TaskSpec(
    name="CausalConv1d",
    version=1,
    e_baseline="torch.compile",   # eager is an unfused chain of ops (TaskSpec.e_baseline)
    changelog=("v1: the reward's E is taken against torch.compile of the reference (e_baseline): eager runs it as an unfused chain of ops that a fused kernel beats 5.7x, where E sat at the reward's ceiling (issue 34)",),
    category="convolution",
    statement=("Causal depthwise 1-D convolution with bias and SiLU, as Mamba's causal_conv1d_fn(x, weight, "
               "bias, activation='silu'): x [B, D, L], weight [D, W], bias [D] (contiguous, one dtype). "
               "y[b, d, l] = bias[d] + sum over j in 0..W-1 of weight[d, j] * x[b, d, l - (W - 1) + j], "
               "where x at negative positions is zero (each output sees only the current and W - 1 past "
               "positions of its own channel); out = y * sigmoid(y), of shape [B, D, L] in x's dtype. "
               "Compute in float32. The shape tuple is (B, D, L, W); W <= 4 as in Mamba."),
    entry_point="causal_conv1d",
    signature="causal_conv1d(x: Tensor[B, D, L], weight: Tensor[D, W], bias: Tensor[D]) -> Tensor[B, D, L]",
    reference=reference,
    make_inputs=make_inputs,
    # "large" (std 30): pre-activations reach +-100, so exp(-y) overflows float16 (and a naive
    # 1 / (1 + exp(-y)) in float16 gives inf / nan paths) and SiLU's two tails both matter; "sparse": most
    # windows are all zero (out = silu(bias)), the first W - 1 positions test the causal zero padding.
    distributions=("normal", "uniform", "large", "sparse"),
    timed_distribution="normal",
    level=2,
    tags=("depthwise", "causal", "fused-activation", "memory-bound", "ssm"),
    motivation=("Every Mamba / Mamba-2 block (and Hyena/StripedHyena-style short convolutions) runs this "
                "width-4 causal depthwise conv with SiLU over the whole [B, D, L] activation before the "
                "selective scan; it is purely memory-bound, and the unfused torch path (conv1d with "
                "groups = D, a slice, then SiLU) moves the activation several times."),
    workloads={
        # Small for the Triton interpreter (the slow solution walks each row position by position): odd
        # lengths below and above one 128-wide block (so the causal taps cross block boundaries), row
        # counts that leave partial row tiles, W = 4, 3 and 2.
        "cpu": Workload(public=((2, 2, 37, 4), (1, 1, 130, 4)),
                        heldout=((1, 2, 150, 3), (2, 5, 9, 2)),
                        dtypes=("float32", "float16")),
        # Mamba-2.8B (d_inner 5120) and Mamba2-2.7B (conv dim 5376) prefill; held out: a 1536-wide model,
        # W = 3, and an odd length (95-270 MB moved per call in bfloat16, twice that in float32).
        "cuda": Workload(public=((8, 5120, 2048, 4), (4, 5376, 4096, 4)),
                         heldout=((16, 1536, 1000, 3), (2, 8192, 4095, 4)),
                         dtypes=("bfloat16", "float32")),
    },
    # At most 4 products, a bias and SiLU per output, computed in float32: float32 error ~1e-6 relative
    # (exp included, |y| <= ~100 for "large"), so 1e-4 is tight and safe. float16 / bfloat16: inputs are
    # exact in the float64 reference; the error is one output rounding, at most u |out| (u = 2^-11, 2^-8),
    # so rtol = 4u with a small atol (as for Matmul). A float16 pre-activation sum or SiLU in float16 errs
    # by several u of the summands, and a missed causal tap by ~0.1-1.
    tolerances={"float32": Tolerance(1e-4, 1e-4), "float16": Tolerance(1e-3, 2e-3),
                "bfloat16": Tolerance(8e-3, 1.6e-2)},
    flops=flops,
    min_bytes=min_bytes,
    solutions=(
        Solution("triton_blocked.py", "triton", "optimized",
                 note="one program per tile of 8 rows (b, d) x 128 positions: the W taps are W masked, "
                      "shifted tile loads (the overlap hits L1), fp32 FMAs, bias and SiLU fused, one store; "
                      "one read and one write of the activation (torch runs conv1d, a slice copy and SiLU "
                      "separately, so E > 1 is expected)"),
        Solution("triton_sequential.py", "triton", "slow", defect="scalar_loop",
                 note="one program per row that walks the L positions one at a time, W scalar loads and "
                      "scalar FMAs per position: one busy lane per program and L dependent steps"),
        Solution("tilelang_pixel.py", "tilelang", "optimized",
                 note="one block per (row, run of 128 positions), one position per thread, the W taps "
                      "unrolled into predicated loads, fp32 accumulation, bias and SiLU fused; runs on the "
                      "C target"),
    ),
)
