# QK-norm, tiled over heads: x is viewed as [T*H rows, D]. A head vector (D = 64-256) is far too short for a
# program of its own, so each program normalizes a [ROWS, BLOCK_D] tile of ~4096 elements (32 heads of 128):
# loaded once, squared and summed along D in float32 (tl.sum axis=1), scaled by rstd[:, None] * weight and
# stored. Rows past T*H and columns past D are masked. One read and one write: memory-bound.
import torch
import triton
import triton.language as tl


@triton.jit
def _qk_norm_tile(x_ptr, w_ptr, y_ptr, n_rows, d, eps, ROWS: tl.constexpr, BLOCK_D: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_D)
    cmask = cols < d
    mask = (rows < n_rows)[:, None] & cmask[None, :]
    offs = rows.to(tl.int64)[:, None] * d + cols[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=1) / d + eps)
    w = tl.load(w_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
    y = x * rstd[:, None] * w[None, :]
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def qk_norm(x, weight):
    x = x.contiguous()
    t, h, d = x.shape
    n_rows = t * h
    y = torch.empty_like(x)
    block_d = triton.next_power_of_2(d)
    rows = max(1, 4096 // block_d)
    _qk_norm_tile[(triton.cdiv(n_rows, rows),)](x, weight.contiguous(), y, n_rows, d, 1e-6, ROWS=rows,
                                                BLOCK_D=block_d, num_warps=8)
    return y
