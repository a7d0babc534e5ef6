# Idiomatic-looking but slow (defect: scalar_loop): one program per row, and the row is accumulated one
# scalar load at a time. Every program runs a dependent chain of N scalar loads and adds; no load is
# vectorized and no part of the reduction runs in parallel. Correct (float32 accumulator), but far from
# the memory bandwidth.
import torch
import triton
import triton.language as tl


@triton.jit
def _row_sum_scalar(x_ptr, y_ptr, N):
    row = tl.program_id(0)
    base = row.to(tl.int64) * N
    acc = 0.0
    for i in range(0, N):
        acc += tl.load(x_ptr + base + i).to(tl.float32)
    tl.store(y_ptr + row, acc.to(y_ptr.dtype.element_ty))


def row_sum(x):
    x = x.contiguous()
    m, n = x.shape
    y = torch.empty((m,), dtype=x.dtype, device=x.device)
    _row_sum_scalar[(m,)](x, y, n)
    return y
