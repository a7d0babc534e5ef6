# Slow by construction (defect: no_tiling): one program per row of C and 64 columns. Its K loop loads a
# 64-wide slice of A's row and the matching [64, 64] block of B, multiplies them elementwise on the CUDA cores
# and sums along K (int32 for int8, float32 for float8): no tl.dot, so no tensor cores, and no tile of A or B
# is reused across rows (B is re-read by every row of C). Correct, but far from the tensor cores' rate.
import torch
import triton
import triton.language as tl


@triton.jit
def _scaled_gemm_rowvec(a_ptr, b_ptr, sa_ptr, sb_ptr, c_ptr, N, K, BN: tl.constexpr, BK: tl.constexpr,
                        IS_INT: tl.constexpr):
    i = tl.program_id(0).to(tl.int64)
    rn = (tl.program_id(1) * BN + tl.arange(0, BN)).to(tl.int64)
    n_mask = rn < N
    if IS_INT:
        acc = tl.zeros((BN,), dtype=tl.int32)
    else:
        acc = tl.zeros((BN,), dtype=tl.float32)
    for k0 in range(0, K, BK):
        kk = k0 + tl.arange(0, BK)
        k_mask = kk < K
        b_mask = n_mask[:, None] & k_mask[None, :]
        # masked lanes zeroed after the upcast (the interpreter cannot cast an `other` literal to float8)
        a = tl.load(a_ptr + i * K + kk, mask=k_mask)
        b = tl.load(b_ptr + rn[:, None] * K + kk[None, :], mask=b_mask)
        if IS_INT:
            a = tl.where(k_mask, a.to(tl.int32), 0)
            b = tl.where(b_mask, b.to(tl.int32), 0)
        else:
            a = tl.where(k_mask, a.to(tl.float32), 0.0)
            b = tl.where(b_mask, b.to(tl.float32), 0.0)
        acc += tl.sum(a[None, :] * b, axis=1)
    sa = tl.load(sa_ptr + i)
    sb = tl.load(sb_ptr + rn, mask=n_mask, other=0.0)
    tl.store(c_ptr + i * N + rn, (acc.to(tl.float32) * sa * sb).to(tl.bfloat16), mask=n_mask)


def scaled_gemm(a, b, scale_a, scale_b):
    a, b = a.contiguous(), b.contiguous()
    m, k = a.shape
    n = b.shape[0]
    c = torch.empty((m, n), dtype=torch.bfloat16, device=a.device)
    _scaled_gemm_rowvec[(m, triton.cdiv(n, 64))](a, b, scale_a.contiguous(), scale_b.contiguous(), c, n, k,
                                                BN=64, BK=64, IS_INT=a.dtype == torch.int8)
    return c
