# Defect: sequential_reduction. Idiomatic TileLang, one block per row, but the sum of squares is a T.serial
# loop over the row, so the block's threads never share the reduction (and every thread repeats it).
import tilelang
import tilelang.language as T

_kernels = {}


def _build(m, n, dtype):
    @T.prim_func
    def rmsnorm_kernel(X: T.Tensor((m, n), dtype), W: T.Tensor((n,), dtype), Y: T.Tensor((m, n), dtype)):
        with T.Kernel(m, threads=128) as row:
            acc = T.alloc_local((1,), "float32")
            acc[0] = 0.0
            for j in T.serial(n):
                v = T.Cast("float32", X[row, j])
                acc[0] += v * v
            for j in T.serial(n):
                r = T.rsqrt(acc[0] / n + 1e-6)
                Y[row, j] = T.Cast(dtype, T.Cast("float32", X[row, j]) * r * T.Cast("float32", W[j]))

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
