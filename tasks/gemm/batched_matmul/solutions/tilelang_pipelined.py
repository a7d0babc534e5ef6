# GPU-style TileLang batched GEMM: the batch is the kernel's third grid axis and each block computes a
# 128x128 tile of C[b]. A[b] and B[b] tiles (128x32, 32x128) are staged in shared memory by T.copy inside a
# T.Pipelined loop of 3 stages (cp.async prefetch overlapping the math), multiplied with T.gemm (wgmma on
# sm_90a) into a float32 fragment, and the tile is cast and stored once at the end (T.copy masks the M, N
# and K edges). T.use_swizzle rasterizes the blocks in panels so that neighbours share L2.
# The cpu backend cannot run it: shared/fragment tiles and T.gemm do not lower to the C target, so the
# harness lowers it for CUDA sm_90a and compiles it with nvcc instead (cpu_status "unverified").
import tilelang
import tilelang.language as T

BLOCK_M, BLOCK_N, BLOCK_K = 128, 128, 32
STAGES = 3
THREADS = 128

_kernels = {}


def _build(batch, m, n, k, dtype):
    @T.prim_func
    def bmm_kernel(A: T.Tensor((batch, m, k), dtype), B: T.Tensor((batch, k, n), dtype),
                   C: T.Tensor((batch, m, n), dtype)):
        with T.Kernel(T.ceildiv(n, BLOCK_N), T.ceildiv(m, BLOCK_M), batch, threads=THREADS) as (bx, by, bz):
            a_tile = T.alloc_shared((BLOCK_M, BLOCK_K), dtype)
            b_tile = T.alloc_shared((BLOCK_K, BLOCK_N), dtype)
            acc = T.alloc_fragment((BLOCK_M, BLOCK_N), "float32")
            T.use_swizzle(panel_size=10)
            T.clear(acc)
            for ko in T.Pipelined(T.ceildiv(k, BLOCK_K), num_stages=STAGES):
                T.copy(A[bz, by * BLOCK_M, ko * BLOCK_K], a_tile)
                T.copy(B[bz, ko * BLOCK_K, bx * BLOCK_N], b_tile)
                T.gemm(a_tile, b_tile, acc)
            T.copy(acc, C[bz, by * BLOCK_M, bx * BLOCK_N])

    return tilelang.compile(bmm_kernel, out_idx=[-1])


def batched_matmul(a, b):
    a = a.contiguous()
    b = b.contiguous()
    batch, m, k = a.shape
    n = b.shape[2]
    dtype = str(a.dtype).removeprefix("torch.")
    key = (batch, m, n, k, dtype)
    if key not in _kernels:
        _kernels[key] = _build(batch, m, n, k, dtype)
    return _kernels[key](a, b)
