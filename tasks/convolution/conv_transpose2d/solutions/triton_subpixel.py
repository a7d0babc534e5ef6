# ConvTranspose2d, stride 2, padding P = (R - 2) / 2, NCHW, as four sub-pixel convolutions. An output
# row oh = 2 i + a only receives taps r with r = (a + P) mod 2 (mod 2), from input row
# ih = i + (a + P - r0) / 2 - t for r = r0 + 2 t, t < R / 2 (the same for columns). So for each of the four
# output parities (a, b) the operator is a dense implicit GEMM: rows = the N*H*W input-grid positions
# (n, i, j), columns = the K output channels, reduction over the (R/2)^2 taps of that parity and the C
# input channels. One program per (parity, 128 positions, 128 output channels), parity fastest so that
# the four programs sharing an input tile run together; tl.dot accumulates in float32. The weight is
# permuted to [R, R, C, K] once per call so that every weight tile is contiguous along K.
import torch
import triton
import triton.language as tl

BLOCK_M = 128   # input-grid positions (n, i, j) per program
BLOCK_N = 128   # output channels per program
BLOCK_C = 32    # input channels per reduction step


@triton.jit
def _conv_t2d_subpixel(x_ptr, w_ptr, y_ptr, N, C, H, W, K, R: tl.constexpr,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_C: tl.constexpr):
    phase = tl.program_id(0)
    pid_m = tl.program_id(1)
    pid_n = tl.program_id(2)
    P: tl.constexpr = (R - 2) // 2
    a = phase // 2
    b = phase % 2
    r0 = (a + P) % 2
    s0 = (b + P) % 2
    dh = (a + P - r0) // 2
    dw = (b + P - s0) // 2
    HW = H * W
    M = N * HW
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_c = tl.arange(0, BLOCK_C)
    m_ok = offs_m < M
    n_ok = offs_n < K
    img = offs_m // HW
    pix = offs_m % HW
    i = pix // W
    j = pix % W
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for t in tl.static_range(R // 2):
        ih = i + dh - t
        h_ok = m_ok & (ih >= 0) & (ih < H)
        for u in tl.static_range(R // 2):
            iw = j + dw - u
            ok = h_ok & (iw >= 0) & (iw < W)
            x_base = img * C * HW + ih * W + iw                       # [BLOCK_M], channel 0
            w_tap = w_ptr + ((r0 + 2 * t) * R + (s0 + 2 * u)) * C * K    # [C, K] slice of this tap
            for c0 in range(0, C, BLOCK_C):
                cc = c0 + offs_c
                c_ok = cc < C
                xa = tl.load(x_ptr + x_base[:, None] + cc[None, :] * HW, mask=ok[:, None] & c_ok[None, :],
                             other=0.0)
                wb = tl.load(w_tap + cc[:, None] * K + offs_n[None, :], mask=c_ok[:, None] & n_ok[None, :],
                             other=0.0)
                acc = tl.dot(xa, wb, acc)
    OW = 2 * W
    y_pix = (2 * i + a) * OW + 2 * j + b
    y_off = (img * K * 4 * HW + y_pix)[:, None] + offs_n[None, :] * (4 * HW)
    tl.store(y_ptr + y_off, acc.to(y_ptr.dtype.element_ty), mask=m_ok[:, None] & n_ok[None, :])


def conv_transpose2d(x, weight):
    x = x.contiguous()
    n, c, h, w = x.shape
    _, k, r, _ = weight.shape
    wp = weight.permute(2, 3, 0, 1).contiguous()          # [R, R, C, K]
    y = torch.empty((n, k, 2 * h, 2 * w), dtype=x.dtype, device=x.device)
    grid = (4, triton.cdiv(n * h * w, BLOCK_M), triton.cdiv(k, BLOCK_N))
    _conv_t2d_subpixel[grid](x, wp, y, n, c, h, w, k, R=r, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
                             BLOCK_C=BLOCK_C, num_warps=8, num_stages=3)
    return y
