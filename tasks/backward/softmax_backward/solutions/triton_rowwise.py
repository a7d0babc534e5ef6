# Softmax backward, one program per row. Rows up to 8192 wide: y and dy are loaded once into float32
# registers, c = tl.sum(y * dy) and dx = y * (dy - c) is written from the same registers (2 reads + 1 write,
# the minimum). Wider rows: a chunked first pass accumulates c, a second pass re-reads y and dy (the second
# read mostly hits L2 at these row sizes).
import torch
import triton
import triton.language as tl

MAX_BLOCK = 8192


@triton.jit
def _softmax_bwd_row(y_ptr, dy_ptr, dx_ptr, n_cols, BLOCK: tl.constexpr, ONE_PASS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = row * n_cols
    cols = tl.arange(0, BLOCK)
    if ONE_PASS:
        mask = cols < n_cols
        y = tl.load(y_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)
        c = tl.sum(y * dy, axis=0)
        tl.store(dx_ptr + base + cols, (y * (dy - c)).to(dx_ptr.dtype.element_ty), mask=mask)
    else:
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for start in range(0, n_cols, BLOCK):
            mask = start + cols < n_cols
            y = tl.load(y_ptr + base + start + cols, mask=mask, other=0.0).to(tl.float32)
            dy = tl.load(dy_ptr + base + start + cols, mask=mask, other=0.0).to(tl.float32)
            acc += y * dy
        c = tl.sum(acc, axis=0)
        for start in range(0, n_cols, BLOCK):
            mask = start + cols < n_cols
            y = tl.load(y_ptr + base + start + cols, mask=mask, other=0.0).to(tl.float32)
            dy = tl.load(dy_ptr + base + start + cols, mask=mask, other=0.0).to(tl.float32)
            tl.store(dx_ptr + base + start + cols, (y * (dy - c)).to(dx_ptr.dtype.element_ty), mask=mask)


def softmax_backward(y, dy):
    y = y.contiguous()
    dy = dy.contiguous()
    m, n = y.shape
    dx = torch.empty_like(y)
    block = min(triton.next_power_of_2(n), MAX_BLOCK)
    num_warps = min(max(block // 256, 1), 16)
    _softmax_bwd_row[(m,)](y, dy, dx, n, BLOCK=block, ONE_PASS=n <= block, num_warps=num_warps)
    return dx
