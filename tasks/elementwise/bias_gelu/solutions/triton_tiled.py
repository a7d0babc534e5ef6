# Bias + GELU(tanh): 2-D tiles of BLOCK_M rows x BLOCK_N columns. The bias block is loaded once per tile
# and broadcast over its rows; each row segment is a contiguous, vectorized load. With z = x + bias and
# u = sqrt(2/pi) * (z + 0.044715 z^3): 0.5 * (1 + tanh(u)) = sigmoid(2u), so y = z / (1 + exp(-2u)) in
# float32: no tanh from libdevice, no cancellation in 1 + tanh(u), and exp(-2u) -> inf for z << 0 gives
# z / inf = -0, the right limit. One read of x, one write of y; row offsets in int64.
import torch
import triton
import triton.language as tl

BLOCK_M, BLOCK_N = 8, 1024
SQRT_2_OVER_PI = tl.constexpr(0.7978845608028654)


@triton.jit
def _bias_gelu_kernel(x_ptr, b_ptr, y_ptr, m, n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    rows = tl.program_id(1).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cmask = cols < n
    mask = (rows[:, None] < m) & cmask[None, :]
    b = tl.load(b_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
    offs = rows[:, None] * n + cols[None, :]
    z = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32) + b[None, :]
    u2 = (2.0 * SQRT_2_OVER_PI) * (z + 0.044715 * z * z * z)
    y = z / (1.0 + tl.exp(-u2))
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def bias_gelu(x, bias):
    x = x.contiguous()
    bias = bias.contiguous()
    m, n = x.shape
    y = torch.empty_like(x)
    grid = (triton.cdiv(n, BLOCK_N), triton.cdiv(m, BLOCK_M))
    _bias_gelu_kernel[grid](x, bias, y, m, n, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, num_warps=8)
    return y
