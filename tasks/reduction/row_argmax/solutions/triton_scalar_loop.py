# Idiomatic-looking but slow (defect: scalar_loop): one program per row, and the row is scanned one scalar
# load at a time, keeping the running maximum and its index (strict >, so the first occurrence wins, as in
# torch.argmax). Every program runs a dependent chain of N scalar loads and compares; nothing is vectorized
# and no part of the reduction runs in parallel.
import torch
import triton
import triton.language as tl


@triton.jit
def _row_argmax_scalar(x_ptr, y_ptr, N):
    row = tl.program_id(0)
    base = row.to(tl.int64) * N
    best = tl.load(x_ptr + base).to(tl.float32)
    best_idx = 0
    for i in range(1, N):
        v = tl.load(x_ptr + base + i).to(tl.float32)
        if v > best:
            best = v
            best_idx = i
    tl.store(y_ptr + row, best_idx.to(tl.int64))


def row_argmax(x):
    x = x.contiguous()
    m, n = x.shape
    y = torch.empty((m,), dtype=torch.int64, device=x.device)
    _row_argmax_scalar[(m,)](x, y, n)
    return y
