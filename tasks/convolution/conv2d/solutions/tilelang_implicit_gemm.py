# Conv2d (NCHW, stride 1, 'same' zero padding) as an implicit GEMM in TileLang, one GEMM per image:
# out[n] (K x H*W) = weight (K x C*R*S) @ im2col(x[n]) (C*R*S x H*W). Each block owns a tile of output
# channels x output pixels; per reduction step it copies a weight tile and gathers an im2col tile (zero
# outside the image) into shared memory, and T.gemm accumulates into a float32 fragment, software
# pipelined by T.Pipelined. GPU-style (shared memory, fragments, tensor cores): it does not lower to
# TileLang's C target, so on the cpu backend it is only compiled for CUDA sm_90a.
import tilelang
import tilelang.language as T

_kernels = {}

BLOCK_M = 64      # output channels per block
BLOCK_N = 128     # output pixels per block
BLOCK_K = 32      # reduction (c, r, s) per step
STAGES = 3
THREADS = 128


def _build(n, c, h, w, k, r, s, dtype):
    hw = h * w
    crs = c * r * s
    rs = r * s
    ph, pw = r // 2, s // 2
    accum = "float32"

    @T.prim_func
    def conv2d_igemm(X: T.Tensor((n, c, h, w), dtype), Wt: T.Tensor((k, c, r, s), dtype),
                     Y: T.Tensor((n, k, h, w), dtype)):
        with T.Kernel(T.ceildiv(hw, BLOCK_N), T.ceildiv(k, BLOCK_M), n, threads=THREADS) as (bx, by, bz):
            w_shared = T.alloc_shared((BLOCK_M, BLOCK_K), dtype)
            x_shared = T.alloc_shared((BLOCK_K, BLOCK_N), dtype)
            acc = T.alloc_fragment((BLOCK_M, BLOCK_N), accum)
            w_flat = T.Tensor((k, crs), dtype, Wt.data)
            y_flat = T.Tensor((n, k, hw), dtype, Y.data)
            T.clear(acc)
            for ko in T.Pipelined(T.ceildiv(crs, BLOCK_K), num_stages=STAGES):
                for i, j in T.Parallel(BLOCK_M, BLOCK_K):
                    kk = by * BLOCK_M + i
                    red = ko * BLOCK_K + j
                    w_shared[i, j] = T.if_then_else((kk < k) and (red < crs), w_flat[kk, red], 0)
                for i, j in T.Parallel(BLOCK_K, BLOCK_N):
                    red = ko * BLOCK_K + i
                    p = bx * BLOCK_N + j
                    ih = p // w + (red % rs) // s - ph
                    iw = p % w + red % s - pw
                    ok = (red < crs) and (p < hw) and (ih >= 0) and (ih < h) and (iw >= 0) and (iw < w)
                    x_shared[i, j] = T.if_then_else(ok, X[bz, red // rs, ih, iw], 0)
                T.gemm(w_shared, x_shared, acc)
            for i, j in T.Parallel(BLOCK_M, BLOCK_N):
                kk = by * BLOCK_M + i
                p = bx * BLOCK_N + j
                if (kk < k) and (p < hw):
                    y_flat[bz, kk, p] = T.Cast(dtype, acc[i, j])

    return tilelang.compile(conv2d_igemm, out_idx=[-1])


def conv2d(x, weight):
    x = x.contiguous()
    weight = weight.contiguous()
    n, c, h, w = x.shape
    k, _, r, s = weight.shape
    dtype = str(x.dtype).removeprefix("torch.")
    key = (n, c, h, w, k, r, s, dtype)
    if key not in _kernels:
        _kernels[key] = _build(n, c, h, w, k, r, s, dtype)
    return _kernels[key](x, weight)
