# Idiomatic-looking but slow (defect: scalar_loop): one program per row, a float32 running total, and the
# row walked one element at a time (load, add, store). Correct (float32 carry, one rounding per output), but
# every program runs a dependent chain of N scalar loads and stores: nothing is vectorized, and the scan
# inside a row never runs in parallel.
import torch
import triton
import triton.language as tl


@triton.jit
def _cumsum_scalar(x_ptr, y_ptr, N):
    row = tl.program_id(0)
    base = row.to(tl.int64) * N
    acc = 0.0
    for i in range(0, N):
        acc += tl.load(x_ptr + base + i).to(tl.float32)
        tl.store(y_ptr + base + i, acc.to(y_ptr.dtype.element_ty))


def cumsum(x):
    x = x.contiguous()
    m, n = x.shape
    y = torch.empty_like(x)
    _cumsum_scalar[(m,)](x, y, n)
    return y
