# TileLang column sum with the rows split across blocks (the TileLang twin of triton_split_rows.py). Stage 1:
# a 2-D grid of (column blocks of BLOCK_N columns, row splits); each thread owns one column of its block and
# sums that column over its split's rows into a float32 partial, so every row step is one coalesced load of
# BLOCK_N contiguous elements and the grid has enough blocks to fill the GPU (the slow sibling,
# tilelang_column_threads.py, walks all M rows in cdiv(N, BLOCK_N) blocks). Stage 2: one thread per column
# adds its SPLITS float32 partials and writes the column's sum once, in the input dtype. Plain local
# accumulators and global loads, so it lowers to TileLang's C target and is verified on the cpu backend.
import tilelang
import tilelang.language as T
import torch

BLOCK_N = 128
TARGET_BLOCKS = 528        # ~4 blocks per SM on a 132-SM H200
MIN_ROWS = 32              # a split walks at least this many rows
_kernels = {}


def _splits(m: int, n: int) -> int:
    col_blocks = -(-n // BLOCK_N)
    want = -(-TARGET_BLOCKS // col_blocks)
    return max(1, min(want, -(-m // MIN_ROWS)))


def _build(m, n, dtype):
    splits = _splits(m, n)
    rows = -(-m // splits)

    @T.prim_func
    def partial_sums(X: T.Tensor((m, n), dtype), P: T.Tensor((splits, n), "float32")):
        with T.Kernel(T.ceildiv(n, BLOCK_N), splits, threads=BLOCK_N) as (bx, by):
            for j in T.Parallel(BLOCK_N):
                col = bx * BLOCK_N + j
                if col < n:
                    acc = T.alloc_var("float32")
                    acc = T.float32(0)
                    for i in T.serial(rows):
                        row = by * rows + i
                        if row < m:
                            acc += T.Cast("float32", X[row, col])
                    P[by, col] = acc

    @T.prim_func
    def combine(P: T.Tensor((splits, n), "float32"), Y: T.Tensor((n,), dtype)):
        with T.Kernel(T.ceildiv(n, BLOCK_N), threads=BLOCK_N) as bx:
            for j in T.Parallel(BLOCK_N):
                col = bx * BLOCK_N + j
                if col < n:
                    acc = T.alloc_var("float32")
                    acc = T.float32(0)
                    for s in T.serial(splits):
                        acc += P[s, col]
                    Y[col] = T.Cast(dtype, acc)

    return splits, tilelang.compile(partial_sums), tilelang.compile(combine)


def column_sum(x):
    x = x.contiguous()
    m, n = x.shape
    dtype = str(x.dtype).removeprefix("torch.")
    key = (m, n, dtype)
    if key not in _kernels:
        _kernels[key] = _build(m, n, dtype)
    splits, partial_sums, combine = _kernels[key]
    p = torch.empty((splits, n), dtype=torch.float32, device=x.device)
    y = torch.empty((n,), dtype=x.dtype, device=x.device)
    partial_sums(x, p)
    combine(p, y)
    return y
