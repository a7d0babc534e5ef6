# Defect: needless_dtype_conversion. The same tiled, fused kernel as the optimized one (fixed 128x128x64
# tiles), except that every loaded x and weight tile is converted to float32 "for accuracy" before tl.dot.
# Nothing is gained: float32 accumulation is what tl.dot does for fp16/bf16 inputs anyway, and fp16/bf16
# values are exact in TF32. But the dot now runs as TF32 on the tensor cores (half the fp16/bf16 rate),
# each tile costs a conversion pass and twice the registers/shared memory per element.
import torch
import triton
import triton.language as tl


@triton.jit
def _linear_relu_fp32(x_ptr, w_ptr, bias_ptr, y_ptr, M, N, K, stride_xm, stride_xk, stride_wn, stride_wk,
                      stride_ym, stride_yn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      GROUP_M: tl.constexpr):
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
    x_ptrs = x_ptr + (offs_m % M)[:, None].to(tl.int64) * stride_xm + offs_k[None, :] * stride_xk
    w_ptrs = w_ptr + (offs_n % N)[None, :].to(tl.int64) * stride_wn + offs_k[:, None] * stride_wk

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(x_ptrs, mask=offs_k[None, :] < k_left, other=0.0).to(tl.float32)
        b = tl.load(w_ptrs, mask=offs_k[:, None] < k_left, other=0.0).to(tl.float32)
        acc = tl.dot(a, b, acc)
        x_ptrs += BLOCK_K * stride_xk
        w_ptrs += BLOCK_K * stride_wk

    bias = tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)
    acc = tl.maximum(acc + bias[None, :], 0.0)
    y_ptrs = y_ptr + offs_m[:, None].to(tl.int64) * stride_ym + offs_n[None, :] * stride_yn
    tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def linear_relu(x, weight, bias):
    m, k = x.shape
    n = weight.shape[0]
    bias = bias.contiguous()
    y = torch.empty((m, n), device=x.device, dtype=x.dtype)
    grid = (triton.cdiv(m, 128) * triton.cdiv(n, 128),)
    _linear_relu_fp32[grid](x, weight, bias, y, m, n, k, x.stride(0), x.stride(1), weight.stride(0),
                            weight.stride(1), y.stride(0), y.stride(1), BLOCK_M=128, BLOCK_N=128, BLOCK_K=64,
                            GROUP_M=8, num_warps=8, num_stages=3)
    return y
