# TileLang, GPU-style: one block of 128 threads per row. The row is walked in chunks of BLOCK_N elements
# spread over the threads (8 contiguous elements each: 16-byte loads for float16), each element squared in
# float32 and added into a per-thread float32 fragment; T.reduce_sum folds the fragment across the block
# (a warp-shuffle all-reduce), then one sqrt and a single rounding to the output dtype.
# The cpu backend cannot run it: the C target lowers no reduction over a fragment, so the harness lowers it
# for CUDA sm_90a and compiles it with nvcc instead (cpu_status "unverified").
import tilelang
import tilelang.language as T

BLOCK_N = 1024
THREADS = 128

_kernels = {}


def _build(m, n, dtype):
    chunks = (n + BLOCK_N - 1) // BLOCK_N

    @T.prim_func
    def row_l2_norm_kernel(X: T.Tensor((m, n), dtype), Y: T.Tensor((m,), dtype)):
        with T.Kernel(m, threads=THREADS) as row:
            part = T.alloc_fragment((BLOCK_N,), "float32")
            total = T.alloc_fragment((1,), "float32")
            T.clear(part)
            for c in T.serial(chunks):
                for j in T.Parallel(BLOCK_N):
                    col = c * BLOCK_N + j
                    v = T.if_then_else(col < n, T.Cast("float32", X[row, col]), T.float32(0))
                    part[j] += v * v
            T.reduce_sum(part, total, dim=0)
            Y[row] = T.Cast(dtype, T.sqrt(total[0]))

    return tilelang.compile(row_l2_norm_kernel, out_idx=[-1])


def row_l2_norm(x):
    x = x.contiguous()
    m, n = x.shape
    dtype = str(x.dtype).removeprefix("torch.")
    key = (m, n, dtype)
    if key not in _kernels:
        _kernels[key] = _build(m, n, dtype)
    return _kernels[key](x)
