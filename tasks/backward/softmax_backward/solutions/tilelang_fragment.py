# TileLang softmax backward, GPU-style: one block of 256 threads per row, y and dy held in float32 register
# fragments (each read from memory once), c = sum(y * dy) by a block-wide T.reduce_sum, then
# dx = y * (dy - c) stored once. Rows whose length is not a multiple of the fragment are padded with
# guarded loads (0, which adds nothing to c). Compiled once per (shape, dtype) and cached.
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
    def softmax_bwd_kernel(Y: T.Tensor((m, n), dtype), DY: T.Tensor((m, n), dtype),
                           DX: T.Tensor((m, n), dtype)):
        with T.Kernel(m, threads=THREADS) as row:
            y = T.alloc_fragment((1, width), "float32")
            g = T.alloc_fragment((1, width), "float32")
            prod = T.alloc_fragment((1, width), "float32")
            total = T.alloc_fragment((1,), "float32")
            for i, j in T.Parallel(1, width):
                if padded:
                    y[i, j] = T.if_then_else(j < n, T.Cast("float32", Y[row, j]), T.float32(0))
                    g[i, j] = T.if_then_else(j < n, T.Cast("float32", DY[row, j]), T.float32(0))
                else:
                    y[i, j] = T.Cast("float32", Y[row, j])
                    g[i, j] = T.Cast("float32", DY[row, j])
            for i, j in T.Parallel(1, width):
                prod[i, j] = y[i, j] * g[i, j]
            T.reduce_sum(prod, total, dim=1)
            for i, j in T.Parallel(1, width):
                if j < n:
                    DX[row, j] = T.Cast(dtype, y[i, j] * (g[i, j] - total[i]))

    return tilelang.compile(softmax_bwd_kernel, out_idx=[-1])


def softmax_backward(y, dy):
    y = y.contiguous()
    dy = dy.contiguous()
    m, n = y.shape
    dtype = str(y.dtype).removeprefix("torch.")
    key = (m, n, dtype)
    if key not in _kernels:
        _kernels[key] = _build(m, n, dtype)
    return _kernels[key](y, dy)
