"""RMSNorm backward: dx and dweight from x, dy and weight (eps = 1e-6), returned stacked as [M + 1, N]."""
import torch

from kernelgym_gap.core.inputs import sample
from kernelgym_gap.core.task import Solution, TaskSpec, Tolerance, Workload, itemsize

EPS = 1e-6


def reference(x, dy, weight):
    # The backward of y = x * rsqrt(mean(x^2) + eps) * weight, written out as eager torch runs it (rstd
    # recomputed from x; autograd of F.rms_norm computes the same terms). Inputs are upcast to float32
    # (the checker passes float64: kept), the results rounded back to the input dtype.
    f = x.dtype if x.dtype == torch.float64 else torch.float32
    xf, dyf, wf = x.to(f), dy.to(f), weight.to(f)
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)
    xhat = xf * rstd
    g = dyf * wf
    dx = rstd * (g - xhat * (g * xhat).mean(-1, keepdim=True))
    dw = (dyf * xhat).sum(0)
    return torch.cat([dx, dw[None]]).to(x.dtype)


def make_inputs(shape, dtype, gen, distribution, device):
    m, n = shape
    x = sample((m, n), dtype, gen, distribution, device)
    dy = sample((m, n), dtype, gen, "normal", device)
    weight = sample((n,), dtype, gen, "positive", device, scale=2.0)
    return x, dy, weight


def error_bound(ins, dtype):
    """What float32 arithmetic may owe beyond the output's rounding. dx rows: c2 = mean(g * xhat) by a
    sequential float32 sum errs by up to N * 2^-24 * mean|g * xhat|, times |xhat| * rstd in dx, and the
    subtraction g - xhat * c2 rounds by 2^-24 (|g| + |xhat * c2|) (times rstd). dw row: a sum over M rows
    errs by up to M * 2^-24 * sum_m |dy * xhat| (partial sums per program combined in float32 do better).
    Twice each."""
    x, dy, w = ins
    m, n = x.shape
    u = 2.0 ** -24
    rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS)
    xhat = x * rstd
    g = dy * w
    gx = (g * xhat).abs().mean(-1, keepdim=True)
    dx = rstd * (xhat.abs() * n * u * gx + u * (g.abs() + xhat.abs() * gx))
    dw = m * u * (dy * xhat).abs().sum(0)
    return 2 * torch.cat([dx, dw[None]])


TASK = TaskSpec(
    name="RMSNormBackward",
    version=0,
    category="backward",
    statement=("The gradients of y = x * rstd * weight, rstd = 1 / sqrt(mean(x^2) + eps) over the last "
               "dimension (x and dy of shape [M, N], weight [N], eps = 1e-6, the same dtype), as in LLaMA-style "
               "RMSNorm: with rstd recomputed per row, xhat = x * rstd and g = dy * weight, "
               "dx = rstd * (g - xhat * mean(g * xhat)) (the mean over the row's N elements) and "
               "dweight = sum over the M rows of dy * xhat. Return ONE new tensor of shape [M + 1, N] in the "
               "input dtype: rows 0..M-1 hold dx, row M holds dweight. Accumulate every sum in float32 (dweight "
               "sums M rows: a 16-bit accumulator is far off)."),
    entry_point="rmsnorm_backward",
    signature="rmsnorm_backward(x: Tensor[M, N], dy: Tensor[M, N], weight: Tensor[N]) -> Tensor[M + 1, N]",
    reference=reference,
    make_inputs=make_inputs,
    # "small": x std 1e-2, rstd ~100 (dx large); "large": std 30, rstd ~0.03; "offset" (mean 8): xhat ~ 1
    # everywhere, so mean(g * xhat) ~ mean(g) and dx cancels; "uniform", "normal" (timed).
    distributions=("normal", "offset", "small", "large", "uniform"),
    workloads={
        # Tiny for the interpreter (the slow solution's scalar loops ran past the 300 s deadline at
        # 16 x 128 on a loaded CI machine): N = 100 and 72 are not powers of two; M = 8, 5 and 3 rows over
        # the optimized solution's 3 cpu programs leave its row groups partial.
        "cpu": Workload(public=((8, 64), (5, 100)), heldout=((3, 72),), dtypes=("float32", "float16")),
        # Training activations (tokens x hidden) of 7-70B models: 16384 x 4096 and 8192 x 8192 bf16 move
        # 400 MB (~84 us at 4.8 TB/s); held out: an odd hidden size (5001) and many tokens of a narrow,
        # unaligned hidden size (65536 x 1000: the dweight reduction runs over 65536 rows).
        "cuda": Workload(public=((16384, 4096), (8192, 8192)), heldout=((6000, 5001), (65536, 1000)),
                         dtypes=("bfloat16", "float16")),
    },
    # The reference runs in float64 on the same rounded inputs. A float32 kernel errs by the output's own
    # rounding (u = 2^-11 fp16, 2^-8 bf16 relative: rtol = 4u) plus the float32 sums (error_bound). atol
    # 1e-6 only guards exact zeros and float16 subnormals (2^-25 absolute). A 16-bit dweight accumulator
    # over M = 16384 rows errs by ~sqrt(M) u |dw| ~ 0.06 |dw| (fp16) and fails; so does a dropped mean term.
    tolerances={"float32": Tolerance(1e-6, 1e-5), "float16": Tolerance(1e-6, 2e-3),
                "bfloat16": Tolerance(1e-6, 1.6e-2)},
    error_bound=error_bound,
    # per element: x^2 and its sum (2), xhat (1), g (1), g * xhat and its sum (2), dx (3), dy * xhat and
    # the dweight sum (2): 11
    flops=lambda s: 11 * s[0] * s[1],
    # x, dy read once, weight read once; dx and dweight written once
    min_bytes=lambda s, d: (3 * s[0] * s[1] + 2 * s[1]) * itemsize(d),
    written_bytes=lambda s, d: (s[0] * s[1] + s[1]) * itemsize(d),
    # E against torch.compile of the reference: eager runs the written-out backward as ~10 separate kernels,
    # which no user would ship
    e_baseline="torch.compile",
    level=3,
    tags=("rmsnorm", "backward", "training", "two-stage-reduction", "column-reduction"),
    motivation=("Every RMSNorm of LLaMA-style training runs this once per step and layer; dweight is a "
                "reduction over all tokens (a column sum) fused with dx's row reductions, which a fused "
                "kernel splits into per-program partial sums and a second small reduction (Liger's and "
                "Apex's RMSNorm backward)."),
    solutions=(
        Solution("triton_two_stage.py", "triton", "optimized",
                 note="stage 1: ~4 programs per SM, each walks a group of rows (x and dy loaded once into "
                      "float32 registers), writes dx and accumulates its dweight partial in registers, stored "
                      "once to a float32 workspace; stage 2: a column sum of the partials"),
        Solution("triton_scalar_loop.py", "triton", "slow", defect="scalar_loop",
                 note="one program per row for dx and one per column for dweight, every sum and every store "
                      "one scalar element at a time"),
        Solution("tilelang_two_stage.py", "tilelang", "optimized",
                 note="stage 1: ~4 blocks per SM, each walking a group of rows: per row the two float32 sums "
                      "(x^2, dy * w * x) folded across the block by one atomic add per thread, a barrier, then dx "
                      "written and dy * xhat added into the group's float32 dweight partial; stage 2: a column "
                      "sum of the partials; lowers to the C target, so it runs on the cpu backend"),
    ),
)
