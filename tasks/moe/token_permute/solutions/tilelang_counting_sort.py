# TileLang MoE token permute: a parallel stable counting sort in two launches, then the row copy fused in.
# The T * K routed pairs (flat index t * K + j) are cut into chunks of CHUNK pairs, one block each.
# 1. histogram: thread e of a chunk's block counts the pairs routed to expert e (the chunk's ids are read by
#    every thread at the same address: broadcast loads), stored to hist[chunk, e].
# 2. rank, scatter and copy: thread e of a chunk's block sums hist[., e] over all chunks (its expert's total)
#    and over the earlier chunks (the pairs of expert e before this chunk), writes both to scratch; after a
#    block barrier it adds the totals of the experts below e (its expert's first row), walks the chunk in
#    order and gives each of its pairs the next row (stable: by expert, then by flat index). After a second
#    barrier the whole block copies the chunk's token rows to their rows of the output, one row at a time,
#    neighbouring threads on neighbouring elements (coalesced), so x is read and y written at bandwidth.
# Plain registers, global scratch and block barriers (no shared or fragment buffers), so both kernels also
# lower to TileLang's C target and are verified on the cpu backend. All sizes are symbolic: one histogram
# compile, one copy compile per dtype. Limitation: TileLang's symbolic shapes index in int32, so x and the
# output may hold at most 2^31 - 1 elements (the largest cuda output holds 0.94e9).
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
    def permute_hist(ids: T.Tensor((t, k), "int32"), hist: T.Tensor((nb, e), "int32")):
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

    return tilelang.compile(permute_hist)


def _build_scatter(dtype):
    t = T.symbolic("t")
    h = T.symbolic("h")
    k = T.symbolic("k")
    e = T.symbolic("e")
    nb = T.symbolic("nb")
    n = T.symbolic("n")

    @T.prim_func
    def permute_scatter(X: T.Tensor((t, h), dtype), ids: T.Tensor((t, k), "int32"),
                        hist: T.Tensor((nb, e), "int32"), total: T.Tensor((nb, e), "int32"),
                        before: T.Tensor((nb, e), "int32"), dest: T.Tensor((n,), "int32"),
                        Y: T.Tensor((n, h), dtype)):
        with T.Kernel(nb, threads=THREADS) as b:
            for tt in T.Parallel(THREADS):
                for eo in T.serial(T.ceildiv(e, THREADS)):
                    ex = eo * THREADS + tt
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
            for tt in T.Parallel(THREADS):
                for eo in T.serial(T.ceildiv(e, THREADS)):
                    ex = eo * THREADS + tt
                    if ex < e:
                        pos = T.alloc_var("int32")
                        pos = before[b, ex]
                        for lower in T.serial(ex):
                            pos += total[b, lower]
                        for i in T.serial(CHUNK):
                            p = b * CHUNK + i
                            if p < n:
                                if ids[p // k, p % k] == ex:
                                    dest[p] = pos
                                    pos += 1
            T.sync_threads()
            for i in T.serial(CHUNK):
                p = b * CHUNK + i
                if p < n:
                    for tt in T.Parallel(THREADS):
                        for c in T.serial(T.ceildiv(h, THREADS)):
                            col = c * THREADS + tt
                            if col < h:
                                Y[dest[p], col] = X[p // k, col]

    return tilelang.compile(permute_scatter)


def moe_token_permute(x, topk_ids, num_experts):
    x = x.contiguous()
    ids = topk_ids.contiguous()
    t, h = x.shape
    k = ids.shape[1]
    n = t * k
    if n * h >= 2 ** 31:
        raise ValueError("tilelang_counting_sort indexes in int32: T * K * H must be below 2^31")
    dtype = str(x.dtype).removeprefix("torch.")
    if "hist" not in _kernels:
        _kernels["hist"] = _build_hist()
    if dtype not in _kernels:
        _kernels[dtype] = _build_scatter(dtype)
    nb = max(1, -(-n // CHUNK))
    hist = torch.empty((nb, num_experts), dtype=torch.int32, device=x.device)
    total = torch.empty_like(hist)
    before = torch.empty_like(hist)
    dest = torch.empty((n,), dtype=torch.int32, device=x.device)
    y = torch.empty((n, h), dtype=x.dtype, device=x.device)
    _kernels["hist"](ids, hist)
    _kernels[dtype](x, ids, hist, total, before, dest, y)
    return y
