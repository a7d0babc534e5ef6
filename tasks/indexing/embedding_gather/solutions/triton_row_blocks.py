# Embedding gather: one program per (token, column block). The program reads its id once, then copies the
# block of the row with vector loads and stores (int64 offsets: V * D exceeds 2^31 elements on large tables).
# Every row slice is read once and written once: the copy's bytes, nothing more.
import torch
import triton
import triton.language as tl


@triton.jit
def _embedding_gather_kernel(ids_ptr, w_ptr, out_ptr, d, BLOCK: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < d
    row = tl.load(ids_ptr + t)
    x = tl.load(w_ptr + row * d + cols, mask=mask)
    tl.store(out_ptr + t * d + cols, x, mask=mask)


def embedding_gather(ids, weight):
    ids, weight = ids.contiguous(), weight.contiguous()
    t = ids.shape[0]
    d = weight.shape[1]
    out = torch.empty((t, d), dtype=weight.dtype, device=weight.device)
    block = min(2048, triton.next_power_of_2(d))
    _embedding_gather_kernel[(t, triton.cdiv(d, block))](ids, weight, out, d, BLOCK=block,
                                                         num_warps=4 if block <= 1024 else 8)
    return out
