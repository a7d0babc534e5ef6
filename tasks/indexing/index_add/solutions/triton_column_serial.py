# Slow by construction (defect: too_few_programs): one program per 256-column block. It copies its columns of
# x into out row by row, then walks all T src rows in order, reading the destination row of out, adding the
# src slice and writing it back. No atomics are needed (one program owns its columns) and the order is fixed,
# but only D / 256 programs run (16 for D = 4096) on a GPU of 132 SMs, each a serial loop over V + T rows.
import torch
import triton
import triton.language as tl


@triton.jit
def _index_add_columns(x_ptr, out_ptr, index_ptr, src_ptr, v, d, t, BLOCK: tl.constexpr):
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < d
    for r in range(0, v):
        row = r * d          # V * D and T * D stay under 2^31 on every shape of the task
        tl.store(out_ptr + row + cols, tl.load(x_ptr + row + cols, mask=mask), mask=mask)
    for i in range(0, t):
        dst = tl.load(index_ptr + i) * d
        acc = tl.load(out_ptr + dst + cols, mask=mask) + tl.load(src_ptr + i * d + cols, mask=mask)
        tl.store(out_ptr + dst + cols, acc, mask=mask)


def index_add(x, index, src):
    x, index, src = x.contiguous(), index.contiguous(), src.contiguous()
    out = torch.empty_like(x)
    v, d = x.shape
    _index_add_columns[(triton.cdiv(d, 256),)](x, out, index, src, v, d, index.shape[0], BLOCK=256)
    return out
