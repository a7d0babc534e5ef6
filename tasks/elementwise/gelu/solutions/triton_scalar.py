# Idiomatic-looking but slow (defect: scalar_loop): one program per element, so every program does one
# scalar load, a few flops and one scalar store. The launch and scheduling cost of tens of millions of
# tiny programs dwarfs the memory traffic; correct, but far from the copy bandwidth on a GPU.
import torch
import triton
import triton.language as tl


@triton.jit
def _gelu_one(x_ptr, y_ptr):
    i = tl.program_id(0)
    x = tl.load(x_ptr + i).to(tl.float32)
    y = 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))
    tl.store(y_ptr + i, y.to(y_ptr.dtype.element_ty))


def gelu(x):
    x = x.contiguous()
    y = torch.empty_like(x)
    _gelu_one[(x.numel(),)](x, y)
    return y
