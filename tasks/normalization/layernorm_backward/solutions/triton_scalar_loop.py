# Idiomatic-looking but slow (defect: scalar_loop): one program per row, but every reduction walks the row
# one element at a time with scalar loads (mean; variance around the mean; sum of g; sum of g * xhat) and a
# final scalar loop writes dx: five serial passes of N dependent steps per row, nothing vectorized.
import torch
import triton
import triton.language as tl


@triton.jit
def _ln_bwd_scalar(x_ptr, dy_ptr, w_ptr, dx_ptr, n_cols, eps):
    row = tl.program_id(0)
    base = row * n_cols
    total = 0.0
    for i in range(0, n_cols):
        total += tl.load(x_ptr + base + i).to(tl.float32)
    mean = total / n_cols
    sq = 0.0
    for i in range(0, n_cols):
        d = tl.load(x_ptr + base + i).to(tl.float32) - mean
        sq += d * d
    rstd = 1.0 / tl.sqrt(sq / n_cols + eps)
    c1 = 0.0
    c2 = 0.0
    for i in range(0, n_cols):
        g = tl.load(dy_ptr + base + i).to(tl.float32) * tl.load(w_ptr + i).to(tl.float32)
        c1 += g
        c2 += g * (tl.load(x_ptr + base + i).to(tl.float32) - mean) * rstd
    c1 = c1 / n_cols
    c2 = c2 / n_cols
    for i in range(0, n_cols):
        g = tl.load(dy_ptr + base + i).to(tl.float32) * tl.load(w_ptr + i).to(tl.float32)
        xhat = (tl.load(x_ptr + base + i).to(tl.float32) - mean) * rstd
        tl.store(dx_ptr + base + i, ((g - c1 - xhat * c2) * rstd).to(dx_ptr.dtype.element_ty))


def layernorm_backward(x, dy, weight):
    x = x.contiguous()
    dy = dy.contiguous()
    m, n = x.shape
    dx = torch.empty_like(x)
    _ln_bwd_scalar[(m,)](x, dy, weight, dx, n, 1e-5)
    return dx
