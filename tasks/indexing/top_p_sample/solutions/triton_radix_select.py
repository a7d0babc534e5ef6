# Top-p sampling without sorting: one program per row, a fixed number of passes over the row.
# Every logit gets an order-preserving key: its float32 bits (-0.0 made +0.0, so equal logits share a key) with
# the magnitude bits flipped for negatives, shifted into [0, 2^32). G(tau), the unnormalised mass of the
# tokens whose key is >= tau, falls as tau grows, so "the position where the cumulative mass in sorted order
# reaches a target" is a search for a key: the largest tau with G(tau) >= target. Each search takes 8 rounds
# of radix 16 (one pass over the row sums the mass above 15 candidate keys at once and keeps the last
# candidate that still reaches the target) and one pass for the mass strictly above tau and tau's ties.
# Equal logits share a key and a probability, so within the key the rank follows from the leftover mass, and
# one last pass finds that rank's token id with a running count (ties go to the lower id).
# Passes: 1 (online max and sum) + 9 (nucleus boundary) + 9 (the pick) + 1 (the tied id) = 20 reads of the
# row, which one program re-reads from L2; no [B, V] intermediate is written. Reductions are kept few per
# pass because the Triton interpreter pays ~10 ms for each (CI replays this on the cpu backend).
import torch
import triton
import triton.language as tl


@triton.jit
def _mass_of_key(key, inv_t, m):
    """exp(logit / T - m) for one key, computed as the passes compute it."""
    ordered = (key - 2147483648).to(tl.int32)
    bits = ordered ^ ((ordered >> 31) & 0x7FFFFFFF)
    return tl.exp(bits.to(tl.float32, bitcast=True) * inv_t - m)


@triton.jit
def _search(x_ptr, base, V, inv_t, m, target, STRICT: tl.constexpr, BLOCK: tl.constexpr):
    """The largest key tau with G(tau) >= target (> target if STRICT); returns tau, G(tau + 1) (the mass
    strictly above tau) and the number of tokens whose key is tau."""
    j = tl.arange(0, 16)
    lo = tl.zeros((), tl.int64)                 # G(0) is the whole row's mass: it always qualifies
    for r in range(0, 8):                       # a loop, not unrolled: 8x less code to compile
        cand = lo + (j.to(tl.int64) << (28 - 4 * r))
        acc = tl.zeros((16,), tl.float32)
        for start in range(0, V, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            mask = cols < V
            x = tl.load(x_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)
            x = tl.where(x == 0.0, 0.0, x)          # -0.0 == +0.0: one key
            bits = x.to(tl.int32, bitcast=True)
            key = (bits ^ ((bits >> 31) & 0x7FFFFFFF)).to(tl.int64) + 2147483648
            e = tl.where(mask, tl.exp(x * inv_t - m), 0.0)
            ge = (key[:, None] >= cand[None, :]) & mask[:, None]
            acc += tl.sum(tl.where(ge, e[:, None], 0.0), axis=0)
        if STRICT:
            sat = acc > target
        else:
            sat = acc >= target
        # G falls as the key grows, so the qualifying candidates are 0 .. n_sat - 1 (0 is lo itself)
        n_sat = tl.sum((sat | (j == 0)).to(tl.int32), axis=0)
        lo = lo + ((n_sat - 1).to(tl.int64) << (28 - 4 * r))
    # one more pass: the mass strictly above tau and tau's ties
    above = 0.0
    ties = 0
    for start in range(0, V, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < V
        x = tl.load(x_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)
        x = tl.where(x == 0.0, 0.0, x)
        bits = x.to(tl.int32, bitcast=True)
        key = (bits ^ ((bits >> 31) & 0x7FFFFFFF)).to(tl.int64) + 2147483648
        above += tl.sum(tl.where(mask & (key > lo), tl.exp(x * inv_t - m), 0.0), axis=0)
        ties += tl.sum((mask & (key == lo)).to(tl.int32), axis=0)
    return lo, above, ties


@triton.jit
def _top_p_kernel(x_ptr, t_ptr, p_ptr, u_ptr, out_ptr, V, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = row * V
    inv_t = 1.0 / tl.load(t_ptr + row)
    # pass 1: max and sum of exp, online
    m = float("-inf")
    z_sum = 0.0
    for start in range(0, V, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < V
        x = tl.load(x_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)
        z = x * inv_t
        z = tl.where(mask, z, float("-inf"))
        m_new = tl.maximum(m, tl.max(z, axis=0))
        z_sum = z_sum * tl.exp(m - m_new) + tl.sum(tl.exp(z - m_new), axis=0)
        m = m_new
    # the nucleus boundary: tau's ties are taken in id order until the mass reaches top_p
    target = tl.load(p_ptr + row) * z_sum
    tau, g_up, n_tau = _search(x_ptr, base, V, inv_t, m, target, False, BLOCK)
    e_tau = _mass_of_key(tau, inv_t, m)
    need = (target - g_up) / e_tau
    r = need.to(tl.int32)
    r = tl.where(r.to(tl.float32) < need, r + 1, r)
    r = tl.minimum(tl.maximum(r, 1), n_tau)
    nucleus = g_up + r.to(tl.float32) * e_tau
    # the pick: the first position whose mass exceeds u * nucleus
    t = tl.load(u_ptr + row) * nucleus
    sig, g_up2, n_sig = _search(x_ptr, base, V, inv_t, m, t, True, BLOCK)
    e_sig = _mass_of_key(sig, inv_t, m)
    s = ((t - g_up2) / e_sig).to(tl.int32) + 1         # rank of the pick among sig's ties
    s = tl.minimum(tl.maximum(s, 1), n_sig)
    # last pass: the s-th lowest id whose key is sig
    seen = 0
    found = -1
    for start in range(0, V, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < V
        x = tl.load(x_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)
        x = tl.where(x == 0.0, 0.0, x)          # -0.0 == +0.0: one key
        bits = x.to(tl.int32, bitcast=True)
        key = (bits ^ ((bits >> 31) & 0x7FFFFFFF)).to(tl.int64) + 2147483648
        eq = ((key == sig) & mask).to(tl.int32)
        rank = tl.cumsum(eq, axis=0) + seen
        found = tl.maximum(found, tl.max(tl.where((eq > 0) & (rank == s), cols, -1), axis=0))
        seen += tl.sum(eq, axis=0)
    tl.store(out_ptr + row, found.to(tl.int64))


def top_p_sample(logits, temperature, top_p, u):
    logits = logits.contiguous()
    b, v = logits.shape
    out = torch.empty((b,), dtype=torch.int64, device=logits.device)
    block = min(1024, triton.next_power_of_2(v))
    _top_p_kernel[(b,)](logits, temperature.contiguous(), top_p.contiguous(), u.contiguous(), out, v,
                        BLOCK=block, num_warps=8 if block >= 1024 else 4)
    return out
