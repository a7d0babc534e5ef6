# Idiomatic-looking but slow (defect: scalar_loop): one program per row, but the row sum c = sum(y * dy)
# walks the row one scalar load pair at a time, and a second scalar loop writes dx: 2N dependent steps per
# row, nothing vectorized, each load a few bytes at memory latency.
import torch
import triton
import triton.language as tl


@triton.jit
def _softmax_bwd_scalar(y_ptr, dy_ptr, dx_ptr, n_cols):
    row = tl.program_id(0).to(tl.int64)
    base = row * n_cols
    c = 0.0
    for i in range(0, n_cols):
        c += tl.load(y_ptr + base + i).to(tl.float32) * tl.load(dy_ptr + base + i).to(tl.float32)
    for i in range(0, n_cols):
        y = tl.load(y_ptr + base + i).to(tl.float32)
        dy = tl.load(dy_ptr + base + i).to(tl.float32)
        tl.store(dx_ptr + base + i, (y * (dy - c)).to(dx_ptr.dtype.element_ty))


def softmax_backward(y, dy):
    y = y.contiguous()
    dy = dy.contiguous()
    m, n = y.shape
    dx = torch.empty_like(y)
    _softmax_bwd_scalar[(m,)](y, dy, dx, n, num_warps=1)
    return dx
