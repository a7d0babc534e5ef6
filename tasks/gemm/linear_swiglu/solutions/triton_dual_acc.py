# Fused gate/up projection + SwiGLU for Hopper. Each program owns one BLOCK_M x BLOCK_N tile of h and keeps
# two float32 accumulators: gate (weight rows n) and up (weight rows N + n of the merged [2N, K] weight),
# both fed from the same x tile per K step, so x is read once for both products. tl.dot runs as wgmma on
# sm_90 with the K-contiguous weight tiles as the B operand; a 3-stage software pipeline overlaps the loads
# with the math. The epilogue computes silu(gate) * up in registers with gate / (1 + exp(-gate)) (exp of
# a large positive argument gives inf and gate / inf = 0, the right limit; never inf / inf) and stores h
# once: the [M, 2N] intermediate of the unfused version never exists. Programs are ordered in groups of
# GROUP_M tile-rows for L2 reuse; rows/columns past M or N are wrapped onto valid ones and never stored.
import torch
import triton
import triton.language as tl

BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M = 128, 128, 64, 8


@triton.jit
def _swiglu_kernel(x_ptr, w_ptr, h_ptr, M, N, K, stride_xm, stride_wn, stride_hm,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
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
    rows_w = (offs_n % N).to(tl.int64)
    x_ptrs = x_ptr + (offs_m % M)[:, None].to(tl.int64) * stride_xm + offs_k[None, :]
    # B operands are W_gate^T and W_up^T: element (k, n) at w_ptr + n * stride_wn + k (+ N rows for up)
    g_ptrs = w_ptr + rows_w[None, :] * stride_wn + offs_k[:, None]
    u_ptrs = w_ptr + (rows_w + N)[None, :] * stride_wn + offs_k[:, None]

    acc_g = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_u = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(x_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        bg = tl.load(g_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        bu = tl.load(u_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        acc_g = tl.dot(a, bg, acc_g)
        acc_u = tl.dot(a, bu, acc_u)
        x_ptrs += BLOCK_K
        g_ptrs += BLOCK_K
        u_ptrs += BLOCK_K

    h = acc_g / (1.0 + tl.exp(-acc_g)) * acc_u
    h_ptrs = h_ptr + offs_m[:, None].to(tl.int64) * stride_hm + offs_n[None, :]
    tl.store(h_ptrs, h.to(h_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def linear_swiglu(x, weight):
    assert x.shape[1] == weight.shape[1] and weight.shape[0] % 2 == 0, "x and weight disagree"
    x = x.contiguous()
    weight = weight.contiguous()
    m, k = x.shape
    n = weight.shape[0] // 2
    h = torch.empty((m, n), device=x.device, dtype=x.dtype)
    grid = (triton.cdiv(m, BLOCK_M) * triton.cdiv(n, BLOCK_N),)
    _swiglu_kernel[grid](x, weight, h, m, n, k, x.stride(0), weight.stride(0), h.stride(0), BLOCK_M=BLOCK_M,
                         BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M, num_warps=8, num_stages=3)
    return h
