# Slow by construction (defect: sequential_reduction): one program per row, but the absmax is accumulated one
# element at a time in a scalar loop (a dependent chain of N load-abs-max steps on one thread) before a
# vectorized pass that quantizes the row. Correct, but the reduction serialises what a tree reduction across
# the program's threads does in log2(N) steps.
import torch
import triton
import triton.language as tl


@triton.jit
def _int8_quant_serial(x_ptr, q_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    amax = 0.0
    for j in range(0, n):
        amax = tl.maximum(amax, tl.abs(tl.load(x_ptr + row * n + j).to(tl.float32)))
    scale = 127.0 / tl.maximum(amax, 1e-12)
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n
        v = tl.load(x_ptr + row * n + cols, mask=mask, other=0.0).to(tl.float32) * scale
        r = tl.where(v >= 0, tl.floor(v + 0.5), -tl.floor(0.5 - v))
        r = tl.minimum(tl.maximum(r, -127.0), 127.0)
        tl.store(q_ptr + row * n + cols, r.to(tl.int8), mask=mask)


def int8_token_quant(x):
    x = x.contiguous()
    m, n = x.shape
    q = torch.empty((m, n), dtype=torch.int8, device=x.device)
    _int8_quant_serial[(m,)](x, q, n, BLOCK=1024)
    return q
