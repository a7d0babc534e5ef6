# Slow by construction (defect: sequential_reduction): one program per row, but the absmax is accumulated one
# element at a time in a scalar loop (a dependent chain of N load-abs-max steps on one thread) before a
# vectorized pass that scales and casts the row to e4m3.
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
def _fp8_quant_serial(x_ptr, q_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    amax = 0.0
    for j in range(0, n):
        amax = tl.maximum(amax, tl.abs(tl.load(x_ptr + row * n + j).to(tl.float32)))
    scale = 448.0 / tl.maximum(amax, 1e-12)
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n
        v = tl.load(x_ptr + row * n + cols, mask=mask, other=0.0).to(tl.float32) * scale
        v = tl.minimum(tl.maximum(v, -448.0), 448.0)
        tl.store(q_ptr + row * n + cols, _round_to_e4m3(v).to(tl.float8e4nv), mask=mask)


def fp8_token_quant(x):
    x = x.contiguous()
    m, n = x.shape
    q = torch.empty((m, n), dtype=torch.float8_e4m3fn, device=x.device)
    _fp8_quant_serial[(m,)](x, q, n, BLOCK=1024)
    return q
