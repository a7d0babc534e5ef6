# Conv1d (NCL, stride 1, 'same' zero padding R // 2) as an implicit GEMM per image:
# out[n] (K x L) = W (K x C*R) @ im2col(x[n]) (C*R x L). One program per (128 positions, 128 output
# channels, image). The reduction runs over the flattened index red = c * R + r, the weight's own memory
# order, in 32-wide steps: the weight tile [128, 32] is contiguous along red, and the im2col tile [32, 128]
# is gathered from x[n, red // R, l + red % R - R // 2] (contiguous along the positions), the zero padding
# being the load mask. tl.dot accumulates in float32 (wgmma on Hopper), 3 pipeline stages.
import torch
import triton
import triton.language as tl

BLOCK_K = 128   # output channels per program
BLOCK_L = 128   # output positions per program
BLOCK_R = 32    # reduction (channel, tap) per step


@triton.jit
def _conv1d_igemm(x_ptr, w_ptr, y_ptr, C, L, K, R: tl.constexpr,
                  BLOCK_K: tl.constexpr, BLOCK_L: tl.constexpr, BLOCK_R: tl.constexpr):
    pid_l = tl.program_id(0)
    pid_k = tl.program_id(1)
    img = tl.program_id(2).to(tl.int64)
    CR = C * R
    offs_l = pid_l * BLOCK_L + tl.arange(0, BLOCK_L)
    offs_k = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
    offs_r = tl.arange(0, BLOCK_R)
    l_ok = offs_l < L
    k_ok = offs_k < K
    x_img = x_ptr + img * C * L
    acc = tl.zeros((BLOCK_K, BLOCK_L), dtype=tl.float32)
    for red0 in range(0, CR, BLOCK_R):
        red = red0 + offs_r
        red_ok = red < CR
        a = tl.load(w_ptr + offs_k[:, None] * CR + red[None, :], mask=k_ok[:, None] & red_ok[None, :],
                    other=0.0)
        c = red // R
        pos = offs_l[None, :] + (red % R - R // 2)[:, None]          # [BLOCK_R, BLOCK_L]
        ok = red_ok[:, None] & (pos >= 0) & (pos < L)
        b = tl.load(x_img + c[:, None] * L + pos, mask=ok, other=0.0)
        acc = tl.dot(a, b, acc)
    y_off = img * K * L + offs_k[:, None] * L + offs_l[None, :]
    tl.store(y_ptr + y_off, acc.to(y_ptr.dtype.element_ty), mask=k_ok[:, None] & l_ok[None, :])


def conv1d(x, weight):
    x = x.contiguous()
    weight = weight.contiguous()
    n, c, length = x.shape
    k, _, r = weight.shape
    y = torch.empty((n, k, length), dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(length, BLOCK_L), triton.cdiv(k, BLOCK_K), n)
    _conv1d_igemm[grid](x, weight, y, c, length, k, R=r, BLOCK_K=BLOCK_K, BLOCK_L=BLOCK_L,
                        BLOCK_R=BLOCK_R, num_warps=8, num_stages=3)
    return y
