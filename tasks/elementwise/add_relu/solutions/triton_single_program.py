# Slow by construction (defect: too_few_programs): a single program walks the whole tensor in
# 1024-element blocks. Each block is vectorized and coalesced, but one program runs on one SM: the other
# 131 SMs of an H200 sit idle, and one SM cannot pull anywhere near the device's memory bandwidth.
import torch
import triton
import triton.language as tl


@triton.jit
def _add_relu_serial(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    for start in range(0, n, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < n
        s = (tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
             + tl.load(y_ptr + offs, mask=mask, other=0.0).to(tl.float32))
        tl.store(out_ptr + offs, tl.maximum(s, 0.0).to(out_ptr.dtype.element_ty), mask=mask)


def add_relu(x, y):
    x = x.contiguous()
    y = y.contiguous()
    out = torch.empty_like(x)
    _add_relu_serial[(1,)](x, y, out, x.numel(), BLOCK=1024)
    return out
