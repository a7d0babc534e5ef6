# TileLang LayerNorm, GPU-style: one block of 256 threads per row, and the whole row held in a float32
# register fragment (16-32 values per thread for N = 4096-8192), so x is read from memory once. The mean
# and the variance are block-wide T.reduce_sum reductions (warp shuffles, then shared memory) over the
# fragment; the variance is taken around the mean (two passes over registers, not over memory). Rows
# whose length is not a multiple of the fragment are padded with guarded loads (the padding adds zero to
# the sums and is never stored). Compiled once per (shape, dtype) and cached.
# The cpu backend cannot run it: fragment reductions do not lower to TileLang's C target, so the harness
# lowers it for CUDA sm_90a and compiles it with nvcc instead (cpu_status "unverified").
import tilelang
import tilelang.language as T

THREADS = 256
CHUNK = 8 * THREADS          # the fragment's length is a multiple of this (8 contiguous values a thread)
EPS = 1e-5

_kernels = {}


def _build(m, n, dtype):
    width = (n + CHUNK - 1) // CHUNK * CHUNK
    padded = width != n

    @T.prim_func
    def layernorm_kernel(X: T.Tensor((m, n), dtype), W: T.Tensor((n,), dtype), B: T.Tensor((n,), dtype),
                         Y: T.Tensor((m, n), dtype)):
        with T.Kernel(m, threads=THREADS) as row:
            x = T.alloc_fragment((1, width), "float32")
            sq = T.alloc_fragment((1, width), "float32")
            total = T.alloc_fragment((1,), "float32")
            var = T.alloc_fragment((1,), "float32")
            for i, j in T.Parallel(1, width):
                if padded:
                    x[i, j] = T.if_then_else(j < n, T.Cast("float32", X[row, j]), T.float32(0))
                else:
                    x[i, j] = T.Cast("float32", X[row, j])
            T.reduce_sum(x, total, dim=1)
            for i, j in T.Parallel(1, width):
                if padded:
                    d = T.if_then_else(j < n, x[i, j] - total[i] / n, T.float32(0))
                else:
                    d = x[i, j] - total[i] / n
                sq[i, j] = d * d
            T.reduce_sum(sq, var, dim=1)
            for i, j in T.Parallel(1, width):
                if j < n:
                    v = (x[i, j] - total[i] / n) * T.rsqrt(var[i] / n + T.float32(EPS))
                    Y[row, j] = T.Cast(dtype, v * T.Cast("float32", W[j]) + T.Cast("float32", B[j]))

    return tilelang.compile(layernorm_kernel, out_idx=[-1])


def layernorm(x, weight, bias):
    x = x.contiguous()
    m, n = x.shape
    dtype = str(x.dtype).removeprefix("torch.")
    key = (m, n, dtype)
    if key not in _kernels:
        _kernels[key] = _build(m, n, dtype)
    return _kernels[key](x, weight.contiguous(), bias.contiguous())
