# Flash-decoding. Decode attention reads the whole KV cache once per token and does ~1 flop per byte, so
# the goal is to keep every SM streaming K and V. Stage 1: grid (B*H, n_splits), the L keys of a (b, h)
# split into chunks of CHUNK keys, n_splits chosen so that B*H*n_splits fills the GPU several times over
# (B*H = 32 at one long sequence would leave 100 of 132 SMs idle otherwise). Each program streams its chunk in
# BLOCK_N-key tiles: scores = tl.sum(q * k, 1) in float32 (one query: a matrix-vector product, no tensor
# cores), an online softmax (running max m, sum l) and a float32 D-vector accumulator; it writes (m, l, acc)
# to a float32 workspace. Stage 2: one program per (b, h) loads the n_splits partials, rescales each by
# exp2(m_s - max m) and divides the combined accumulator by the combined sum.
import math

import torch
import triton
import triton.language as tl


@triton.jit
def _decode_partial(q_ptr, k_ptr, v_ptr, m_ptr, l_ptr, acc_ptr, L, n_splits, qk_scale,
                    CHUNK: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr):
    bh = tl.program_id(0).to(tl.int64)
    split = tl.program_id(1)
    offs_d = tl.arange(0, HEAD_DIM)
    offs_n = tl.arange(0, BLOCK_N)
    q = tl.load(q_ptr + bh * HEAD_DIM + offs_d).to(tl.float32)
    kv_base = bh * L * HEAD_DIM
    lo = split * CHUNK
    hi = tl.minimum(lo + CHUNK, L)
    m = -1.0e30
    l = 0.0
    acc = tl.zeros([HEAD_DIM], dtype=tl.float32)
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + offs_n
        ok = cols < hi
        off = kv_base + cols[:, None] * HEAD_DIM + offs_d[None, :]
        k = tl.load(k_ptr + off, mask=ok[:, None], other=0.0).to(tl.float32)
        s = tl.sum(q[None, :] * k, 1) * qk_scale
        s = tl.where(ok, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 0))
        alpha = tl.exp2(m - m_new)
        p = tl.exp2(s - m_new)
        l = l * alpha + tl.sum(p, 0)
        v = tl.load(v_ptr + off, mask=ok[:, None], other=0.0).to(tl.float32)
        acc = acc * alpha + tl.sum(p[:, None] * v, 0)
        m = m_new
    part = bh * n_splits + split
    tl.store(m_ptr + part, m)
    tl.store(l_ptr + part, l)
    tl.store(acc_ptr + part * HEAD_DIM + offs_d, acc)


@triton.jit
def _decode_combine(m_ptr, l_ptr, acc_ptr, o_ptr, n_splits, HEAD_DIM: tl.constexpr, SPLITS_P2: tl.constexpr):
    bh = tl.program_id(0).to(tl.int64)
    offs_s = tl.arange(0, SPLITS_P2)
    offs_d = tl.arange(0, HEAD_DIM)
    ok = offs_s < n_splits
    m = tl.load(m_ptr + bh * n_splits + offs_s, mask=ok, other=-1.0e30)
    l = tl.load(l_ptr + bh * n_splits + offs_s, mask=ok, other=0.0)
    acc = tl.load(acc_ptr + (bh * n_splits + offs_s)[:, None] * HEAD_DIM + offs_d[None, :], mask=ok[:, None],
                  other=0.0)
    w = tl.exp2(m - tl.max(m, 0))
    w = tl.where(ok, w, 0.0)
    o = tl.sum(w[:, None] * acc, 0) / tl.sum(w * l, 0)
    tl.store(o_ptr + bh * HEAD_DIM + offs_d, o.to(o_ptr.dtype.element_ty))


def decode_attention(q, k, v):
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    b, h, l, d = k.shape
    bh = b * h
    if q.is_cuda:
        block_n, warps = 64, 4
        # ~4 programs per SM (132 SMs), chunks of at least 256 keys so the partials stay cheap
        want = max(1, min(triton.cdiv(l, 256), triton.cdiv(4 * 132, bh)))
    else:
        block_n, warps = 8, 4
        want = triton.cdiv(l, 16)     # the interpreter: 16-key splits, several per (b, h), a partial last one
    chunk = triton.cdiv(triton.cdiv(l, want), block_n) * block_n
    n_splits = triton.cdiv(l, chunk)
    m_part = torch.empty((bh, n_splits), device=q.device, dtype=torch.float32)
    l_part = torch.empty((bh, n_splits), device=q.device, dtype=torch.float32)
    acc_part = torch.empty((bh, n_splits, d), device=q.device, dtype=torch.float32)
    o = torch.empty((b, h, d), device=q.device, dtype=q.dtype)
    qk_scale = (1.0 / math.sqrt(d)) * 1.4426950408889634
    _decode_partial[(bh, n_splits)](q, k, v, m_part, l_part, acc_part, l, n_splits, qk_scale, CHUNK=chunk,
                                    HEAD_DIM=d, BLOCK_N=block_n, num_warps=warps, num_stages=3)
    _decode_combine[(bh,)](m_part, l_part, acc_part, o, n_splits, HEAD_DIM=d,
                           SPLITS_P2=max(2, triton.next_power_of_2(n_splits)), num_warps=4)
    return o
