# Idiomatic-looking but slow (defect: needless_dtype_conversion): "to be safe" the wrapper converts x and the
# parameters to float32 on the host, runs a float32 kernel, and casts the float32 result back to the input
# dtype. The kernel itself is fine, but for 16-bit inputs the op now takes three full passes (upcast copy,
# float32 kernel, downcast copy) moving 2+4 + 4+4 + 4+2 = 20 bytes per element instead of 4: ~5x slower
# than the streaming kernel. (float32 inputs are unaffected: .float() returns x itself.)
import torch
import triton
import triton.language as tl


@triton.jit
def _bn_infer_f32(x_ptr, mean_ptr, var_ptr, w_ptr, b_ptr, y_ptr, hw, n_channels, eps, BLOCK: tl.constexpr):
    plane = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < hw
    ch = plane % n_channels
    rstd = 1.0 / tl.sqrt(tl.load(var_ptr + ch) + eps)
    scale = tl.load(w_ptr + ch) * rstd
    shift = tl.load(b_ptr + ch) - tl.load(mean_ptr + ch) * scale
    offs = plane.to(tl.int64) * hw + cols
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(y_ptr + offs, x * scale + shift, mask=mask)


def batchnorm_inference(x, running_mean, running_var, weight, bias):
    xf = x.float().contiguous()
    n, c, h, w = x.shape
    hw = h * w
    yf = torch.empty_like(xf)
    block = min(triton.next_power_of_2(hw), 1024)
    grid = (n * c, triton.cdiv(hw, block))
    _bn_infer_f32[grid](xf, running_mean.float(), running_var.float(), weight.float(), bias.float(), yf, hw, c,
                        1e-5, BLOCK=block)
    return yf.to(x.dtype)
