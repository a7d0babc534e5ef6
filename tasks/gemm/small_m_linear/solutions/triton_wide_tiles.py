# Defect: too_few_programs. A textbook tiled GEMM (tl.dot, float32 accumulator, whole K per program) with
# the 64 x 128 tiles that suit large M. For a few tokens there is a single tile row, so the grid is just
# N / 128 programs: 32 for N = 4096 (the down projection) and 112 for N = 14336, on 132 SMs. Each program
# streams a 128-row weight panel (1-3.5 MB) alone, and most SMs idle or run one program with too few loads
# in flight to approach HBM bandwidth.
import torch
import triton
import triton.language as tl


@triton.jit
def _wide_kernel(x_ptr, w_ptr, y_ptr, M, N, K, stride_xm, stride_wn,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(1)
    pid_n = tl.program_id(0)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    x_ptrs = x_ptr + offs_m[:, None].to(tl.int64) * stride_xm + offs_k[None, :]
    w_ptrs = w_ptr + offs_n[None, :].to(tl.int64) * stride_wn + offs_k[:, None]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a = tl.load(x_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < K - k0), other=0.0)
        b = tl.load(w_ptrs, mask=(offs_n[None, :] < N) & (offs_k[:, None] < K - k0), other=0.0)
        acc = tl.dot(a, b, acc)
        x_ptrs += BLOCK_K
        w_ptrs += BLOCK_K
    y_ptrs = y_ptr + offs_m[:, None] * N + offs_n[None, :]
    tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def small_m_linear(x, weight):
    x = x.contiguous()
    weight = weight.contiguous()
    m, k = x.shape
    n = weight.shape[0]
    y = torch.empty((m, n), device=x.device, dtype=x.dtype)
    grid = (triton.cdiv(n, 128), triton.cdiv(m, 64))
    _wide_kernel[grid](x, weight, y, m, n, k, x.stride(0), weight.stride(0), BLOCK_M=64, BLOCK_N=128,
                       BLOCK_K=64, num_warps=4, num_stages=3)
    return y
