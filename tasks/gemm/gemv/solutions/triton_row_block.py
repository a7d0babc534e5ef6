# Memory-bound GEMV. Each program owns BLOCK_N rows of the weight and sweeps K in BLOCK_K steps: every
# step loads a [BLOCK_N, BLOCK_K] tile whose rows are K-contiguous (16-byte vector loads, fully coalesced)
# and the matching x chunk (re-read by every program, served from L2), and accumulates the products
# elementwise into a 2-D float32 accumulator; the cross-lane reduction (tl.sum) runs once, after the loop.
# Small row blocks give thousands of programs (>= 4 per SM on the shapes here) so that enough loads are in
# flight to saturate HBM. Rows past N are wrapped onto valid ones and never stored; when K is a multiple of
# BLOCK_K the loads carry no mask at all.
import torch
import triton
import triton.language as tl


@triton.jit
def _gemv_kernel(w_ptr, x_ptr, y_ptr, N, K, stride_wn, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                 EVEN_K: tl.constexpr):
    pid = tl.program_id(0)
    offs_n = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    rows = offs_n % N
    offs_k = tl.arange(0, BLOCK_K)
    w_ptrs = w_ptr + rows[:, None].to(tl.int64) * stride_wn + offs_k[None, :]
    x_ptrs = x_ptr + offs_k
    acc = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        if EVEN_K:
            w = tl.load(w_ptrs, eviction_policy="evict_first")
            x = tl.load(x_ptrs)
        else:
            kmask = offs_k < K - k0
            w = tl.load(w_ptrs, mask=kmask[None, :], other=0.0, eviction_policy="evict_first")
            x = tl.load(x_ptrs, mask=kmask, other=0.0)
        acc += w.to(tl.float32) * x.to(tl.float32)[None, :]
        w_ptrs += BLOCK_K
        x_ptrs += BLOCK_K
    y = tl.sum(acc, axis=1)
    tl.store(y_ptr + offs_n, y.to(y_ptr.dtype.element_ty), mask=offs_n < N)


def gemv(weight, x):
    assert weight.shape[1] == x.shape[0], "weight and x disagree on K"
    weight = weight if weight.stride(1) == 1 else weight.contiguous()
    x = x.contiguous()
    n, k = weight.shape
    y = torch.empty((n,), device=weight.device, dtype=weight.dtype)
    block_n = 8
    block_k = 512 if weight.dtype == torch.float32 else 1024     # 16 KB of weight per step either way
    _gemv_kernel[(triton.cdiv(n, block_n),)](weight, x, y, n, k, weight.stride(0), BLOCK_N=block_n,
                                             BLOCK_K=block_k, EVEN_K=(k % block_k == 0), num_warps=4)
    return y
