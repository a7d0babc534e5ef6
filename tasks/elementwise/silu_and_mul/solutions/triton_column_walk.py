# Slow by construction (defect: uncoalesced_access): one program per (output column, block of 1024 rows).
# The vector dimension runs down a column, so consecutive lanes read addresses a whole row (2D elements)
# apart: every lane of a warp needs its own 32-byte memory sector for 2 or 4 useful bytes, and the store
# is scattered the same way. Correct, but it moves ~8-16x the bytes it needs.
import torch
import triton
import triton.language as tl

BLOCK_M = 1024


@triton.jit
def _silu_and_mul_col(x_ptr, out_ptr, m, d, BLOCK_M: tl.constexpr):
    col = tl.program_id(0)
    rows = tl.program_id(1).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    mask = rows < m
    a = tl.load(x_ptr + rows * 2 * d + col, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(x_ptr + rows * 2 * d + d + col, mask=mask, other=0.0).to(tl.float32)
    y = a / (1.0 + tl.exp(-a)) * b
    tl.store(out_ptr + rows * d + col, y.to(out_ptr.dtype.element_ty), mask=mask)


def silu_and_mul(x):
    x = x.contiguous()
    m, two_d = x.shape
    d = two_d // 2
    out = torch.empty((m, d), dtype=x.dtype, device=x.device)
    _silu_and_mul_col[(d, triton.cdiv(m, BLOCK_M))](x, out, m, d, BLOCK_M=BLOCK_M)
    return out
