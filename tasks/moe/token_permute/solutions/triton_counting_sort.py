# MoE token permute as a parallel counting sort of the T * K (token, slot) pairs by expert.
# 1. _histogram: each program counts the experts of its BLOCK pairs (a one-hot [BLOCK, E] summed over rows)
#    into counts[block, e].
# 2. _scan_blocks: one program per expert turns its column of counts into exclusive per-block offsets and
#    its total; _scan_experts: one program turns the totals into exclusive expert starts.
# 3. _scatter: each block ranks every pair among the earlier pairs of the same expert in the block (an
#    exclusive cumsum of the one-hot down the rows), so dest = start[e] + offset[block, e] + rank, which is
#    the stable order the task fixes; then it copies the pairs' token rows to their destinations, H in
#    chunks. Every row of x is read once per copy and written once; the index work is O(T K E / BLOCK).
import torch
import triton
import triton.language as tl


@triton.jit
def _histogram(ids_ptr, counts_ptr, N, E, BLOCK: tl.constexpr, E_P2: tl.constexpr):
    b = tl.program_id(0)
    i = b * BLOCK + tl.arange(0, BLOCK)
    ids = tl.load(ids_ptr + i, mask=i < N, other=-1)
    ex = tl.arange(0, E_P2)
    onehot = (ids[:, None] == ex[None, :]).to(tl.int32)
    tl.store(counts_ptr + b * E + ex, tl.sum(onehot, 0), mask=ex < E)


@triton.jit
def _scan_blocks(counts_ptr, offs_ptr, total_ptr, NB, E, CHUNK: tl.constexpr):
    e = tl.program_id(0)
    carry = 0
    for b0 in range(0, NB, CHUNK):
        b = b0 + tl.arange(0, CHUNK)
        c = tl.load(counts_ptr + b * E + e, mask=b < NB, other=0)
        inc = tl.cumsum(c, 0)
        tl.store(offs_ptr + b * E + e, carry + inc - c, mask=b < NB)
        carry += tl.sum(c, 0)
    tl.store(total_ptr + e, carry)


@triton.jit
def _scan_experts(total_ptr, start_ptr, E, E_P2: tl.constexpr):
    ex = tl.arange(0, E_P2)
    c = tl.load(total_ptr + ex, mask=ex < E, other=0)
    tl.store(start_ptr + ex, tl.cumsum(c, 0) - c, mask=ex < E)


@triton.jit
def _scatter(x_ptr, ids_ptr, offs_ptr, start_ptr, out_ptr, N, E, H, K,
             BLOCK: tl.constexpr, E_P2: tl.constexpr, BLOCK_H: tl.constexpr):
    b = tl.program_id(0)
    i = b * BLOCK + tl.arange(0, BLOCK)
    ok = i < N
    ids = tl.load(ids_ptr + i, mask=ok, other=-1)
    ex = tl.arange(0, E_P2)
    onehot = (ids[:, None] == ex[None, :]).to(tl.int32)
    before = tl.cumsum(onehot, 0) - onehot                   # earlier pairs of the same expert in the block
    rank = tl.sum(before * onehot, 1)
    safe = tl.where(ok, ids, 0)
    dest = tl.load(start_ptr + safe, mask=ok, other=0) + tl.load(offs_ptr + b * E + safe, mask=ok, other=0) + rank
    src = (i // K).to(tl.int64)
    dst = dest.to(tl.int64)
    rh = tl.arange(0, BLOCK_H)
    for h0 in range(0, H, BLOCK_H):
        hh = h0 + rh
        m = ok[:, None] & (hh < H)[None, :]
        row = tl.load(x_ptr + src[:, None] * H + hh[None, :], mask=m)
        tl.store(out_ptr + dst[:, None] * H + hh[None, :], row, mask=m)


def moe_token_permute(x, topk_ids, num_experts):
    x = x.contiguous()
    ids = topk_ids.contiguous().reshape(-1)
    t, h = x.shape
    k = topk_ids.shape[1]
    n = t * k
    e = num_experts
    e_p2 = max(2, triton.next_power_of_2(e))
    if x.is_cuda:
        block, block_h = max(16, min(128, 8192 // e_p2)), 256
    else:
        block, block_h = 8, 16                     # the interpreter: several blocks, partial ones
    nb = triton.cdiv(n, block)
    counts = torch.empty((nb, e), device=x.device, dtype=torch.int32)
    offs = torch.empty((nb, e), device=x.device, dtype=torch.int32)
    total = torch.empty((e,), device=x.device, dtype=torch.int32)
    start = torch.empty((e,), device=x.device, dtype=torch.int32)
    out = torch.empty((n, h), device=x.device, dtype=x.dtype)
    _histogram[(nb,)](ids, counts, n, e, BLOCK=block, E_P2=e_p2)
    _scan_blocks[(e,)](counts, offs, total, nb, e, CHUNK=256 if x.is_cuda else 4)
    _scan_experts[(1,)](total, start, e, E_P2=e_p2)
    _scatter[(nb,)](x, ids, offs, start, out, n, e, h, k, BLOCK=block, E_P2=e_p2, BLOCK_H=block_h,
                    num_warps=4)
    return out
