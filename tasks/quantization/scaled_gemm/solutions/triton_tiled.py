# Scaled FP8 / int8 GEMM: C = (A @ B^T) * scale_a[:, None] * scale_b[None, :], bfloat16 out. Tiles of
# BM x BN over C, a K loop of BK-wide tiles of A [BM, BK] and B^T [BK, BN] (B is [N, K] row-major, so a B^T
# tile is read along K, contiguous). Each tile's tl.dot (wgmma on Hopper) is added into a separate float32
# accumulator (int32 for int8, exact): Hopper's FP8 tensor cores keep ~14 bits inside one instruction chain,
# and promoting every BK = 128 is DeepSeek-V3's remedy. Scales are applied once, in the epilogue. Programs
# run in groups of 8 row-tiles so that neighbouring programs share B tiles in L2.
import torch
import triton
import triton.language as tl


@triton.jit
def _scaled_gemm_kernel(a_ptr, b_ptr, sa_ptr, sb_ptr, c_ptr, M, N, K,
                        BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
                        IS_INT: tl.constexpr):
    pid = tl.program_id(0)
    num_m, num_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
    group = pid // (GROUP_M * num_n)
    first_m = group * GROUP_M
    size_m = tl.minimum(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % (GROUP_M * num_n)) % size_m
    pid_n = (pid % (GROUP_M * num_n)) // size_m
    rm = (pid_m * BM + tl.arange(0, BM)).to(tl.int64)
    rn = (pid_n * BN + tl.arange(0, BN)).to(tl.int64)
    rk = tl.arange(0, BK)
    if IS_INT:
        acc = tl.zeros((BM, BN), dtype=tl.int32)
    else:
        acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        kk = k0 + rk
        # masked lanes zeroed with tl.where (the interpreter cannot cast an `other` literal to float8)
        a_mask = (rm[:, None] < M) & (kk[None, :] < K)
        b_mask = (rn[None, :] < N) & (kk[:, None] < K)
        a = tl.load(a_ptr + rm[:, None] * K + kk[None, :], mask=a_mask)
        b = tl.load(b_ptr + rn[None, :] * K + kk[:, None], mask=b_mask)
        a = tl.where(a_mask, a, tl.zeros_like(a))
        b = tl.where(b_mask, b, tl.zeros_like(b))
        acc += tl.dot(a, b)
    sa = tl.load(sa_ptr + rm, mask=rm < M, other=0.0)
    sb = tl.load(sb_ptr + rn, mask=rn < N, other=0.0)
    c = acc.to(tl.float32) * sa[:, None] * sb[None, :]
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], c.to(tl.bfloat16), mask=(rm[:, None] < M) & (rn[None, :] < N))


def scaled_gemm(a, b, scale_a, scale_b):
    a, b = a.contiguous(), b.contiguous()
    scale_a, scale_b = scale_a.contiguous(), scale_b.contiguous()
    m, k = a.shape
    n = b.shape[0]
    c = torch.empty((m, n), dtype=torch.bfloat16, device=a.device)
    big = m * n >= (1 << 20)
    bm, bn, bk = (128, 128, 128) if big else (32, 32, 32)
    grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn),)
    _scaled_gemm_kernel[grid](a, b, scale_a, scale_b, c, m, n, k, BM=bm, BN=bn, BK=bk, GROUP_M=8,
                              IS_INT=a.dtype == torch.int8, num_warps=8 if big else 4,
                              num_stages=3 if big else 1)
    return c
