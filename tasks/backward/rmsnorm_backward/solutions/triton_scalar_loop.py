# Idiomatic-looking but slow (defect: scalar_loop): one program per row computes dx, walking the row one
# scalar element at a time for sum(x^2), for sum(g * xhat) and for the stores; then one program per column
# walks all M rows one scalar at a time for dweight (a strided, uncoalesced walk as well; rstd per row is
# kept in a float32 workspace by the first kernel). Thousands of
# dependent scalar steps per program, nothing vectorized.
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
    _rms_bwd_dx_scalar[(m,)](x, dy, weight.contiguous(), out, rstd, n, 1e-6, num_warps=1)
    _rms_bwd_dw_scalar[(n,)](x, dy, out, rstd, m, n, num_warps=1)
    return out
