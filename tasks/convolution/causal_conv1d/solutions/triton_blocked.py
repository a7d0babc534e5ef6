# Causal depthwise conv1d + bias + SiLU (Mamba's short conv), [B, D, L]. One program per tile of
# BLOCK_R rows (b * D + d) x BLOCK_L positions. The W taps of each row's weight are a [BLOCK_R] vector;
# each tap is one masked [BLOCK_R, BLOCK_L] load of the rows shifted by j - (W - 1) positions (the mask
# is the causal zero padding; the shifted loads overlap and hit L1), fp32 multiply-adds, then bias and
# SiLU fused in registers and one store. Memory-bound: the activation is read once and written once.
import torch
import triton
import triton.language as tl

BLOCK_R = 8      # rows (b, d) per program
BLOCK_L = 128    # positions per program


@triton.jit
def _causal_conv1d(x_ptr, w_ptr, b_ptr, y_ptr, R, D, L, W: tl.constexpr,
                   BLOCK_R: tl.constexpr, BLOCK_L: tl.constexpr):
    offs_l = tl.program_id(0) * BLOCK_L + tl.arange(0, BLOCK_L)
    rows = tl.program_id(1) * BLOCK_R + tl.arange(0, BLOCK_R)
    r_ok = rows < R
    l_ok = offs_l < L
    d = rows % D
    base = rows.to(tl.int64)[:, None] * L
    acc = tl.zeros((BLOCK_R, BLOCK_L), dtype=tl.float32)
    acc += tl.load(b_ptr + d, mask=r_ok, other=0.0).to(tl.float32)[:, None]
    for j in tl.static_range(W):
        pos = offs_l + (j - (W - 1))
        wv = tl.load(w_ptr + d * W + j, mask=r_ok, other=0.0).to(tl.float32)
        xv = tl.load(x_ptr + base + pos[None, :], mask=r_ok[:, None] & (l_ok & (pos >= 0))[None, :],
                     other=0.0).to(tl.float32)
        acc += xv * wv[:, None]
    out = acc / (1.0 + tl.exp(-acc))
    tl.store(y_ptr + base + offs_l[None, :], out.to(y_ptr.dtype.element_ty),
             mask=r_ok[:, None] & l_ok[None, :])


def causal_conv1d(x, weight, bias):
    x = x.contiguous()
    weight = weight.contiguous()
    bias = bias.contiguous()
    b, d, length = x.shape
    w = weight.shape[1]
    y = torch.empty_like(x)
    grid = (triton.cdiv(length, BLOCK_L), triton.cdiv(b * d, BLOCK_R))
    _causal_conv1d[grid](x, weight, bias, y, b * d, d, length, W=w, BLOCK_R=BLOCK_R, BLOCK_L=BLOCK_L,
                         num_warps=4)
    return y
