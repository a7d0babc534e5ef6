"""Dynamic per-token FP8 (e4m3) quantization: each row scaled by its own absmax onto [-448, 448] and cast."""
import torch

from kernelgym_gap.core.inputs import sample
from kernelgym_gap.core.task import Solution, TaskSpec, Tolerance, Workload, itemsize

FP8_E4M3_MAX = 448.0


def reference(x):
    amax = x.abs().amax(dim=-1, keepdim=True).clamp_min(1e-12)
    return (x * (448.0 / amax)).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)


def make_inputs(shape, dtype, gen, distribution, device):
    x = sample(shape, dtype, gen, distribution, device)
    if distribution == "sparse":
        x[::4] = 0           # padding tokens: every fourth row is all zeros (amax 0)
    return (x,)


# One step of e4m3 (judge/lowbit.py), derived: the scaled value v = x * 448 / amax is rounded once to e4m3
# (3 mantissa bits: a step is 6-12% of the value). A float32 kernel forms v within a few 2^-24 relative of the
# float64 reference's, so it can land on the other side of a rounding midpoint, and at an exact midpoint the
# GPU's cvt.rn (ties to even) and the Triton interpreter's cast (ties away from zero, tests/
# test_lowbit_dtypes.py) differ: one step either way. Values below e4m3's smallest subnormal (2^-9) flush to
# 0, at most one step too. A kernel that skips the scale, uses a per-tensor amax or casts without scaling
# misses by many steps (a factor 2 is 8 steps).
STEP = Tolerance(0.0, 0.0, steps=1)

TASK = TaskSpec(
    name="Fp8TokenQuant",
    version=0,
    category="quantization",
    statement=("Quantize every row (token) of x (shape [M, N]) to FP8 e4m3 (torch.float8_e4m3fn) with its own "
               "scale: amax[i] = max_j |x[i, j]| (exact, in float32), floored at 1e-12, and "
               "q[i, j] = fp8(x[i, j] * 448 / amax[i]), rounded to the nearest e4m3 value (448 is e4m3's "
               "largest; clamp to [-448, 448] before the cast: e4m3fn has no inf). Rows of zeros give zeros. "
               "Return q as a new float8_e4m3fn tensor of shape [M, N]. The row scales amax / 448 are not "
               "returned (the contract has one output). Compute in float32; checked to within one e4m3 step."
               " On the cpu backend (the Triton 3.7 interpreter) a float32 -> float8 cast is itself wrong "
               "where rounding carries into the exponent (127.9 -> 64) and for subnormals: round to e4m3 in "
               "float32 first (as the reference solutions do); the GPU's cast is exact."),
    entry_point="fp8_token_quant",
    signature="fp8_token_quant(x: Tensor[M, N]) -> Tensor[M, N] (float8_e4m3fn)",
    reference=reference,
    make_inputs=make_inputs,
    # As Int8TokenQuant: "sparse" holds all-zero rows (a 0 * inf NaN unless amax is floored), "small" a scale
    # that overflows float16 if formed in the input's dtype, "large" and "offset" the ordinary extremes.
    distributions=("normal", "sparse", "large", "small", "offset"),
    output_dtype=lambda dtype: "float8_e4m3fn",
    workloads={
        # Small: the slow solution reduces each row with an interpreted scalar loop.
        "cpu": Workload(public=((8, 128), (5, 200)), heldout=((6, 77),), dtypes=("float32", "float16")),
        # Activations entering FP8 GEMMs (vLLM/SGLang on Hopper): Llama-3-8B hidden (4096) and MLP (14336);
        # held out: an odd width (5121) and a short, very wide one (1024 x 53248, Llama-3-405B's MLP).
        # bf16: 3 bytes per element, 0.16-0.35 GB per call, floors 34-73 us at 4.8 TB/s.
        "cuda": Workload(public=((16384, 4096), (8192, 14336)), heldout=((12000, 5121), (1024, 53248)),
                         dtypes=("bfloat16", "float16")),
    },
    tolerances={"float32": STEP, "float16": STEP, "bfloat16": STEP},
    flops=lambda s: 3 * s[0] * s[1] + s[0],           # abs, max, multiply per element; a divide per row
    min_bytes=lambda s, d: s[0] * s[1] * (itemsize(d) + itemsize("float8_e4m3fn")),
    written_bytes=lambda s, d: s[0] * s[1] * itemsize("float8_e4m3fn"),
    level=2,
    tags=("quantization", "fp8", "per-token", "row-reduction", "memory-bound"),
    motivation=("FP8 inference on Hopper and Blackwell quantizes every activation entering a linear layer with "
                "a dynamic per-token scale (vLLM's dynamic_per_token_scaled_fp8_quant); it runs before every "
                "FP8 GEMM and must run at copy bandwidth."),
    solutions=(
        Solution("triton_row_register.py", "triton", "optimized",
                 note="one program per row, the row loaded once into registers, tl.max of |x|, then scaled, "
                      "clamped and cast to e4m3 from registers: one read, one write"),
        Solution("triton_serial_amax.py", "triton", "slow", defect="sequential_reduction",
                 note="one program per row, the absmax accumulated one element at a time in a scalar loop "
                      "before a vectorized quantizing pass"),
        Solution("tilelang_row_atomic.py", "tilelang", "optimized",
                 note="one 256-thread block per row: per-thread running max of |x|, one atomic max per thread "
                      "into the row's absmax, a barrier, then the row quantized from L1/L2, the e4m3 bit pattern "
                      "formed in integer arithmetic (the C target has no float8) and returned as a float8 view; "
                      "runs on the C target (cpu-verified)"),
    ),
)
