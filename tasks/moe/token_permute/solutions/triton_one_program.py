# Idiomatic-looking but slow (defect: too_few_programs): the counting sort of triton_counting_sort.py run
# by a single program. It walks the T * K pairs in chunks to count the experts, scans the counts, then
# walks them again in order, ranking each chunk's pairs after a running per-expert count (the stable
# order) and copying every token row itself. Correct, but one SM moves the whole output (gigabytes on the
# cuda shapes) while the other 131 idle.
import torch
import triton
import triton.language as tl


@triton.jit
def _permute_one(x_ptr, ids_ptr, out_ptr, N, H, K, CHUNK: tl.constexpr, E_P2: tl.constexpr,
                 BLOCK_H: tl.constexpr):
    ex = tl.arange(0, E_P2)
    totals = tl.zeros([E_P2], dtype=tl.int32)
    for c0 in range(0, N, CHUNK):
        i = c0 + tl.arange(0, CHUNK)
        ids = tl.load(ids_ptr + i, mask=i < N, other=-1)
        totals += tl.sum((ids[:, None] == ex[None, :]).to(tl.int32), 0)
    seen = tl.cumsum(totals, 0) - totals        # the start of each expert; grows as pairs are placed
    rh = tl.arange(0, BLOCK_H)
    for c0 in range(0, N, CHUNK):
        i = c0 + tl.arange(0, CHUNK)
        ok = i < N
        ids = tl.load(ids_ptr + i, mask=ok, other=-1)
        onehot = (ids[:, None] == ex[None, :]).to(tl.int32)
        before = tl.cumsum(onehot, 0) - onehot
        dest = tl.sum((before + seen[None, :]) * onehot, 1)
        seen += tl.sum(onehot, 0)
        src = (i // K).to(tl.int64)
        dst = dest.to(tl.int64)
        for h0 in range(0, H, BLOCK_H):
            hh = h0 + rh
            m = ok[:, None] & (hh < H)[None, :]
            row = tl.load(x_ptr + src[:, None] * H + hh[None, :], mask=m)
            tl.store(out_ptr + dst[:, None] * H + hh[None, :], row,
                     mask=m)


def moe_token_permute(x, topk_ids, num_experts):
    x = x.contiguous()
    ids = topk_ids.contiguous().reshape(-1)
    t, h = x.shape
    k = topk_ids.shape[1]
    n = t * k
    e = num_experts
    out = torch.empty((n, h), device=x.device, dtype=x.dtype)
    e_p2 = max(2, triton.next_power_of_2(e))
    chunk = max(16, min(128, 8192 // e_p2)) if x.is_cuda else 8
    _permute_one[(1,)](x, ids, out, n, h, k, CHUNK=chunk, E_P2=e_p2, BLOCK_H=256 if x.is_cuda else 16,
                       num_warps=4)
    return out
