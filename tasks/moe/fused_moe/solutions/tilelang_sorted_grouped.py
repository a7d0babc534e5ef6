# Fused MoE in TileLang as vLLM / SGLang run it: sort the routed (token, slot) pairs by expert into runs
# padded to the GEMM's row block, then two grouped GEMMs whose row blocks each belong to one expert.
# 1. sort (two launches, plain registers: as tasks/moe/align_block_size): per-chunk expert histograms, then
#    each chunk's pairs ranked into their expert's padded run of `rows` (pair index t * K + j, or the sentinel
#    N = T * K for padding), and block 0 writes each row block's expert (`tile_expert`; 0 for the tail blocks,
#    whose rows are all sentinels). The group sizes stay on the device: no host synchronisation.
# 2. gate_up, per (F tile, row block): the A tile is gathered straight from hidden through `rows` (sentinel
#    rows zero) into shared memory; the gate and up tiles of the same F columns of w1[e] are copied to shared
#    memory in a T.Pipelined loop and multiplied by two T.gemm into float32 fragments, so silu(g) * u is formed
#    in registers (g and u rounded once to the dtype, as vLLM stores them) and only the activation is stored.
# 3. down, per (D tile, row block): act @ w2[e]^T by T.gemm; the epilogue scales each row by its routing
#    weight and stores it at its pair's (unsorted) row of a float32 buffer [N, D] (sentinel rows skipped).
# 4. combine (plain registers): y[t] = sum over j of buf[t * K + j] in slot order, one rounding.
# The GEMMs do not lower to TileLang's C target (shared/fragment buffers, T.gemm), so the cpu backend only
# compiles them for CUDA sm_90a with nvcc (cpu_status "unverified"); they are built first.
import torch
import tilelang
import tilelang.language as T

BLOCK_M, BLOCK_N, BLOCK_K = 64, 64, 32
STAGES = 2
THREADS = 128
CHUNK = 1024
_kernels = {}


def _build_gate_up(d, f, e, dtype):
    t = T.symbolic("t")
    k = T.symbolic("k")
    nr = T.symbolic("nr")
    nt = T.symbolic("nt")

    @T.prim_func
    def moe_gate_up(X: T.Tensor((t, d), dtype), W1: T.Tensor((e, 2 * f, d), dtype), ROWS: T.Tensor((nr,), "int32"),
                    TE: T.Tensor((nt,), "int32"), IDS: T.Tensor((t, k), "int32"), ACT: T.Tensor((nr, f), dtype)):
        with T.Kernel(T.ceildiv(f, BLOCK_N), nt, threads=THREADS) as (bx, by):
            a_s = T.alloc_shared((BLOCK_M, BLOCK_K), dtype)
            g_s = T.alloc_shared((BLOCK_N, BLOCK_K), dtype)
            u_s = T.alloc_shared((BLOCK_N, BLOCK_K), dtype)
            acc_g = T.alloc_fragment((BLOCK_M, BLOCK_N), "float32")
            acc_u = T.alloc_fragment((BLOCK_M, BLOCK_N), "float32")
            ex = TE[by]
            T.clear(acc_g)
            T.clear(acc_u)
            for ko in T.Pipelined(T.ceildiv(d, BLOCK_K), num_stages=STAGES):
                for i, kk in T.Parallel(BLOCK_M, BLOCK_K):
                    p = ROWS[by * BLOCK_M + i]
                    col = ko * BLOCK_K + kk
                    a_s[i, kk] = T.if_then_else((p < t * k) & (col < d), X[p // k, col], T.Cast(dtype, 0))
                # rows past F of the gate tile read up rows: their columns are never stored
                T.copy(W1[ex, bx * BLOCK_N:(bx + 1) * BLOCK_N, ko * BLOCK_K:(ko + 1) * BLOCK_K], g_s)
                T.copy(W1[ex, f + bx * BLOCK_N:f + (bx + 1) * BLOCK_N, ko * BLOCK_K:(ko + 1) * BLOCK_K], u_s)
                T.gemm(a_s, g_s, acc_g, transpose_B=True)
                T.gemm(a_s, u_s, acc_u, transpose_B=True)
            for i, j in T.Parallel(BLOCK_M, BLOCK_N):
                if bx * BLOCK_N + j < f:
                    g = T.Cast("float32", T.Cast(dtype, acc_g[i, j]))
                    u = T.Cast("float32", T.Cast(dtype, acc_u[i, j]))
                    ACT[by * BLOCK_M + i, bx * BLOCK_N + j] = T.Cast(dtype, g / (T.float32(1) + T.exp(-g)) * u)

    return tilelang.compile(moe_gate_up)


def _build_down(d, f, e, dtype):
    n = T.symbolic("n")                 # = t * k (TVM binds no symbol from a product in a shape)
    t = T.symbolic("t")
    k = T.symbolic("k")
    nr = T.symbolic("nr")
    nt = T.symbolic("nt")

    @T.prim_func
    def moe_down(ACT: T.Tensor((nr, f), dtype), W2: T.Tensor((e, d, f), dtype), ROWS: T.Tensor((nr,), "int32"),
                 TE: T.Tensor((nt,), "int32"), WT: T.Tensor((t, k), "float32"), BUF: T.Tensor((n, d), "float32")):
        with T.Kernel(T.ceildiv(d, BLOCK_N), nt, threads=THREADS) as (bx, by):
            a_s = T.alloc_shared((BLOCK_M, BLOCK_K), dtype)
            b_s = T.alloc_shared((BLOCK_N, BLOCK_K), dtype)
            acc = T.alloc_fragment((BLOCK_M, BLOCK_N), "float32")
            ex = TE[by]
            T.clear(acc)
            for ko in T.Pipelined(T.ceildiv(f, BLOCK_K), num_stages=STAGES):
                T.copy(ACT[by * BLOCK_M:(by + 1) * BLOCK_M, ko * BLOCK_K:(ko + 1) * BLOCK_K], a_s)
                T.copy(W2[ex, bx * BLOCK_N:(bx + 1) * BLOCK_N, ko * BLOCK_K:(ko + 1) * BLOCK_K], b_s)
                T.gemm(a_s, b_s, acc, transpose_B=True)
            for i, j in T.Parallel(BLOCK_M, BLOCK_N):
                p = ROWS[by * BLOCK_M + i]
                if (p < t * k) & (bx * BLOCK_N + j < d):
                    BUF[p, bx * BLOCK_N + j] = acc[i, j] * WT[p // k, p % k]

    return tilelang.compile(moe_down)


def _build_hist():
    t = T.symbolic("t")
    k = T.symbolic("k")
    e = T.symbolic("e")
    nb = T.symbolic("nb")

    @T.prim_func
    def moe_sort_hist(ids: T.Tensor((t, k), "int32"), hist: T.Tensor((nb, e), "int32")):
        with T.Kernel(nb, threads=256) as b:
            for tt in T.Parallel(256):
                for eo in T.serial(T.ceildiv(e, 256)):
                    ex = eo * 256 + tt
                    if ex < e:
                        cnt = T.alloc_var("int32")
                        cnt = 0
                        for i in T.serial(CHUNK):
                            p = b * CHUNK + i
                            if p < t * k:
                                if ids[p // k, p % k] == ex:
                                    cnt += 1
                        hist[b, ex] = cnt

    return tilelang.compile(moe_sort_hist)


def _build_place():
    t = T.symbolic("t")
    k = T.symbolic("k")
    e = T.symbolic("e")
    nb = T.symbolic("nb")
    nr = T.symbolic("nr")
    nt = T.symbolic("nt")

    @T.prim_func
    def moe_sort_place(ids: T.Tensor((t, k), "int32"), hist: T.Tensor((nb, e), "int32"),
                       total: T.Tensor((nb, e), "int32"), before: T.Tensor((nb, e), "int32"),
                       ROWS: T.Tensor((nr,), "int32"), TE: T.Tensor((nt,), "int32")):
        with T.Kernel(nb, threads=256) as b:
            for tt in T.Parallel(256):
                for eo in T.serial(T.ceildiv(e, 256)):
                    ex = eo * 256 + tt
                    if ex < e:
                        tot = T.alloc_var("int32")
                        pre = T.alloc_var("int32")
                        tot = 0
                        pre = 0
                        for bb in T.serial(nb):
                            c = hist[bb, ex]
                            tot += c
                            pre += T.if_then_else(bb < b, c, 0)
                        total[b, ex] = tot
                        before[b, ex] = pre
            T.sync_threads()
            for tt in T.Parallel(256):
                for eo in T.serial(T.ceildiv(e, 256)):
                    ex = eo * 256 + tt
                    if ex < e:
                        base = T.alloc_var("int32")
                        pos = T.alloc_var("int32")
                        base = 0
                        for lower in T.serial(ex):
                            base += T.ceildiv(total[b, lower], BLOCK_M) * BLOCK_M
                        pos = base + before[b, ex]
                        for i in T.serial(CHUNK):
                            p = b * CHUNK + i
                            if p < t * k:
                                if ids[p // k, p % k] == ex:
                                    ROWS[pos] = p
                                    pos += 1
                        if b == 0:
                            c = total[b, ex]
                            tiles = T.ceildiv(c, BLOCK_M)
                            for q in T.serial(tiles * BLOCK_M - c):
                                ROWS[base + c + q] = t * k
                            for q in T.serial(tiles):
                                TE[base // BLOCK_M + q] = ex
            if b == 0:
                T.sync_threads()
                for tt in T.Parallel(256):
                    # past the last run: sentinel rows, row blocks on expert 0 (nothing is stored from them)
                    last = T.alloc_var("int32")
                    last = 0
                    for ex in T.serial(e):
                        last += T.ceildiv(total[0, ex], BLOCK_M) * BLOCK_M
                    for q in T.serial(T.ceildiv(nr - last, 256)):
                        j = last + q * 256 + tt
                        if j < nr:
                            ROWS[j] = t * k
                            if j % BLOCK_M == 0:
                                TE[j // BLOCK_M] = 0

    return tilelang.compile(moe_sort_place)


def _build_combine(dtype):
    n = T.symbolic("n")                 # = t * k
    t = T.symbolic("t")
    k = T.symbolic("k")
    d = T.symbolic("d")

    @T.prim_func
    def moe_combine(BUF: T.Tensor((n, d), "float32"), IDS: T.Tensor((t, k), "int32"),
                    Y: T.Tensor((t, d), dtype)):
        with T.Kernel(T.ceildiv(d, 256), t, threads=256) as (bx, tok):
            for tt in T.Parallel(256):
                col = bx * 256 + tt
                if col < d:
                    acc = T.alloc_var("float32")
                    acc = T.float32(0)
                    for j in T.serial(k):
                        acc += BUF[tok * k + j, col]
                    Y[tok, col] = T.Cast(dtype, acc)

    return tilelang.compile(moe_combine)


def fused_moe(hidden, topk_ids, topk_weights, w1, w2):
    hidden, ids, wts = hidden.contiguous(), topk_ids.contiguous(), topk_weights.contiguous()
    w1, w2 = w1.contiguous(), w2.contiguous()
    t, d = hidden.shape
    e, f = w2.shape[0], w2.shape[2]
    k = ids.shape[1]
    n = t * k
    dtype = str(hidden.dtype).removeprefix("torch.")
    key = (d, f, e, dtype)
    if key not in _kernels:
        # the GEMMs first: on the cpu backend they are what decides the status (compiled, unverified). They
        # are specialised on (D, F, E, dtype): one pair of compiles per cuda shape and dtype (16 over the
        # task's cuda workload, each an nvcc run of seconds); the combine is symbolic, built once per dtype.
        _kernels[key] = (_build_gate_up(*key), _build_down(*key))
    if ("combine", dtype) not in _kernels:
        _kernels[("combine", dtype)] = _build_combine(dtype)
    if "sort" not in _kernels:
        _kernels["sort"] = (_build_hist(), _build_place())
    gate_up, down = _kernels[key]
    combine = _kernels[("combine", dtype)]
    hist_k, place_k = _kernels["sort"]
    dev = hidden.device
    tiles = -(-n // BLOCK_M) + e                     # an upper bound on the padded runs' row blocks
    nb = max(1, -(-n // CHUNK))
    hist = torch.empty((nb, e), dtype=torch.int32, device=dev)
    total = torch.empty_like(hist)
    before = torch.empty_like(hist)
    rows = torch.empty((tiles * BLOCK_M,), dtype=torch.int32, device=dev)
    tile_expert = torch.empty((tiles,), dtype=torch.int32, device=dev)
    act = torch.empty((tiles * BLOCK_M, f), dtype=hidden.dtype, device=dev)
    buf = torch.empty((n, d), dtype=torch.float32, device=dev)
    y = torch.empty((t, d), dtype=hidden.dtype, device=dev)
    hist_k(ids, hist)
    place_k(ids, hist, total, before, rows, tile_expert)
    gate_up(hidden, w1, rows, tile_expert, ids, act)
    down(act, w2, rows, tile_expert, wts, buf)
    combine(buf, ids, y)
    return y
