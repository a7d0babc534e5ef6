# Idiomatic-looking but slow (defect: scalar_loop): one program per row, and three passes over the row
# (its maximum, the sum of exponentials, the normalized write), each one scalar load at a time. Every
# program runs a dependent chain of 3N scalar loads; no load is vectorized and no reduction runs in
# parallel. Numerically sound (max subtracted, float32), so it passes every check.
import torch
import triton
import triton.language as tl


@triton.jit
def _softmax_scalar(x_ptr, y_ptr, N):
    row = tl.program_id(0)
    base = row.to(tl.int64) * N
    mx = tl.load(x_ptr + base).to(tl.float32)
    for i in range(1, N):
        mx = tl.maximum(mx, tl.load(x_ptr + base + i).to(tl.float32))
    total = 0.0
    for i in range(0, N):
        total += tl.exp(tl.load(x_ptr + base + i).to(tl.float32) - mx)
    for i in range(0, N):
        v = tl.exp(tl.load(x_ptr + base + i).to(tl.float32) - mx) / total
        tl.store(y_ptr + base + i, v.to(y_ptr.dtype.element_ty))


def softmax(x):
    x = x.contiguous()
    m, n = x.shape
    y = torch.empty_like(x)
    _softmax_scalar[(m,)](x, y, n)
    return y
