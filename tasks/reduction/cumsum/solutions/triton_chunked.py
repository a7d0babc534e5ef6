# Optimized row scan. Two paths, picked by the number of rows:
# - many rows (>= 4 per SM of an H200): one program per row walks it in chunks of up to BLOCK elements; each chunk is
#   loaded once (coalesced), scanned in registers with tl.cumsum (a tree scan), offset by the float32 carry
#   of the preceding chunks and stored; the carry grows by the chunk's total. x is read once, y written once.
# - few, long rows (top-p over a 128k vocabulary has a few hundred rows: one program per row would leave
#   SMs idle and serialize 60+ dependent chunks): a 2-D grid of (row, chunk) programs. The first kernel sums
#   each chunk in float32; the second adds the sums of the chunks before its own (a short vector load and
#   tl.sum) and scans its chunk. x is read twice (1.5x the minimal traffic) but all SMs stream in parallel.
# Masks only on the last, partial chunk of a row. float32 throughout; one rounding per output.
import torch
import triton
import triton.language as tl

BLOCK = 2048
ROW_PROGRAMS_MIN = 528        # 4 per SM on a 132-SM H200


@triton.jit
def _scan_rows(x_ptr, y_ptr, N, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    xb = x_ptr + row * stride
    yb = y_ptr + row * stride
    carry = tl.zeros((), dtype=tl.float32)
    n_full = (N // BLOCK) * BLOCK
    for k in range(0, n_full, BLOCK):
        v = tl.load(xb + k + cols).to(tl.float32)
        tl.store(yb + k + cols, (tl.cumsum(v, axis=0) + carry).to(y_ptr.dtype.element_ty))
        carry += tl.sum(v, axis=0)
    if n_full < N:
        idx = n_full + cols
        v = tl.load(xb + idx, mask=idx < N, other=0.0).to(tl.float32)
        tl.store(yb + idx, (tl.cumsum(v, axis=0) + carry).to(y_ptr.dtype.element_ty), mask=idx < N)


@triton.jit
def _chunk_sums(x_ptr, s_ptr, N, stride, n_chunks, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1)
    idx = c * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x_ptr + row * stride + idx, mask=idx < N, other=0.0).to(tl.float32)
    tl.store(s_ptr + row * n_chunks + c, tl.sum(v, axis=0))


@triton.jit
def _scan_chunks(x_ptr, s_ptr, y_ptr, N, stride, n_chunks, BLOCK: tl.constexpr, CHUNKS_P2: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1)
    prev = tl.arange(0, CHUNKS_P2)
    carry = tl.sum(tl.load(s_ptr + row * n_chunks + prev, mask=prev < c, other=0.0), axis=0)
    idx = c * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x_ptr + row * stride + idx, mask=idx < N, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * stride + idx, (tl.cumsum(v, axis=0) + carry).to(y_ptr.dtype.element_ty),
             mask=idx < N)


def cumsum(x):
    x = x.contiguous()
    m, n = x.shape
    y = torch.empty_like(x)
    # at most half a row per chunk (so even short rows take the carry path), at most BLOCK
    block = min(BLOCK, triton.next_power_of_2(triton.cdiv(n, 2)))
    if m >= ROW_PROGRAMS_MIN:
        _scan_rows[(m,)](x, y, n, x.stride(0), BLOCK=block, num_warps=8)
        return y
    n_chunks = triton.cdiv(n, block)
    sums = torch.empty((m, n_chunks), dtype=torch.float32, device=x.device)
    _chunk_sums[(m, n_chunks)](x, sums, n, x.stride(0), n_chunks, BLOCK=block, num_warps=8)
    _scan_chunks[(m, n_chunks)](x, sums, y, n, x.stride(0), n_chunks, BLOCK=block,
                                CHUNKS_P2=triton.next_power_of_2(n_chunks), num_warps=8)
    return y
