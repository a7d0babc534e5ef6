# Idiomatic-looking but slow (defect: scalar_loop): one program per token; every output element is its own
# scalar loop over the K experts (a scalar index load, a scalar weight load, a scalar row-element load),
# so a token costs H * K dependent scalar steps and nothing is vectorized or coalesced.
import torch
import triton
import triton.language as tl


@triton.jit
def _unpermute_scalar(e_ptr, map_ptr, w_ptr, y_ptr, H, K):
    t = tl.program_id(0).to(tl.int64)
    for i in range(0, H):
        acc = 0.0
        for j in range(0, K):
            row = tl.load(map_ptr + t * K + j).to(tl.int64)
            acc += tl.load(w_ptr + t * K + j) * tl.load(e_ptr + row * H + i).to(tl.float32)
        tl.store(y_ptr + t * H + i, acc.to(y_ptr.dtype.element_ty))


def moe_token_unpermute(expert_out, row_map, weights):
    expert_out = expert_out.contiguous()
    t, k = row_map.shape
    h = expert_out.shape[1]
    y = torch.empty((t, h), device=expert_out.device, dtype=expert_out.dtype)
    _unpermute_scalar[(t,)](expert_out, row_map.contiguous(), weights.contiguous(), y, h, k, num_warps=1)
    return y
