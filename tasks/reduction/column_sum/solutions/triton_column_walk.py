# Idiomatic-looking but slow (defect: uncoalesced_access): the row-sum recipe turned sideways. One program
# per column walks down it BLOCK_M rows at a time and tl.sum's the float32 vector at the end. Correct, but
# each load gathers BLOCK_M elements that lie N elements apart: every lane touches its own 32-byte sector
# (of which it uses 2-4 bytes), and neighbouring columns' programs re-fetch the same sectors later, so the
# memory system moves 8-16x the bytes the sum needs.
import torch
import triton
import triton.language as tl


@triton.jit
def _column_walk(x_ptr, y_ptr, M, N, BLOCK_M: tl.constexpr):
    col = tl.program_id(0)
    rows = tl.arange(0, BLOCK_M)
    acc = tl.zeros((BLOCK_M,), dtype=tl.float32)
    for r in range(0, M, BLOCK_M):
        rr = r + rows
        acc += tl.load(x_ptr + rr.to(tl.int64) * N + col, mask=rr < M, other=0.0).to(tl.float32)
    tl.store(y_ptr + col, tl.sum(acc, axis=0).to(y_ptr.dtype.element_ty))


def column_sum(x):
    x = x.contiguous()
    m, n = x.shape
    y = torch.empty((n,), dtype=x.dtype, device=x.device)
    _column_walk[(n,)](x, y, m, n, BLOCK_M=128, num_warps=4)
    return y
