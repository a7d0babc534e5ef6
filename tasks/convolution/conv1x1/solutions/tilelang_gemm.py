# Pointwise (1x1) conv, NCHW, in TileLang: per image a GEMM out[n] (K x HW) = W (K x C) @ x[n] (C x HW).
# Each block owns a 128x128 tile of (output channels, pixels); per 32-channel step it copies a weight
# tile and an input tile into shared memory and T.gemm accumulates into a float32 fragment, software
# pipelined by T.Pipelined. GPU-style (shared memory, fragments, tensor cores): it does not lower to
# TileLang's C target, so on the cpu backend it is only compiled for CUDA sm_90a.
import tilelang
import tilelang.language as T

_kernels = {}

BLOCK_M = 128     # output channels per block
BLOCK_N = 128     # pixels per block
BLOCK_K = 32      # input channels per step
STAGES = 3
THREADS = 128


def _build(n, c, hw, k, dtype):
    accum = "float32"

    @T.prim_func
    def conv1x1_gemm(X: T.Tensor((n, c, hw), dtype), Wt: T.Tensor((k, c), dtype),
                     Y: T.Tensor((n, k, hw), dtype)):
        with T.Kernel(T.ceildiv(hw, BLOCK_N), T.ceildiv(k, BLOCK_M), n, threads=THREADS) as (bx, by, bz):
            w_shared = T.alloc_shared((BLOCK_M, BLOCK_K), dtype)
            x_shared = T.alloc_shared((BLOCK_K, BLOCK_N), dtype)
            acc = T.alloc_fragment((BLOCK_M, BLOCK_N), accum)
            T.clear(acc)
            for ko in T.Pipelined(T.ceildiv(c, BLOCK_K), num_stages=STAGES):
                for i, j in T.Parallel(BLOCK_M, BLOCK_K):
                    kk = by * BLOCK_M + i
                    cc = ko * BLOCK_K + j
                    w_shared[i, j] = T.if_then_else((kk < k) and (cc < c), Wt[kk, cc], 0)
                for i, j in T.Parallel(BLOCK_K, BLOCK_N):
                    cc = ko * BLOCK_K + i
                    p = bx * BLOCK_N + j
                    x_shared[i, j] = T.if_then_else((cc < c) and (p < hw), X[bz, cc, p], 0)
                T.gemm(w_shared, x_shared, acc)
            for i, j in T.Parallel(BLOCK_M, BLOCK_N):
                kk = by * BLOCK_M + i
                p = bx * BLOCK_N + j
                if (kk < k) and (p < hw):
                    Y[bz, kk, p] = T.Cast(dtype, acc[i, j])

    return tilelang.compile(conv1x1_gemm, out_idx=[-1])


def conv1x1(x, weight):
    n, c, h, w = x.shape
    k = weight.shape[0]
    x3 = x.contiguous().view(n, c, h * w)
    w2 = weight.contiguous().view(k, c)
    dtype = str(x.dtype).removeprefix("torch.")
    key = (n, c, h * w, k, dtype)
    if key not in _kernels:
        _kernels[key] = _build(n, c, h * w, k, dtype)
    return _kernels[key](x3, w2).view(n, k, h, w)
