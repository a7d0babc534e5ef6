# Idiomatic TileLang, slow (defect: sequential_reduction): one block per row; the row's maximum and its
# sum of exponentials are accumulated by serial loops (T.serial) into float32 locals, so the block's
# threads never share the work and the loads are not vectorized. Compiled once per (shape, dtype).
import tilelang
import tilelang.language as T

_kernels = {}


def _build(m, n, dtype):
    @T.prim_func
    def softmax_kernel(X: T.Tensor((m, n), dtype), Y: T.Tensor((m, n), dtype)):
        with T.Kernel(m, threads=128) as row:
            stats = T.alloc_local((2,), "float32")
            stats[0] = T.Cast("float32", X[row, 0])
            stats[1] = 0.0
            for j in T.serial(n):
                stats[0] = T.max(stats[0], T.Cast("float32", X[row, j]))
            for j in T.serial(n):
                stats[1] += T.exp(T.Cast("float32", X[row, j]) - stats[0])
            for j in T.serial(n):
                Y[row, j] = T.Cast(dtype, T.exp(T.Cast("float32", X[row, j]) - stats[0]) / stats[1])

    return tilelang.compile(softmax_kernel, out_idx=[-1])


def softmax(x):
    x = x.contiguous()
    m, n = x.shape
    dtype = str(x.dtype).removeprefix("torch.")
    key = (m, n, dtype)
    if key not in _kernels:
        _kernels[key] = _build(m, n, dtype)
    return _kernels[key](x)
