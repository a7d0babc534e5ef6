# Idiomatic-looking but slow (defect: no_tiling): the fused-softmax tutorial recipe applied to a vocabulary.
# One program per token loads the entire row as a single block (BLOCK = next power of two of V), then
# tl.max, tl.exp, tl.sum and the target's logit. Numerically sound (max subtracted, float32) and correct,
# but at V = 32k-152k the block is 32768-262144 lanes: every thread of the program holds hundreds of float32
# values, far beyond the register file, so they spill to local memory and the row makes extra round trips
# through the cache hierarchy; occupancy collapses to one program per SM.
import torch
import triton
import triton.language as tl


@triton.jit
def _ce_whole_row(x_ptr, t_ptr, loss_ptr, V, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < V, other=float("-inf")).to(tl.float32)
    m = tl.max(x, axis=0)
    lse = m + tl.log(tl.sum(tl.exp(x - m), axis=0))
    target = tl.load(t_ptr + row)
    valid = target != -100
    safe = tl.where(valid, target, 0)
    x_t = tl.load(x_ptr + row * stride + safe).to(tl.float32)
    tl.store(loss_ptr + row, tl.where(valid, lse - x_t, 0.0))


def cross_entropy(logits, targets):
    logits = logits.contiguous()
    targets = targets.contiguous()
    t, v = logits.shape
    loss = torch.empty((t,), dtype=torch.float32, device=logits.device)
    block = triton.next_power_of_2(v)
    _ce_whole_row[(t,)](logits, targets, loss, v, logits.stride(0), BLOCK=block, num_warps=16)
    return loss
