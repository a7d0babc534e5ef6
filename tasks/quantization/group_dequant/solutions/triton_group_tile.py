# Group dequantization: one program per (row, 8 consecutive 128-column groups). The [8, 128] tile of q and its
# 8 float32 scales are loaded once, q upcast in registers (int8 and float8 convert exactly), multiplied in
# float32 and rounded once to bfloat16 on the store: one read of q and of the scales, one write of y.
import torch
import triton
import triton.language as tl


@triton.jit
def _group_dequant_kernel(q_ptr, s_ptr, y_ptr, n, groups, GROUPS: tl.constexpr, GROUP: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    g = tl.program_id(1) * GROUPS + tl.arange(0, GROUPS)
    cols = g[:, None] * GROUP + tl.arange(0, GROUP)[None, :]
    mask = cols < n
    q = tl.load(q_ptr + row * n + cols, mask=mask).to(tl.float32)   # masked lanes are never stored
    s = tl.load(s_ptr + row * groups + g, mask=g < groups, other=0.0)
    tl.store(y_ptr + row * n + cols, (q * s[:, None]).to(tl.bfloat16), mask=mask)


def group_dequant(q, scale):
    q, scale = q.contiguous(), scale.contiguous()
    m, n = q.shape
    y = torch.empty((m, n), dtype=torch.bfloat16, device=q.device)
    per = 8
    _group_dequant_kernel[(m, triton.cdiv(n, per * 128))](q, scale, y, n, scale.shape[1], GROUPS=per, GROUP=128,
                                                          num_warps=4)
    return y
