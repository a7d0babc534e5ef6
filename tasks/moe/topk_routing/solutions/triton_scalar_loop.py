# Idiomatic-looking but slow (defect: scalar_loop): one program per token. Selection j rescans the row one
# scalar load at a time for the largest logit strictly below the previous pick (the rows hold no ties, so
# this walks the top-k in order); the k picks are found once to sum their exponentials and again to store
# the weights, after a scalar loop has zeroed the row: (2k + 1) E dependent steps per token.
import torch
import triton
import triton.language as tl


@triton.jit
def _topk_scalar(x_ptr, out_ptr, E, K: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = row * E
    for j in range(0, E):
        tl.store(out_ptr + base + j, 0.0)
    top = -float("inf")
    for j in range(0, E):
        top = tl.maximum(top, tl.load(x_ptr + base + j).to(tl.float32))
    total = 0.0
    prev = float("inf")
    for _ in range(0, K):
        best = -float("inf")
        for j in range(0, E):
            v = tl.load(x_ptr + base + j).to(tl.float32)
            best = tl.where((v < prev) & (v > best), v, best)
        total += tl.exp(best - top)
        prev = best
    prev = float("inf")
    for _ in range(0, K):
        best = -float("inf")
        at = 0
        for j in range(0, E):
            v = tl.load(x_ptr + base + j).to(tl.float32)
            take = (v < prev) & (v > best)
            best = tl.where(take, v, best)
            at = tl.where(take, j, at)
        tl.store(out_ptr + base + at, tl.exp(best - top) / total)
        prev = best


def moe_topk_routing(logits):
    logits = logits.contiguous()
    t, e = logits.shape
    k = 2 if e <= 8 else 4 if e <= 60 else 6 if e <= 64 else 8
    out = torch.empty((t, e), device=logits.device, dtype=torch.float32)
    _topk_scalar[(t,)](logits, out, e, K=k, num_warps=1)
    return out
