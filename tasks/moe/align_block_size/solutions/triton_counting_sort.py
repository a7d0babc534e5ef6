# moe_align_block_size as a parallel counting sort. _histogram: per-block expert counts (a one-hot
# [BLOCK, E] summed). _scan_blocks: per expert, exclusive per-block offsets and the total. _scan_experts: the
# totals padded to the block size and scanned into the offsets (written to the output's first E + 1
# entries). _fill: the sentinel everywhere after them. _scatter: each block ranks its pairs among the
# earlier pairs of the same expert (an exclusive one-hot cumsum) and writes its flat indices at
# E + 1 + offset[e] + block offset + rank: the stable order the task fixes.
import torch
import triton
import triton.language as tl


@triton.jit
def _histogram(ids_ptr, counts_ptr, N, E, BLOCK: tl.constexpr, E_P2: tl.constexpr):
    b = tl.program_id(0)
    i = b * BLOCK + tl.arange(0, BLOCK)
    ids = tl.load(ids_ptr + i, mask=i < N, other=-1)
    ex = tl.arange(0, E_P2)
    tl.store(counts_ptr + b * E + ex, tl.sum((ids[:, None] == ex[None, :]).to(tl.int32), 0), mask=ex < E)


@triton.jit
def _scan_blocks(counts_ptr, offs_ptr, total_ptr, NB, E, CHUNK: tl.constexpr):
    e = tl.program_id(0)
    carry = 0
    for b0 in range(0, NB, CHUNK):
        b = b0 + tl.arange(0, CHUNK)
        c = tl.load(counts_ptr + b * E + e, mask=b < NB, other=0)
        tl.store(offs_ptr + b * E + e, carry + tl.cumsum(c, 0) - c, mask=b < NB)
        carry += tl.sum(c, 0)
    tl.store(total_ptr + e, carry)


@triton.jit
def _scan_experts(total_ptr, out_ptr, E, BS, E_P2: tl.constexpr):
    ex = tl.arange(0, E_P2)
    c = tl.load(total_ptr + ex, mask=ex < E, other=0)
    padded = (c + BS - 1) // BS * BS
    inc = tl.cumsum(padded, 0)
    tl.store(out_ptr + ex, inc - padded, mask=ex < E)
    tl.store(out_ptr + E, tl.sum(padded, 0))


@triton.jit
def _fill(out_ptr, start, total, value, BLOCK: tl.constexpr):
    i = start + tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + i, tl.zeros([BLOCK], dtype=tl.int32) + value, mask=i < total)


@triton.jit
def _scatter(ids_ptr, offs_ptr, out_ptr, N, E, BLOCK: tl.constexpr, E_P2: tl.constexpr):
    b = tl.program_id(0)
    i = b * BLOCK + tl.arange(0, BLOCK)
    ok = i < N
    ids = tl.load(ids_ptr + i, mask=ok, other=-1)
    ex = tl.arange(0, E_P2)
    onehot = (ids[:, None] == ex[None, :]).to(tl.int32)
    rank = tl.sum((tl.cumsum(onehot, 0) - onehot) * onehot, 1)
    safe = tl.where(ok, ids, 0)
    dest = (E + 1) + tl.load(out_ptr + safe, mask=ok, other=0) + tl.load(offs_ptr + b * E + safe, mask=ok,
                                                                      other=0) + rank
    tl.store(out_ptr + dest, i, mask=ok)


def moe_align_block_size(topk_ids, num_experts, block_size):
    ids = topk_ids.contiguous().reshape(-1)
    n = ids.numel()
    e = num_experts
    e_p2 = max(2, triton.next_power_of_2(e))
    cuda = ids.is_cuda
    block = max(16, min(256, 8192 // e_p2)) if cuda else 8
    nb = triton.cdiv(n, block)
    total_len = e + 1 + n + e * (block_size - 1)
    out = torch.empty((total_len,), device=ids.device, dtype=torch.int32)
    counts = torch.empty((nb, e), device=ids.device, dtype=torch.int32)
    offs = torch.empty((nb, e), device=ids.device, dtype=torch.int32)
    total = torch.empty((e,), device=ids.device, dtype=torch.int32)
    _histogram[(nb,)](ids, counts, n, e, BLOCK=block, E_P2=e_p2)
    _scan_blocks[(e,)](counts, offs, total, nb, e, CHUNK=1024 if cuda else 4)
    _scan_experts[(1,)](total, out, e, block_size, E_P2=e_p2)
    fill = 4096 if cuda else 64
    _fill[(triton.cdiv(total_len - e - 1, fill),)](out, e + 1, total_len, n, BLOCK=fill)
    _scatter[(nb,)](ids, offs, out, n, e, BLOCK=block, E_P2=e_p2)
    return out
