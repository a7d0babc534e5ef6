# TileLang softmax, GPU-style: one block of 256 threads per row, the whole row held in a float32 register
# fragment (x is read from memory once), the row maximum by a block-wide T.reduce_max, the exponentials
# computed once into the fragment, their sum by T.reduce_sum, then one scaled store. Rows whose length is
# not a multiple of the fragment are padded with guarded loads (-3e38, whose exponential is 0). Compiled
# once per (shape, dtype) and cached.
# The cpu backend cannot run it: fragment reductions do not lower to TileLang's C target, so the harness
# lowers it for CUDA sm_90a and compiles it with nvcc instead (cpu_status "unverified").
import tilelang
import tilelang.language as T

THREADS = 256
CHUNK = 8 * THREADS

_kernels = {}


def _build(m, n, dtype):
    width = (n + CHUNK - 1) // CHUNK * CHUNK
    padded = width != n

    @T.prim_func
    def softmax_kernel(X: T.Tensor((m, n), dtype), Y: T.Tensor((m, n), dtype)):
        with T.Kernel(m, threads=THREADS) as row:
            x = T.alloc_fragment((1, width), "float32")
            top = T.alloc_fragment((1,), "float32")
            total = T.alloc_fragment((1,), "float32")
            for i, j in T.Parallel(1, width):
                if padded:
                    x[i, j] = T.if_then_else(j < n, T.Cast("float32", X[row, j]), T.float32(-3.0e38))
                else:
                    x[i, j] = T.Cast("float32", X[row, j])
            T.reduce_max(x, top, dim=1)
            for i, j in T.Parallel(1, width):
                x[i, j] = T.exp(x[i, j] - top[i])
            T.reduce_sum(x, total, dim=1)
            for i, j in T.Parallel(1, width):
                if j < n:
                    Y[row, j] = T.Cast(dtype, x[i, j] / total[i])

    return tilelang.compile(softmax_kernel, out_idx=[-1])


def softmax(x):
    x = x.contiguous()
    m, n = x.shape
    dtype = str(x.dtype).removeprefix("torch.")
    key = (m, n, dtype)
    if key not in _kernels:
        _kernels[key] = _build(m, n, dtype)
    return _kernels[key](x)
