# Idiomatic-looking but slow (defect: scalar_loop): one program per head vector (T*H programs), and inside
# it the sum of squares and the normalized output walk head_dim one element at a time with scalar loads and
# stores: 2*D dependent steps per program, no vector loads, no parallel reduction.
import torch
import triton
import triton.language as tl


@triton.jit
def _qk_norm_scalar(x_ptr, w_ptr, y_ptr, d, eps):
    base = tl.program_id(0).to(tl.int64) * d
    sq = 0.0
    for i in range(0, d):
        v = tl.load(x_ptr + base + i).to(tl.float32)
        sq += v * v
    rstd = 1.0 / tl.sqrt(sq / d + eps)
    for i in range(0, d):
        v = tl.load(x_ptr + base + i).to(tl.float32) * rstd * tl.load(w_ptr + i).to(tl.float32)
        tl.store(y_ptr + base + i, v.to(y_ptr.dtype.element_ty))


def qk_norm(x, weight):
    x = x.contiguous()
    t, h, d = x.shape
    y = torch.empty_like(x)
    _qk_norm_scalar[(t * h,)](x, weight, y, d, 1e-6)
    return y
