# Idiomatic-looking but slow: each program walks its row one element at a time (three sequential loops),
# so every load is a scalar and nothing is reduced in parallel. Passes allclose; ~0.01x torch on the H200.
import torch
import triton
import triton.language as tl


@triton.jit
def _layernorm_scalar(x_ptr, w_ptr, b_ptr, y_ptr, n_cols, eps):
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
    for i in range(0, n_cols):
        v = (tl.load(x_ptr + base + i).to(tl.float32) - mean) * rstd
        v = v * tl.load(w_ptr + i).to(tl.float32) + tl.load(b_ptr + i).to(tl.float32)
        tl.store(y_ptr + base + i, v.to(y_ptr.dtype.element_ty))


def layernorm(x, weight, bias):
    x = x.contiguous()
    m, n = x.shape
    y = torch.empty_like(x)
    _layernorm_scalar[(m,)](x, weight, bias, y, n, 1e-5)
    return y
