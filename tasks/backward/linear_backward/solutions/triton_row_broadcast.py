# Idiomatic-looking but slow (defect: no_tiling): one program per output row. Row p of C = A B is computed
# by walking B in [BLOCK_L, BLOCK_Q] tiles and reducing a[p, l] * b[l, q] with a broadcast multiply and
# tl.sum over l: every program re-reads the whole second operand (M + N times in all), nothing is reused
# across rows, and no tensor core is used. dX = dY W and dW = dY^T X (dY read transposed, a strided walk).
import torch
import triton
import triton.language as tl


@triton.jit
def _row(a_ptr, b_ptr, c_ptr, Q, L, s_ap, s_al, s_bl, s_cp, BLOCK_L: tl.constexpr, BLOCK_Q: tl.constexpr):
    p = tl.program_id(0).to(tl.int64)
    rl = tl.arange(0, BLOCK_L)
    rq = tl.arange(0, BLOCK_Q)
    for q0 in range(0, Q, BLOCK_Q):
        qq = q0 + rq
        acc = tl.zeros([BLOCK_Q], dtype=tl.float32)
        for l0 in range(0, L, BLOCK_L):
            ll = l0 + rl
            a = tl.load(a_ptr + p * s_ap + ll.to(tl.int64) * s_al, mask=ll < L, other=0.0).to(tl.float32)
            b = tl.load(b_ptr + ll.to(tl.int64)[:, None] * s_bl + qq[None, :],
                        mask=(ll[:, None] < L) & (qq[None, :] < Q), other=0.0).to(tl.float32)
            acc += tl.sum(a[:, None] * b, axis=0)
        tl.store(c_ptr + p * s_cp + qq, acc.to(c_ptr.dtype.element_ty), mask=qq < Q)


def linear_backward(x, weight, dy):
    x, weight, dy = x.contiguous(), weight.contiguous(), dy.contiguous()
    m, k = x.shape
    n = weight.shape[0]
    out = torch.empty((m + n, k), device=x.device, dtype=x.dtype)
    bl, bq = (32, 64) if x.is_cuda else (64, 64)
    _row[(m,)](dy, weight, out, k, n, n, 1, k, k, BLOCK_L=bl, BLOCK_Q=bq, num_warps=4)
    _row[(n,)](dy, x, out[m:], k, m, 1, n, k, k, BLOCK_L=bl, BLOCK_Q=bq, num_warps=4)
    return out
