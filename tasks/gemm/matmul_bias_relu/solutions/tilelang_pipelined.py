# GPU-style TileLang linear + bias + ReLU: each block computes a 128x128 tile of y. x tiles (128x32) and
# weight tiles (128x32, rows of weight = columns of y) are staged in shared memory by T.copy inside a
# T.Pipelined loop of 3 stages, multiplied with T.gemm(transpose_B=True) (wgmma on sm_90a) into a float32
# fragment; bias and ReLU are applied to the fragment before the single cast and store.
# The cpu backend cannot run it (shared/fragment tiles and T.gemm do not lower to the C target): the
# harness lowers it for CUDA sm_90a and compiles it with nvcc instead (cpu_status "unverified").
import tilelang
import tilelang.language as T

BLOCK_M, BLOCK_N, BLOCK_K = 128, 128, 32
STAGES = 3
THREADS = 128

_kernels = {}


def _build(m, n, k, dtype):
    @T.prim_func
    def linear_relu_kernel(X: T.Tensor((m, k), dtype), W: T.Tensor((n, k), dtype), Bias: T.Tensor((n,), dtype),
                           Y: T.Tensor((m, n), dtype)):
        with T.Kernel(T.ceildiv(n, BLOCK_N), T.ceildiv(m, BLOCK_M), threads=THREADS) as (bx, by):
            x_tile = T.alloc_shared((BLOCK_M, BLOCK_K), dtype)
            w_tile = T.alloc_shared((BLOCK_N, BLOCK_K), dtype)
            acc = T.alloc_fragment((BLOCK_M, BLOCK_N), "float32")
            T.use_swizzle(panel_size=10)
            T.clear(acc)
            for ko in T.Pipelined(T.ceildiv(k, BLOCK_K), num_stages=STAGES):
                T.copy(X[by * BLOCK_M, ko * BLOCK_K], x_tile)
                T.copy(W[bx * BLOCK_N, ko * BLOCK_K], w_tile)
                T.gemm(x_tile, w_tile, acc, transpose_B=True)
            for i, j in T.Parallel(BLOCK_M, BLOCK_N):
                col = bx * BLOCK_N + j
                acc[i, j] = T.max(acc[i, j] + T.if_then_else(col < n, T.Cast("float32", Bias[col]), T.float32(0)),
                                  T.float32(0))
            T.copy(acc, Y[by * BLOCK_M, bx * BLOCK_N])

    return tilelang.compile(linear_relu_kernel, out_idx=[-1])


def linear_relu(x, weight, bias):
    x = x.contiguous()
    weight = weight.contiguous()
    bias = bias.contiguous()
    m, k = x.shape
    n = weight.shape[0]
    dtype = str(x.dtype).removeprefix("torch.")
    key = (m, n, k, dtype)
    if key not in _kernels:
        _kernels[key] = _build(m, n, k, dtype)
    return _kernels[key](x, weight, bias)
