# One block of 128 threads per row. The row is walked in chunks of BLOCK_N elements spread over the
# threads (8 contiguous elements each: 16-byte loads), squares are accumulated per thread in a float32
# fragment, and T.reduce_sum folds them across the block (a warp-shuffle all-reduce). The second pass
# re-reads the row (from L2) and writes x * rstd * weight.
# The cpu backend cannot run it: the C target lowers no reduction over a fragment, so the harness lowers it
# for CUDA sm_90a and compiles it with nvcc instead (cpu_status "unverified").
import tilelang
import tilelang.language as T

BLOCK_N = 1024
THREADS = 128

_kernels = {}


def _build(m, n, dtype):
    chunks = (n + BLOCK_N - 1) // BLOCK_N

    @T.prim_func
    def rmsnorm_kernel(X: T.Tensor((m, n), dtype), W: T.Tensor((n,), dtype), Y: T.Tensor((m, n), dtype)):
        with T.Kernel(m, threads=THREADS) as row:
            part = T.alloc_fragment((BLOCK_N,), "float32")
            total = T.alloc_fragment((1,), "float32")
            T.clear(part)
            for c in T.serial(chunks):
                for j in T.Parallel(BLOCK_N):
                    col = c * BLOCK_N + j
                    v = T.if_then_else(col < n, T.Cast("float32", X[row, col]), T.float32(0))
                    part[j] += v * v
            T.reduce_sum(part, total, dim=0)
            rstd = T.rsqrt(total[0] / n + T.float32(1e-6))
            for c in T.serial(chunks):
                for j in T.Parallel(BLOCK_N):
                    col = c * BLOCK_N + j
                    if col < n:
                        Y[row, col] = T.Cast(dtype, T.Cast("float32", X[row, col]) * rstd
                                             * T.Cast("float32", W[col]))

    return tilelang.compile(rmsnorm_kernel, out_idx=[-1])


def rmsnorm(x, weight):
    x = x.contiguous()
    weight = weight.contiguous()
    m, n = x.shape
    dtype = str(x.dtype).removeprefix("torch.")
    key = (m, n, dtype)
    if key not in _kernels:
        _kernels[key] = _build(m, n, dtype)
    return _kernels[key](x, weight)
