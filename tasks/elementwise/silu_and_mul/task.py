"""SiLU-and-mul, the SwiGLU gate of a gated MLP: x = [a | b] (shape [M, 2D]) -> silu(a) * b (shape [M, D])."""
import torch

from kernelgym_gap.core.inputs import sample
from kernelgym_gap.core.task import Solution, TaskSpec, Tolerance, Workload, itemsize

# Operations counted per output element: exp, + 1, divide (silu(a) = a / (1 + exp(-a))) and the multiply
# by b (exp counted as one operation, the negation folded into it). Memory-bound by two orders of magnitude.
FLOPS_PER_ELEMENT = 4


def reference(x):
    d = x.shape[-1] // 2
    return torch.nn.functional.silu(x[..., :d]) * x[..., d:]


def make_inputs(shape, dtype, gen, distribution, device):
    m, d = shape
    return (sample((m, 2 * d), dtype, gen, distribution, device),)


TASK = TaskSpec(
    name="SiLUAndMul",
    version=2,
    e_baseline="torch.compile",   # eager is an unfused chain of ops (TaskSpec.e_baseline)
    category="elementwise",
    statement=("The SwiGLU gate of a gated MLP (vLLM's silu_and_mul). x has shape [M, 2*D]: its first D columns "
               "are the gate a, its last D columns the up projection b. Return silu(a) * b, where "
               "silu(a) = a * sigmoid(a) = a / (1 + exp(-a)), as a new contiguous tensor of shape [M, D] and "
               "x's dtype. The task shape is (M, D). Compute in float32 and round once to the output dtype."),
    entry_point="silu_and_mul",
    signature="silu_and_mul(x: Tensor[M, 2*D]) -> Tensor[M, D]",
    reference=reference,
    make_inputs=make_inputs,
    # Five distributions (coprime with the 2 dtypes x 2 seeds of each shape). "large" (std 30) drives
    # exp(-a) to overflow for very negative gates (the limit silu(a) -> -0 must come out, not NaN) and
    # makes products of up to ~2e4, near float16's range: a float16 computation of a * b loses digits.
    distributions=("normal", "large", "uniform", "small", "sparse"),
    workloads={
        # (M, D): the input is [M, 2D]. D = 96 and 77 are not powers of two (masked column tails); 1000
        # and 13 rows, odd row counts.
        "cpu": Workload(public=((16, 128), (13, 77)), heldout=((5, 96),), dtypes=("float32", "float16")),
        # Llama-3-8B (D = 14336), Llama-2-7B (11008), Qwen2-7B (18944), Llama-2-70B (28672) MLPs at
        # prefill batch sizes: 0.1-0.7 GB moved per call in float16 (>= 30 us at H200 bandwidth).
        "cuda": Workload(public=((8192, 14336), (4096, 11008)), heldout=((3000, 18944), (2048, 28672)),
                         dtypes=("float16", "float32")),
    },
    # The reference runs in float64. float32: a few ulp from exp (the GPU's ex2.approx) and the divide;
    # far below 1e-5 relative, and the absolute floor only matters where silu(a) * b underflows.
    # float16/bfloat16: one rounding of the output, half an ulp (4.9e-4 / 3.9e-3 relative); torch's own
    # float16 result rounds twice (after silu, after the multiply) and still fits.
    # v1: a float32 kernel rounds once, at most half an ulp (2^-11 = 4.9e-4 relative for float16, 2^-9 for
    # bfloat16) plus float32's ~1e-6: rtol 1e-3 (float16) and 8e-3 (bfloat16) are ~2x and ~4x that, and
    # atol only covers the subnormal range and float32 cancellation (1e-5 / 1e-4). v0's atol of 1e-3 / 1e-2
    # admitted 16-bit math (a rounding per op) on every distribution and a constant output on inputs whose
    # outputs are all below it. Measured at the cpu shapes, max |err| / allowed over the distributions:
    # float16 math 3.3x the allowance, float32 0.48x.
    tolerances={"float32": Tolerance(1e-5, 1e-5), "float16": Tolerance(1e-5, 1e-3),
                "bfloat16": Tolerance(1e-4, 8e-3)},
    changelog=("v1: float16 atol 1e-3 -> 1e-5 and bfloat16 1e-2/1e-2 -> 1e-4/8e-3: the 16-bit tolerance is "
               "derived from one rounding; v0's admitted 16-bit arithmetic where the statement asks for "
               "float32 (issue 31)",
               "v2: the reward's E is taken against torch.compile of the reference (e_baseline): eager runs it as an unfused chain of ops that a fused kernel beats 3.5x, where E sat at the reward's ceiling (issue 34)",),
    flops=lambda s: FLOPS_PER_ELEMENT * s[0] * s[1],
    # x read once (2 * M * D elements), the output written once (M * D).
    min_bytes=lambda s, d: 3 * s[0] * s[1] * itemsize(d),
    level=2,   # a fused op (silu of one half times the other) (core/task.py LEVELS; re-applied in issue 34)
    tags=("activation", "gated-mlp", "swiglu", "memory-bound"),
    motivation=("The SwiGLU MLP of Llama, Mistral, Qwen and most current LLMs runs silu(gate) * up between its "
                "two GEMMs on every token of every layer; unfused it costs three passes over a [tokens, 2D] "
                "activation instead of one, so vLLM and SGLang ship a dedicated kernel."),
    solutions=(
        Solution("triton_rowblock.py", "triton", "optimized",
                 note="2-D grid (row, column block of 2048): gate and up halves loaded as contiguous "
                      "vectorized blocks, sigmoid via exp in float32, masked column tail"),
        Solution("triton_column_walk.py", "triton", "slow", defect="uncoalesced_access",
                 note="one program per (output column, block of 1024 rows): each vector load strides by "
                      "a whole row (2D elements), so every lane touches its own 32-byte sector"),
        Solution("tilelang_tiled.py", "tilelang", "optimized",
                 note="2-D tiles of 16 x 256 output elements, T.Parallel over the tile, bounds-guarded, "
                      "float32 math"),
    ),
)
