# Slow by construction: one program for the whole tensor, rows processed in sequence. Vectorised within a
# row, but the GPU's 132 SMs sit idle except one.
import torch
import triton
import triton.language as tl


@triton.jit
def _layernorm_serial(x_ptr, w_ptr, b_ptr, y_ptr, n_rows, n_cols, eps, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    for row in range(0, n_rows):
        x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
        mean = tl.sum(x, axis=0) / n_cols
        xc = tl.where(mask, x - mean, 0.0)
        rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=0) / n_cols + eps)
        tl.store(y_ptr + row * n_cols + cols, (xc * rstd * w + b).to(y_ptr.dtype.element_ty), mask=mask)


def layernorm(x, weight, bias):
    x = x.contiguous()
    m, n = x.shape
    y = torch.empty_like(x)
    _layernorm_serial[(1,)](x, weight, bias, y, m, n, 1e-5, BLOCK=triton.next_power_of_2(n))
    return y
