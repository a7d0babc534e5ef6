# MoE unpermute, one program per (token, BLOCK_H chunk of H): the token's K row indices and weights are
# loaded as vectors, then each of the K expert rows is gathered (a contiguous, coalesced chunk of H) and
# added into a float32 accumulator; one store of y. Every expert row is read exactly once in all.
import torch
import triton
import triton.language as tl


@triton.jit
def _gather_sum(e_ptr, map_ptr, w_ptr, y_ptr, H, K, BLOCK_H: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    hh = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    ok = hh < H
    acc = tl.zeros([BLOCK_H], dtype=tl.float32)
    for j in range(0, K):
        row = tl.load(map_ptr + t * K + j).to(tl.int64)
        w = tl.load(w_ptr + t * K + j)
        acc += w * tl.load(e_ptr + row * H + hh, mask=ok, other=0.0).to(tl.float32)
    tl.store(y_ptr + t * H + hh, acc.to(y_ptr.dtype.element_ty), mask=ok)


def moe_token_unpermute(expert_out, row_map, weights):
    expert_out = expert_out.contiguous()
    t, k = row_map.shape
    h = expert_out.shape[1]
    y = torch.empty((t, h), device=expert_out.device, dtype=expert_out.dtype)
    block_h = min(triton.next_power_of_2(h), 1024) if expert_out.is_cuda else 16
    _gather_sum[(t, triton.cdiv(h, block_h))](expert_out, row_map.contiguous(), weights.contiguous(), y, h, k,
                                              BLOCK_H=block_h, num_warps=4)
    return y
