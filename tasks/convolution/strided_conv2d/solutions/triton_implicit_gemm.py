# Strided Conv2d (NCHW; R = 3: stride 2, padding 1; R >= 4: patch embedding, stride R, no padding) as an
# implicit GEMM: rows are the output pixels (n, oh, ow), columns the output channels k, and the reduction
# runs over the flattened index red = (c * R + r) * R + s, the weight's own memory order, in 32-wide
# steps, so a C = 3 patch embedding (C*R*R = 588) wastes no reduction lanes. Per step: a gathered
# [128, 32] input tile x[n, c, oh*U - P + r, ow*U - P + s] (the zero padding is the load mask) and a
# [32, 128] weight tile contiguous along red, tl.dot with fp32 accumulation, 3 pipeline stages.
import torch
import triton
import triton.language as tl

BLOCK_M = 128   # output pixels per program
BLOCK_N = 128   # output channels per program
BLOCK_K = 32    # reduction (c, r, s) per step


@triton.jit
def _strided_conv2d(x_ptr, w_ptr, y_ptr, N, C, H, W, K, HO, WO,
                    R: tl.constexpr, U: tl.constexpr, P: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    HWO = HO * WO
    M = N * HWO
    CRS = C * R * R
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    m_ok = offs_m < M
    n_ok = offs_n < K
    img = offs_m // HWO
    pix = offs_m % HWO
    ih0 = (pix // WO) * U - P
    iw0 = (pix % WO) * U - P
    x_img = img * C * H * W
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for red0 in range(0, CRS, BLOCK_K):
        red = red0 + offs_k
        red_ok = red < CRS
        c = red // (R * R)
        rs = red % (R * R)
        ih = ih0[:, None] + (rs // R)[None, :]
        iw = iw0[:, None] + (rs % R)[None, :]
        ok = m_ok[:, None] & red_ok[None, :] & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
        a = tl.load(x_ptr + x_img[:, None] + c[None, :] * (H * W) + ih * W + iw, mask=ok, other=0.0)
        b = tl.load(w_ptr + offs_n[None, :] * CRS + red[:, None], mask=red_ok[:, None] & n_ok[None, :],
                    other=0.0)
        acc = tl.dot(a, b, acc)
    y_off = (img * K * HWO + pix)[:, None] + offs_n[None, :] * HWO
    tl.store(y_ptr + y_off, acc.to(y_ptr.dtype.element_ty), mask=m_ok[:, None] & n_ok[None, :])


def strided_conv2d(x, weight):
    x = x.contiguous()
    weight = weight.contiguous()
    n, c, h, w = x.shape
    k, _, r, _ = weight.shape
    u, p = (2, 1) if r == 3 else (r, 0)
    ho = (h + 2 * p - r) // u + 1
    wo = (w + 2 * p - r) // u + 1
    y = torch.empty((n, k, ho, wo), dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(n * ho * wo, BLOCK_M), triton.cdiv(k, BLOCK_N))
    _strided_conv2d[grid](x, weight, y, n, c, h, w, k, ho, wo, R=r, U=u, P=p, BLOCK_M=BLOCK_M,
                          BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, num_warps=8, num_stages=3)
    return y
