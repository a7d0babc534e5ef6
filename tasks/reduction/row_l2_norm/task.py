"""Row L2 norm: sqrt of the sum of squares over the last dimension of a 2-D tensor, output [M]."""
import torch

from kernelgym_gap.core.inputs import sample
from kernelgym_gap.core.task import Solution, TaskSpec, Tolerance, Workload, itemsize


def reference(x):
    return torch.linalg.vector_norm(x, ord=2, dim=-1)


def make_inputs(shape, dtype, gen, distribution, device):
    return (sample(shape, dtype, gen, distribution, device),)


TASK = TaskSpec(
    name="RowL2Norm",
    version=0,
    category="reduction",
    statement=("Compute the Euclidean (L2) norm of each row of x (shape [M, N]): y[i] = sqrt(sum_j x[i, j]^2). "
               "Return a new tensor of shape [M] in x's dtype. Square and accumulate in float32 and round "
               "once at the end: a 16-bit sum of squares overflows ('large', std 30: a row's sum of squares "
               "reaches ~4e6 > 65504)."),
    entry_point="row_l2_norm",
    signature="row_l2_norm(x: Tensor[M, N]) -> Tensor[M]",
    reference=reference,
    make_inputs=make_inputs,
    # "large" (std 30): a 16-bit sum of squares overflows to inf (and a 16-bit accumulator of 'normal' rows
    # drifts past rtol); "small" (std 1e-2): squares of ~1e-4, the smallest of them float16 subnormals (norms
    # near atol); "offset" (mean 8): the norm is dominated by the mean and must still be exact to a few ulps;
    # "uniform", "normal" (timed).
    distributions=("normal", "large", "small", "offset", "uniform"),
    timed_distribution="normal",
    workloads={
        # Small: 200, 257 and 1500 are not powers of two; 1500 spans two of the optimized kernel's
        # 1024-wide column tiles plus a tail; 5 and 3 rows are not multiples of a row block.
        "cpu": Workload(public=((6, 128), (5, 200)), heldout=((3, 1500), (7, 257)),
                        dtypes=("float32", "float16")),
        # Per-token norms of hidden states and per-row norms of weight matrices (gradient clipping, QK
        # l2-normalization, embedding normalization): 4096-14336 wide; 128-256 MiB (fp16) read per call.
        "cuda": Workload(public=((32768, 4096), (131072, 512)), heldout=((20000, 3001), (4096, 14336)),
                         dtypes=("float16", "float32")),
    },
    # The sum of squares is all positive (no cancellation): a float32 sum of N <= 14336 squares is off by
    # ~sqrt(N) u to N u / 2 relative at worst (u = 6e-8: 7e-6 to 4e-4 worst-case bound, ~1e-6 measured for
    # sequential sums), halved by the square root; rtol 2e-5 for float32 (blocked/tree sums are far closer;
    # a strictly sequential sum stays within it for these N). float16/bfloat16 outputs add one rounding
    # (half an ulp: 4.9e-4 / 3.9e-3): rtol 1e-3 / 8e-3. atol only for norms near 0 ('small' rows of 128
    # have norms ~0.1). A 16-bit sum of squares overflows on 'large' rows and fails.
    tolerances={"float32": Tolerance(1e-6, 2e-5), "float16": Tolerance(1e-5, 1e-3),
                "bfloat16": Tolerance(1e-4, 8e-3)},
    flops=lambda s: 2 * s[0] * s[1],                              # a square and an add per element
    min_bytes=lambda s, d: (s[0] * s[1] + s[0]) * itemsize(d),    # x read once, [M] written once
    output_dtype=lambda dtype: dtype,
    level=2,
    tags=("l2-norm", "sum-of-squares", "overflow", "row-reduction"),
    motivation=("Gradient-norm clipping, QK and embedding L2-normalization (nGPT, retrieval embeddings) and "
                "weight-norm diagnostics take per-row L2 norms of activations and weights; a 16-bit sum of "
                "squares overflows, so the kernel must upcast while staying at memory bandwidth."),
    solutions=(
        Solution("triton_tiled.py", "triton", "optimized",
                 note="BLOCK_M rows x up to 1024 columns per tile, squares accumulated into a float32 tile, "
                      "one tl.sum per row at the end, sqrt and one rounding; full column tiles unmasked"),
        Solution("triton_float64.py", "triton", "slow", defect="needless_dtype_conversion",
                 note="'for accuracy' the wrapper upcasts x to float64 in torch and the kernel reduces in "
                      "float64: an extra full read and a 4x (float16) wider write and re-read of x, and "
                      "float64 math, for a result float32 accumulation already gets right"),
        Solution("tilelang_fragment.py", "tilelang", "optimized", cpu_status="unverified",
                 note="one block of 128 threads per row, the row walked in 1024-wide chunks of 8 contiguous "
                      "elements per thread into a float32 fragment of squares, block-wide T.reduce_sum, sqrt; "
                      "fragment reductions do not lower to the C target"),
    ),
)
