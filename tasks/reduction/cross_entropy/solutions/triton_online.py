# Optimized: one program per token. The logits row is read exactly once, in CHUNK-wide vectorized chunks, with
# an online logsumexp in float32: each chunk's maximum m_c updates the running maximum m, the running sum of
# exponentials is rescaled by exp(m_old - m) and the chunk's sum(exp(x - m)) is added. One exponential per
# logit, one block reduction pair per chunk. The target's logit is a single scalar load, and ignored tokens
# (-100) return 0 before touching the row (and never form the address logits[t, -100]). Full chunks load
# unmasked; only the last, partial one is masked with -inf (exp(-inf) = 0). Thousands of tokens per call:
# one program per token fills the H200's SMs many times over.
import torch
import triton
import triton.language as tl

CHUNK = 4096
IGNORE_INDEX = -100


@triton.jit
def _ce_online(x_ptr, t_ptr, loss_ptr, V, stride, IGNORE: tl.constexpr, CHUNK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    target = tl.load(t_ptr + row)
    if target == IGNORE:
        tl.store(loss_ptr + row, 0.0)
    else:
        base = x_ptr + row * stride
        cols = tl.arange(0, CHUNK)
        m = tl.full((), float("-inf"), tl.float32)
        s = tl.zeros((), dtype=tl.float32)
        n_full = (V // CHUNK) * CHUNK
        for k in range(0, n_full, CHUNK):
            x = tl.load(base + k + cols).to(tl.float32)
            m_new = tl.maximum(m, tl.max(x, axis=0))
            s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
            m = m_new
        if n_full < V:
            idx = n_full + cols
            x = tl.load(base + idx, mask=idx < V, other=float("-inf")).to(tl.float32)
            m_new = tl.maximum(m, tl.max(x, axis=0))
            s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
            m = m_new
        x_t = tl.load(base + target).to(tl.float32)
        tl.store(loss_ptr + row, m + tl.log(s) - x_t)


def cross_entropy(logits, targets):
    logits = logits.contiguous()
    targets = targets.contiguous()
    t, v = logits.shape
    loss = torch.empty((t,), dtype=torch.float32, device=logits.device)
    chunk = min(CHUNK, triton.next_power_of_2(v))
    _ce_online[(t,)](logits, targets, loss, v, logits.stride(0), IGNORE=IGNORE_INDEX, CHUNK=chunk,
                     num_warps=8 if chunk >= 2048 else 4)
    return loss
