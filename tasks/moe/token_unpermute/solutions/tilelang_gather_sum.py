# TileLang MoE unpermute (gather-combine): a block of BLOCK_H threads per (token, chunk of H), one output
# element per thread. Each thread walks the token's K slots, reads the slot's row index and routing weight
# (the same address across the block: one broadcast load) and its element of that expert row (neighbouring
# threads read neighbouring elements: one coalesced load per slot), accumulating in a float32 register; one
# store of y. Every expert row is read exactly once and [T, K, H] is never materialized. Plain registers and
# serial loops, so it also lowers to TileLang's C target and is verified on the cpu backend. T, H and the
# number of expert rows and K are symbolic: one compile per dtype serves every shape.
# Limitation: TileLang's symbolic shapes index in int32, so expert_out may hold at most 2^31 - 1 elements
# (the largest cuda shape holds 0.94e9).
import torch
import tilelang
import tilelang.language as T

BLOCK_H = 256
_kernels = {}


def _build(dtype):
    t = T.symbolic("t")
    k = T.symbolic("k")
    h = T.symbolic("h")
    n = T.symbolic("n")

    @T.prim_func
    def unpermute_kernel(E: T.Tensor((n, h), dtype), M: T.Tensor((t, k), "int32"), W: T.Tensor((t, k), "float32"),
                         Y: T.Tensor((t, h), dtype)):
        # tokens on the grid's x axis (up to 2^31 - 1 blocks): gridDim.y is at most 65535 on NVIDIA GPUs and
        # the cuda shapes route 65536 tokens (grid=(8, 65536) failed to launch on an H100)
        with T.Kernel(t, T.ceildiv(h, BLOCK_H), threads=BLOCK_H) as (tok, bx):
            for i in T.Parallel(BLOCK_H):
                col = bx * BLOCK_H + i
                if col < h:
                    acc = T.alloc_var("float32")
                    acc = T.float32(0)
                    for j in T.serial(k):
                        acc += W[tok, j] * T.Cast("float32", E[M[tok, j], col])
                    Y[tok, col] = T.Cast(dtype, acc)

    return tilelang.compile(unpermute_kernel)


def moe_token_unpermute(expert_out, row_map, weights):
    if expert_out.numel() >= 2 ** 31:
        raise ValueError("tilelang_gather_sum indexes in int32: expert_out must hold fewer than 2^31 elements")
    expert_out = expert_out.contiguous()
    t, k = row_map.shape
    h = expert_out.shape[1]
    dtype = str(expert_out.dtype).removeprefix("torch.")
    if dtype not in _kernels:
        _kernels[dtype] = _build(dtype)
    y = torch.empty((t, h), dtype=expert_out.dtype, device=expert_out.device)
    _kernels[dtype](expert_out, row_map.contiguous(), weights.contiguous(), y)
    return y
