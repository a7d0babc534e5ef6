# Idiomatic-looking but slow (defect: scalar_loop). Written like the recurrence it is often described
# as: one program per row (b, d), which walks the L positions in order, and at each one loads the W taps
# as scalars, does W scalar multiply-adds, adds the bias, applies SiLU and stores one value. Each program
# keeps one lane of its warp busy for L dependent steps; the work is never vectorised.
import torch
import triton
import triton.language as tl


@triton.jit
def _causal_conv1d_seq(x_ptr, w_ptr, b_ptr, y_ptr, D, L, W: tl.constexpr):
    row = tl.program_id(0)
    d = row % D
    base = row.to(tl.int64) * L
    bias = tl.load(b_ptr + d).to(tl.float32)
    for l in range(0, L):
        acc = bias
        for j in tl.static_range(W):
            pos = l + (j - (W - 1))
            xv = tl.load(x_ptr + base + pos, mask=pos >= 0, other=0.0).to(tl.float32)
            acc += xv * tl.load(w_ptr + d * W + j).to(tl.float32)
        out = acc / (1.0 + tl.exp(-acc))
        tl.store(y_ptr + base + l, out.to(y_ptr.dtype.element_ty))


def causal_conv1d(x, weight, bias):
    x = x.contiguous()
    weight = weight.contiguous()
    bias = bias.contiguous()
    b, d, length = x.shape
    y = torch.empty_like(x)
    _causal_conv1d_seq[(b * d,)](x, weight, bias, y, d, length, W=weight.shape[1], num_warps=1)
    return y
