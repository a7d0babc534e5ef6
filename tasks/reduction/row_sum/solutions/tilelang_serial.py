# Idiomatic TileLang, slow (defect: sequential_reduction): one block per row, and the row summed by a
# serial loop (T.serial) into a float32 local accumulator, so the block's threads never share the work and
# the loads are not vectorized. Compiled once per (shape, dtype) and cached.
import tilelang
import tilelang.language as T

_kernels = {}


def _build(m, n, dtype):
    @T.prim_func
    def row_sum_kernel(X: T.Tensor((m, n), dtype), Y: T.Tensor((m,), dtype)):
        with T.Kernel(m, threads=128) as row:
            acc = T.alloc_local((1,), "float32")
            acc[0] = 0.0
            for j in T.serial(n):
                acc[0] += T.Cast("float32", X[row, j])
            Y[row] = T.Cast(dtype, acc[0])

    return tilelang.compile(row_sum_kernel, out_idx=[-1])


def row_sum(x):
    x = x.contiguous()
    m, n = x.shape
    dtype = str(x.dtype).removeprefix("torch.")
    key = (m, n, dtype)
    if key not in _kernels:
        _kernels[key] = _build(m, n, dtype)
    return _kernels[key](x)
