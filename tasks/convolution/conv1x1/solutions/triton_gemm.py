# Pointwise (1x1) conv, NCHW, as one GEMM per image: out[n] (K x HW) = W (K x C) @ x[n] (C x HW).
# One program per (128 output channels, 128 pixels, image). Per 32-channel step it loads a [128, 32]
# weight tile (contiguous along C) and a [32, 128] input tile (contiguous along the pixels) and
# accumulates tl.dot in float32 (wgmma on Hopper), software pipelined over 3 stages. The output tile is
# stored contiguous along the pixels. Masks cover partial channel, output-channel and pixel tiles.
import torch
import triton
import triton.language as tl

BLOCK_K = 128   # output channels per program
BLOCK_P = 128   # pixels per program
BLOCK_C = 32    # input channels per reduction step


@triton.jit
def _conv1x1(x_ptr, w_ptr, y_ptr, C, HW, K,
             BLOCK_K: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr):
    pid_p = tl.program_id(0)
    pid_k = tl.program_id(1)
    img = tl.program_id(2).to(tl.int64)
    offs_p = pid_p * BLOCK_P + tl.arange(0, BLOCK_P)
    offs_k = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
    offs_c = tl.arange(0, BLOCK_C)
    p_ok = offs_p < HW
    k_ok = offs_k < K
    x_img = x_ptr + img * C * HW
    acc = tl.zeros((BLOCK_K, BLOCK_P), dtype=tl.float32)
    for c0 in range(0, C, BLOCK_C):
        cc = c0 + offs_c
        c_ok = cc < C
        a = tl.load(w_ptr + offs_k[:, None] * C + cc[None, :], mask=k_ok[:, None] & c_ok[None, :], other=0.0)
        b = tl.load(x_img + cc[:, None] * HW + offs_p[None, :], mask=c_ok[:, None] & p_ok[None, :], other=0.0)
        acc = tl.dot(a, b, acc)
    y_off = img * K * HW + offs_k[:, None] * HW + offs_p[None, :]
    tl.store(y_ptr + y_off, acc.to(y_ptr.dtype.element_ty), mask=k_ok[:, None] & p_ok[None, :])


def conv1x1(x, weight):
    x = x.contiguous()
    weight = weight.contiguous()
    n, c, h, w = x.shape
    k = weight.shape[0]
    y = torch.empty((n, k, h, w), dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(h * w, BLOCK_P), triton.cdiv(k, BLOCK_K), n)
    _conv1x1[grid](x, weight, y, c, h * w, k, BLOCK_K=BLOCK_K, BLOCK_P=BLOCK_P, BLOCK_C=BLOCK_C,
                   num_warps=8, num_stages=3)
    return y
