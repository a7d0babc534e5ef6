"""gpt-oss's clamped SwiGLU on an interleaved [gate, linear] activation: the MoE experts' activation."""
import torch

from kernelgym_gap.core.inputs import sample
from kernelgym_gap.core.task import Solution, TaskSpec, Tolerance, Workload, itemsize

ALPHA = 1.702
LIMIT = 7.0
# Operations counted per output element: two clamps (3 comparisons), * alpha, exp, + 1, divide (the
# sigmoid), * gate, + 1 on the linear half, the final multiply (exp counted as one operation).
FLOPS_PER_ELEMENT = 10


def reference(x):
    # gpt-oss's reference implementation (gpt_oss/torch/model.py, swiglu with alpha=1.702, limit=7.0).
    x_glu, x_linear = x[..., ::2], x[..., 1::2]
    x_glu = x_glu.clamp(min=None, max=7.0)
    x_linear = x_linear.clamp(min=-7.0, max=7.0)
    out_glu = x_glu * torch.sigmoid(1.702 * x_glu)
    return out_glu * (x_linear + 1)


def make_inputs(shape, dtype, gen, distribution, device):
    m, d = shape
    return (sample((m, 2 * d), dtype, gen, distribution, device),)


TASK = TaskSpec(
    name="ClampedSwiGLU",
    version=2,
    e_baseline="torch.compile",   # eager is an unfused chain of ops (TaskSpec.e_baseline)
    category="elementwise",
    statement=("gpt-oss's MoE activation. x has shape [M, 2*D] with the gate and linear halves INTERLEAVED: "
               "g = x[:, 0::2], l = x[:, 1::2] (each [M, D]). Clamp g from above only, g = min(g, 7), and l to "
               "[-7, 7]; return g * sigmoid(1.702 * g) * (l + 1) as a new contiguous tensor of shape [M, D] and "
               "x's dtype. The task shape is (M, D). Compute in float32 and round once to the output dtype."),
    entry_point="clamped_swiglu",
    signature="clamped_swiglu(x: Tensor[M, 2*D]) -> Tensor[M, D]",
    reference=reference,
    make_inputs=make_inputs,
    # Five distributions (coprime with the 2 dtypes x 2 seeds of each shape). "large" (std 30) puts most
    # values beyond the clamps: a kernel that clamps the gate from below too, forgets the +1, or swaps the
    # interleaved halves fails there; very negative gates drive exp(-1.702 g) to overflow (the limit is -0).
    distributions=("normal", "large", "uniform", "offset", "sparse"),
    workloads={
        # (M, D): the input is [M, 2D]. D = 77 and 90 are not powers of two (masked column tails).
        "cpu": Workload(public=((16, 128), (13, 77)), heldout=((5, 90),), dtypes=("float32", "float16")),
        # gpt-oss-20b/120b experts (D = 2880) on grouped tokens (tokens x top-4 experts): 32768 and 8192
        # rows public, 20000 and 12000 held out: 0.14-0.57 GB moved per call in bfloat16.
        "cuda": Workload(public=((32768, 2880), (8192, 2880)), heldout=((20000, 2880), (12000, 4100)),
                         dtypes=("bfloat16", "float16")),
    },
    # The reference runs in float64. float32: a few ulp from exp (ex2.approx on the GPU), the divide and two
    # multiplies: far below 1e-5 relative. float16/bfloat16: one rounding of the output, half an ulp
    # (4.9e-4 / 3.9e-3 relative); the clamps act on the same rounded inputs as the reference's.
    # v1: a float32 kernel rounds once, at most half an ulp (2^-11 = 4.9e-4 relative for float16, 2^-9 for
    # bfloat16) plus float32's ~1e-6: rtol 1e-3 (float16) and 8e-3 (bfloat16) are ~2x and ~4x that, and
    # atol only covers the subnormal range and float32 cancellation (1e-5 / 1e-4). v0's atol of 1e-3 / 1e-2
    # admitted 16-bit math (a rounding per op) on every distribution and a constant output on inputs whose
    # outputs are all below it. Measured at the cpu shapes, max |err| / allowed over the distributions:
    # float16 math 2.1x / bfloat16 math 1.9x the allowance, float32 0.46x / 0.47x.
    tolerances={"float32": Tolerance(1e-5, 1e-5), "float16": Tolerance(1e-5, 1e-3),
                "bfloat16": Tolerance(1e-4, 8e-3)},
    changelog=("v1: float16 atol 1e-3 -> 1e-5 and bfloat16 1e-2/1e-2 -> 1e-4/8e-3: the 16-bit tolerance is "
               "derived from one rounding; v0's admitted 16-bit arithmetic where the statement asks for "
               "float32 (issue 31)",
               "v2: cuda shapes: held-out 12000x2880 -> 12000x4100: D was 2880 in all four shapes; 4100 is another width and not a multiple of 16 (issue 34); the reward's E is taken against torch.compile of the reference (e_baseline): eager runs it as an unfused chain of ops that a fused kernel beats 6.9x, where E sat at the reward's ceiling (issue 34)",),
    flops=lambda s: FLOPS_PER_ELEMENT * s[0] * s[1],
    # x read once (2 * M * D elements), the output written once (M * D).
    min_bytes=lambda s, d: 3 * s[0] * s[1] * itemsize(d),
    level=2,
    tags=("activation", "swiglu", "moe", "interleaved", "clamp", "memory-bound"),
    motivation=("OpenAI's gpt-oss models run this clamped, interleaved SwiGLU between the two grouped GEMMs of "
                "every MoE expert on every routed token; its interleaved layout defeats the usual "
                "split-in-halves silu_and_mul kernels, so inference stacks (vLLM, SGLang, Triton's "
                "triton_kernels) ship a dedicated fused kernel."),
    solutions=(
        Solution("triton_interleaved.py", "triton", "optimized",
                 note="one program per (row, 1024 output columns): the 2048 interleaved inputs loaded as one "
                      "contiguous vector, de-interleaved in registers with tl.reshape + tl.split, float32 "
                      "math, masked column tail"),
        Solution("triton_fp32_roundtrip.py", "triton", "slow", defect="needless_dtype_conversion",
                 note="upcasts the whole input to a float32 copy in torch, runs a float32 kernel into a "
                      "float32 output and casts it back: for 16-bit inputs ~5x the bytes of one fused pass"),
    ),
)
