# Defect: no_tiling. One block per (row of y, 128 outputs): each of the 128 threads owns one output in a
# float32 fragment and walks K serially, reading x[row, k] and weight[col, k] straight from global memory
# (the weight reads are strided by K across the threads: uncoalesced too). Bias and ReLU are fused at the
# end. Nothing is staged in shared memory or reused and no tensor core is used. Lowers to the C target.
import tilelang
import tilelang.language as T

BLOCK_N = 128

_kernels = {}


def _build(m, n, k, dtype):
    @T.prim_func
    def linear_relu_kernel(X: T.Tensor((m, k), dtype), W: T.Tensor((n, k), dtype), Bias: T.Tensor((n,), dtype),
                           Y: T.Tensor((m, n), dtype)):
        with T.Kernel(T.ceildiv(n, BLOCK_N), m, threads=BLOCK_N) as (bx, row):
            acc = T.alloc_fragment((BLOCK_N,), "float32")
            for j in T.Parallel(BLOCK_N):
                acc[j] = 0.0
            for kk in T.serial(k):
                for j in T.Parallel(BLOCK_N):
                    col = bx * BLOCK_N + j
                    acc[j] += T.Cast("float32", X[row, kk]) * T.if_then_else(
                        col < n, T.Cast("float32", W[col, kk]), T.float32(0))
            for j in T.Parallel(BLOCK_N):
                col = bx * BLOCK_N + j
                if col < n:
                    Y[row, col] = T.Cast(dtype, T.max(acc[j] + T.Cast("float32", Bias[col]), T.float32(0)))

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
