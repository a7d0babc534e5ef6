# Defect: uncoalesced_access. One program per 64 rows, walking K one column at a time: step k loads
# weight[n0:n0+64, k], 64 elements that lie K apart in memory. Every element lands in its own 32-byte
# sector, so each 2-byte weight value costs a 32-byte DRAM transaction (16x the weight's bytes for
# float16, unless L2 happens to keep the sectors until the next columns need them), and each program runs
# K dependent iterations. It is correct and reads like the textbook formula y[n] = sum_k w[n, k] x[k].
import torch
import triton
import triton.language as tl


@triton.jit
def _gemv_columns(w_ptr, x_ptr, y_ptr, N, K, stride_wn, BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)
    offs_n = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    nmask = offs_n < N
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for k in range(0, K):
        w = tl.load(w_ptr + offs_n.to(tl.int64) * stride_wn + k, mask=nmask, other=0.0)
        xk = tl.load(x_ptr + k)
        acc += w.to(tl.float32) * xk.to(tl.float32)
    tl.store(y_ptr + offs_n, acc.to(y_ptr.dtype.element_ty), mask=nmask)


def gemv(weight, x):
    weight = weight.contiguous()
    x = x.contiguous()
    n, k = weight.shape
    y = torch.empty((n,), device=weight.device, dtype=weight.dtype)
    _gemv_columns[(triton.cdiv(n, 64),)](weight, x, y, n, k, weight.stride(0), BLOCK_N=64, num_warps=2)
    return y
