# Slow by construction (defect: sequential_reduction): one program per row, but the absmax is accumulated
# one element at a time in a scalar loop (a dependent chain of N load-abs-max steps on one thread), before
# a vectorized pass that rescales the row. Correct, but the reduction serialises what a tree reduction
# across the program's threads does in log2(N) steps.
import torch
import triton
import triton.language as tl


@triton.jit
def _row_absmax_serial(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    amax = 0.0
    for j in range(0, n):
        amax = tl.maximum(amax, tl.abs(tl.load(x_ptr + row * n + j).to(tl.float32)))
    scale = 448.0 / tl.maximum(amax, 1e-12)
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n
        x = tl.load(x_ptr + row * n + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * n + cols, (x * scale).to(tl.float16), mask=mask)


def row_absmax_scale(x):
    x = x.contiguous()
    m, n = x.shape
    y = torch.empty((m, n), dtype=torch.float16, device=x.device)
    _row_absmax_serial[(m,)](x, y, n, BLOCK=1024)
    return y
