# TileLang moe_align_block_size: a parallel stable counting sort with padded expert runs, in three launches.
# The n = T * K routed pairs (flat index t * K + j) are cut into chunks of CHUNK pairs, one block each.
# 1. histogram: thread e of a chunk's block counts the chunk's pairs routed to expert e (every thread reads
#    the chunk's ids at the same address: broadcast loads), stored to hist[chunk, e].
# 2. scan: one block per expert e, its threads each summing a contiguous segment of hist[., e], then writing
#    the exclusive prefix before[chunk, e] of every chunk and the count c_e (total[e]). (Until 2026-12-06
#    every chunk's block summed the whole column itself: O(chunks^2 x E) reads, 137 GB from L2 per call at
#    2M tokens top-8 of 128, seconds per call; it ran past the H100 test's 150 s.)
# 3. rank and scatter: thread e adds the padded counts p_f = ceil(c_f / B) * B of the experts f below e (its
#    run's padded offset), walks the chunk in order and writes each of its pairs' flat index to the run's
#    next entry (stable). Block 0 also writes the offsets (thread e: entry e + 1;
#    entry 0 is 0), each expert's padding entries (thread e) and, all threads striding, the sentinel tail past
#    the padded total: every output entry is written exactly once, by exactly one thread.
# Plain registers, global scratch and block barriers, so the kernels also lower to TileLang's C target and
# are verified on the cpu backend. Sizes are symbolic and the block size a scalar argument: one compile of
# each kernel serves every shape.
import torch
import tilelang
import tilelang.language as T

CHUNK = 1024
THREADS = 256
_kernels = {}


def _build_hist():
    t = T.symbolic("t")
    k = T.symbolic("k")
    e = T.symbolic("e")
    nb = T.symbolic("nb")

    @T.prim_func
    def align_hist(ids: T.Tensor((t, k), "int32"), hist: T.Tensor((nb, e), "int32")):
        with T.Kernel(nb, threads=THREADS) as b:
            for tt in T.Parallel(THREADS):
                for eo in T.serial(T.ceildiv(e, THREADS)):
                    ex = eo * THREADS + tt
                    if ex < e:
                        cnt = T.alloc_var("int32")
                        cnt = 0
                        for i in T.serial(CHUNK):
                            p = b * CHUNK + i
                            if p < t * k:
                                if ids[p // k, p % k] == ex:
                                    cnt += 1
                        hist[b, ex] = cnt

    return tilelang.compile(align_hist)


def _build_scan():
    e = T.symbolic("e")
    nb = T.symbolic("nb")

    @T.prim_func
    def align_scan(hist: T.Tensor((nb, e), "int32"), part: T.Tensor((e, THREADS), "int32"),
                   before: T.Tensor((nb, e), "int32"), total: T.Tensor((e,), "int32")):
        # one block per expert; thread tt owns a contiguous segment of the chunks: its segment's sum, a
        # barrier, then its exclusive prefix over the earlier segments and a running sum through its own
        with T.Kernel(e, threads=THREADS) as ex:
            for tt in T.Parallel(THREADS):
                acc = T.alloc_var("int32")
                acc = 0
                for i in T.serial(T.ceildiv(nb, THREADS)):
                    bb = tt * T.ceildiv(nb, THREADS) + i
                    if bb < nb:
                        acc += hist[bb, ex]
                part[ex, tt] = acc
            T.sync_threads()
            for tt in T.Parallel(THREADS):
                run = T.alloc_var("int32")
                run = 0
                for j in T.serial(tt):
                    run += part[ex, j]
                for i in T.serial(T.ceildiv(nb, THREADS)):
                    bb = tt * T.ceildiv(nb, THREADS) + i
                    if bb < nb:
                        before[bb, ex] = run
                        run += hist[bb, ex]
                if tt == THREADS - 1:
                    total[ex] = run

    return tilelang.compile(align_scan)


def _build_scatter():
    t = T.symbolic("t")
    k = T.symbolic("k")
    e = T.symbolic("e")
    nb = T.symbolic("nb")
    m = T.symbolic("m")

    @T.prim_func
    def align_scatter(ids: T.Tensor((t, k), "int32"), before: T.Tensor((nb, e), "int32"),
                      total: T.Tensor((e,), "int32"), out: T.Tensor((m,), "int32"), bs: T.int32):
        with T.Kernel(nb, threads=THREADS) as b:
            for tt in T.Parallel(THREADS):
                for eo in T.serial(T.ceildiv(e, THREADS)):
                    ex = eo * THREADS + tt
                    if ex < e:
                        base = T.alloc_var("int32")
                        pos = T.alloc_var("int32")
                        base = 0
                        for lower in T.serial(ex):
                            base += T.ceildiv(total[lower], bs) * bs
                        pos = e + 1 + base + before[b, ex]
                        for i in T.serial(CHUNK):
                            p = b * CHUNK + i
                            if p < t * k:
                                if ids[p // k, p % k] == ex:
                                    out[pos] = p
                                    pos += 1
                        if b == 0:
                            c = total[ex]
                            padded = T.ceildiv(c, bs) * bs
                            out[ex + 1] = base + padded
                            for q in T.serial(padded - c):
                                out[e + 1 + base + c + q] = t * k
                            if ex == 0:
                                out[0] = 0
            if b == 0:
                T.sync_threads()
                for tt in T.Parallel(THREADS):
                    # the padded total is the last offset, written above by expert e - 1's thread
                    for q in T.serial(T.ceildiv(m - (e + 1) - out[e], THREADS)):
                        j = e + 1 + out[e] + q * THREADS + tt
                        if j < m:
                            out[j] = t * k

    return tilelang.compile(align_scatter)


def moe_align_block_size(topk_ids, num_experts, block_size):
    ids = topk_ids.contiguous()
    t, k = ids.shape
    n = t * k
    if "hist" not in _kernels:
        _kernels["hist"] = _build_hist()
        _kernels["scan"] = _build_scan()
        _kernels["scatter"] = _build_scatter()
    nb = max(1, -(-n // CHUNK))
    hist = torch.empty((nb, num_experts), dtype=torch.int32, device=ids.device)
    part = torch.empty((num_experts, THREADS), dtype=torch.int32, device=ids.device)
    before = torch.empty_like(hist)
    total = torch.empty((num_experts,), dtype=torch.int32, device=ids.device)
    out = torch.empty((num_experts + 1 + n + num_experts * (block_size - 1),), dtype=torch.int32,
                      device=ids.device)
    _kernels["hist"](ids, hist)
    _kernels["scan"](hist, part, before, total)
    _kernels["scatter"](ids, before, total, out, block_size)
    return out
