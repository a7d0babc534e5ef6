# Flash-attention backward (FlashAttention-2's split). Kernel 1, per query block: an online-softmax forward
# over all key blocks gives the row logsumexp (lse) and O, from which delta = rowsum(dO * O); both float32,
# [B*H, S]. Kernel 2, per key block: K and V stay in registers while the kernel walks every query block,
# recomputes P = exp(Q K^T * scale - lse) and accumulates dV += P^T dO and dK += dS^T Q with
# dS = P * (dO V^T - delta): no atomics, each program owns its dK/dV rows. Kernel 3, per query block:
# dQ += dS K over every key block. The products are tl.dot (tensor cores on a GPU) with P and dS rounded to
# the input dtype, float32 accumulators. Padding rows and keys (S not a multiple of the blocks) get P = 0.
import math

import torch
import triton
import triton.language as tl


@triton.jit
def _fwd_stats(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, S, scale,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr):
    bh = tl.program_id(1).to(tl.int64)
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.arange(0, BLOCK_N)
    rd = tl.arange(0, D)
    base = bh * S * D
    row_ok = rm < S
    q = tl.load(q_ptr + base + rm[:, None] * D + rd[None, :], mask=row_ok[:, None], other=0.0)
    m = tl.full([BLOCK_M], -1.0e30, tl.float32)
    l = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, D], dtype=tl.float32)
    for n0 in range(0, S, BLOCK_N):
        cols = n0 + rn
        col_ok = cols < S
        k = tl.load(k_ptr + base + cols[:, None] * D + rd[None, :], mask=col_ok[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k)) * scale
        s = tl.where(col_ok[None, :], s, -1.0e30)
        m_new = tl.maximum(m, tl.max(s, 1))
        alpha = tl.exp(m - m_new)
        p = tl.exp(s - m_new[:, None])
        p = tl.where(col_ok[None, :], p, 0.0)
        l = l * alpha + tl.sum(p, 1)
        v = tl.load(v_ptr + base + cols[:, None] * D + rd[None, :], mask=col_ok[:, None], other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m = m_new
    o = acc / l[:, None]
    do = tl.load(do_ptr + base + rm[:, None] * D + rd[None, :], mask=row_ok[:, None], other=0.0).to(tl.float32)
    tl.store(lse_ptr + bh * S + rm, m + tl.log(l), mask=row_ok)
    tl.store(delta_ptr + bh * S + rm, tl.sum(do * o, 1), mask=row_ok)


@triton.jit
def _dkdv(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, out_ptr, S, scale, part,
          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr):
    bh = tl.program_id(1).to(tl.int64)
    rn = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    rm = tl.arange(0, BLOCK_M)
    rd = tl.arange(0, D)
    base = bh * S * D
    col_ok = rn < S
    k = tl.load(k_ptr + base + rn[:, None] * D + rd[None, :], mask=col_ok[:, None], other=0.0)
    v = tl.load(v_ptr + base + rn[:, None] * D + rd[None, :], mask=col_ok[:, None], other=0.0)
    dk = tl.zeros([BLOCK_N, D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, D], dtype=tl.float32)
    for m0 in range(0, S, BLOCK_M):
        rows = m0 + rm
        row_ok = rows < S
        q = tl.load(q_ptr + base + rows[:, None] * D + rd[None, :], mask=row_ok[:, None], other=0.0)
        do = tl.load(do_ptr + base + rows[:, None] * D + rd[None, :], mask=row_ok[:, None], other=0.0)
        lse = tl.load(lse_ptr + bh * S + rows, mask=row_ok, other=0.0)
        delta = tl.load(delta_ptr + bh * S + rows, mask=row_ok, other=0.0)
        s = tl.dot(q, tl.trans(k)) * scale
        p = tl.exp(s - lse[:, None])
        p = tl.where(row_ok[:, None] & col_ok[None, :], p, 0.0)
        dv += tl.dot(tl.trans(p.to(do.dtype)), do)
        dp = tl.dot(do, tl.trans(v))
        ds = p * (dp - delta[:, None])
        dk += tl.dot(tl.trans(ds.to(q.dtype)), q)
    off = rn[:, None] * D + rd[None, :]
    tl.store(out_ptr + part + base + off, (dk * scale).to(out_ptr.dtype.element_ty), mask=col_ok[:, None])
    tl.store(out_ptr + 2 * part + base + off, dv.to(out_ptr.dtype.element_ty), mask=col_ok[:, None])


@triton.jit
def _dq(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, out_ptr, S, scale,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr):
    bh = tl.program_id(1).to(tl.int64)
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.arange(0, BLOCK_N)
    rd = tl.arange(0, D)
    base = bh * S * D
    row_ok = rm < S
    q = tl.load(q_ptr + base + rm[:, None] * D + rd[None, :], mask=row_ok[:, None], other=0.0)
    do = tl.load(do_ptr + base + rm[:, None] * D + rd[None, :], mask=row_ok[:, None], other=0.0)
    lse = tl.load(lse_ptr + bh * S + rm, mask=row_ok, other=0.0)
    delta = tl.load(delta_ptr + bh * S + rm, mask=row_ok, other=0.0)
    dq = tl.zeros([BLOCK_M, D], dtype=tl.float32)
    for n0 in range(0, S, BLOCK_N):
        cols = n0 + rn
        col_ok = cols < S
        k = tl.load(k_ptr + base + cols[:, None] * D + rd[None, :], mask=col_ok[:, None], other=0.0)
        v = tl.load(v_ptr + base + cols[:, None] * D + rd[None, :], mask=col_ok[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k)) * scale
        p = tl.exp(s - lse[:, None])
        p = tl.where(row_ok[:, None] & col_ok[None, :], p, 0.0)
        dp = tl.dot(do, tl.trans(v))
        ds = p * (dp - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k)
    tl.store(out_ptr + base + rm[:, None] * D + rd[None, :], (dq * scale).to(out_ptr.dtype.element_ty),
             mask=row_ok[:, None])


def attention_backward(q, k, v, do):
    q, k, v, do = q.contiguous(), k.contiguous(), v.contiguous(), do.contiguous()
    b, h, s, d = q.shape
    bh = b * h
    out = torch.empty((3, b, h, s, d), device=q.device, dtype=q.dtype)
    lse = torch.empty((bh, s), device=q.device, dtype=torch.float32)
    delta = torch.empty((bh, s), device=q.device, dtype=torch.float32)
    scale = 1.0 / math.sqrt(d)
    if q.is_cuda:
        bm, bn, warps, stages = (64, 64, 4, 2) if d > 64 else (128, 64, 8, 2)
    else:
        bm, bn, warps, stages = 16, 16, 4, 1
    _fwd_stats[(triton.cdiv(s, bm), bh)](q, k, v, do, lse, delta, s, scale, BLOCK_M=bm, BLOCK_N=bn, D=d,
                                         num_warps=warps, num_stages=stages)
    _dkdv[(triton.cdiv(s, bn), bh)](q, k, v, do, lse, delta, out, s, scale, bh * s * d, BLOCK_M=bm,
                                    BLOCK_N=bn, D=d, num_warps=warps, num_stages=stages)
    _dq[(triton.cdiv(s, bm), bh)](q, k, v, do, lse, delta, out, s, scale, BLOCK_M=bm, BLOCK_N=bn, D=d,
                                  num_warps=warps, num_stages=stages)
    return out
