# Per-group (1x128) FP8 quantization: one program per (row, 8 consecutive groups). The [GROUPS, 128] tile is
# loaded once (masked past N: zeros leave a group's absmax unchanged), each group's |x| reduced with tl.max
# along axis 1 in float32, floored at 1e-12, and the tile scaled, clamped and cast to e4m3 from registers: one
# read of x, one write of q, 1024 elements per program.
import torch
import triton
import triton.language as tl


@triton.jit
def _round_to_e4m3(v):
    # Round float32 v (|v| <= 448) to the nearest e4m3 value in float32, ties to even, so that the cast
    # below is exact. The GPU's cvt rounds correctly by itself; Triton 3.7's interpreter does not (a round-up
    # that carries into the exponent drops the carry, 127.9 -> 64, and subnormals come out wrong), so the
    # rounding is done here on the float32 bits: 20 low mantissa bits dropped with round-to-nearest-even
    # (a carry moves into the exponent as it should); below e4m3's smallest normal (2^-6) its subnormals
    # are the multiples of 2^-9 (a tie rounds up: one step at most, within the task's tolerance).
    bits = v.to(tl.int32, bitcast=True)
    rounded = ((bits + 0x7FFFF + ((bits >> 20) & 1)) & -1048576).to(tl.float32, bitcast=True)
    sub = tl.floor(v * 512.0 + 0.5) * 0.001953125
    return tl.where(tl.abs(v) < 0.015625, sub, rounded)


@triton.jit
def _fp8_block_quant_kernel(x_ptr, q_ptr, n, GROUPS: tl.constexpr, GROUP: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    first = tl.program_id(1) * GROUPS * GROUP
    cols = first + tl.arange(0, GROUPS)[:, None] * GROUP + tl.arange(0, GROUP)[None, :]
    mask = cols < n
    x = tl.load(x_ptr + row * n + cols, mask=mask, other=0.0).to(tl.float32)
    amax = tl.maximum(tl.max(tl.abs(x), axis=1), 1e-12)
    v = tl.minimum(tl.maximum(x * (448.0 / amax)[:, None], -448.0), 448.0)
    tl.store(q_ptr + row * n + cols, _round_to_e4m3(v).to(tl.float8e4nv), mask=mask)


def fp8_block_quant(x):
    x = x.contiguous()
    m, n = x.shape
    q = torch.empty((m, n), dtype=torch.float8_e4m3fn, device=x.device)
    groups = 8
    _fp8_block_quant_kernel[(m, triton.cdiv(n, groups * 128))](x, q, n, GROUPS=groups, GROUP=128, num_warps=4)
    return q
