# Causal flash attention forward. One program per (BLOCK_M-query tile, batch*head); the Q tile stays in
# registers and K/V are streamed in BLOCK_N-key tiles with tl.dot (wgmma on sm_90) and float32 accumulators;
# the softmax is computed online in base 2 (scale folded with log2(e)). Causality is exploited twice: tiles
# above the diagonal are never visited (half the work), and only the diagonal tile pays for a mask: the
# loop over keys [0, m0) runs unmasked, a second loop over [m0, m0 + BLOCK_M) applies j <= i and j < S.
# m starts at a finite -1e30, so a row fully masked in one tile never makes exp2(-inf - -inf) = NaN.
import math

import torch
import triton
import triton.language as tl


@triton.jit
def _attn_inner(acc, l_i, m_i, q, k_ptr, v_ptr, offs_m, offs_n, offs_d, lo, hi, S, qk_scale,
                HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, MASKED: tl.constexpr):
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + offs_n
        kv_off = cols[:, None] * HEAD_DIM + offs_d[None, :]
        if MASKED:
            k = tl.load(k_ptr + kv_off, mask=cols[:, None] < S, other=0.0)
        else:
            k = tl.load(k_ptr + kv_off)
        qk = tl.dot(q, tl.trans(k)) * qk_scale
        if MASKED:
            ok = (cols[None, :] <= offs_m[:, None]) & (cols[None, :] < S)
            qk = tl.where(ok, qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(qk - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        if MASKED:
            v = tl.load(v_ptr + kv_off, mask=cols[:, None] < S, other=0.0)
        else:
            v = tl.load(v_ptr + kv_off)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _causal_fwd(q_ptr, k_ptr, v_ptr, o_ptr, S, qk_scale,
                HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    start_m = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    base = bh * S * HEAD_DIM
    q_ptr += base
    k_ptr += base
    v_ptr += base
    o_ptr += base
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + offs_m[:, None] * HEAD_DIM + offs_d[None, :], mask=offs_m[:, None] < S, other=0.0)

    m_i = tl.full([BLOCK_M], -1.0e30, dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    m0 = start_m * BLOCK_M
    # keys strictly below the diagonal tile: every (row, key) pair is visible, no mask (all keys < m0 < S)
    acc, l_i, m_i = _attn_inner(acc, l_i, m_i, q, k_ptr, v_ptr, offs_m, offs_n, offs_d, 0, m0, S, qk_scale,
                                HEAD_DIM, BLOCK_N, False)
    # the diagonal tile: j <= i and j < S
    acc, l_i, m_i = _attn_inner(acc, l_i, m_i, q, k_ptr, v_ptr, offs_m, offs_n, offs_d, m0,
                                tl.minimum(m0 + BLOCK_M, S), S, qk_scale, HEAD_DIM, BLOCK_N, True)
    acc = acc / l_i[:, None]
    tl.store(o_ptr + offs_m[:, None] * HEAD_DIM + offs_d[None, :], acc.to(o_ptr.dtype.element_ty),
             mask=offs_m[:, None] < S)


def causal_attention(q, k, v):
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    b, h, s, d = q.shape
    o = torch.empty_like(q)
    if q.is_cuda:
        # Hopper, head_dim 128: 128-query tiles on 8 warps, 64-key tiles, 3-stage K/V pipeline
        block_m, block_n, warps, stages = 128, 64, 8 if d >= 128 else 4, 3
    else:
        # the interpreter: small tiles, so the tiny cpu shapes get several tiles and masked tails
        block_m, block_n, warps, stages = 16, 16, 4, 1
    qk_scale = (1.0 / math.sqrt(d)) * 1.4426950408889634   # softmax scale * log2(e), for exp2
    # the longest (last) query tiles first: they finish last otherwise (causal work grows with the tile index)
    grid = (triton.cdiv(s, block_m), b * h)
    _causal_fwd[grid](q, k, v, o, s, qk_scale, HEAD_DIM=d, BLOCK_M=block_m, BLOCK_N=block_n,
                      num_warps=warps, num_stages=stages)
    return o
