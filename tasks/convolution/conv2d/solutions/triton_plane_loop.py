# Idiomatic-looking but slow (defect: no_tiling). A direct convolution: one program per (image n, output
# channel k, block of output pixels), the C*R*S reduction a loop of vector multiply-adds. Nothing is tiled
# over output channels, so every input value is loaded again by each of the K output channels, and the
# work never reaches the tensor cores (no tl.dot). It passes allclose and is many times slower than cuDNN.
import torch
import triton
import triton.language as tl


@triton.jit
def _conv2d_direct(x_ptr, w_ptr, y_ptr, C, H, W, K,
                   R: tl.constexpr, S: tl.constexpr, BLOCK: tl.constexpr):
    nk = tl.program_id(0)
    img = nk // K
    k = nk % K
    HW = H * W
    pix = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    p_ok = pix < HW
    oh = pix // W
    ow = pix % W
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for c in range(0, C):
        x_plane = x_ptr + (img * C + c) * HW
        w_tap = w_ptr + (k * C + c) * (R * S)
        for r in range(R):
            ih = oh + (r - R // 2)
            h_ok = p_ok & (ih >= 0) & (ih < H)
            for s in range(S):
                iw = ow + (s - S // 2)
                ok = h_ok & (iw >= 0) & (iw < W)
                xv = tl.load(x_plane + ih * W + iw, mask=ok, other=0.0).to(tl.float32)
                wv = tl.load(w_tap + r * S + s).to(tl.float32)
                acc += xv * wv
    tl.store(y_ptr + (img * K + k) * HW + pix, acc.to(y_ptr.dtype.element_ty), mask=p_ok)


def conv2d(x, weight):
    x = x.contiguous()
    weight = weight.contiguous()
    n, c, h, w = x.shape
    k, _, r, s = weight.shape
    y = torch.empty((n, k, h, w), dtype=x.dtype, device=x.device)
    block = min(1024, triton.next_power_of_2(h * w))
    _conv2d_direct[(n * k, triton.cdiv(h * w, block))](x, weight, y, c, h, w, k, R=r, S=s, BLOCK=block,
                                                       num_warps=4)
    return y
