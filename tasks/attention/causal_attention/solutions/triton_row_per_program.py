# Defect: no_tiling. One program per (query row i, batch*head): it walks the keys 0..i in BLOCK_N-key
# chunks, computing the chunk's scores as a broadcast multiply and tl.sum over D (no tl.dot), with an online
# softmax and a D-wide float32 accumulator. Correct and vectorised along D, but queries are not tiled:
# every K/V chunk is re-read (from L2 at best) by each of the S query rows that need it instead of once
# per 128-row tile, and none of the work reaches the tensor cores.
import math

import torch
import triton
import triton.language as tl


@triton.jit
def _causal_row(q_ptr, k_ptr, v_ptr, o_ptr, S, qk_scale, HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr):
    i = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    base = bh * S * HEAD_DIM
    offs_d = tl.arange(0, HEAD_DIM)
    offs_n = tl.arange(0, BLOCK_N)
    q = tl.load(q_ptr + base + i * HEAD_DIM + offs_d).to(tl.float32)
    m = -1.0e30
    l = 0.0
    acc = tl.zeros([HEAD_DIM], dtype=tl.float32)
    for start_n in range(0, i + 1, BLOCK_N):
        cols = start_n + offs_n
        ok = cols <= i
        kv_off = base + cols[:, None] * HEAD_DIM + offs_d[None, :]
        k = tl.load(k_ptr + kv_off, mask=ok[:, None], other=0.0).to(tl.float32)
        s = tl.sum(q[None, :] * k, 1) * qk_scale
        s = tl.where(ok, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 0))
        alpha = tl.exp2(m - m_new)
        p = tl.exp2(s - m_new)
        l = l * alpha + tl.sum(p, 0)
        v = tl.load(v_ptr + kv_off, mask=ok[:, None], other=0.0).to(tl.float32)
        acc = acc * alpha + tl.sum(p[:, None] * v, 0)
        m = m_new
    tl.store(o_ptr + base + i * HEAD_DIM + offs_d, (acc / l).to(o_ptr.dtype.element_ty))


def causal_attention(q, k, v):
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    b, h, s, d = q.shape
    o = torch.empty_like(q)
    qk_scale = (1.0 / math.sqrt(d)) * 1.4426950408889634
    _causal_row[(s, b * h)](q, k, v, o, s, qk_scale, HEAD_DIM=d, BLOCK_N=16 if q.is_cuda else 8, num_warps=4)
    return o
