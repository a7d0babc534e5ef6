# Causal grouped-query flash attention forward. One program per (BLOCK_M-query tile, batch*query head);
# query head h reads key/value head h // G in place (no repeated K/V in memory). The Q tile stays in
# registers and K/V are streamed in BLOCK_N-key tiles with tl.dot (wgmma on sm_90) and float32
# accumulators; the softmax is computed online in base 2. Causality: tiles above the diagonal are never
# visited, keys [0, m0) run unmasked, and only the diagonal tile applies j <= i (and j < S for the tail).
# Grid axis 0 is the query tile and axis 1 the query head, so the G query heads of a group and the tiles of
# one head run close together and share K/V tiles in L2.
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
def _gqa_fwd(q_ptr, k_ptr, v_ptr, o_ptr, S, HQ, GROUP, qk_scale,
             HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    start_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // HQ
    h = bh % HQ
    hkv = HQ // GROUP
    q_base = bh.to(tl.int64) * S * HEAD_DIM
    kv_base = (b * hkv + h // GROUP).to(tl.int64) * S * HEAD_DIM
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + q_base + offs_m[:, None] * HEAD_DIM + offs_d[None, :], mask=offs_m[:, None] < S,
                other=0.0)

    m_i = tl.full([BLOCK_M], -1.0e30, dtype=tl.float32)   # finite: a fully masked row never gives NaN
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    m0 = start_m * BLOCK_M
    acc, l_i, m_i = _attn_inner(acc, l_i, m_i, q, k_ptr + kv_base, v_ptr + kv_base, offs_m, offs_n, offs_d,
                                0, m0, S, qk_scale, HEAD_DIM, BLOCK_N, False)
    acc, l_i, m_i = _attn_inner(acc, l_i, m_i, q, k_ptr + kv_base, v_ptr + kv_base, offs_m, offs_n, offs_d,
                                m0, tl.minimum(m0 + BLOCK_M, S), S, qk_scale, HEAD_DIM, BLOCK_N, True)
    acc = acc / l_i[:, None]
    tl.store(o_ptr + q_base + offs_m[:, None] * HEAD_DIM + offs_d[None, :], acc.to(o_ptr.dtype.element_ty),
             mask=offs_m[:, None] < S)


def grouped_query_attention(q, k, v):
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    b, hq, s, d = q.shape
    hkv = k.shape[1]
    assert hq % hkv == 0, "Hq must be a multiple of Hkv"
    o = torch.empty_like(q)
    if q.is_cuda:
        block_m, block_n, warps, stages = 128, 64, 8 if d >= 128 else 4, 3
    else:
        block_m, block_n, warps, stages = 16, 16, 4, 1     # the interpreter: several tiles, masked tails
    qk_scale = (1.0 / math.sqrt(d)) * 1.4426950408889634
    grid = (triton.cdiv(s, block_m), b * hq)
    _gqa_fwd[grid](q, k, v, o, s, hq, hq // hkv, qk_scale, HEAD_DIM=d, BLOCK_M=block_m, BLOCK_N=block_n,
                   num_warps=warps, num_stages=stages)
    return o
