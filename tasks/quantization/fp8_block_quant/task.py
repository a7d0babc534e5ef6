"""FP8 (e4m3) quantization with one scale per 1x128 group of a row (DeepSeek-V3's activation format)."""
import torch

from kernelgym_gap.core.inputs import sample
from kernelgym_gap.core.task import Solution, TaskSpec, Tolerance, Workload, itemsize

GROUP = 128


def reference(x):
    m, n = x.shape
    g = -(-n // 128)
    xp = torch.nn.functional.pad(x, (0, g * 128 - n)).reshape(m, g, 128)   # zero padding: the absmax is unchanged
    amax = xp.abs().amax(dim=-1, keepdim=True).clamp_min(1e-12)
    y = (xp * (448.0 / amax)).clamp(-448.0, 448.0).reshape(m, g * 128)[:, :n]
    return y.to(torch.float8_e4m3fn)


def make_inputs(shape, dtype, gen, distribution, device):
    x = sample(shape, dtype, gen, distribution, device)
    if distribution == "sparse":
        x[:, :128] = 0       # the first group of every row is all zeros (amax 0): zeros, not NaN
    elif distribution == "offset":
        x[:, 128:256] *= 1e-3     # one group per row 1000x quieter: a row-wide scale leaves it ~80 steps low
    return (x,)


# One e4m3 step, as Fp8TokenQuant (judge/lowbit.py): one rounding of x * 448 / amax, whose float32 formation
# or tie rule may cross a midpoint. A per-row scale instead of a per-group one misses by many steps on the
# "offset" rows (one group is 1000x quieter than the rest: a row scale leaves it ~1000x too small, some 80
# steps low), so only a kernel that really groups passes.
STEP = Tolerance(0.0, 0.0, steps=1)

TASK = TaskSpec(
    name="Fp8BlockQuant",
    version=0,
    category="quantization",
    statement=("Quantize x (shape [M, N]) to FP8 e4m3 (torch.float8_e4m3fn) with one scale per group of 128 "
               "consecutive columns of a row (columns 128g .. 128g + 127; the last group of a row is shorter "
               "when N is not a multiple of 128): amax[i, g] = max |x[i, j]| over the group (exact, in "
               "float32), floored at 1e-12, and q[i, j] = fp8(x[i, j] * 448 / amax[i, g]), clamped to "
               "[-448, 448] and rounded to the nearest e4m3 value. Return q as a new float8_e4m3fn tensor of "
               "shape [M, N]. The group scales are not returned (the contract has one output). Compute in "
               "float32; checked to within one e4m3 step."
               " On the cpu backend (the Triton 3.7 interpreter) a float32 -> float8 cast is itself wrong "
               "where rounding carries into the exponent (127.9 -> 64) and for subnormals: round to e4m3 in "
               "float32 first (as the reference solutions do); the GPU's cast is exact."),
    entry_point="fp8_block_quant",
    signature="fp8_block_quant(x: Tensor[M, N]) -> Tensor[M, N] (float8_e4m3fn)",
    reference=reference,
    make_inputs=make_inputs,
    # "sparse": the first group of every row is all zeros; "offset": the second group is 1000x quieter than
    # the row (fails a row-wide scale); "small": scales ~1e4-1e5; "large": std 30.
    distributions=("normal", "sparse", "offset", "large", "small"),
    output_dtype=lambda dtype: "float8_e4m3fn",
    workloads={
        # 256: two whole groups; 300 and 130: a ragged last group (44 and 2 columns).
        "cpu": Workload(public=((4, 256), (3, 300)), heldout=((5, 130),), dtypes=("float32", "float16")),
        # DeepSeek-V3 activations: hidden 7168 (56 groups) and MLP 18432 (144 groups). Held out: an unaligned
        # width (7000: a 88-column last group) and a tall, narrow one (100000 x 1536, the q-LoRA rank).
        # bf16: 3 bytes per element, 0.13-0.45 GB per call, floors 26-95 us at 4.8 TB/s.
        "cuda": Workload(public=((16384, 7168), (8192, 18432)), heldout=((6000, 7000), (100000, 1536)),
                         dtypes=("bfloat16", "float16")),
    },
    tolerances={"float32": STEP, "float16": STEP, "bfloat16": STEP},
    flops=lambda s: 3 * s[0] * s[1] + s[0] * -(-s[1] // 128),   # abs, max, multiply; a divide per group
    min_bytes=lambda s, d: s[0] * s[1] * (itemsize(d) + itemsize("float8_e4m3fn")),
    written_bytes=lambda s, d: s[0] * s[1] * itemsize("float8_e4m3fn"),
    level=2,
    tags=("quantization", "fp8", "per-block", "group-reduction", "memory-bound"),
    motivation=("DeepSeek-V3 trains and serves with FP8 activations scaled per 1x128 group (fine-grained "
                "quantization keeps outliers from flushing a whole row); the group quantize runs before every "
                "block-scaled FP8 GEMM (DeepGEMM, vLLM's per_token_group_quant_fp8)."),
    solutions=(
        Solution("triton_group_tile.py", "triton", "optimized",
                 note="one program per row and 8 groups: a [8, 128] tile loaded once, tl.max over each group "
                      "row, scaled, clamped and cast to e4m3 from registers"),
        Solution("triton_serial_amax.py", "triton", "slow", defect="sequential_reduction",
                 note="one program per row; each group's absmax accumulated one element at a time in a scalar "
                      "loop, then the group scaled with one vector pass"),
        Solution("tilelang_group_atomic.py", "tilelang", "optimized",
                 note="one 128-thread block per (row, 8 groups), 16 threads per group: per-thread max of |x|, "
                      "one native integer atomic max per thread on the group absmax's bits, a barrier, then "
                      "the group quantized from L1 with e4m3's bits formed in integer arithmetic (the C target "
                      "has no float8) and returned as a float8 view; runs on the C target (cpu-verified)"),
    ),
)
