# Linear backward as two GEMMs through one strided tiled kernel. C = A B with A [P, L] and B [L, Q] given by
# strides: dX = dY W (A = dY, B = W, L = N) and dW = dY^T X (A = dY read transposed through its strides,
# B = X, L = M). BLOCK_M x BLOCK_N output tiles, BLOCK_K steps of tl.dot (tensor cores on a GPU) into a
# float32 accumulator, programs in grouped order so that a group's A panels stay in L2; each GEMM writes
# straight into its rows of the [M + N, K] output (no concatenation copy).
import torch
import triton
import triton.language as tl


@triton.jit
def _mm(a_ptr, b_ptr, c_ptr, P, Q, L, s_ap, s_al, s_bl, s_bq, s_cp,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP: tl.constexpr):
    pid = tl.program_id(0)
    n_m = tl.cdiv(P, BLOCK_M)
    n_n = tl.cdiv(Q, BLOCK_N)
    per_group = GROUP * n_n
    first_m = (pid // per_group) * GROUP
    size = tl.minimum(n_m - first_m, GROUP)
    pid_m = first_m + (pid % per_group) % size
    pid_n = (pid % per_group) // size
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, L, BLOCK_K):
        kk = k0 + rk
        a = tl.load(a_ptr + rm.to(tl.int64)[:, None] * s_ap + kk.to(tl.int64)[None, :] * s_al,
                    mask=(rm[:, None] < P) & (kk[None, :] < L), other=0.0)
        b = tl.load(b_ptr + kk.to(tl.int64)[:, None] * s_bl + rn[None, :] * s_bq,
                    mask=(kk[:, None] < L) & (rn[None, :] < Q), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm.to(tl.int64)[:, None] * s_cp + rn[None, :], acc.to(c_ptr.dtype.element_ty),
             mask=(rm[:, None] < P) & (rn[None, :] < Q))


def _launch(a, b, c, p, q, l, s_ap, s_al, s_bl, s_bq, cuda):
    if cuda:
        bm, bn, bk, warps, stages = 128, 128, 64, 8, 3
    else:
        bm, bn, bk, warps, stages = 32, 32, 32, 4, 1
    grid = (triton.cdiv(p, bm) * triton.cdiv(q, bn),)
    _mm[grid](a, b, c, p, q, l, s_ap, s_al, s_bl, s_bq, c.stride(0), BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
              GROUP=8, num_warps=warps, num_stages=stages)


def linear_backward(x, weight, dy):
    x, weight, dy = x.contiguous(), weight.contiguous(), dy.contiguous()
    m, k = x.shape
    n = weight.shape[0]
    out = torch.empty((m + n, k), device=x.device, dtype=x.dtype)
    cuda = x.is_cuda
    # dX [M, K] = dY [M, N] @ W [N, K]
    _launch(dy, weight, out, m, k, n, n, 1, k, 1, cuda)
    # dW [N, K] = dY^T [N, M] @ X [M, K]; dY^T's (row, col) = dY[col, row]: strides (1, N)
    _launch(dy, x, out[m:], n, k, m, 1, n, k, 1, cuda)
    return out
