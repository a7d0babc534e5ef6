# TileLang GEMV: one block of 128 threads per BLOCK_N = 8 weight rows. Each K step the block loads a
# [8, BLOCK_K] weight tile (rows K-contiguous, so each thread's run of the tile is one vector load) and
# the matching x chunk, and accumulates the float32 products elementwise into a [8, BLOCK_K] register
# fragment; one block-wide T.reduce_sum over K after the loop gives the 8 outputs, rounded once. Guarded
# loads cover a K that is not a multiple of BLOCK_K and a last row block past N. Compiled once per
# (shape, dtype) and cached.
# The cpu backend cannot run it: register fragments (T.clear, T.reduce_sum on a fragment) do not lower to
# TileLang's C target, so the harness lowers it for CUDA sm_90a and compiles it with nvcc instead
# (cpu_status "unverified").
import tilelang
import tilelang.language as T

BLOCK_N = 8
THREADS = 128

_kernels = {}


def _build(n, k, dtype):
    block_k = 512 if dtype == "float32" else 1024          # 16 KB of weight per step either way

    @T.prim_func
    def gemv_kernel(W: T.Tensor((n, k), dtype), X: T.Tensor((k,), dtype), Y: T.Tensor((n,), dtype)):
        with T.Kernel(T.ceildiv(n, BLOCK_N), threads=THREADS) as bx:
            acc = T.alloc_fragment((BLOCK_N, block_k), "float32")
            out = T.alloc_fragment((BLOCK_N,), "float32")
            T.clear(acc)
            for ko in T.serial(T.ceildiv(k, block_k)):
                for i, j in T.Parallel(BLOCK_N, block_k):
                    row = bx * BLOCK_N + i
                    kk = ko * block_k + j
                    acc[i, j] += T.if_then_else(
                        (row < n) and (kk < k),
                        T.Cast("float32", W[row, kk]) * T.Cast("float32", X[kk]), T.float32(0))
            T.reduce_sum(acc, out, dim=1)
            for i in T.Parallel(BLOCK_N):
                if bx * BLOCK_N + i < n:
                    Y[bx * BLOCK_N + i] = T.Cast(dtype, out[i])

    return tilelang.compile(gemv_kernel, out_idx=[-1])


def gemv(weight, x):
    weight = weight.contiguous()
    x = x.contiguous()
    n, k = weight.shape
    dtype = str(weight.dtype).removeprefix("torch.")
    key = (n, k, dtype)
    if key not in _kernels:
        _kernels[key] = _build(n, k, dtype)
    return _kernels[key](weight, x)
