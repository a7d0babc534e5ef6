# Idiomatic-looking but slow (defect: uncoalesced_access): the kernel vectorizes over ROWS instead of over
# the row's elements. Each program owns 32 rows and walks the N columns one at a time, so every load and
# store touches 32 addresses N elements apart (one useful element per 128-byte line, each line fetched
# again for the next column only if it survived in cache), once to accumulate the sums of squares and once
# to normalize. Correct, and far slower than the row-wise kernel.
import torch
import triton
import triton.language as tl


@triton.jit
def _add_rmsnorm_cols(x_ptr, r_ptr, w_ptr, y_ptr, n_rows, n_cols, eps, ROWS: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    rmask = rows < n_rows
    base = rows.to(tl.int64) * n_cols
    acc = tl.zeros((ROWS,), dtype=tl.float32)
    for j in range(0, n_cols):
        h = (tl.load(x_ptr + base + j, mask=rmask, other=0.0).to(tl.float32)
             + tl.load(r_ptr + base + j, mask=rmask, other=0.0).to(tl.float32))
        acc += h * h
    rstd = 1.0 / tl.sqrt(acc / n_cols + eps)
    for j in range(0, n_cols):
        h = (tl.load(x_ptr + base + j, mask=rmask, other=0.0).to(tl.float32)
             + tl.load(r_ptr + base + j, mask=rmask, other=0.0).to(tl.float32))
        w = tl.load(w_ptr + j).to(tl.float32)
        tl.store(y_ptr + base + j, (h * rstd * w).to(y_ptr.dtype.element_ty), mask=rmask)


def fused_add_rmsnorm(x, residual, weight):
    x = x.contiguous()
    residual = residual.contiguous()
    m, n = x.shape
    y = torch.empty_like(x)
    rows = 32
    _add_rmsnorm_cols[(triton.cdiv(m, rows),)](x, residual, weight, y, m, n, 1e-6, ROWS=rows)
    return y
