# Causal depthwise conv1d + bias + SiLU (Mamba's short conv) in TileLang: one block per (run of BLOCK
# positions, channel d, batch b), one output position per thread. The W taps are unrolled into
# predicated loads (the predicate is the causal zero padding) and float32 multiply-adds; bias and SiLU
# are fused before the single store. Neighbouring threads read neighbouring positions, so every tap is a
# coalesced load and the overlap between taps is served by the cache. Simple enough for the C target.
import tilelang
import tilelang.language as T

_kernels = {}

BLOCK = 128   # positions per block, one per thread


def _build(b, d, length, w, dtype):
    @T.prim_func
    def causal_conv1d_silu(X: T.Tensor((b, d, length), dtype), Wt: T.Tensor((d, w), dtype),
                           Bias: T.Tensor((d,), dtype), Y: T.Tensor((b, d, length), dtype)):
        with T.Kernel(T.ceildiv(length, BLOCK), d, b, threads=BLOCK) as (bx, ch, bb):
            for i in T.Parallel(BLOCK):
                acc = T.alloc_var("float32")
                acc = T.Cast("float32", Bias[ch])
                p = bx * BLOCK + i
                for j in T.unroll(w):
                    q = p + j - (w - 1)
                    ok = (p < length) and (q >= 0)
                    acc += (T.if_then_else(ok, T.Cast("float32", X[bb, ch, q]), 0.0)
                            * T.Cast("float32", Wt[ch, j]))
                if p < length:
                    Y[bb, ch, p] = T.Cast(dtype, acc / (1.0 + T.exp(-acc)))

    return tilelang.compile(causal_conv1d_silu, out_idx=[-1])


def causal_conv1d(x, weight, bias):
    x = x.contiguous()
    weight = weight.contiguous()
    bias = bias.contiguous()
    b, d, length = x.shape
    w = weight.shape[1]
    dtype = str(x.dtype).removeprefix("torch.")
    key = (b, d, length, w, dtype)
    if key not in _kernels:
        _kernels[key] = _build(b, d, length, w, dtype)
    return _kernels[key](x, weight, bias)
