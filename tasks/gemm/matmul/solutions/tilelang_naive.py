# Defect: no_tiling. One block per (row of C, 128 columns): each of the 128 threads owns one element of C
# in a float32 fragment and walks K serially, reading A[row, k] and B[k, col] straight from global memory.
# Correct and coalesced along N, but nothing is staged in shared memory and reused: B is read M times and
# A N / 128 times, and no tensor core is used. (It lowers to TileLang's C target, so the cpu backend runs it.)
import tilelang
import tilelang.language as T

BLOCK_N = 128

_kernels = {}


def _build(m, n, k, dtype):
    @T.prim_func
    def matmul_kernel(A: T.Tensor((m, k), dtype), B: T.Tensor((k, n), dtype), C: T.Tensor((m, n), dtype)):
        with T.Kernel(T.ceildiv(n, BLOCK_N), m, threads=BLOCK_N) as (bx, row):
            acc = T.alloc_fragment((BLOCK_N,), "float32")
            for j in T.Parallel(BLOCK_N):
                acc[j] = 0.0
            for kk in T.serial(k):
                for j in T.Parallel(BLOCK_N):
                    col = bx * BLOCK_N + j
                    acc[j] += T.Cast("float32", A[row, kk]) * T.if_then_else(
                        col < n, T.Cast("float32", B[kk, col]), T.float32(0))
            for j in T.Parallel(BLOCK_N):
                if bx * BLOCK_N + j < n:
                    C[row, bx * BLOCK_N + j] = T.Cast(dtype, acc[j])

    return tilelang.compile(matmul_kernel, out_idx=[-1])


def matmul(a, b):
    a = a.contiguous()
    b = b.contiguous()
    m, k = a.shape
    n = b.shape[1]
    dtype = str(a.dtype).removeprefix("torch.")
    key = (m, n, k, dtype)
    if key not in _kernels:
        _kernels[key] = _build(m, n, k, dtype)
    return _kernels[key](a, b)
