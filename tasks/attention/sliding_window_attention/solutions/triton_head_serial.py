# Defect: too_few_programs. The banded flash attention of triton_banded_flash.py (three loops per query
# tile: masked window edge, unmasked interior, masked diagonal; tl.dot, float32 accumulators, online
# softmax), but the grid has one program per (batch, head), and each program walks all of its head's
# S / BLOCK_M query tiles one after another. B*H programs (96-128 on the cuda shapes) leave SMs of the
# H200's 132 idle, and each busy SM runs its tiles strictly in sequence.
import math

import torch
import triton
import triton.language as tl

WINDOW = 128


@triton.jit
def _band_inner(acc, l_i, m_i, q, k_ptr, v_ptr, offs_m, offs_n, offs_d, lo, hi, S, qk_scale,
                WINDOW: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, MASKED: tl.constexpr):
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + offs_n
        kv_off = cols[:, None] * HEAD_DIM + offs_d[None, :]
        if MASKED:
            k = tl.load(k_ptr + kv_off, mask=cols[:, None] < S, other=0.0)
        else:
            k = tl.load(k_ptr + kv_off)
        qk = tl.dot(q, tl.trans(k)) * qk_scale
        if MASKED:
            ok = ((cols[None, :] <= offs_m[:, None]) & (cols[None, :] > offs_m[:, None] - WINDOW)
                  & (cols[None, :] < S))
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
def _swa_fwd(q_ptr, k_ptr, v_ptr, o_ptr, S, qk_scale, WINDOW: tl.constexpr,
             HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    bh = tl.program_id(0).to(tl.int64)
    base = bh * S * HEAD_DIM
    q_ptr += base
    k_ptr += base
    v_ptr += base
    o_ptr += base
    for start_m in range(0, tl.cdiv(S, BLOCK_M)):
        _swa_tile(q_ptr, k_ptr, v_ptr, o_ptr, start_m, S, qk_scale, WINDOW, HEAD_DIM, BLOCK_M, BLOCK_N)


@triton.jit
def _swa_tile(q_ptr, k_ptr, v_ptr, o_ptr, start_m, S, qk_scale, WINDOW: tl.constexpr,
              HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + offs_m[:, None] * HEAD_DIM + offs_d[None, :], mask=offs_m[:, None] < S, other=0.0)

    m_i = tl.full([BLOCK_M], -1.0e30, dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    m0 = start_m * BLOCK_M
    lo = tl.maximum(m0 - WINDOW + 1, 0) // BLOCK_N * BLOCK_N
    mid = (tl.maximum(m0 + BLOCK_M - WINDOW, 0) + BLOCK_N - 1) // BLOCK_N * BLOCK_N
    mid = tl.maximum(tl.minimum(mid, m0), lo)
    acc, l_i, m_i = _band_inner(acc, l_i, m_i, q, k_ptr, v_ptr, offs_m, offs_n, offs_d, lo, mid, S, qk_scale,
                                WINDOW, HEAD_DIM, BLOCK_N, True)
    acc, l_i, m_i = _band_inner(acc, l_i, m_i, q, k_ptr, v_ptr, offs_m, offs_n, offs_d, mid, m0, S, qk_scale,
                                WINDOW, HEAD_DIM, BLOCK_N, False)
    acc, l_i, m_i = _band_inner(acc, l_i, m_i, q, k_ptr, v_ptr, offs_m, offs_n, offs_d, m0,
                                tl.minimum(m0 + BLOCK_M, S), S, qk_scale, WINDOW, HEAD_DIM, BLOCK_N, True)
    acc = acc / l_i[:, None]
    tl.store(o_ptr + offs_m[:, None] * HEAD_DIM + offs_d[None, :], acc.to(o_ptr.dtype.element_ty),
             mask=offs_m[:, None] < S)


def sliding_window_attention(q, k, v):
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    b, h, s, d = q.shape
    o = torch.empty_like(q)
    if q.is_cuda:
        block_m, block_n, warps, stages = 64, 64, 4, 3
    else:
        block_m, block_n, warps, stages = 16, 16, 4, 1     # the interpreter: several tiles, all three loops
    qk_scale = (1.0 / math.sqrt(d)) * 1.4426950408889634
    grid = (b * h,)
    _swa_fwd[grid](q, k, v, o, s, qk_scale, WINDOW=WINDOW, HEAD_DIM=d, BLOCK_M=block_m, BLOCK_N=block_n,
                   num_warps=warps, num_stages=stages)
    return o
