# Idiomatic-looking but slow (defect: too_few_programs). The same implicit-GEMM tiles as the optimized
# kernel (tl.dot of a contiguous weight tile and a gathered, padding-masked input tile, fp32
# accumulation), but the grid is one program per 128-output-channel panel, and each program walks every
# image and every 128-position tile in sequence. That is K / 128 programs (4 to 10 here) on an H200 with
# 132 SMs: more than 90% of the GPU idles.
import torch
import triton
import triton.language as tl

BLOCK_K = 128
BLOCK_L = 128
BLOCK_R = 32


@triton.jit
def _conv1d_panel(x_ptr, w_ptr, y_ptr, N, C, L, K, R: tl.constexpr,
                  BLOCK_K: tl.constexpr, BLOCK_L: tl.constexpr, BLOCK_R: tl.constexpr):
    pid_k = tl.program_id(0)
    CR = C * R
    offs_k = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
    offs_r = tl.arange(0, BLOCK_R)
    k_ok = offs_k < K
    for img in range(0, N):
        x_img = x_ptr + img * C * L
        for l0 in range(0, L, BLOCK_L):
            offs_l = l0 + tl.arange(0, BLOCK_L)
            acc = tl.zeros((BLOCK_K, BLOCK_L), dtype=tl.float32)
            for red0 in range(0, CR, BLOCK_R):
                red = red0 + offs_r
                red_ok = red < CR
                a = tl.load(w_ptr + offs_k[:, None] * CR + red[None, :],
                            mask=k_ok[:, None] & red_ok[None, :], other=0.0)
                pos = offs_l[None, :] + (red % R - R // 2)[:, None]
                ok = red_ok[:, None] & (pos >= 0) & (pos < L)
                b = tl.load(x_img + (red // R)[:, None] * L + pos, mask=ok, other=0.0)
                acc = tl.dot(a, b, acc)
            y_off = img * K * L + offs_k[:, None] * L + offs_l[None, :]
            tl.store(y_ptr + y_off, acc.to(y_ptr.dtype.element_ty),
                     mask=k_ok[:, None] & (offs_l < L)[None, :])


def conv1d(x, weight):
    x = x.contiguous()
    weight = weight.contiguous()
    n, c, length = x.shape
    k, _, r = weight.shape
    y = torch.empty((n, k, length), dtype=x.dtype, device=x.device)
    _conv1d_panel[(triton.cdiv(k, BLOCK_K),)](x, weight, y, n, c, length, k, R=r, BLOCK_K=BLOCK_K,
                                               BLOCK_L=BLOCK_L, BLOCK_R=BLOCK_R, num_warps=8, num_stages=3)
    return y
