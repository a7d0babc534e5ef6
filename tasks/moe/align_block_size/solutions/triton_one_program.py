# Idiomatic-looking but slow (defect: too_few_programs): the counting sort of triton_counting_sort.py run
# by one program: it counts all T * K pairs chunk by chunk, scans the padded counts, fills the sentinel and
# walks the pairs again in order, placing each chunk after a running per-expert count. One SM does all the
# work (millions of pairs on the cuda shapes) while the others idle.
import torch
import triton
import triton.language as tl


@triton.jit
def _align_one(ids_ptr, out_ptr, N, E, BS, total_len, CHUNK: tl.constexpr, E_P2: tl.constexpr):
    ex = tl.arange(0, E_P2)
    totals = tl.zeros([E_P2], dtype=tl.int32)
    for c0 in range(0, N, CHUNK):
        i = c0 + tl.arange(0, CHUNK)
        ids = tl.load(ids_ptr + i, mask=i < N, other=-1)
        totals += tl.sum((ids[:, None] == ex[None, :]).to(tl.int32), 0)
    padded = (totals + BS - 1) // BS * BS
    starts = tl.cumsum(padded, 0) - padded
    tl.store(out_ptr + ex, starts, mask=ex < E)
    tl.store(out_ptr + E, tl.sum(padded, 0))
    for f0 in range(E + 1, total_len, CHUNK):
        f = f0 + tl.arange(0, CHUNK)
        tl.store(out_ptr + f, tl.zeros([CHUNK], dtype=tl.int32) + N, mask=f < total_len)
    tl.debug_barrier()
    seen = starts
    for c0 in range(0, N, CHUNK):
        i = c0 + tl.arange(0, CHUNK)
        ok = i < N
        ids = tl.load(ids_ptr + i, mask=ok, other=-1)
        onehot = (ids[:, None] == ex[None, :]).to(tl.int32)
        dest = tl.sum((tl.cumsum(onehot, 0) - onehot + seen[None, :]) * onehot, 1)
        seen += tl.sum(onehot, 0)
        tl.store(out_ptr + (E + 1) + dest, i, mask=ok)


def moe_align_block_size(topk_ids, num_experts, block_size):
    ids = topk_ids.contiguous().reshape(-1)
    n = ids.numel()
    e = num_experts
    total_len = e + 1 + n + e * (block_size - 1)
    out = torch.empty((total_len,), device=ids.device, dtype=torch.int32)
    e_p2 = max(2, triton.next_power_of_2(e))
    chunk = max(16, min(256, 8192 // e_p2)) if ids.is_cuda else 8
    _align_one[(1,)](ids, out, n, e, block_size, total_len, CHUNK=chunk, E_P2=e_p2, num_warps=4)
    return out
