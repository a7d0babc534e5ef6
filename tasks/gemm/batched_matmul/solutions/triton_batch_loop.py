# Defect: too_few_programs. Correct 128x128x64 tl.dot tiles with a float32 accumulator, but the grid covers
# the tiles of ONE matrix and each program loops over the batch in sequence ("the batch is just an outer
# loop"). P @ V with 64 x [2048 x 2048] @ [2048 x 128] launches 16 programs on 132 SMs, each doing 64
# tiles one after another; the MLA shape (128 x 4096 x 512) launches 128, each running 128 batches.
import torch
import triton
import triton.language as tl


@triton.jit
def _bmm_batch_loop(a_ptr, b_ptr, c_ptr, BATCH, M, N, K, stride_ab, stride_am, stride_bb, stride_bk, stride_cb,
                    stride_cm, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid = tl.program_id(0)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pid_m = pid // num_pid_n
    pid_n = pid % num_pid_n
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    for bt in range(0, BATCH):
        a_ptrs = a_ptr + bt * stride_ab + offs_m[:, None].to(tl.int64) * stride_am + offs_k[None, :]
        b_ptrs = b_ptr + bt * stride_bb + offs_k[:, None].to(tl.int64) * stride_bk + offs_n[None, :]
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < K - k0), other=0.0)
            b = tl.load(b_ptrs, mask=(offs_k[:, None] < K - k0) & (offs_n[None, :] < N), other=0.0)
            acc = tl.dot(a, b, acc)
            a_ptrs += BLOCK_K
            b_ptrs += BLOCK_K * stride_bk
        c_ptrs = c_ptr + bt * stride_cb + offs_m[:, None].to(tl.int64) * stride_cm + offs_n[None, :]
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def batched_matmul(a, b):
    a = a.contiguous()
    b = b.contiguous()
    batch, m, k = a.shape
    n = b.shape[2]
    c = torch.empty((batch, m, n), device=a.device, dtype=a.dtype)
    grid = (triton.cdiv(m, 128) * triton.cdiv(n, 128),)
    _bmm_batch_loop[grid](a, b, c, batch, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                          c.stride(0), c.stride(1), BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=8,
                          num_stages=3)
    return c
