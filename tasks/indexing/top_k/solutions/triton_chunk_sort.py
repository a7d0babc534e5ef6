# Top-k in two stages over packed keys. A value is made order-preserving as an int32 (float32 bits with the
# magnitude bits flipped for negatives) and packed with its column index into one int64 key, value in the
# high half: sorting keys sorts values, and the index rides along. Stage 1: one program per (row, CHUNK-wide
# chunk) sorts its keys descending with tl.sort (bitonic, in registers) and keeps the first KP (k rounded up to
# a power of two). Stage 2: one program per row sorts the n_chunks x KP candidates and writes the indices of
# the first k. The row is read once; the candidates are a few KB per row.
import torch
import triton
import triton.language as tl

LOWEST = tl.constexpr(-9223372036854775807)      # below every packed key (masked lanes)


@triton.jit
def _chunk_topk(x_ptr, cand_ptr, n, n_chunks, CHUNK: tl.constexpr, KP: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    cols = chunk * CHUNK + tl.arange(0, CHUNK)
    mask = cols < n
    x = tl.load(x_ptr + row * n + cols, mask=mask, other=0.0).to(tl.float32)
    bits = x.to(tl.int32, bitcast=True)
    ordered = bits ^ ((bits >> 31) & 0x7FFFFFFF)
    key = (ordered.to(tl.int64) << 32) | cols.to(tl.int64)
    key = tl.where(mask, key, LOWEST)
    key = tl.sort(key, descending=True)
    pos = tl.arange(0, CHUNK)
    tl.store(cand_ptr + (row * n_chunks + chunk) * KP + pos, key, mask=pos < KP)


@triton.jit
def _merge_topk(cand_ptr, out_ptr, k, total, TOTAL: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    pos = tl.arange(0, TOTAL)
    key = tl.load(cand_ptr + row * total + pos, mask=pos < total, other=LOWEST)
    key = tl.sort(key, descending=True)
    tl.store(out_ptr + row * k + pos, key & 0xFFFFFFFF, mask=pos < k)


def top_k(x, k):
    x = x.contiguous()
    m, n = x.shape
    kp = triton.next_power_of_2(k)
    chunk = max(kp, min(2048, triton.next_power_of_2(n)))
    n_chunks = triton.cdiv(n, chunk)
    cand = torch.empty((m, n_chunks, kp), dtype=torch.int64, device=x.device)
    _chunk_topk[(m, n_chunks)](x, cand, n, n_chunks, CHUNK=chunk, KP=kp, num_warps=8 if chunk >= 1024 else 4)
    out = torch.empty((m, k), dtype=torch.int64, device=x.device)
    total = n_chunks * kp
    _merge_topk[(m,)](cand, out, k, total, TOTAL=triton.next_power_of_2(total), num_warps=4)
    return out
