# Defect: scalar_loop. One program per row, as it should be, but the sum of squares is accumulated one
# element at a time (a scalar load and add per iteration), so nothing is reduced in parallel and every
# load is a single element. The normalization pass itself is vectorized: the defect is the one loop.
# Passes allclose; a LayerNorm written this way ran at ~0.01x torch on the H200.
import torch
import triton
import triton.language as tl


@triton.jit
def _rmsnorm_scalar_sum(x_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = row * n_cols
    sq = 0.0
    for i in range(0, n_cols):
        v = tl.load(x_ptr + base + i).to(tl.float32)
        sq += v * v
    rstd = 1.0 / tl.sqrt(sq / n_cols + eps)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + base + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


def rmsnorm(x, weight):
    x = x.contiguous()
    weight = weight.contiguous()
    m, n = x.shape
    y = torch.empty_like(x)
    block = triton.next_power_of_2(n)
    _rmsnorm_scalar_sum[(m,)](x, weight, y, n, 1e-6, BLOCK=block, num_warps=min(max(block // 256, 1), 16))
    return y
