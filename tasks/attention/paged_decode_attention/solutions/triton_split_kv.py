# Flash-decoding over a paged KV cache. Stage 1: grid (B*H, n_splits), the longest length L split into
# chunks so that B*H*n_splits fills the GPU several times over; a program whose chunk starts past its own
# sequence's length writes an empty partial (m = -1e30, l = 0). Each program streams its chunk in BLOCK_N-key
# tiles: every key position j is mapped through the block table (page = table[b, j // PAGE], slot
# j % PAGE; consecutive keys of a page are contiguous per head, so a tile reads PAGE-long runs of D-wide
# rows), scores = tl.sum(q * k) in float32, an online softmax, a float32 D-vector accumulator, written as a
# partial (m, l, acc). Stage 2: one program per (b, h) rescales and combines the partials.
import math

import torch
import triton
import triton.language as tl


@triton.jit
def _paged_partial(q_ptr, k_ptr, v_ptr, bt_ptr, len_ptr, m_ptr, l_ptr, acc_ptr, H, MAXP, n_splits, qk_scale,
                   CHUNK: tl.constexpr, PAGE: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr):
    bh = tl.program_id(0)
    split = tl.program_id(1)
    b = bh // H
    h = bh % H
    offs_d = tl.arange(0, HEAD_DIM)
    offs_n = tl.arange(0, BLOCK_N)
    q = tl.load(q_ptr + bh.to(tl.int64) * HEAD_DIM + offs_d).to(tl.float32)
    seq_len = tl.load(len_ptr + b)
    lo = split * CHUNK
    hi = tl.minimum(lo + CHUNK, seq_len)
    m = -1.0e30
    l = 0.0
    acc = tl.zeros([HEAD_DIM], dtype=tl.float32)
    for start_n in range(lo, hi, BLOCK_N):
        pos = start_n + offs_n
        ok = pos < hi
        page = tl.load(bt_ptr + b.to(tl.int64) * MAXP + pos // PAGE, mask=ok, other=0).to(tl.int64)
        row = (page * PAGE + pos % PAGE) * H + h
        off = row[:, None] * HEAD_DIM + offs_d[None, :]
        k = tl.load(k_ptr + off, mask=ok[:, None], other=0.0).to(tl.float32)
        s = tl.where(ok, tl.sum(q[None, :] * k, 1) * qk_scale, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 0))
        alpha = tl.exp2(m - m_new)
        p = tl.exp2(s - m_new)
        l = l * alpha + tl.sum(p, 0)
        v = tl.load(v_ptr + off, mask=ok[:, None], other=0.0).to(tl.float32)
        acc = acc * alpha + tl.sum(p[:, None] * v, 0)
        m = m_new
    part = bh.to(tl.int64) * n_splits + split
    tl.store(m_ptr + part, m)
    tl.store(l_ptr + part, l)
    tl.store(acc_ptr + part * HEAD_DIM + offs_d, acc)


@triton.jit
def _combine(m_ptr, l_ptr, acc_ptr, o_ptr, n_splits, HEAD_DIM: tl.constexpr, SPLITS_P2: tl.constexpr):
    bh = tl.program_id(0).to(tl.int64)
    offs_s = tl.arange(0, SPLITS_P2)
    offs_d = tl.arange(0, HEAD_DIM)
    ok = offs_s < n_splits
    m = tl.load(m_ptr + bh * n_splits + offs_s, mask=ok, other=-1.0e30)
    l = tl.load(l_ptr + bh * n_splits + offs_s, mask=ok, other=0.0)
    acc = tl.load(acc_ptr + (bh * n_splits + offs_s)[:, None] * HEAD_DIM + offs_d[None, :], mask=ok[:, None],
                  other=0.0)
    w = tl.where(ok, tl.exp2(m - tl.max(m, 0)), 0.0)
    o = tl.sum(w[:, None] * acc, 0) / tl.sum(w * l, 0)
    tl.store(o_ptr + bh * HEAD_DIM + offs_d, o.to(o_ptr.dtype.element_ty))


def paged_decode_attention(q, k_cache, v_cache, block_table, seq_lens):
    q, k_cache, v_cache = q.contiguous(), k_cache.contiguous(), v_cache.contiguous()
    b, h, d = q.shape
    page = k_cache.shape[1]
    maxp = block_table.shape[1]
    lmax = maxp * page                     # an upper bound of every length (no sync to read seq_lens)
    bh = b * h
    if q.is_cuda:
        block_n = 64
        want = max(1, min(triton.cdiv(lmax, 256), triton.cdiv(4 * 132, bh)))
    else:
        block_n = 8
        want = triton.cdiv(lmax, 16)      # the interpreter: 16-key splits, empty ones past short sequences
    chunk = triton.cdiv(triton.cdiv(lmax, want), block_n) * block_n
    n_splits = triton.cdiv(lmax, chunk)
    m_part = torch.empty((bh, n_splits), device=q.device, dtype=torch.float32)
    l_part = torch.empty((bh, n_splits), device=q.device, dtype=torch.float32)
    acc_part = torch.empty((bh, n_splits, d), device=q.device, dtype=torch.float32)
    o = torch.empty((b, h, d), device=q.device, dtype=q.dtype)
    qk_scale = (1.0 / math.sqrt(d)) * 1.4426950408889634
    _paged_partial[(bh, n_splits)](q, k_cache, v_cache, block_table.contiguous(), seq_lens.contiguous(), m_part,
                                   l_part, acc_part, h, maxp, n_splits, qk_scale, CHUNK=chunk, PAGE=page,
                                   HEAD_DIM=d, BLOCK_N=block_n, num_warps=4)
    _combine[(bh,)](m_part, l_part, acc_part, o, n_splits, HEAD_DIM=d,
                    SPLITS_P2=max(2, triton.next_power_of_2(n_splits)), num_warps=4)
    return o
