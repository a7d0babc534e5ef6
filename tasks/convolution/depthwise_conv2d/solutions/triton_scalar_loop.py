# Idiomatic-looking but slow (defect: scalar_loop): one program per output element, which walks the nine
# taps with scalar loads and scalar multiply-adds. Nothing is vectorised: each program keeps one lane of
# its warp busy, and the launch holds N*C*H*W programs. Passes allclose; far slower than cuDNN.
import torch
import triton
import triton.language as tl


@triton.jit
def _dwconv3x3_scalar(x_ptr, w_ptr, y_ptr, C, H, W):
    pid = tl.program_id(0)
    HW = H * W
    nc = pid // HW
    p = pid % HW
    oh = p // W
    ow = p % W
    acc = 0.0
    for r in range(3):
        for s in range(3):
            ih = oh + r - 1
            iw = ow + s - 1
            ok = (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
            xv = tl.load(x_ptr + nc * HW + ih * W + iw, mask=ok, other=0.0).to(tl.float32)
            acc += xv * tl.load(w_ptr + (nc % C) * 9 + r * 3 + s).to(tl.float32)
    tl.store(y_ptr + pid, acc.to(y_ptr.dtype.element_ty))


def depthwise_conv2d(x, weight):
    x = x.contiguous()
    weight = weight.contiguous()
    n, c, h, w = x.shape
    y = torch.empty_like(x)
    _dwconv3x3_scalar[(n * c * h * w,)](x, weight, y, c, h, w, num_warps=1)
    return y
