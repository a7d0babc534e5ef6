# Fused MoE as vLLM / SGLang run it: sort the routed (token, slot) pairs by expert, then grouped GEMMs.
# 1. A parallel counting sort of the N = T * K pairs by expert (as tasks/moe/token_permute): per-block
#    one-hot histograms, a scan per expert over the blocks and one over the experts, then each block ranks
#    its pairs (stable) and writes pair_of_row[dest] = pair. The group sizes stay on the device: no host sync.
# 2. _gate_up: a grouped GEMM over the sorted rows. Its grid is an upper bound on the row tiles
#    (cdiv(N, BLOCK_M) + E); each program finds its expert and rows from a running sum of the E groups'
#    tile counts, one vector op (_tile_owner), not a walk of E dependent loads; programs past the last tile,
#    and empty experts, do nothing. The A tile is gathered straight from hidden through
#    pair_of_row (no permuted copy of the tokens); the gate and up column tiles of the same F columns are two
#    tl.dot accumulators, so silu(g) * u is formed in registers and only the activation [N, F] is stored.
# 3. _down: the same schedule over act @ w2[e]^T; the epilogue scales each row by its routing weight and
#    stores it at its pair's (unsorted) position in a float32 buffer [N, D].
# 4. _combine: y[t] = sum over j of buf[t * K + j], in slot order (deterministic, no atomics), one rounding.
# Programs are ordered in groups of GROUP_M row tiles swept column by column so that the row tiles of one
# expert running together share its weight tiles in L2.
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
def _scan_experts(total_ptr, start_ptr, E, E_P2: tl.constexpr):
    ex = tl.arange(0, E_P2)
    c = tl.load(total_ptr + ex, mask=ex < E, other=0)
    tl.store(start_ptr + ex, tl.cumsum(c, 0) - c, mask=ex < E)


@triton.jit
def _place(ids_ptr, offs_ptr, start_ptr, pair_of_row_ptr, N, E, BLOCK: tl.constexpr, E_P2: tl.constexpr):
    b = tl.program_id(0)
    i = b * BLOCK + tl.arange(0, BLOCK)
    ok = i < N
    ids = tl.load(ids_ptr + i, mask=ok, other=-1)
    onehot = (ids[:, None] == tl.arange(0, E_P2)[None, :]).to(tl.int32)
    rank = tl.sum((tl.cumsum(onehot, 0) - onehot) * onehot, 1)     # earlier pairs of the same expert here
    safe = tl.where(ok, ids, 0)
    dest = tl.load(start_ptr + safe, mask=ok, other=0) + tl.load(offs_ptr + b * E + safe, mask=ok, other=0) + rank
    tl.store(pair_of_row_ptr + dest, i, mask=ok)


@triton.jit
def _tile_owner(start_ptr, total_ptr, E, pid_m, BLOCK_M: tl.constexpr, E_P2: tl.constexpr):
    """The expert owning sorted row tile pid_m, its first row, the group's end, and whether it exists: the
    experts' tile counts (cdiv(rows, BLOCK_M), 0 for an empty one) and their running sum as one vector, the
    owner being the number of experts whose tiles all come before pid_m."""
    ex = tl.arange(0, E_P2)
    rows = tl.load(total_ptr + ex, mask=ex < E, other=0)
    first = tl.load(start_ptr + ex, mask=ex < E, other=0)
    nt = (rows + BLOCK_M - 1) // BLOCK_M
    cum = tl.cumsum(nt, 0)
    expert = tl.minimum(tl.sum((cum <= pid_m).to(tl.int32), 0), E - 1)
    mine = ex == expert
    tiles_before = tl.sum(tl.where(mine, cum - nt, 0), 0)
    group_lo = tl.sum(tl.where(mine, first, 0), 0)
    row_hi = group_lo + tl.sum(tl.where(mine, rows, 0), 0)
    return expert, group_lo + (pid_m - tiles_before) * BLOCK_M, row_hi, pid_m < tl.sum(nt, 0)


@triton.jit
def _swizzle(num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    group_size = GROUP_M * num_pid_n
    first_m = (pid // group_size) * GROUP_M
    group_m = min(num_pid_m - first_m, GROUP_M)
    return first_m + (pid % group_size) % group_m, (pid % group_size) // group_m


@triton.jit
def _gate_up(h_ptr, w1_ptr, act_ptr, pair_of_row_ptr, start_ptr, total_ptr, E, D, F, K, num_pid_m,
             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
             E_P2: tl.constexpr, PREC: tl.constexpr):
    pid_m, pid_n = _swizzle(num_pid_m, tl.cdiv(F, BLOCK_N), GROUP_M)
    expert, row_lo, row_hi, real = _tile_owner(start_ptr, total_ptr, E, pid_m, BLOCK_M, E_P2)
    if real:
        offs_m = row_lo + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        offs_k = tl.arange(0, BLOCK_K)
        # rows past the group's end / columns past F are wrapped onto valid ones and never stored
        rows = tl.where(offs_m < row_hi, offs_m, row_lo)
        tok = (tl.load(pair_of_row_ptr + rows) // K).to(tl.int64)
        cols = (offs_n % F).to(tl.int64)
        a_ptrs = h_ptr + tok[:, None] * D + offs_k[None, :]
        wbase = w1_ptr + expert.to(tl.int64) * 2 * F * D
        g_ptrs = wbase + cols[None, :] * D + offs_k[:, None]
        u_ptrs = g_ptrs + F * D
        acc_g = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        acc_u = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, tl.cdiv(D, BLOCK_K)):
            k_left = D - k * BLOCK_K
            a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
            g = tl.load(g_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
            u = tl.load(u_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
            acc_g = tl.dot(a, g, acc_g, input_precision=PREC)
            acc_u = tl.dot(a, u, acc_u, input_precision=PREC)
            a_ptrs += BLOCK_K
            g_ptrs += BLOCK_K
            u_ptrs += BLOCK_K
        act = acc_g / (1.0 + tl.exp(-acc_g)) * acc_u
        out = act_ptr + offs_m[:, None].to(tl.int64) * F + offs_n[None, :]
        tl.store(out, act.to(act_ptr.dtype.element_ty), mask=(offs_m[:, None] < row_hi) & (offs_n[None, :] < F))


@triton.jit
def _down(act_ptr, w2_ptr, wt_ptr, buf_ptr, pair_of_row_ptr, start_ptr, total_ptr, E, D, F, num_pid_m,
          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
          E_P2: tl.constexpr, PREC: tl.constexpr):
    pid_m, pid_n = _swizzle(num_pid_m, tl.cdiv(D, BLOCK_N), GROUP_M)
    expert, row_lo, row_hi, real = _tile_owner(start_ptr, total_ptr, E, pid_m, BLOCK_M, E_P2)
    if real:
        offs_m = row_lo + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        offs_k = tl.arange(0, BLOCK_K)
        rows = tl.where(offs_m < row_hi, offs_m, row_lo)
        a_ptrs = act_ptr + rows[:, None].to(tl.int64) * F + offs_k[None, :]
        b_ptrs = (w2_ptr + expert.to(tl.int64) * D * F + (offs_n % D)[None, :].to(tl.int64) * F
                  + offs_k[:, None])
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, tl.cdiv(F, BLOCK_K)):
            k_left = F - k * BLOCK_K
            a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
            acc = tl.dot(a, b, acc, input_precision=PREC)
            a_ptrs += BLOCK_K
            b_ptrs += BLOCK_K
        pair = tl.load(pair_of_row_ptr + rows).to(tl.int64)
        acc = acc * tl.load(wt_ptr + pair)[:, None]
        out = buf_ptr + pair[:, None] * D + offs_n[None, :]
        tl.store(out, acc, mask=(offs_m[:, None] < row_hi) & (offs_n[None, :] < D))


@triton.jit
def _combine(buf_ptr, y_ptr, D, K: tl.constexpr, BLOCK_D: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    acc = tl.zeros((BLOCK_D,), dtype=tl.float32)
    for j in range(K):
        acc += tl.load(buf_ptr + (t * K + j) * D + d, mask=d < D, other=0.0)
    tl.store(y_ptr + t * D + d, acc.to(y_ptr.dtype.element_ty), mask=d < D)


def fused_moe(hidden, topk_ids, topk_weights, w1, w2):
    hidden, w1, w2 = hidden.contiguous(), w1.contiguous(), w2.contiguous()
    ids = topk_ids.contiguous().reshape(-1)
    wts = topk_weights.contiguous().reshape(-1)
    t, d = hidden.shape
    e, f = w1.shape[0], w2.shape[2]
    k = topk_ids.shape[1]
    assert w1.shape == (e, 2 * f, d) and w2.shape == (e, d, f) and topk_weights.shape == topk_ids.shape
    n = t * k
    dev = hidden.device
    y = torch.empty((t, d), device=dev, dtype=hidden.dtype)
    if n == 0:
        return y.zero_()
    e_p2 = max(2, triton.next_power_of_2(e))
    cuda = hidden.is_cuda
    block = max(16, min(128, 8192 // e_p2)) if cuda else 16   # cpu: still 2 blocks
    nb = triton.cdiv(n, block)
    counts = torch.empty((nb, e), device=dev, dtype=torch.int32)
    offs = torch.empty((nb, e), device=dev, dtype=torch.int32)
    total = torch.empty((e,), device=dev, dtype=torch.int32)
    start = torch.empty((e,), device=dev, dtype=torch.int32)
    pair_of_row = torch.empty((n,), device=dev, dtype=torch.int32)
    _histogram[(nb,)](ids, counts, n, e, BLOCK=block, E_P2=e_p2)
    _scan_blocks[(e,)](counts, offs, total, nb, e, CHUNK=256 if cuda else 4)
    _scan_experts[(1,)](total, start, e, E_P2=e_p2)
    _place[(nb,)](ids, offs, start, pair_of_row, n, e, BLOCK=block, E_P2=e_p2)

    # float32 inputs get exact float32 products; "tf32" is tl.dot's default, which 16-bit inputs ignore
    prec = "ieee" if hidden.dtype == torch.float32 else "tf32"
    if cuda:
        # large groups (Mixtral: ~1000 rows an expert) get 128-row tiles, small ones 64 (less padding)
        big = n >= 512 * e
        block_m, warps, stages = (128, 8, 3) if big else (64, 4, 4)
        block_n, block_k, group_m = 128, 64, 8
        # the gate/up kernel holds two accumulators: half-width column tiles keep its registers (and its
        # shared memory per stage) those of one 128-wide tile
        block_n_gu = block_n // 2
    else:
        # the interpreter: few programs (its cost is per program), still several row tiles and K steps
        block_m, warps, stages, block_n, block_k, group_m = 16, 4, 1, 32, 32, 2
        block_n_gu = block_n
    num_pid_m = triton.cdiv(n, block_m) + e                    # an upper bound on the real row tiles
    act = torch.empty((n, f), device=dev, dtype=hidden.dtype)
    _gate_up[(num_pid_m * triton.cdiv(f, block_n_gu),)](
        hidden, w1, act, pair_of_row, start, total, e, d, f, k, num_pid_m, BLOCK_M=block_m, BLOCK_N=block_n_gu,
        BLOCK_K=block_k, GROUP_M=group_m, E_P2=e_p2, PREC=prec, num_warps=warps, num_stages=stages)
    buf = torch.empty((n, d), device=dev, dtype=torch.float32)
    _down[(num_pid_m * triton.cdiv(d, block_n),)](
        act, w2, wts, buf, pair_of_row, start, total, e, d, f, num_pid_m, BLOCK_M=block_m, BLOCK_N=block_n,
        BLOCK_K=block_k, GROUP_M=group_m, E_P2=e_p2, PREC=prec, num_warps=warps, num_stages=stages)
    block_d = 1024 if cuda else 64
    _combine[(t, triton.cdiv(d, block_d))](buf, y, d, K=k, BLOCK_D=block_d)
    return y
