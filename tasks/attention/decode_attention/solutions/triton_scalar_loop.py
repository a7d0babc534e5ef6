# Defect: scalar_loop. One program per (batch, head) walks the L cached keys one at a time: a D-wide load of
# k[j], tl.sum for the score, a scalar online-softmax update (running max and sum) and a D-wide axpy with
# v[j]. Correct, but each key is a short dependent chain of tiny loads and reductions, so a program moves a
# few hundred bytes per iteration at memory latency, and only B*H programs exist (32 at one long sequence,
# on 132 SMs). Far from the bandwidth roofline this operator lives on.
import math

import torch
import triton
import triton.language as tl


@triton.jit
def _decode_scalar(q_ptr, k_ptr, v_ptr, o_ptr, L, qk_scale, HEAD_DIM: tl.constexpr):
    bh = tl.program_id(0).to(tl.int64)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + bh * HEAD_DIM + offs_d).to(tl.float32)
    base = bh * L * HEAD_DIM
    m = -1.0e30
    l = 0.0
    acc = tl.zeros([HEAD_DIM], dtype=tl.float32)
    for j in range(0, L):
        kj = tl.load(k_ptr + base + j * HEAD_DIM + offs_d).to(tl.float32)
        s = tl.sum(q * kj, 0) * qk_scale
        m_new = tl.maximum(m, s)
        alpha = tl.exp2(m - m_new)
        p = tl.exp2(s - m_new)
        l = l * alpha + p
        vj = tl.load(v_ptr + base + j * HEAD_DIM + offs_d).to(tl.float32)
        acc = acc * alpha + p * vj
        m = m_new
    tl.store(o_ptr + bh * HEAD_DIM + offs_d, (acc / l).to(o_ptr.dtype.element_ty))


def decode_attention(q, k, v):
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    b, h, l, d = k.shape
    o = torch.empty((b, h, d), device=q.device, dtype=q.dtype)
    qk_scale = (1.0 / math.sqrt(d)) * 1.4426950408889634
    _decode_scalar[(b * h,)](q, k, v, o, l, qk_scale, HEAD_DIM=d, num_warps=1)
    return o
