# Idiomatic-looking but slow (defect: scalar_loop): one program per (b, h) walks its sequence one key at a
# time, and each score is itself a scalar loop over the head dimension that re-reads q[d] and k[d] from
# memory at every step (nothing cached in registers); then a scalar online-softmax update and a D-wide axpy
# with the value. Launched with Triton's default 4 warps, every one of which redoes each scalar step.
#
# How slow, by an estimate calibrated on the H100 (2026-12-06, results/h100_2026-12-06_owed_tests/call4):
# the previous version (a vector tl.sum dot, num_warps=1) measured 2.30 ms at [32, 32, 4096, 128, 16] fp16
# (torch eager 1.98 ms, E 0.86): ~0.56 us per key of the longest sequence, a chain of dependent loads. The
# scalar dot adds D dependent steps per key, each at least an L1-hit load (~20 ns; the MoE/RMSNorm scalar
# loops measured 37-40 ns a step at full occupancy). Per key >= 0.56 + D x 0.02 us; with 4 warps an SM holds
# 16 programs (2112 at once). [32, 32, 4096, 128, 16]: 1024 programs, 4096 keys x 3.1 us >= 13 ms (torch
# 1.98: E <= 0.15). [128, 32, 1024, 128, 16]: 4096 programs fill every SM (64 warps each), so a step is
# bound by issue as well: >= 6 instructions x 64 warps / 4 per cycle ~ 50 ns; 4096 x 640 keys (the mean
# length, 5/8 of L) x (0.56 + 128 x 0.05) us / 2112 slots >= 8.7 ms (torch 1.99: E <= 0.23).
# [4, 40, 30000, 128, 16]: 160 programs, 30000 x 3.1 us ~ 95 ms
# (torch 2.40: E ~0.03, below the 200x too_slow bound). [48, 32, 3001, 64, 32]: 1536 programs, 3001 x
# (0.56 + 1.3) us >= 5.6 ms (torch 1.11: E <= 0.2). The optimized split-KV solution runs 0.36-0.93 ms.
import math

import torch
import triton
import triton.language as tl


@triton.jit
def _paged_scalar(q_ptr, k_ptr, v_ptr, bt_ptr, len_ptr, o_ptr, H, MAXP, D, qk_scale,
                  PAGE: tl.constexpr, HEAD_DIM: tl.constexpr):
    bh = tl.program_id(0)
    b = bh // H
    h = bh % H
    offs_d = tl.arange(0, HEAD_DIM)
    q_base = bh.to(tl.int64) * HEAD_DIM
    seq_len = tl.load(len_ptr + b)
    m = -1.0e30
    l = 0.0
    acc = tl.zeros([HEAD_DIM], dtype=tl.float32)
    for j in range(0, seq_len):
        page = tl.load(bt_ptr + b.to(tl.int64) * MAXP + j // PAGE).to(tl.int64)
        row = ((page * PAGE + j % PAGE) * H + h) * HEAD_DIM
        s = 0.0
        for i in range(0, D):
            s += tl.load(q_ptr + q_base + i).to(tl.float32) * tl.load(k_ptr + row + i).to(tl.float32)
        s = s * qk_scale
        m_new = tl.maximum(m, s)
        alpha = tl.exp2(m - m_new)
        p = tl.exp2(s - m_new)
        l = l * alpha + p
        acc = acc * alpha + p * tl.load(v_ptr + row + offs_d).to(tl.float32)
        m = m_new
    tl.store(o_ptr + q_base + offs_d, (acc / l).to(o_ptr.dtype.element_ty))


def paged_decode_attention(q, k_cache, v_cache, block_table, seq_lens):
    q, k_cache, v_cache = q.contiguous(), k_cache.contiguous(), v_cache.contiguous()
    b, h, d = q.shape
    o = torch.empty((b, h, d), device=q.device, dtype=q.dtype)
    qk_scale = (1.0 / math.sqrt(d)) * 1.4426950408889634
    _paged_scalar[(b * h,)](q, k_cache, v_cache, block_table.contiguous(), seq_lens.contiguous(), o, h,
                            block_table.shape[1], d, qk_scale, PAGE=k_cache.shape[1], HEAD_DIM=d)
    return o
