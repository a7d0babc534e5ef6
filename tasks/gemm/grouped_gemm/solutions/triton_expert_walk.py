# Defect: too_few_programs. Correct 128x128x64 tl.dot tiles with a float32 accumulator and device-side
# offsets, but the grid has one program per 128-column tile of y, and each program walks every expert and
# every 128-row block of that expert in sequence ("loop over the experts like the PyTorch reference
# does"). N = 768 (Qwen3-MoE) launches 6 programs, N = 4096 launches 32 and N = 14336 launches 112, on
# 132 SMs: the GPU idles while each program grinds through T / 128 tiles alone.
import torch
import triton
import triton.language as tl


@triton.jit
def _expert_walk(x_ptr, w_ptr, y_ptr, offs_ptr, G, N, K, stride_xm, stride_wg, stride_wn, stride_ym,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_n = tl.program_id(0)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    start = 0
    for g in range(0, G):
        end = tl.load(offs_ptr + g)
        for m0 in range(start, end, BLOCK_M):
            offs_m = m0 + tl.arange(0, BLOCK_M)
            x_ptrs = x_ptr + offs_m[:, None].to(tl.int64) * stride_xm + offs_k[None, :]
            w_ptrs = (w_ptr + g * stride_wg + offs_n[None, :].to(tl.int64) * stride_wn + offs_k[:, None])
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for k0 in range(0, K, BLOCK_K):
                a = tl.load(x_ptrs, mask=(offs_m[:, None] < end) & (offs_k[None, :] < K - k0), other=0.0)
                b = tl.load(w_ptrs, mask=(offs_n[None, :] < N) & (offs_k[:, None] < K - k0), other=0.0)
                acc = tl.dot(a, b, acc)
                x_ptrs += BLOCK_K
                w_ptrs += BLOCK_K
            y_ptrs = y_ptr + offs_m[:, None].to(tl.int64) * stride_ym + offs_n[None, :]
            tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=(offs_m[:, None] < end) & (offs_n[None, :] < N))
        start = end


def grouped_gemm(x, weight, offsets):
    x = x.contiguous()
    weight = weight.contiguous()
    t, k = x.shape
    g, n, _ = weight.shape
    y = torch.empty((t, n), device=x.device, dtype=x.dtype)
    _expert_walk[(triton.cdiv(n, 128),)](x, weight, y, offsets, g, n, k, x.stride(0), weight.stride(0),
                                         weight.stride(1), y.stride(0), BLOCK_M=128, BLOCK_N=128, BLOCK_K=64,
                                         num_warps=8, num_stages=3)
    return y
