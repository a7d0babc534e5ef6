# Idiomatic-looking but slow (defect: no_tiling). One program per (image n, output channel k, block of
# pixels); the reduction over the C input channels is a loop of vector multiply-adds with one scalar
# weight each. Nothing is tiled over output channels, so every input value is loaded again by each of the
# K output channels (K times the GEMM's traffic), and the tensor cores are never used (no tl.dot).
import torch
import triton
import triton.language as tl


@triton.jit
def _conv1x1_loop(x_ptr, w_ptr, y_ptr, C, HW, K, BLOCK: tl.constexpr):
    nk = tl.program_id(0)
    img = nk // K
    k = nk % K
    pix = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    p_ok = pix < HW
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for c in range(0, C):
        xv = tl.load(x_ptr + (img * C + c) * HW + pix, mask=p_ok, other=0.0).to(tl.float32)
        wv = tl.load(w_ptr + k * C + c).to(tl.float32)
        acc += xv * wv
    tl.store(y_ptr + (img * K + k) * HW + pix, acc.to(y_ptr.dtype.element_ty), mask=p_ok)


def conv1x1(x, weight):
    x = x.contiguous()
    weight = weight.contiguous()
    n, c, h, w = x.shape
    k = weight.shape[0]
    y = torch.empty((n, k, h, w), dtype=x.dtype, device=x.device)
    block = min(1024, triton.next_power_of_2(h * w))
    _conv1x1_loop[(n * k, triton.cdiv(h * w, block))](x, weight, y, c, h * w, k, BLOCK=block, num_warps=4)
    return y
