# Idiomatic-looking but slow (defect: too_few_programs): one program per (b, h) walks the S query rows one
# at a time. For row i: a pass over the key tiles gives the logsumexp and O_i (delta_i = dO_i . O_i); a
# second pass recomputes p, accumulates dQ_i and read-modify-writes this head's float32 dK and dV
# accumulators (only this program touches them, so no atomics). Vector products (broadcast multiply +
# tl.sum), no tensor cores; B * H programs (8 on a long sequence, against 132 SMs) each running S^2 / BLOCK
# dependent steps.
import math

import torch
import triton
import triton.language as tl


@triton.jit
def _head_serial(q_ptr, k_ptr, v_ptr, do_ptr, out_ptr, dk_ws, dv_ws, S, scale, part,
                 BLOCK_N: tl.constexpr, D: tl.constexpr):
    bh = tl.program_id(0).to(tl.int64)
    base = bh * S * D
    rn = tl.arange(0, BLOCK_N)
    rd = tl.arange(0, D)
    for i in range(0, S):
        q = tl.load(q_ptr + base + i * D + rd).to(tl.float32)
        do = tl.load(do_ptr + base + i * D + rd).to(tl.float32)
        m = -1.0e30
        l = 0.0
        o = tl.zeros([D], dtype=tl.float32)
        for n0 in range(0, S, BLOCK_N):
            cols = n0 + rn
            ok = cols < S
            k = tl.load(k_ptr + base + cols[:, None] * D + rd[None, :], mask=ok[:, None], other=0.0).to(tl.float32)
            s = tl.where(ok, tl.sum(q[None, :] * k, 1) * scale, -1.0e30)
            m_new = tl.maximum(m, tl.max(s, 0))
            alpha = tl.exp(m - m_new)
            p = tl.where(ok, tl.exp(s - m_new), 0.0)
            l = l * alpha + tl.sum(p, 0)
            v = tl.load(v_ptr + base + cols[:, None] * D + rd[None, :], mask=ok[:, None], other=0.0).to(tl.float32)
            o = o * alpha + tl.sum(p[:, None] * v, 0)
            m = m_new
        lse = m + tl.log(l)
        delta = tl.sum(do * o / l, 0)
        dq = tl.zeros([D], dtype=tl.float32)
        for n0 in range(0, S, BLOCK_N):
            cols = n0 + rn
            ok = cols < S
            off = base + cols[:, None] * D + rd[None, :]
            k = tl.load(k_ptr + off, mask=ok[:, None], other=0.0).to(tl.float32)
            v = tl.load(v_ptr + off, mask=ok[:, None], other=0.0).to(tl.float32)
            p = tl.where(ok, tl.exp(tl.sum(q[None, :] * k, 1) * scale - lse), 0.0)
            ds = p * (tl.sum(do[None, :] * v, 1) - delta)
            dq += tl.sum(ds[:, None] * k, 0)
            dk = tl.load(dk_ws + off, mask=ok[:, None], other=0.0)
            tl.store(dk_ws + off, dk + ds[:, None] * q[None, :], mask=ok[:, None])
            dv = tl.load(dv_ws + off, mask=ok[:, None], other=0.0)
            tl.store(dv_ws + off, dv + p[:, None] * do[None, :], mask=ok[:, None])
            tl.debug_barrier()
        tl.store(out_ptr + base + i * D + rd, (dq * scale).to(out_ptr.dtype.element_ty))
    for n0 in range(0, S, BLOCK_N):
        cols = n0 + rn
        ok = cols < S
        off = base + cols[:, None] * D + rd[None, :]
        dk = tl.load(dk_ws + off, mask=ok[:, None], other=0.0)
        dv = tl.load(dv_ws + off, mask=ok[:, None], other=0.0)
        tl.store(out_ptr + part + off, (dk * scale).to(out_ptr.dtype.element_ty), mask=ok[:, None])
        tl.store(out_ptr + 2 * part + off, dv.to(out_ptr.dtype.element_ty), mask=ok[:, None])


def attention_backward(q, k, v, do):
    q, k, v, do = q.contiguous(), k.contiguous(), v.contiguous(), do.contiguous()
    b, h, s, d = q.shape
    out = torch.empty((3, b, h, s, d), device=q.device, dtype=q.dtype)
    dk_ws = torch.zeros((b, h, s, d), device=q.device, dtype=torch.float32)
    dv_ws = torch.zeros((b, h, s, d), device=q.device, dtype=torch.float32)
    block_n = 32
    _head_serial[(b * h,)](q, k, v, do, out, dk_ws, dv_ws, s, 1.0 / math.sqrt(d), b * h * s * d,
                           BLOCK_N=block_n, D=d, num_warps=4)
    return out
