# Idiomatic TileLang, slow: one block per row and the row's statistics accumulated by a serial loop
# (T.serial), so the reduction never uses the block's threads. This is the pattern behind the source
# paper's LayerNorm that passed KernelBench's check while running far slower than PyTorch.
import tilelang
import tilelang.language as T

_kernels = {}


def _build(m, n, dtype):
    @T.prim_func
    def layernorm_kernel(X: T.Tensor((m, n), dtype), W: T.Tensor((n,), dtype), B: T.Tensor((n,), dtype),
                         Y: T.Tensor((m, n), dtype)):
        with T.Kernel(m, threads=128) as row:
            stats = T.alloc_local((2,), "float32")
            stats[0] = 0.0
            stats[1] = 0.0
            for j in T.serial(n):
                stats[0] += T.Cast("float32", X[row, j])
            for j in T.serial(n):
                d = T.Cast("float32", X[row, j]) - stats[0] / n
                stats[1] += d * d
            for j in T.serial(n):
                v = (T.Cast("float32", X[row, j]) - stats[0] / n) * T.rsqrt(stats[1] / n + 1e-5)
                Y[row, j] = T.Cast(dtype, v * T.Cast("float32", W[j]) + T.Cast("float32", B[j]))

    return tilelang.compile(layernorm_kernel, out_idx=[-1])


def layernorm(x, weight, bias):
    x = x.contiguous()
    m, n = x.shape
    dtype = str(x.dtype).removeprefix("torch.")
    key = (m, n, dtype)
    if key not in _kernels:
        _kernels[key] = _build(m, n, dtype)
    return _kernels[key](x, weight, bias)
