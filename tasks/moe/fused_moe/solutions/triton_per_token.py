# Idiomatic-looking but slow (defect: no_tiling): the MoE layer as a per-token loop, the way one would
# write it token by token. _act runs one program per (token, slot) pair: for its expert it computes the F
# activations as matrix-vector products (gate and up rows times the token's hidden row, D in chunks, summed
# with tl.sum) and stores them in float32. _out runs one program per token: for each D chunk it sums, over
# the token's K slots, the routing weight times the down projection of that slot's activations. Correct,
# but every expert weight is streamed once per routed token instead of once per tile of tokens (the cuda
# shapes read terabytes where the grouped GEMM reads the weights about once), and there is no tl.dot, so no
# tensor cores.
import torch
import triton
import triton.language as tl


@triton.jit
def _act(h_ptr, ids_ptr, w1_ptr, act_ptr, D, F, K, BLOCK_F: tl.constexpr, BLOCK_D: tl.constexpr):
    p = tl.program_id(0).to(tl.int64)
    t = p // K
    e = tl.load(ids_ptr + p).to(tl.int64)
    rf = tl.arange(0, BLOCK_F)
    rd = tl.arange(0, BLOCK_D)
    for f0 in range(0, F, BLOCK_F):
        f = f0 + rf
        gate = tl.zeros((BLOCK_F,), dtype=tl.float32)
        up = tl.zeros((BLOCK_F,), dtype=tl.float32)
        for d0 in range(0, D, BLOCK_D):
            d = d0 + rd
            h = tl.load(h_ptr + t * D + d, mask=d < D, other=0.0).to(tl.float32)
            m = (f < F)[:, None] & (d < D)[None, :]
            g_ptrs = w1_ptr + (e * 2 * F + f)[:, None] * D + d[None, :]
            gate += tl.sum(tl.load(g_ptrs, mask=m, other=0.0).to(tl.float32) * h[None, :], 1)
            up += tl.sum(tl.load(g_ptrs + F * D, mask=m, other=0.0).to(tl.float32) * h[None, :], 1)
        tl.store(act_ptr + p * F + f, gate / (1.0 + tl.exp(-gate)) * up, mask=f < F)


@triton.jit
def _out(act_ptr, ids_ptr, wt_ptr, w2_ptr, y_ptr, D, F, K, BLOCK_D: tl.constexpr, BLOCK_F: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    rf = tl.arange(0, BLOCK_F)
    rd = tl.arange(0, BLOCK_D)
    for d0 in range(0, D, BLOCK_D):
        d = d0 + rd
        acc = tl.zeros((BLOCK_D,), dtype=tl.float32)
        for j in range(0, K):
            p = t * K + j
            e = tl.load(ids_ptr + p).to(tl.int64)
            part = tl.zeros((BLOCK_D,), dtype=tl.float32)
            for f0 in range(0, F, BLOCK_F):
                f = f0 + rf
                a = tl.load(act_ptr + p * F + f, mask=f < F, other=0.0)
                m = (d < D)[:, None] & (f < F)[None, :]
                w = tl.load(w2_ptr + (e * D + d)[:, None] * F + f[None, :], mask=m, other=0.0).to(tl.float32)
                part += tl.sum(w * a[None, :], 1)
            acc += tl.load(wt_ptr + p) * part
        tl.store(y_ptr + t * D + d, acc.to(y_ptr.dtype.element_ty), mask=d < D)


def fused_moe(hidden, topk_ids, topk_weights, w1, w2):
    hidden, w1, w2 = hidden.contiguous(), w1.contiguous(), w2.contiguous()
    ids = topk_ids.contiguous().reshape(-1)
    wts = topk_weights.contiguous().reshape(-1)
    t, d = hidden.shape
    f = w2.shape[2]
    k = topk_ids.shape[1]
    y = torch.empty((t, d), device=hidden.device, dtype=hidden.dtype)
    if t * k == 0:
        return y.zero_()
    act = torch.empty((t * k, f), device=hidden.device, dtype=torch.float32)
    bf, bd = (64, 64) if hidden.is_cuda else (32, 32)
    _act[(t * k,)](hidden, ids, w1, act, d, f, k, BLOCK_F=bf, BLOCK_D=bd)
    _out[(t,)](act, ids, wts, w2, y, d, f, k, BLOCK_D=bd, BLOCK_F=bf)
    return y
