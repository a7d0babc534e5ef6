# TileLang paged decode attention, flash-decoding over the paged KV cache in two launches.
# 1. split: one block per (split of KCHUNK key positions, head, sequence). Each thread takes strided key
#    positions below its sequence's length, maps each through the block table (page, slot), computes the
#    score q . k * D^-0.5 in float32 (the key's D elements are contiguous) into a float32 score scratch and
#    keeps a running max; the block's max is folded by one atomic max per thread. After a barrier each thread
#    turns its scores into exp(s - max) and folds their sum with one atomic add; after a second barrier thread
#    d (d < D) sums p_j * v[j, d] over the split's keys (neighbouring threads read neighbouring elements of a
#    value row: coalesced) and writes the float32 partial output. A split past its sequence's end writes a
#    zero partial with max -3e38 and sum 0, which the combine weighs by exp(-3e38 - max) = 0.
# 2. combine: thread d of each (head, sequence) rescales the splits' partials to the global max and divides
#    by the rescaled sum, in float32, one store in the input dtype.
# Garbage block-table entries and unowned pages are never read (positions >= seq_len are skipped before
# the table is read). Plain registers, atomics and global float32 scratch (no fragment or shared buffers),
# so both kernels also lower to TileLang's C target and are verified on the cpu backend; every size is
# symbolic: one compile per dtype serves every shape. The atomics' order varies the sums' last bits.
import torch
import tilelang
import tilelang.language as T

KCHUNK = 256
THREADS = 128           # >= D (the task's D is at most 128)
_kernels = {}


def _build_split(dtype):
    b = T.symbolic("b")
    h = T.symbolic("h")
    d = T.symbolic("d")
    p = T.symbolic("p")
    page = T.symbolic("page")
    maxp = T.symbolic("maxp")
    ns = T.symbolic("ns")
    lpad = T.symbolic("lpad")

    @T.prim_func
    def paged_split(Q: T.Tensor((b, h, d), dtype), K: T.Tensor((p, page, h, d), dtype),
                    V: T.Tensor((p, page, h, d), dtype), BT: T.Tensor((b, maxp), "int32"),
                    LEN: T.Tensor((b,), "int32"), SC: T.Tensor((b, h, lpad), "float32"),
                    MX: T.Tensor((b, h, ns), "float32"), SM: T.Tensor((b, h, ns), "float32"),
                    PO: T.Tensor((b, h, ns, d), "float32")):
        with T.Kernel(ns, h, b, threads=THREADS) as (sp, hh, bb):
            scale = T.float32(1) / T.sqrt(T.Cast("float32", d))
            for tt in T.Parallel(THREADS):
                m = T.alloc_var("float32")
                m = T.float32(-3.0e38)
                for j in T.serial(KCHUNK // THREADS):
                    pos = sp * KCHUNK + j * THREADS + tt
                    if pos < LEN[bb]:
                        pg = BT[bb, pos // page]
                        s = T.alloc_var("float32")
                        s = T.float32(0)
                        for i in T.serial(d):
                            s += T.Cast("float32", Q[bb, hh, i]) * T.Cast("float32", K[pg, pos % page, hh, i])
                        s = s * scale
                        SC[bb, hh, pos] = s
                        m = T.max(m, s)
                T.atomic_max(MX[bb, hh, sp], m)
            T.sync_threads()
            for tt in T.Parallel(THREADS):
                acc = T.alloc_var("float32")
                acc = T.float32(0)
                for j in T.serial(KCHUNK // THREADS):
                    pos = sp * KCHUNK + j * THREADS + tt
                    if pos < LEN[bb]:
                        e = T.exp(SC[bb, hh, pos] - MX[bb, hh, sp])
                        SC[bb, hh, pos] = e
                        acc += e
                T.atomic_add(SM[bb, hh, sp], acc)
            T.sync_threads()
            for tt in T.Parallel(THREADS):
                if tt < d:
                    o = T.alloc_var("float32")
                    o = T.float32(0)
                    for j in T.serial(KCHUNK):
                        pos = sp * KCHUNK + j
                        if pos < LEN[bb]:
                            o += SC[bb, hh, pos] * T.Cast("float32", V[BT[bb, pos // page], pos % page, hh, tt])
                    PO[bb, hh, sp, tt] = o

    return tilelang.compile(paged_split)


def _build_combine(dtype):
    b = T.symbolic("b")
    h = T.symbolic("h")
    d = T.symbolic("d")
    ns = T.symbolic("ns")

    @T.prim_func
    def paged_combine(MX: T.Tensor((b, h, ns), "float32"), SM: T.Tensor((b, h, ns), "float32"),
                      PO: T.Tensor((b, h, ns, d), "float32"), O: T.Tensor((b, h, d), dtype)):
        with T.Kernel(h, b, threads=THREADS) as (hh, bb):
            for tt in T.Parallel(THREADS):
                if tt < d:
                    gm = T.alloc_var("float32")
                    tot = T.alloc_var("float32")
                    o = T.alloc_var("float32")
                    gm = T.float32(-3.0e38)
                    for s in T.serial(ns):
                        gm = T.max(gm, MX[bb, hh, s])
                    tot = T.float32(0)
                    o = T.float32(0)
                    for s in T.serial(ns):
                        w = T.exp(MX[bb, hh, s] - gm)
                        tot += SM[bb, hh, s] * w
                        o += PO[bb, hh, s, tt] * w
                    O[bb, hh, tt] = T.Cast(dtype, o / tot)

    return tilelang.compile(paged_combine)


def paged_decode_attention(q, k_cache, v_cache, block_table, seq_lens):
    q, k_cache, v_cache = q.contiguous(), k_cache.contiguous(), v_cache.contiguous()
    block_table, seq_lens = block_table.contiguous(), seq_lens.contiguous()
    b, h, d = q.shape
    if d > THREADS:
        raise ValueError(f"tilelang_split_kv gives one thread per head dimension: D must be <= {THREADS}")
    lmax = block_table.shape[1] * k_cache.shape[1]           # every position the table can address
    ns = max(1, -(-lmax // KCHUNK))
    dtype = str(q.dtype).removeprefix("torch.")
    if dtype not in _kernels:
        _kernels[dtype] = (_build_split(dtype), _build_combine(dtype))
    split, combine = _kernels[dtype]
    dev = q.device
    scores = torch.empty((b, h, ns * KCHUNK), dtype=torch.float32, device=dev)
    mx = torch.full((b, h, ns), -3.0e38, dtype=torch.float32, device=dev)
    sm = torch.zeros((b, h, ns), dtype=torch.float32, device=dev)
    po = torch.empty((b, h, ns, d), dtype=torch.float32, device=dev)
    o = torch.empty((b, h, d), dtype=q.dtype, device=dev)
    split(q, k_cache, v_cache, block_table, seq_lens, scores, mx, sm, po)
    combine(mx, sm, po, o)
    return o
