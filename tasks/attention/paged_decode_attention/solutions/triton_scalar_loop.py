# Idiomatic-looking but slow (defect: scalar_loop): one program per (b, h) walks its sequence one key at a
# time: a scalar block-table load, a D-wide key load, tl.sum for the score, a scalar online-softmax update
# and a D-wide axpy with the value. A long dependent chain of tiny loads, and only B*H programs (160 for
# the long-context shape), far from the bandwidth this operator lives on.
import math

import torch
import triton
import triton.language as tl


@triton.jit
def _paged_scalar(q_ptr, k_ptr, v_ptr, bt_ptr, len_ptr, o_ptr, H, MAXP, qk_scale,
                  PAGE: tl.constexpr, HEAD_DIM: tl.constexpr):
    bh = tl.program_id(0)
    b = bh // H
    h = bh % H
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + bh.to(tl.int64) * HEAD_DIM + offs_d).to(tl.float32)
    seq_len = tl.load(len_ptr + b)
    m = -1.0e30
    l = 0.0
    acc = tl.zeros([HEAD_DIM], dtype=tl.float32)
    for j in range(0, seq_len):
        page = tl.load(bt_ptr + b.to(tl.int64) * MAXP + j // PAGE).to(tl.int64)
        off = ((page * PAGE + j % PAGE) * H + h) * HEAD_DIM + offs_d
        s = tl.sum(q * tl.load(k_ptr + off).to(tl.float32), 0) * qk_scale
        m_new = tl.maximum(m, s)
        alpha = tl.exp2(m - m_new)
        p = tl.exp2(s - m_new)
        l = l * alpha + p
        acc = acc * alpha + p * tl.load(v_ptr + off).to(tl.float32)
        m = m_new
    tl.store(o_ptr + bh.to(tl.int64) * HEAD_DIM + offs_d, (acc / l).to(o_ptr.dtype.element_ty))


def paged_decode_attention(q, k_cache, v_cache, block_table, seq_lens):
    q, k_cache, v_cache = q.contiguous(), k_cache.contiguous(), v_cache.contiguous()
    b, h, d = q.shape
    o = torch.empty((b, h, d), device=q.device, dtype=q.dtype)
    qk_scale = (1.0 / math.sqrt(d)) * 1.4426950408889634
    _paged_scalar[(b * h,)](q, k_cache, v_cache, block_table.contiguous(), seq_lens.contiguous(), o, h,
                            block_table.shape[1], qk_scale, PAGE=k_cache.shape[1], HEAD_DIM=d, num_warps=1)
    return o
