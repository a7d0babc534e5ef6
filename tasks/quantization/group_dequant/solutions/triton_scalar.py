# Slow by construction (defect: scalar_loop): one program per row, and within it one scalar load of q, one of
# its group's scale, one multiply and one scalar store per element, in sequence. Correct (float32 product,
# one rounding to bfloat16), but with no vector accesses and one thread of work per row.
import torch
import triton
import triton.language as tl


@triton.jit
def _group_dequant_scalar(q_ptr, s_ptr, y_ptr, n, groups):
    row = tl.program_id(0).to(tl.int64)
    for j in range(0, n):
        q = tl.load(q_ptr + row * n + j).to(tl.float32)
        s = tl.load(s_ptr + row * groups + j // 128)
        tl.store(y_ptr + row * n + j, (q * s).to(tl.bfloat16))


def group_dequant(q, scale):
    q, scale = q.contiguous(), scale.contiguous()
    m, n = q.shape
    y = torch.empty((m, n), dtype=torch.bfloat16, device=q.device)
    _group_dequant_scalar[(m,)](q, scale, y, n, scale.shape[1])
    return y
