# Slow by construction (defect: needless_dtype_conversion): "for accuracy", the wrapper upcasts the whole
# input to a float32 copy in torch, the kernel reads float32 and writes a float32 output, and torch casts it
# back to x's dtype. The kernel itself is a fine elementwise kernel, but for 16-bit inputs the call moves
# 2 + 8 + 8 + 4 + 4 + 2 = 28 bytes per output element instead of the 6 of one fused pass, in three launches.
import torch
import triton
import triton.language as tl

BLOCK = 1024


@triton.jit
def _clamped_swiglu_f32(x_ptr, out_ptr, d, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < d
    g = tl.load(x_ptr + row * 2 * d + 2 * cols, mask=mask, other=0.0)
    lin = tl.load(x_ptr + row * 2 * d + 2 * cols + 1, mask=mask, other=0.0)
    g = tl.minimum(g, 7.0)
    lin = tl.minimum(tl.maximum(lin, -7.0), 7.0)
    y = g / (1.0 + tl.exp(-1.702 * g)) * (lin + 1.0)
    tl.store(out_ptr + row * d + cols, y, mask=mask)


def clamped_swiglu(x):
    xf = x.contiguous().to(torch.float32)
    m, two_d = xf.shape
    d = two_d // 2
    out = torch.empty((m, d), dtype=torch.float32, device=x.device)
    _clamped_swiglu_f32[(m, triton.cdiv(d, BLOCK))](xf, out, d, BLOCK=BLOCK)
    return out.to(x.dtype)
