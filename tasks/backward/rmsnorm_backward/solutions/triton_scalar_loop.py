# Idiomatic-looking but slow (defect: scalar_loop): one program per row computes dx, walking the row one
# scalar element at a time for sum(x^2), for sum(g * xhat) and for the stores; then one program per column
# walks all M rows one scalar at a time for dweight (a strided, uncoalesced walk as well; rstd per row is
# kept in a float32 workspace by the first kernel). Thousands of dependent scalar steps per program, nothing
# vectorized; and both kernels launch with num_warps=8, the setting of a row-wise Triton kernel (the
# layernorm tutorial's), though every step is a scalar that all 256 threads of a program redo.
#
# How slow, by a latency estimate calibrated on the H100 (2026-12-06): with num_warps=1 this file measured
# 4.97 ms at [16384, 4096] bf16 (torch eager 2.93 ms: E 0.59, not slow enough). Each program is a chain of
# dependent scalar loads, so a kernel's time is (waves of resident programs) x (steps per program) x (the
# latency of a step). With 1 warp an SM holds 32 programs (132 x 32 = 4224 at once: 4 waves of the dx kernel,
# 1 of the dw kernel); with 8 warps it holds 8 (64 warps per SM): 1056 at once. The 1-warp measurement fixes
# 49152 a + 16384 b = 4.97 ms (a: one step of a row walk, L1 hits, b: one step of a column walk, L2 hits);
# any split between a >= 28 ns (50 cycles) and b >= 0.14 us (250 cycles) gives, with ceil(M / 1056) x 3N
# steps of a and ceil(N / 1056) x M steps of b: [16384, 4096] ~20 ms, [8192, 8192] ~20 ms, [6000, 5001]
# ~9.1 ms, [65536, 1000] ~20 ms: 6.7x torch eager's time at each shape (2.93, 2.92, 1.36, 2.90 ms), at least
# 3.1x 2.93 ms, and 40-100x the optimized two-stage solution (0.20-0.25 ms). Far below the calls'
# too_slow bound (200 x the library's time).
import torch
import triton
import triton.language as tl


@triton.jit
def _rms_bwd_dx_scalar(x_ptr, dy_ptr, w_ptr, out_ptr, rstd_ptr, N, eps):
    row = tl.program_id(0).to(tl.int64)
    base = row * N
    sq = 0.0
    for i in range(0, N):
        v = tl.load(x_ptr + base + i).to(tl.float32)
        sq += v * v
    rstd = 1.0 / tl.sqrt(sq / N + eps)
    tl.store(rstd_ptr + row, rstd)
    c = 0.0
    for i in range(0, N):
        g = tl.load(dy_ptr + base + i).to(tl.float32) * tl.load(w_ptr + i).to(tl.float32)
        c += g * tl.load(x_ptr + base + i).to(tl.float32) * rstd
    c = c / N
    for i in range(0, N):
        xhat = tl.load(x_ptr + base + i).to(tl.float32) * rstd
        g = tl.load(dy_ptr + base + i).to(tl.float32) * tl.load(w_ptr + i).to(tl.float32)
        tl.store(out_ptr + base + i, ((g - xhat * c) * rstd).to(out_ptr.dtype.element_ty))


@triton.jit
def _rms_bwd_dw_scalar(x_ptr, dy_ptr, out_ptr, rstd_ptr, M, N):
    col = tl.program_id(0)
    acc = 0.0
    for r in range(0, M):
        base = r * N.to(tl.int64)
        rstd = tl.load(rstd_ptr + r)
        acc += tl.load(dy_ptr + base + col).to(tl.float32) * tl.load(x_ptr + base + col).to(tl.float32) * rstd
    tl.store(out_ptr + M.to(tl.int64) * N + col, acc.to(out_ptr.dtype.element_ty))


def rmsnorm_backward(x, dy, weight):
    x = x.contiguous()
    dy = dy.contiguous()
    m, n = x.shape
    out = torch.empty((m + 1, n), device=x.device, dtype=x.dtype)
    rstd = torch.empty((m,), device=x.device, dtype=torch.float32)
    _rms_bwd_dx_scalar[(m,)](x, dy, weight.contiguous(), out, rstd, n, 1e-6, num_warps=8)
    _rms_bwd_dw_scalar[(n,)](x, dy, out, rstd, m, n, num_warps=8)
    return out
