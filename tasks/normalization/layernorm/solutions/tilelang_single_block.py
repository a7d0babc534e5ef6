# Idiomatic-looking TileLang, extremely slow (defect: too_few_programs): the kernel is launched with a single
# block of 128 threads, which walks the rows in sequence (T.serial over M). Within a row the work is
# parallel (T.Parallel over the columns, block-wide T.reduce_sum for the mean and the variance), so each
# row is done well, but one block runs on one SM: the H200's other 131 SMs idle and one SM pulls a tiny
# fraction of the memory bandwidth. This is the shape of the source paper's TileLang LayerNorm that passed
# KernelBench's allclose check while running over 300x slower than PyTorch.
# Fragment reductions do not lower to TileLang's C target: on the cpu backend it is lowered for CUDA sm_90a
# and compiled with nvcc instead (cpu_status "unverified").
import tilelang
import tilelang.language as T

THREADS = 128
CHUNK = 8 * THREADS
EPS = 1e-5

_kernels = {}


def _build(m, n, dtype):
    width = (n + CHUNK - 1) // CHUNK * CHUNK

    @T.prim_func
    def layernorm_kernel(X: T.Tensor((m, n), dtype), W: T.Tensor((n,), dtype), B: T.Tensor((n,), dtype),
                         Y: T.Tensor((m, n), dtype)):
        with T.Kernel(1, threads=THREADS) as _:
            x = T.alloc_fragment((1, width), "float32")
            sq = T.alloc_fragment((1, width), "float32")
            total = T.alloc_fragment((1,), "float32")
            var = T.alloc_fragment((1,), "float32")
            for row in T.serial(m):
                for i, j in T.Parallel(1, width):
                    x[i, j] = T.if_then_else(j < n, T.Cast("float32", X[row, j]), T.float32(0))
                T.reduce_sum(x, total, dim=1)
                for i, j in T.Parallel(1, width):
                    d = T.if_then_else(j < n, x[i, j] - total[i] / n, T.float32(0))
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
