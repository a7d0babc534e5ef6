# Slow by construction (defect: too_few_programs): one program per 1024-column strip loads its bias block
# once and then loops over all M rows. Each row segment is still a coalesced vector load, but the grid has
# only ceil(N / 1024) programs (3-20 for LLM shapes), so all but a handful of an H200's 132 SMs sit idle
# and the few busy ones cannot pull the device's memory bandwidth.
import torch
import triton
import triton.language as tl

BLOCK_N = 1024
SQRT_2_OVER_PI = tl.constexpr(0.7978845608028654)


@triton.jit
def _bias_gelu_strip(x_ptr, b_ptr, y_ptr, m, n, BLOCK_N: tl.constexpr):
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    cmask = cols < n
    b = tl.load(b_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
    offs = cols.to(tl.int64)
    for _ in range(0, m):
        z = tl.load(x_ptr + offs, mask=cmask, other=0.0).to(tl.float32) + b
        u2 = (2.0 * SQRT_2_OVER_PI) * (z + 0.044715 * z * z * z)
        y = z / (1.0 + tl.exp(-u2))
        tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=cmask)
        offs += n


def bias_gelu(x, bias):
    x = x.contiguous()
    bias = bias.contiguous()
    m, n = x.shape
    y = torch.empty_like(x)
    _bias_gelu_strip[(triton.cdiv(n, BLOCK_N),)](x, bias, y, m, n, BLOCK_N=BLOCK_N)
    return y
