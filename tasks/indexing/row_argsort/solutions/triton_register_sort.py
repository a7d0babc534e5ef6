# Row argsort in one pass, the whole row sorted on chip. Each value becomes an order-preserving integer (its
# bits with the magnitude bits flipped for negatives, so integer order is float order) packed with its column
# into one key, value in the high half: sorting keys sorts values, and the column rides along. The column is
# stored reversed (NP - 1 - col), so that under a descending sort equal values keep column order (a stable
# sort, though any tie order passes). 16-bit inputs pack into an int32 key (16 value bits, 16 column bits:
# half the registers and compare work of int64); float32 needs an int64 key. One program sorts BLOCK_M rows
# of NP = next_pow2(N) lanes with a bitonic network in registers along the row: x is read once and the indices
# written once. The network is written out here (reshape the row so each compare pair sits on an axis of
# size 2, take max and min over it) rather than called as tl.sort: the same reshape network tl.sort builds,
# but tl.sort swaps through a custom xor reduction that the interpreter runs one element at a time (12 s for
# 1024 keys on a loaded host), where max/min over an axis are vectorised there.
import torch
import triton
import triton.language as tl

LOWEST64 = tl.constexpr(-9223372036854775807 - 1)   # below every packed key: masked lanes sort to the end
LOWEST32 = tl.constexpr(-2147483648)
# One program holds BLOCK_M x NP keys in registers; rows wider than this need a multi-pass (merge or radix)
# sort, which this solution does not do (the task's rows are at most 4096 wide).
MAX_ROW = 16384


@triton.jit
def _compare_swap(key, pos, R: tl.constexpr, NP: tl.constexpr, K: tl.constexpr, J: tl.constexpr):
    # Lanes i and i ^ J form a pair on axis 2. Within a K-block whose (i & K) bit is 0 the pair is put in
    # descending order (the lower lane keeps the max), otherwise ascending; at K = NP that bit is 0 for every
    # lane, so the last merge leaves the whole row descending.
    y = tl.reshape(key, [R, NP // (2 * J), 2, J])
    p = tl.reshape(pos, [R, NP // (2 * J), 2, J])
    mx = tl.max(y, axis=2, keep_dims=True)
    mn = tl.min(y, axis=2, keep_dims=True)
    keep_max = ((p & J) == 0) == ((p & K) == 0)
    return tl.reshape(tl.where(keep_max, mx, mn), [R, NP])


@triton.jit
def _sort_desc(key, R: tl.constexpr, NP: tl.constexpr, LOG: tl.constexpr):
    pos = tl.broadcast_to(tl.arange(0, NP)[None, :], [R, NP])
    for s in tl.static_range(1, LOG + 1):
        for t in tl.static_range(s):
            key = _compare_swap(key, pos, R, NP, 1 << s, 1 << (s - 1 - t))
    return key


@triton.jit
def _argsort_rows(x_ptr, out_ptr, m, n, BLOCK_M: tl.constexpr, NP: tl.constexpr, LOG: tl.constexpr,
                  HALF: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, NP)
    mask = (rows < m)[:, None] & (cols < n)[None, :]
    offs = rows.to(tl.int64)[:, None] * n + cols[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    x = tl.where(x == 0, 0.0, x).to(x.dtype)     # -0.0 as +0.0: torch ranks them equal, so ties stay stable
    rev = (NP - 1 - cols)[None, :]
    if HALF:
        bits = x.to(tl.int16, bitcast=True).to(tl.int32)           # sign-extended
        ordered = bits ^ ((bits >> 15) & 0x7FFF)
        key = (ordered << 16) | rev
        key = tl.where(mask, key, LOWEST32)
        key = _sort_desc(key, BLOCK_M, NP, LOG)
        col = (NP - 1) - (key & 0xFFFF)
    else:
        bits = x.to(tl.int32, bitcast=True)
        ordered = bits ^ ((bits >> 31) & 0x7FFFFFFF)
        key = (ordered.to(tl.int64) << 32) | rev.to(tl.int64)
        key = tl.where(mask, key, LOWEST64)
        key = _sort_desc(key, BLOCK_M, NP, LOG)
        col = (NP - 1) - (key & 0xFFFFFFFF)
    # Position j of the sorted row is output column j; lanes past N hold the padding keys and are not stored.
    tl.store(out_ptr + offs, col.to(tl.int64), mask=mask)


def row_argsort(x):
    x = x.contiguous()
    m, n = x.shape
    if n > MAX_ROW:
        raise ValueError(f"rows of {n} exceed the {MAX_ROW} this register sort holds on chip")
    half = x.element_size() == 2
    if x.element_size() not in (2, 4):
        x = x.float()
    np2 = triton.next_power_of_2(n)
    # ~4096 keys per program: enough rows per program to fill the lanes at N = 256, one row at N >= 4096.
    # (Never more rows than the input has: a tiny input would sort padding rows for nothing.)
    block_m = min(max(1, 4096 // np2), triton.next_power_of_2(m))
    out = torch.empty((m, n), dtype=torch.int64, device=x.device)
    _argsort_rows[(triton.cdiv(m, block_m),)](x, out, m, n, BLOCK_M=block_m, NP=np2,
                                              LOG=np2.bit_length() - 1, HALF=half,
                                              num_warps=8 if block_m * np2 >= 4096 else 4)
    return out
