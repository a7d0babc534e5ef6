# Slow by construction (defect: scalar_loop): one program per token copies its row one element at a time, a
# scalar load and a scalar store per step. Correct, but no vector accesses and D sequential steps per row.
import torch
import triton
import triton.language as tl


@triton.jit
def _embedding_gather_scalar(ids_ptr, w_ptr, out_ptr, d):
    t = tl.program_id(0).to(tl.int64)
    row = tl.load(ids_ptr + t)
    for j in range(0, d):
        tl.store(out_ptr + t * d + j, tl.load(w_ptr + row * d + j))


def embedding_gather(ids, weight):
    ids, weight = ids.contiguous(), weight.contiguous()
    t = ids.shape[0]
    d = weight.shape[1]
    out = torch.empty((t, d), dtype=weight.dtype, device=weight.device)
    _embedding_gather_scalar[(t,)](ids, weight, out, d)
    return out
