# Idiomatic-looking but slow (defect: too_few_programs): the textbook port of GroupNorm, one program per
# (sample, group). Each program walks its group's C/32 * H * W contiguous values three times in 1024-wide
# tiles (mean, then the variance around it, then the normalized output with per-element channel lookups).
# Correct and vectorized, but there are only N * 32 programs (256-512 on the cuda shapes) for 132 SMs, each a
# long serial stream with one tile in flight: far too little memory parallelism to approach bandwidth.
import torch
import triton
import triton.language as tl

GROUPS = 32


@triton.jit
def _gn_group(x_ptr, w_ptr, b_ptr, y_ptr, group_len, hw, ch_per_group, eps, BLOCK: tl.constexpr):
    grp = tl.program_id(0)
    base = grp.to(tl.int64) * group_len
    ch0 = (grp % 32) * ch_per_group
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for off in range(0, group_len, BLOCK):
        idx = off + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + base + idx, mask=idx < group_len, other=0.0).to(tl.float32)
    mean = tl.sum(acc, axis=0) / group_len
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for off in range(0, group_len, BLOCK):
        idx = off + tl.arange(0, BLOCK)
        m = idx < group_len
        d = tl.where(m, tl.load(x_ptr + base + idx, mask=m, other=0.0).to(tl.float32) - mean, 0.0)
        acc += d * d
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / group_len + eps)
    for off in range(0, group_len, BLOCK):
        idx = off + tl.arange(0, BLOCK)
        m = idx < group_len
        ch = ch0 + idx // hw
        x = tl.load(x_ptr + base + idx, mask=m, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + ch, mask=m, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + ch, mask=m, other=0.0).to(tl.float32)
        tl.store(y_ptr + base + idx, ((x - mean) * rstd * w + b).to(y_ptr.dtype.element_ty), mask=m)


def group_norm(x, weight, bias):
    x = x.contiguous()
    n, c, h, w = x.shape
    y = torch.empty_like(x)
    cpg = c // GROUPS
    _gn_group[(n * GROUPS,)](x, weight, bias, y, cpg * h * w, h * w, cpg, 1e-5, BLOCK=1024)
    return y
