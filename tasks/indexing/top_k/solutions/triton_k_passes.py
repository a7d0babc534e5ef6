# Slow by construction (defect: sequential_reduction): one program per row makes k passes over the whole row,
# one after another; pass j finds the largest packed (value, index) key strictly below the key pass j - 1
# found (keys are distinct, so ties are taken one index at a time). Correct, but the row is read k times and
# each selection waits for the previous one.
import torch
import triton
import triton.language as tl

LOWEST = tl.constexpr(-9223372036854775807)
HIGHEST = tl.constexpr(9223372036854775807)


@triton.jit
def _topk_passes(x_ptr, out_ptr, n, k, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    prev = tl.full((), HIGHEST, tl.int64)
    for j in range(0, k):
        best = tl.full((), LOWEST, tl.int64)
        for start in range(0, n, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            mask = cols < n
            x = tl.load(x_ptr + row * n + cols, mask=mask, other=0.0).to(tl.float32)
            bits = x.to(tl.int32, bitcast=True)
            key = ((bits ^ ((bits >> 31) & 0x7FFFFFFF)).to(tl.int64) << 32) | cols.to(tl.int64)
            key = tl.where(mask & (key < prev), key, LOWEST)
            best = tl.maximum(best, tl.max(key, axis=0))
        tl.store(out_ptr + row * k + j, best & 0xFFFFFFFF)
        prev = best


def top_k(x, k):
    x = x.contiguous()
    m, n = x.shape
    out = torch.empty((m, k), dtype=torch.int64, device=x.device)
    _topk_passes[(m,)](x, out, n, k, BLOCK=1024)
    return out
