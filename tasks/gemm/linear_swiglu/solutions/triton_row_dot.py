# Defect: no_tiling. One program per (row of x, 64 outputs), written straight from the formula: for each
# 128-wide K chunk, load x[m, k0:k0+128] and the two [64, 128] weight blocks (gate and up), multiply with
# broadcasting and reduce with tl.sum. Correct, coalesced, float32 accumulation and an overflow-free SiLU, but nothing
# is tiled along M: every row re-reads the whole [2N, K] weight (M times in all, from L2 at best), and the
# math runs on the CUDA cores instead of the tensor cores.
import torch
import triton
import triton.language as tl


@triton.jit
def _swiglu_row(x_ptr, w_ptr, h_ptr, M, N, K, stride_xm, stride_wn, stride_hm,
                BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    row = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    nmask = offs_n < N
    acc_g = tl.zeros((BLOCK_N,), dtype=tl.float32)
    acc_u = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kmask = offs_k < K - k0
        xk = tl.load(x_ptr + row * stride_xm + k0 + offs_k, mask=kmask, other=0.0).to(tl.float32)
        wmask = nmask[:, None] & kmask[None, :]
        g_ptrs = w_ptr + offs_n[:, None].to(tl.int64) * stride_wn + k0 + offs_k[None, :]
        wg = tl.load(g_ptrs, mask=wmask, other=0.0).to(tl.float32)
        wu = tl.load(g_ptrs + N * stride_wn, mask=wmask, other=0.0).to(tl.float32)
        acc_g += tl.sum(wg * xk[None, :], axis=1)
        acc_u += tl.sum(wu * xk[None, :], axis=1)
    h = acc_g / (1.0 + tl.exp(-acc_g)) * acc_u
    tl.store(h_ptr + row * stride_hm + offs_n, h.to(h_ptr.dtype.element_ty), mask=nmask)


def linear_swiglu(x, weight):
    x = x.contiguous()
    weight = weight.contiguous()
    m, k = x.shape
    n = weight.shape[0] // 2
    h = torch.empty((m, n), device=x.device, dtype=x.dtype)
    _swiglu_row[(m, triton.cdiv(n, 64))](x, weight, h, m, n, k, x.stride(0), weight.stride(0), h.stride(0),
                                         BLOCK_N=64, BLOCK_K=128, num_warps=4)
    return h
