"""Softmax backward over the last dimension: dx from the softmax output y and the upstream gradient dy."""
import torch

from kernelgym_gap.core.inputs import sample
from kernelgym_gap.core.task import Solution, TaskSpec, Tolerance, Workload, itemsize


def reference(y, dy):
    # what autograd runs for torch.softmax(x, -1).backward(dy): the saved output, not the input, is used
    return torch.ops.aten._softmax_backward_data(dy, y, -1, y.dtype)


# The logits behind y: "large" (std 30) gives nearly one-hot rows (y ~ 1 at the top, the rest ~ 0, where
# dx cancels: dy_top - c ~ 0), "small" (std 1e-2) nearly flat rows (y ~ 1/N everywhere), "sparse" rows of
# mostly tied zeros; dy is always normal (what an upstream layer hands back).
def make_inputs(shape, dtype, gen, distribution, device):
    m, n = shape
    logits = sample((m, n), "float32", gen, distribution, device)
    y = torch.softmax(logits, dim=-1).to(getattr(torch, dtype))
    dy = sample((m, n), dtype, gen, "normal", device)
    return y, dy


def error_bound(ins, dtype):
    """c = sum_j y_j dy_j in float32 errs by up to ~N * 2^-24 * sum_j y_j |dy_j| (a sequential sum; a tree
    sum far less), and dx_i = y_i (dy_i - c) carries that error times y_i; the subtraction itself rounds by
    2^-24 (|dy_i| + |c|). Twice the sum of both, per element: what a float32 kernel may owe beyond the
    output's own rounding (the tolerance)."""
    y, dy = ins
    n = y.shape[-1]
    s = (y * dy.abs()).sum(-1, keepdim=True)
    return 2 * y * (n * 2.0 ** -24 * s + 2.0 ** -24 * (dy.abs() + s))


TASK = TaskSpec(
    name="SoftmaxBackward",
    version=0,
    category="backward",
    statement=("The input gradient of y = softmax(x) over the last dimension: given the softmax output y and "
               "the upstream gradient dy (both of shape [M, N], the same dtype), return "
               "dx = y * (dy - sum_j(y_j * dy_j)), the sum over each row's N elements, as a new tensor of y's "
               "shape and dtype (torch's _softmax_backward_data). Accumulate the row sum in float32."),
    entry_point="softmax_backward",
    signature="softmax_backward(y: Tensor[M, N], dy: Tensor[M, N]) -> Tensor[M, N]",
    reference=reference,
    make_inputs=make_inputs,
    distributions=("normal", "large", "small", "sparse", "uniform"),
    workloads={
        # Tiny for the interpreter (the slow solution walks each row one scalar at a time): N = 200 and 96
        # are not powers of two (masked tails).
        "cpu": Workload(public=((16, 128), (5, 200)), heldout=((7, 96),), dtypes=("float32", "float16")),
        # Attention-probability and vocabulary-softmax rows of training: 16384 x 4096 bf16 moves 400 MB
        # (~84 us at 4.8 TB/s), 8192 x 8192 the same; held out: an odd width (5001) and many short rows of
        # an unaligned width (65536 x 1000: another regime, a row is 2 KB), each >= 180 MB (>= 37 us).
        "cuda": Workload(public=((16384, 4096), (8192, 8192)), heldout=((6000, 5001), (65536, 1000)),
                         dtypes=("bfloat16", "float16")),
    },
    # The reference runs in float64 on the same rounded inputs. A float32 kernel errs by the output's own
    # rounding (u = 2^-11 fp16, 2^-8 bf16 relative: rtol = 4u) plus the float32 sum (error_bound above,
    # ~1e-7 * y typical). atol covers float16's subnormal range (|dx| < 6e-5, rounded to 2^-25 absolute);
    # bfloat16 has float32's exponent range, so its atol only guards exact cancellation. float32 (cpu only):
    # rtol 1e-5, atol 1e-7 (dx ~ y ~ 1/N on flat rows). A kernel that drops the c term, or sums y * dy in
    # 16 bits over N = 4096 (error ~ sqrt(N) u |c| ~ 3e-2 |c|), misses by far more.
    tolerances={"float32": Tolerance(1e-7, 1e-5), "float16": Tolerance(1e-7, 2e-3),
                "bfloat16": Tolerance(1e-7, 1.6e-2)},
    error_bound=error_bound,
    # per element: y * dy and its sum (2), dy - c (1), * y (1)
    flops=lambda s: 4 * s[0] * s[1],
    min_bytes=lambda s, d: 3 * s[0] * s[1] * itemsize(d),           # y, dy read once; dx written once
    written_bytes=lambda s, d: s[0] * s[1] * itemsize(d),
    level=2,
    tags=("softmax", "backward", "training", "row-reduction", "memory-bound"),
    motivation=("Every softmax in training (attention probabilities in unfused attention, MoE routers, "
                "vocabulary softmax of distillation losses) runs this backward once per step: one row "
                "reduction fused with an elementwise pass, at memory bandwidth when fused."),
    solutions=(
        Solution("triton_rowwise.py", "triton", "optimized",
                 note="one program per row, y and dy loaded once into float32 registers, c = tl.sum(y * dy), "
                      "dx written once; rows wider than 8192 are walked in two chunked passes"),
        Solution("triton_scalar_loop.py", "triton", "slow", defect="scalar_loop",
                 note="one program per row; the row sum and the dx pass walk the row one scalar element at a "
                      "time"),
        Solution("tilelang_fragment.py", "tilelang", "optimized", cpu_status="unverified",
                 note="one 256-thread block per row, y and dy in float32 register fragments, c by a block-wide "
                      "T.reduce_sum, dx stored once; rows padded to the fragment with guarded loads"),
    ),
)
