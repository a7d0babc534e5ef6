# Cross-entropy backward, one program per token. Pass 1 walks the logits row in BLOCK-wide chunks with an
# online maximum and a rescaled float32 sum of exponentials (each lane keeps its own, combined at the end);
# pass 2 re-reads the chunks (from L2 on a GPU for rows up to ~300 KB) and writes
# (exp(x - max) / sum - [j == target]) * dloss. A token whose target is -100 skips both passes and writes a
# row of zeros: its logits are never read.
import torch
import triton
import triton.language as tl


@triton.jit
def _ce_bwd_row(x_ptr, t_ptr, dl_ptr, g_ptr, V, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = row * V
    cols = tl.arange(0, BLOCK)
    target = tl.load(t_ptr + row)
    if target == -100:
        for start in range(0, V, BLOCK):
            tl.store(g_ptr + base + start + cols, tl.zeros([BLOCK], dtype=g_ptr.dtype.element_ty),
                     mask=start + cols < V)
    else:
        m = tl.full([BLOCK], -float("inf"), tl.float32)
        s = tl.zeros([BLOCK], dtype=tl.float32)
        for start in range(0, V, BLOCK):
            mask = start + cols < V
            x = tl.load(x_ptr + base + start + cols, mask=mask, other=-float("inf")).to(tl.float32)
            m_new = tl.maximum(m, x)
            # lanes still at -inf keep a zero sum (exp of -inf - -inf would be nan)
            alpha = tl.where(m_new == -float("inf"), 0.0, tl.exp(m - m_new))
            s = s * alpha + tl.where(mask, tl.exp(x - m_new), 0.0)
            m = m_new
        mx = tl.max(m, axis=0)
        total = tl.sum(tl.where(m == -float("inf"), 0.0, s * tl.exp(m - mx)), axis=0)
        scale = tl.load(dl_ptr + row) / total
        dl = tl.load(dl_ptr + row)
        for start in range(0, V, BLOCK):
            idx = start + cols
            mask = idx < V
            x = tl.load(x_ptr + base + idx, mask=mask, other=0.0).to(tl.float32)
            g = tl.exp(x - mx) * scale - tl.where(idx == target, dl, 0.0)
            tl.store(g_ptr + base + idx, g.to(g_ptr.dtype.element_ty), mask=mask)


def cross_entropy_backward(logits, targets, dloss):
    logits = logits.contiguous()
    t, v = logits.shape
    g = torch.empty_like(logits)
    block = min(triton.next_power_of_2(v), 4096) if logits.is_cuda else 128
    _ce_bwd_row[(t,)](logits, targets.contiguous(), dloss.contiguous(), g, v, BLOCK=block,
                      num_warps=8 if logits.is_cuda else 4)
    return g
