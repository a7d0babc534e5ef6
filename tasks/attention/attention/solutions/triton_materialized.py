# Defect: no_tiling. The textbook three-step attention, each step a reasonable Triton kernel: (1) a tiled
# tl.dot computes the full score matrix S = Q K^T * scale and writes it to memory as float32 [B, H, S, S];
# (2) one program per score row reads it back, applies a max-subtracted softmax and writes P over it;
# (3) a tiled tl.dot computes O = P V, reading P from memory again. Correct, but the key dimension is never
# tiled into a fused loop: the S x S matrix goes through HBM three times (write, read+write, read): 12 bytes
# per score against the flash kernel's none, and 4*B*H*S^2 bytes of extra memory (8 GiB at B=8, H=16,
# S=4096), so it is memory-bound where flash attention is compute-bound.
import math

import torch
import triton
import triton.language as tl


@triton.jit
def _scores(q_ptr, k_ptr, s_ptr, S, scale, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    bh = tl.program_id(2).to(tl.int64)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + bh * S * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :],
                mask=offs_m[:, None] < S, other=0.0)
    k = tl.load(k_ptr + bh * S * HEAD_DIM + offs_n[:, None] * HEAD_DIM + offs_d[None, :],
                mask=offs_n[:, None] < S, other=0.0)
    sc = tl.dot(q, tl.trans(k)) * scale
    tl.store(s_ptr + bh * S * S + offs_m[:, None] * S + offs_n[None, :], sc,
             mask=(offs_m[:, None] < S) & (offs_n[None, :] < S))


@triton.jit
def _softmax_rows(s_ptr, S, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    x = tl.load(s_ptr + row * S + offs, mask=offs < S, other=float("-inf"))
    e = tl.exp(x - tl.max(x, 0))
    tl.store(s_ptr + row * S + offs, e / tl.sum(e, 0), mask=offs < S)


@triton.jit
def _pv(p_ptr, v_ptr, o_ptr, S, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid_m = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    for start_n in range(0, S, BLOCK_N):
        cols = start_n + offs_n
        p = tl.load(p_ptr + bh * S * S + offs_m[:, None] * S + cols[None, :],
                    mask=(offs_m[:, None] < S) & (cols[None, :] < S), other=0.0)
        v = tl.load(v_ptr + bh * S * HEAD_DIM + cols[:, None] * HEAD_DIM + offs_d[None, :],
                    mask=cols[:, None] < S, other=0.0)
        acc = tl.dot(p.to(v.dtype), v, acc)
    tl.store(o_ptr + bh * S * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :],
             acc.to(o_ptr.dtype.element_ty), mask=offs_m[:, None] < S)


def attention(q, k, v):
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    b, h, s, d = q.shape
    scores = torch.empty((b, h, s, s), device=q.device, dtype=torch.float32)
    o = torch.empty_like(q)
    bm, bn = (64, 64) if q.is_cuda else (16, 16)
    _scores[(triton.cdiv(s, bm), triton.cdiv(s, bn), b * h)](q, k, scores, s, 1.0 / math.sqrt(d), HEAD_DIM=d,
                                                            BLOCK_M=bm, BLOCK_N=bn, num_warps=4)
    _softmax_rows[(b * h * s,)](scores, s, BLOCK=triton.next_power_of_2(s), num_warps=8 if s >= 4096 else 4)
    _pv[(triton.cdiv(s, bm), b * h)](scores, v, o, s, HEAD_DIM=d, BLOCK_M=bm, BLOCK_N=bn, num_warps=4)
    return o
