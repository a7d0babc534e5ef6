# Idiomatic-looking but slow (defect: no_tiling). A direct "gather" transposed convolution written from
# the formula: one program per (image n, output channel k, block of output pixels). For each of the R*R
# taps it computes ih = (oh + P - r) / 2, which only counts where oh + P - r is even and in range (so three
# quarters of the taps are masked off for every pixel), and reduces over the input channels in 32-wide
# blocks with a multiply and tl.sum. Nothing is tiled over output channels, so every input value is
# re-read by all K output channels, and the products run on the CUDA cores, never on the tensor cores.
import torch
import triton
import triton.language as tl


@triton.jit
def _conv_t2d_direct(x_ptr, w_ptr, y_ptr, C, H, W, K, R: tl.constexpr, BLOCK_C: tl.constexpr,
                     BLOCK: tl.constexpr):
    nk = tl.program_id(0)
    img = nk // K
    k = nk % K
    P: tl.constexpr = (R - 2) // 2
    OW = 2 * W
    OHW = 4 * H * W
    pix = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    p_ok = pix < OHW
    oh = pix // OW
    ow = pix % OW
    offs_c = tl.arange(0, BLOCK_C)
    x_img = x_ptr + img * C * H * W
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for r in tl.static_range(R):
        hn = oh + P - r
        h_ok = p_ok & (hn >= 0) & (hn % 2 == 0) & (hn < 2 * H)
        for s in tl.static_range(R):
            wn = ow + P - s
            ok = h_ok & (wn >= 0) & (wn % 2 == 0) & (wn < 2 * W)
            x_pix = (hn // 2) * W + wn // 2
            for c0 in range(0, C, BLOCK_C):
                cc = c0 + offs_c
                c_ok = cc < C
                xv = tl.load(x_img + cc[:, None] * (H * W) + x_pix[None, :], mask=c_ok[:, None] & ok[None, :],
                             other=0.0).to(tl.float32)
                wv = tl.load(w_ptr + (cc * K + k) * (R * R) + r * R + s, mask=c_ok, other=0.0).to(tl.float32)
                acc += tl.sum(xv * wv[:, None], axis=0)
    tl.store(y_ptr + (img * K + k) * OHW + pix, acc.to(y_ptr.dtype.element_ty), mask=p_ok)


def conv_transpose2d(x, weight):
    x = x.contiguous()
    weight = weight.contiguous()
    n, c, h, w = x.shape
    _, k, r, _ = weight.shape
    y = torch.empty((n, k, 2 * h, 2 * w), dtype=x.dtype, device=x.device)
    block = min(256, triton.next_power_of_2(4 * h * w))
    _conv_t2d_direct[(n * k, triton.cdiv(4 * h * w, block))](x, weight, y, c, h, w, k, R=r, BLOCK_C=32,
                                                              BLOCK=block, num_warps=4)
    return y
