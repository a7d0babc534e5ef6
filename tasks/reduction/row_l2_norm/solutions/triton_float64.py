# Idiomatic-looking but slow (defect: needless_dtype_conversion): "for accuracy" the wrapper upcasts x to
# float64 in torch, one program per row reduces the squares in float64, and the result is cast back. The
# float64 copy is an extra pass that reads x and writes 4x (float16) / 2x (float32) its bytes, which the
# kernel then reads again, and the math runs at float64 rate; a float32 accumulator is already accurate
# to a few ulps of the output.
import torch
import triton
import triton.language as tl


@triton.jit
def _row_l2_norm_f64(x_ptr, y_ptr, N, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), dtype=tl.float64)
    for k in range(0, N, BLOCK):
        v = tl.load(x_ptr + row * stride + k + cols, mask=k + cols < N, other=0.0)
        acc += v * v
    tl.store(y_ptr + row, tl.sqrt(tl.sum(acc, axis=0)))


def row_l2_norm(x):
    x64 = x.contiguous().double()
    m, n = x64.shape
    y64 = torch.empty((m,), dtype=torch.float64, device=x.device)
    block = min(triton.next_power_of_2(n), 1024)
    _row_l2_norm_f64[(m,)](x64, y64, n, x64.stride(0), BLOCK=block, num_warps=4)
    return y64.to(x.dtype)
