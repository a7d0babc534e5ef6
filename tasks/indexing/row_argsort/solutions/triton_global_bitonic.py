# Slow by construction (defect: no_tiling): the textbook global-memory bitonic sort. Keys are packed as in
# the optimized solution (order-preserving value bits high, reversed column low, int64), padded to
# NP = next_pow2(N) per row, and then every bitonic stage (k, j) is its own launch that reads each key and its
# partner from HBM and writes the kept one back: log2(NP) (log2(NP) + 1) / 2 launches (36 at N = 256, 78 at
# N = 4096), each moving the whole [M, NP] int64 key array, where one on-chip tile holds a whole row and
# sorts it in a single pass. Correct (a bitonic network sorts any input), but it moves ~50-100x the bytes.
import torch
import triton
import triton.language as tl

LOWEST = tl.constexpr(-9223372036854775807 - 1)
BLOCK = 1024


@triton.jit
def _tile(m, NP, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    # A [ROWS, BLOCK] tile of the [M, NP] key array (several short rows per program, as at N = 256)
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    i = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    inb = (rows < m)[:, None] & (i < NP)[None, :]
    return rows.to(tl.int64)[:, None], i[None, :], inb


@triton.jit
def _pack(x_ptr, key_ptr, m, n, NP, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    rows, cols, inb = _tile(m, NP, ROWS, BLOCK)
    valid = inb & (cols < n)
    x = tl.load(x_ptr + rows * n + cols, mask=valid, other=0.0).to(tl.float32)
    x = tl.where(x == 0, 0.0, x)                 # -0.0 as +0.0: torch ranks them equal
    bits = x.to(tl.int32, bitcast=True)
    ordered = bits ^ ((bits >> 31) & 0x7FFFFFFF)
    key = (ordered.to(tl.int64) << 32) | (NP - 1 - cols).to(tl.int64)
    key = tl.where(valid, key, LOWEST)
    tl.store(key_ptr + rows * NP + cols, key, mask=inb)


@triton.jit
def _stage(src_ptr, dst_ptr, m, NP, k, j, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    # Lane i compares its key with lane i ^ j's. Within a k-block whose (i & k) bit is 0 the pair is put in
    # descending order (the lower lane keeps the max), otherwise ascending; the last stage (k = NP) has that
    # bit 0 everywhere, so the row ends descending. Reads come from src and writes go to dst, so no lane sees
    # a partner's key already replaced.
    rows, i, inb = _tile(m, NP, ROWS, BLOCK)
    a = tl.load(src_ptr + rows * NP + i, mask=inb, other=LOWEST)
    b = tl.load(src_ptr + rows * NP + (i ^ j), mask=inb, other=LOWEST)
    keep_max = ((i & j) == 0) == ((i & k) == 0)
    new = tl.where(keep_max, tl.maximum(a, b), tl.minimum(a, b))
    tl.store(dst_ptr + rows * NP + i, new, mask=inb)


@triton.jit
def _unpack(key_ptr, out_ptr, m, n, NP, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    rows, cols, inb = _tile(m, NP, ROWS, BLOCK)
    valid = inb & (cols < n)
    key = tl.load(key_ptr + rows * NP + cols, mask=valid, other=0)
    tl.store(out_ptr + rows * n + cols, (NP - 1) - (key & 0xFFFFFFFF), mask=valid)


def row_argsort(x):
    x = x.contiguous()
    m, n = x.shape
    np2 = triton.next_power_of_2(n)
    block = min(BLOCK, np2)
    rows = min(max(1, BLOCK // block), triton.next_power_of_2(m))
    grid = (triton.cdiv(m, rows), triton.cdiv(np2, block))
    src = torch.empty((m, np2), dtype=torch.int64, device=x.device)
    dst = torch.empty_like(src)
    _pack[grid](x, src, m, n, np2, ROWS=rows, BLOCK=block)
    k = 2
    while k <= np2:
        j = k // 2
        while j >= 1:
            _stage[grid](src, dst, m, np2, k, j, ROWS=rows, BLOCK=block)
            src, dst = dst, src
            j //= 2
        k *= 2
    out = torch.empty((m, n), dtype=torch.int64, device=x.device)
    _unpack[grid](src, out, m, n, np2, ROWS=rows, BLOCK=block)
    return out
