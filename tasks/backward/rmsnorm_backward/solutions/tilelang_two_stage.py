# TileLang RMSNorm backward in two launches, the dweight column sum split into per-group partials.
# 1. rows: G blocks (~4 per SM on the cuda shapes) of THREADS threads, each block walking a group of
#    consecutive rows. Per row, every thread accumulates sum(x^2) and sum(dy * w * x) over its strided
#    elements in float32 registers and folds them into the row's two float32 scratch slots with one atomic
#    add each; after a block barrier every thread reads the sums (rstd = 1 / sqrt(mean(x^2) + eps) and
#    mean(g * xhat) = rstd * sum(g * x) / N), writes its elements of dx and adds dy * xhat into the group's
#    float32 dweight partial (the same thread owns the same columns in every row, so no race). The row's
#    second read hits L1/L2 (one row is 8-16 KB at the cuda widths).
# 2. columns: one thread per column sums the G partials in float32 and writes row M of the output.
# Plain registers, atomics and global scratch (no fragment or shared buffers, no T.reduce_*), so both kernels
# also lower to TileLang's C target and are verified on the cpu backend. M and N are symbolic, the rows per
# group a scalar argument: one compile per dtype serves every shape. The atomics make the row sums' order,
# and so their last bits, vary between runs (within the task's float32 error bound).
import torch
import tilelang
import tilelang.language as T

THREADS = 256
GROUPS = 528            # ~4 blocks per SM of a 132-SM H100/H200
EPS = 1e-6
_kernels = {}


def _build_rows(dtype):
    m = T.symbolic("m")
    n = T.symbolic("n")
    g = T.symbolic("g")

    @T.prim_func
    def rmsnorm_bwd_rows(X: T.Tensor((m, n), dtype), DY: T.Tensor((m, n), dtype), W: T.Tensor((n,), dtype),
                         S: T.Tensor((m, 2), "float32"), P: T.Tensor((g, n), "float32"),
                         Y: T.Tensor((m + 1, n), dtype), rows_per_group: T.int32):
        with T.Kernel(g, threads=THREADS) as grp:
            for r in T.serial(rows_per_group):
                row = grp * rows_per_group + r
                if row < m:
                    for tt in T.Parallel(THREADS):
                        sxx = T.alloc_var("float32")
                        sgx = T.alloc_var("float32")
                        sxx = T.float32(0)
                        sgx = T.float32(0)
                        for c in T.serial(T.ceildiv(n, THREADS)):
                            col = c * THREADS + tt
                            if col < n:
                                xv = T.Cast("float32", X[row, col])
                                sxx += xv * xv
                                sgx += T.Cast("float32", DY[row, col]) * T.Cast("float32", W[col]) * xv
                        T.atomic_add(S[row, 0], sxx)
                        T.atomic_add(S[row, 1], sgx)
                    T.sync_threads()
                    for tt in T.Parallel(THREADS):
                        rstd = T.float32(1) / T.sqrt(S[row, 0] / T.Cast("float32", n) + T.float32(EPS))
                        c2 = rstd * S[row, 1] / T.Cast("float32", n)
                        for c in T.serial(T.ceildiv(n, THREADS)):
                            col = c * THREADS + tt
                            if col < n:
                                dyv = T.Cast("float32", DY[row, col])
                                xhat = T.Cast("float32", X[row, col]) * rstd
                                Y[row, col] = T.Cast(dtype, rstd * (dyv * T.Cast("float32", W[col]) - xhat * c2))
                                P[grp, col] += dyv * xhat

    return tilelang.compile(rmsnorm_bwd_rows)


def _build_columns(dtype):
    # the output's row count as its own symbol: the C target's host wrapper cannot bind m from a shape m + 1
    m1 = T.symbolic("m1")
    n = T.symbolic("n")
    g = T.symbolic("g")

    @T.prim_func
    def rmsnorm_bwd_columns(P: T.Tensor((g, n), "float32"), Y: T.Tensor((m1, n), dtype)):
        with T.Kernel(T.ceildiv(n, THREADS), threads=THREADS) as bx:
            for tt in T.Parallel(THREADS):
                col = bx * THREADS + tt
                if col < n:
                    acc = T.alloc_var("float32")
                    acc = T.float32(0)
                    for i in T.serial(g):
                        acc += P[i, col]
                    Y[m1 - 1, col] = T.Cast(dtype, acc)

    return tilelang.compile(rmsnorm_bwd_columns)


def rmsnorm_backward(x, dy, weight):
    x, dy, weight = x.contiguous(), dy.contiguous(), weight.contiguous()
    m, n = x.shape
    dtype = str(x.dtype).removeprefix("torch.")
    if dtype not in _kernels:
        _kernels[dtype] = (_build_rows(dtype), _build_columns(dtype))
    rows, columns = _kernels[dtype]
    groups = min(m, GROUPS)
    per_group = -(-m // groups)
    groups = -(-m // per_group)
    sums = torch.zeros((m, 2), dtype=torch.float32, device=x.device)
    partial = torch.zeros((groups, n), dtype=torch.float32, device=x.device)
    y = torch.empty((m + 1, n), dtype=x.dtype, device=x.device)
    rows(x, dy, weight, sums, partial, y, per_group)
    columns(partial, y)
    return y
