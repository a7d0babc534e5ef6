# TileLang cross-entropy backward, one block of THREADS threads per token, two passes over its row.
# Pass 1: every thread walks its strided elements (each step one coalesced load across the block) with an
# online max and rescaled sum in float32 registers; the block's row max is folded with one atomic max per
# thread into a float32 scratch slot, and after a barrier each thread rescales its partial sum to that max and
# folds it with one atomic add. The per-thread (max, sum) pairs cross the barrier through a [T, THREADS]
# float32 scratch (8 bytes a thread, 2 KB a row) rather than registers: on the C target each T.Parallel loop
# runs its threads one after another, so a barrier is only honoured between two T.Parallel loops. Pass 2 (after a second barrier) re-reads the row and writes
# (exp(x - max) / sum - [j == target]) * dloss. A token whose target is -100 skips both passes and writes
# zeros without reading its logits (its target is never used as an index).
# Plain registers, atomics and global scratch (no fragment or shared buffers, no T.reduce_*), so it also
# lowers to TileLang's C target and is verified on the cpu backend. T and V are symbolic: one compile per
# dtype serves every shape. The atomic sum's order, and so its last bits, varies between runs (within the
# task's float32 error bound).
import torch
import tilelang
import tilelang.language as T

THREADS = 256
IGNORE_INDEX = -100
_kernels = {}


def _build(dtype):
    t = T.symbolic("t")
    v = T.symbolic("v")

    @T.prim_func
    def ce_backward(X: T.Tensor((t, v), dtype), TGT: T.Tensor((t,), "int64"), DL: T.Tensor((t,), "float32"),
                    MX: T.Tensor((t,), "float32"), SM: T.Tensor((t,), "float32"),
                    PM: T.Tensor((t, THREADS), "float32"), PS: T.Tensor((t, THREADS), "float32"),
                    Y: T.Tensor((t, v), dtype)):
        with T.Kernel(t, threads=THREADS) as row:
            if TGT[row] == IGNORE_INDEX:
                for tt in T.Parallel(THREADS):
                    for c in T.serial(T.ceildiv(v, THREADS)):
                        col = c * THREADS + tt
                        if col < v:
                            Y[row, col] = T.Cast(dtype, T.float32(0))
            else:
                for tt in T.Parallel(THREADS):
                    m = T.alloc_var("float32")
                    s = T.alloc_var("float32")
                    m = T.float32(-3.0e38)
                    s = T.float32(0)
                    for c in T.serial(T.ceildiv(v, THREADS)):
                        col = c * THREADS + tt
                        if col < v:
                            xv = T.Cast("float32", X[row, col])
                            mn = T.max(m, xv)
                            s = s * T.exp(m - mn) + T.exp(xv - mn)
                            m = mn
                    T.atomic_max(MX[row], m)
                    PM[row, tt] = m
                    PS[row, tt] = s
                T.sync_threads()
                for tt in T.Parallel(THREADS):
                    T.atomic_add(SM[row], PS[row, tt] * T.exp(PM[row, tt] - MX[row]))
                T.sync_threads()
                for tt in T.Parallel(THREADS):
                    scale = DL[row] / SM[row]
                    for c in T.serial(T.ceildiv(v, THREADS)):
                        col = c * THREADS + tt
                        if col < v:
                            p = T.exp(T.Cast("float32", X[row, col]) - MX[row]) * scale
                            Y[row, col] = T.Cast(dtype, T.if_then_else(T.Cast("int64", col) == TGT[row],
                                                                       p - DL[row], p))

    return tilelang.compile(ce_backward)


def cross_entropy_backward(logits, targets, dloss):
    x = logits.contiguous()
    t, v = x.shape
    dtype = str(x.dtype).removeprefix("torch.")
    if dtype not in _kernels:
        _kernels[dtype] = _build(dtype)
    mx = torch.full((t,), -3.0e38, dtype=torch.float32, device=x.device)
    sm = torch.zeros((t,), dtype=torch.float32, device=x.device)
    pm = torch.empty((t, THREADS), dtype=torch.float32, device=x.device)
    ps = torch.empty_like(pm)
    y = torch.empty_like(x)
    _kernels[dtype](x, targets.contiguous(), dloss.contiguous(), mx, sm, pm, ps, y)
    return y
