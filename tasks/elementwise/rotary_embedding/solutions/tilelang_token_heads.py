# TileLang RoPE (rotate_half layout): one thread block per (token, block of BLOCK_H heads). T.Parallel over
# the block's [BLOCK_H, D/2] rotation pairs (the compiler maps them onto the block's threads); each pair
# reads q[t, h, i] and q[t, h, i + D/2] and the token's cos/sin entries (shared by all heads, served from
# cache), rotates in float32 and writes both outputs once. Guarded at the head and half-width edges.
# Compiled once per (shape, dtype) and cached.
import tilelang
import tilelang.language as T

BLOCK_H, THREADS = 8, 256
_kernels = {}


def _build(t, h, d, dtype):
    half = d // 2

    @T.prim_func
    def rope_kernel(Q: T.Tensor((t, h, d), dtype), C: T.Tensor((t, half), dtype), S: T.Tensor((t, half), dtype),
                    O: T.Tensor((t, h, d), dtype)):
        with T.Kernel(T.ceildiv(h, BLOCK_H), t, threads=THREADS) as (bh, tok):
            for j, i in T.Parallel(BLOCK_H, half):
                hh = bh * BLOCK_H + j
                if hh < h:
                    c = T.Cast("float32", C[tok, i])
                    s = T.Cast("float32", S[tok, i])
                    q1 = T.Cast("float32", Q[tok, hh, i])
                    q2 = T.Cast("float32", Q[tok, hh, i + half])
                    O[tok, hh, i] = T.Cast(dtype, q1 * c - q2 * s)
                    O[tok, hh, i + half] = T.Cast(dtype, q2 * c + q1 * s)

    return tilelang.compile(rope_kernel, out_idx=[-1])


def rotary_embedding(q, cos, sin):
    q = q.contiguous()
    cos = cos.contiguous()
    sin = sin.contiguous()
    t, h, d = q.shape
    dtype = str(q.dtype).removeprefix("torch.")
    key = (t, h, d, dtype)
    if key not in _kernels:
        _kernels[key] = _build(t, h, d, dtype)
    return _kernels[key](q, cos, sin)
