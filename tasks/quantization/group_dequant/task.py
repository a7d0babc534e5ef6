"""Dequantization: int8 or FP8 e4m3 values times their 1x128-group scales, to bfloat16."""
import torch

from kernelgym_gap.core.inputs import sample
from kernelgym_gap.core.task import Solution, TaskSpec, Tolerance, Workload, itemsize

GROUP = 128


def reference(q, scale):
    s = scale.repeat_interleave(128, dim=1)[:, :q.shape[1]]
    y = q.to(scale.dtype) * s
    return y if scale.dtype == torch.float64 else y.to(torch.bfloat16)


def make_inputs(shape, dtype, gen, distribution, device):
    m, n = shape
    q = sample((m, n), dtype, gen, distribution, device)       # int8: the whole range; fp8: clamped, rounded
    groups = -(-n // 128)
    # positive scales spread over a decade and a half, as amax / 127 (or / 448) of real activations are
    scale = sample((m, groups), "float32", gen, "positive", device, scale=1e-2)
    return q, scale


# The output is bfloat16: q (at most 8 significant bits) times a float32 scale is exact in float64 (the
# reference) and within 2^-24 relative in float32, then rounded once to bfloat16: half an ulp, at most 2^-8
# relative. rtol 8e-3 is one whole ulp (2^-7 = 7.8e-3 at the bottom of a binade), not half: Triton 3.7's
# interpreter casts float32 to bfloat16 by truncation (tests/test_lowbit_dtypes.py), one ulp at worst, and a
# natural kernel must pass on the cpu backend too. atol 0: every output is q times a positive scale. A kernel
# that drops the scale, reads the wrong group's scale or converts q wrongly misses by far more.
TOL = Tolerance(0.0, 8e-3)

TASK = TaskSpec(
    name="GroupDequant",
    version=0,
    category="quantization",
    statement=("Dequantize q (shape [M, N], int8 or float8_e4m3fn) with one float32 scale per group of 128 "
               "consecutive columns of a row: scale has shape [M, ceil(N / 128)] and "
               "y[i, j] = q[i, j] * scale[i, j // 128] (the last group of a row is shorter when N is not a "
               "multiple of 128). Compute the product in float32 and return y as a new bfloat16 tensor of shape "
               "[M, N] whatever q's dtype."),
    entry_point="group_dequant",
    signature="group_dequant(q: Tensor[M, N] (int8 or float8_e4m3fn), scale: Tensor[M, G] (float32)) -> "
              "Tensor[M, N] (bfloat16)",
    reference=reference,
    make_inputs=make_inputs,
    # "sparse": 90% zeros; "large" (std 30): float8 values up to 448 (clamped); "small": float8 values in the
    # subnormal range (int8 draws always span the whole range, whatever their distribution).
    distributions=("normal", "sparse", "large", "small", "uniform"),
    output_dtype=lambda dtype: "bfloat16",
    workloads={
        # 256: two whole groups; 300 and 130: a ragged last group. float8 loads, casts and products run under
        # the interpreter (tests/test_lowbit_dtypes.py).
        "cpu": Workload(public=((4, 256), (3, 300)), heldout=((5, 130),), dtypes=("int8", "float8_e4m3fn")),
        # Block-quantized weights and activations dequantized for a bf16 path (DeepSeek-V3 7168 / 18432);
        # held out: an unaligned width (7000) and a tall, narrow one (100000 x 1536). 3 bytes per element plus
        # the scales: 0.13-0.46 GB per call, floors 26-96 us at 4.8 TB/s.
        "cuda": Workload(public=((16384, 7168), (8192, 18432)), heldout=((6000, 7000), (100000, 1536)),
                         dtypes=("float8_e4m3fn", "int8")),
    },
    tolerances={"int8": TOL, "float8_e4m3fn": TOL},
    flops=lambda s: s[0] * s[1],                                   # one multiply per element
    # q read once (1 byte), the scales once (4 bytes per group), y written once (2 bytes).
    min_bytes=lambda s, d: s[0] * s[1] * (itemsize(d) + 2) + s[0] * -(-s[1] // 128) * 4,
    written_bytes=lambda s, d: s[0] * s[1] * 2,
    level=1,
    tags=("quantization", "dequantize", "fp8", "int8", "per-block", "memory-bound"),
    motivation=("Weight-only and block-quantized checkpoints (DeepSeek-V3's FP8 weights, int8 KV caches) are "
                "dequantized to bfloat16 wherever a kernel has no low-bit path; a one-byte read and a two-byte "
                "write per element, it must run at copy bandwidth."),
    solutions=(
        Solution("triton_group_tile.py", "triton", "optimized",
                 note="one program per row and 8 groups: a [8, 128] tile of q and its 8 scales loaded once, "
                      "multiplied in float32, stored as bfloat16"),
        Solution("triton_scalar.py", "triton", "slow", defect="scalar_loop",
                 note="one program per row, one scalar load, multiply and store per element"),
        Solution("tilelang_tiled.py", "tilelang", "optimized",
                 note="[8, 512] tiles over 256 threads, coalesced: each element times its group's scale in "
                      "float32; float8 decoded and bfloat16 rounded (nearest-even) in integer arithmetic on "
                      "uint8/uint16 views, since the C target has neither type; runs on the C target "
                      "(cpu-verified, bit-exact against torch on every e4m3 code)"),
    ),
)
