# Batched GEMM for Hopper: one program per (BLOCK_M x BLOCK_N tile of C[b], batch b), the batch on grid
# axis 1 so that every batch's tiles are independent programs (thousands on the shapes here). Each program
# runs tl.dot (wgmma on sm_90) over K in BLOCK_K steps with a float32 accumulator and a 3-stage software
# pipeline; within a batch, programs are ordered in groups of GROUP_M tile-rows so that concurrent programs
# share A and B tiles in L2. Rows/columns past M or N are wrapped onto valid ones (never stored), so loads
# need a mask only along K. Fixed tiles (no autotuning): 128x128x64, 8 warps.
import torch
import triton
import triton.language as tl

BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M = 128, 128, 64, 8


@triton.jit
def _bmm_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_ab, stride_am, stride_bb, stride_bk, stride_cb, stride_cm,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    batch = tl.program_id(1).to(tl.int64)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    group_size = GROUP_M * num_pid_n
    first_m = (pid // group_size) * GROUP_M
    group_m = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group_size) % group_m
    pid_n = (pid % group_size) // group_m

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = (a_ptr + batch * stride_ab + (offs_m % M)[:, None].to(tl.int64) * stride_am + offs_k[None, :])
    b_ptrs = (b_ptr + batch * stride_bb + offs_k[:, None].to(tl.int64) * stride_bk + (offs_n % N)[None, :])

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K * stride_bk

    c_ptrs = c_ptr + batch * stride_cb + offs_m[:, None].to(tl.int64) * stride_cm + offs_n[None, :]
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def batched_matmul(a, b):
    assert a.shape[0] == b.shape[0] and a.shape[2] == b.shape[1], "batch or inner dimensions differ"
    a = a.contiguous()
    b = b.contiguous()
    batch, m, k = a.shape
    n = b.shape[2]
    c = torch.empty((batch, m, n), device=a.device, dtype=a.dtype)
    grid = (triton.cdiv(m, BLOCK_M) * triton.cdiv(n, BLOCK_N), batch)
    _bmm_kernel[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                      c.stride(1), BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M,
                      num_warps=8, num_stages=3)
    return c
