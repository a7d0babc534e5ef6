"""Dynamic per-token int8 quantization: each row scaled by its own absmax onto [-127, 127] and rounded."""
import torch

from kernelgym_gap.core.inputs import sample
from kernelgym_gap.core.task import Solution, TaskSpec, Tolerance, Workload, itemsize

INT8_MAX = 127.0
AMAX_FLOOR = 1e-12


def reference(x):
    amax = x.abs().amax(dim=-1, keepdim=True).clamp_min(1e-12)
    return (x * (127.0 / amax)).round().clamp(-127, 127).to(torch.int8)


def make_inputs(shape, dtype, gen, distribution, device):
    x = sample(shape, dtype, gen, distribution, device)
    if distribution == "sparse":
        x[::4] = 0           # padding tokens: every fourth row is all zeros (amax 0)
    return (x,)


# The one-step tolerance, derived: the exact value v = x * 127 / amax is rounded once. A float32 kernel
# forms v with a relative error of a few 2^-24 (a scale formed as 127 / amax then a product, or amax / 127
# then a quotient), so where v lies within ~1e-5 of a .5 midpoint it may round to the other neighbour; and
# round-half-up (floor(v + 0.5), what the Triton interpreter can express) differs from torch's
# round-half-to-even exactly at the midpoints. Both are one step. A kernel that drops the scale, truncates
# toward zero (up to one step too, at most: accepted, like a rounding at a midpoint), scales by the wrong
# amax or clips at 128 misses by many steps on the normal rows.
STEP = Tolerance(0.0, 0.0, steps=1)

TASK = TaskSpec(
    name="Int8TokenQuant",
    version=0,
    category="quantization",
    statement=("Quantize every row (token) of x (shape [M, N]) to int8 with its own symmetric scale: "
               "amax[i] = max_j |x[i, j]| (exact, in float32), floored at 1e-12, and "
               "q[i, j] = round(x[i, j] * 127 / amax[i]) clamped to [-127, 127]. Rows of zeros give zeros. "
               "Return q as a new int8 tensor of shape [M, N]. The row scales amax / 127 are not returned (the "
               "contract has one output; storing them would add 4 bytes per row, under 0.1% of the traffic at "
               "the timed widths). Compute in float32; a rounding at a .5 midpoint may go either way."),
    entry_point="int8_token_quant",
    signature="int8_token_quant(x: Tensor[M, N]) -> Tensor[M, N] (int8)",
    reference=reference,
    make_inputs=make_inputs,
    # "sparse": all-zero rows (127 / 0 = inf, 0 * inf = NaN unless amax is floored) and 90% zeros in the
    # others; "small" (std 1e-2): a scale ~1e4 that overflows float16 if formed in a 16-bit input's dtype;
    # "large" (std 30) and "offset" (mean 8: every value positive, the row's maximum is its absmax).
    distributions=("normal", "sparse", "large", "small", "offset"),
    output_dtype=lambda dtype: "int8",
    workloads={
        # Small: the slow solution reduces each row with an interpreted scalar loop. 200 and 77 are not powers
        # of two (masked tails).
        "cpu": Workload(public=((8, 128), (5, 200)), heldout=((6, 77),), dtypes=("float32", "float16")),
        # Activations entering W8A8 GEMMs (SmoothQuant, vLLM's int8 path): Llama-3-8B hidden (4096) and MLP
        # (14336) rows; held out: an odd, unaligned width (7001) and a short-and-wide one (2048 x 28672).
        # bf16: 3 bytes per element, 0.18-0.35 GB per call, floors 37-73 us at 4.8 TB/s.
        "cuda": Workload(public=((16384, 4096), (8192, 14336)), heldout=((12000, 7001), (2048, 28672)),
                         dtypes=("bfloat16", "float32")),
    },
    tolerances={"float32": STEP, "float16": STEP, "bfloat16": STEP},
    # abs and max per element for the absmax, a multiply and a round per element; one divide per row.
    flops=lambda s: 4 * s[0] * s[1] + s[0],
    # x read once in its dtype, q written once (1 byte per element).
    min_bytes=lambda s, d: s[0] * s[1] * (itemsize(d) + itemsize("int8")),
    written_bytes=lambda s, d: s[0] * s[1] * itemsize("int8"),
    level=2,
    tags=("quantization", "int8", "per-token", "row-reduction", "memory-bound"),
    motivation=("W8A8 int8 inference (SmoothQuant; vLLM and TensorRT-LLM on GPUs without FP8) quantizes every "
                "activation entering a linear layer with a dynamic per-token scale; done unfused (abs, amax, "
                "divide, round, clamp, cast) it reads the activation several times."),
    solutions=(
        Solution("triton_row_register.py", "triton", "optimized",
                 note="one program per row, the row loaded once into registers, tl.max of |x| for the absmax, "
                      "then scaled, rounded and stored as int8 from registers: one read, one write"),
        Solution("triton_serial_amax.py", "triton", "slow", defect="sequential_reduction",
                 note="one program per row, the absmax accumulated one element at a time in a scalar loop "
                      "before a vectorized quantizing pass"),
        Solution("tilelang_row_atomic.py", "tilelang", "optimized",
                 note="one 256-thread block per row: per-thread running max of |x| over a strided walk, one "
                      "atomic max per thread into the row's absmax, a barrier, then the row quantized from "
                      "L1/L2; register variables and an atomic, so it also runs on the C target (cpu-verified)"),
    ),
)
