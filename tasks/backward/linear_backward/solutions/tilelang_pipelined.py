# GPU-style TileLang linear backward: two pipelined tensor-core GEMMs, each writing straight into its rows of
# the one output (dX into rows 0..M-1, dW into rows M..M+N-1, passed as two contiguous views).
# dX = dY W: each block computes a BLOCK_M x BLOCK_N tile of dX; dY and W tiles are staged in shared memory by
#   T.copy inside a T.Pipelined loop of STAGES stages (cp.async prefetch overlapping the math) and multiplied
#   with T.gemm (wgmma on sm_90a) into a float32 fragment.
# dW = dY^T X: the same loop over M, the dY tile loaded as it lies ([BLOCK_K of M, BLOCK_M of N]) and read
#   transposed by T.gemm(transpose_A=True): no transposed copy of dY is ever made.
# T.use_swizzle rasterizes the blocks in panels so that neighbours share L2; the tile is cast and stored once
# (bounds-checked by T.copy at ragged edges). The cpu backend cannot run it: shared/fragment tiles and T.gemm
# do not lower to the C target, so the harness lowers it for CUDA sm_90a and compiles it with nvcc instead
# (cpu_status "unverified").
import torch
import tilelang
import tilelang.language as T

BLOCK_M, BLOCK_N, BLOCK_K = 128, 128, 32
STAGES = 3
THREADS = 128

_kernels = {}


def _build_dx(m, n, k, dtype):
    @T.prim_func
    def linear_bwd_dx(DY: T.Tensor((m, n), dtype), W: T.Tensor((n, k), dtype), DX: T.Tensor((m, k), dtype)):
        with T.Kernel(T.ceildiv(k, BLOCK_N), T.ceildiv(m, BLOCK_M), threads=THREADS) as (bx, by):
            a_tile = T.alloc_shared((BLOCK_M, BLOCK_K), dtype)
            b_tile = T.alloc_shared((BLOCK_K, BLOCK_N), dtype)
            acc = T.alloc_fragment((BLOCK_M, BLOCK_N), "float32")
            T.use_swizzle(panel_size=10)
            T.clear(acc)
            for ko in T.Pipelined(T.ceildiv(n, BLOCK_K), num_stages=STAGES):
                T.copy(DY[by * BLOCK_M, ko * BLOCK_K], a_tile)
                T.copy(W[ko * BLOCK_K, bx * BLOCK_N], b_tile)
                T.gemm(a_tile, b_tile, acc)
            T.copy(acc, DX[by * BLOCK_M, bx * BLOCK_N])

    return tilelang.compile(linear_bwd_dx)


def _build_dw(m, n, k, dtype):
    @T.prim_func
    def linear_bwd_dw(DY: T.Tensor((m, n), dtype), X: T.Tensor((m, k), dtype), DW: T.Tensor((n, k), dtype)):
        with T.Kernel(T.ceildiv(k, BLOCK_N), T.ceildiv(n, BLOCK_M), threads=THREADS) as (bx, by):
            a_tile = T.alloc_shared((BLOCK_K, BLOCK_M), dtype)
            b_tile = T.alloc_shared((BLOCK_K, BLOCK_N), dtype)
            acc = T.alloc_fragment((BLOCK_M, BLOCK_N), "float32")
            T.use_swizzle(panel_size=10)
            T.clear(acc)
            for ko in T.Pipelined(T.ceildiv(m, BLOCK_K), num_stages=STAGES):
                T.copy(DY[ko * BLOCK_K, by * BLOCK_M], a_tile)
                T.copy(X[ko * BLOCK_K, bx * BLOCK_N], b_tile)
                T.gemm(a_tile, b_tile, acc, transpose_A=True)
            T.copy(acc, DW[by * BLOCK_M, bx * BLOCK_N])

    return tilelang.compile(linear_bwd_dw)


def linear_backward(x, weight, dy):
    x, weight, dy = x.contiguous(), weight.contiguous(), dy.contiguous()
    m, k = x.shape
    n = weight.shape[0]
    dtype = str(x.dtype).removeprefix("torch.")
    key = (m, n, k, dtype)
    if key not in _kernels:
        _kernels[key] = (_build_dx(*key), _build_dw(*key))
    dx_kernel, dw_kernel = _kernels[key]
    out = torch.empty((m + n, k), dtype=x.dtype, device=x.device)
    dx_kernel(dy, weight, out[:m])
    dw_kernel(dy, x, out[m:])
    return out
