# Depthwise 3x3 conv2d (NCHW, stride 1, zero padding 1) in TileLang: one block per (image n, channel c,
# run of BLOCK output pixels), one output pixel per thread, the nine taps unrolled into predicated loads
# (the predicate is the zero border) and float32 multiply-adds. Neighbouring threads read neighbouring
# pixels, so every tap is a coalesced load and the 3x3 reuse is served by the cache. Memory-bound, like
# the operator. Simple enough to run on TileLang's C target.
import tilelang
import tilelang.language as T

_kernels = {}

BLOCK = 256   # output pixels per block, one per thread


def _build(n, c, h, w, dtype):
    hw = h * w

    @T.prim_func
    def dwconv3x3(X: T.Tensor((n, c, h, w), dtype), Wt: T.Tensor((c, 1, 3, 3), dtype),
                  Y: T.Tensor((n, c, h, w), dtype)):
        with T.Kernel(T.ceildiv(hw, BLOCK), c, n, threads=BLOCK) as (bx, ch, b):
            for i in T.Parallel(BLOCK):
                acc = T.alloc_var("float32")
                acc = 0.0
                p = bx * BLOCK + i
                oh = p // w
                ow = p % w
                for ri in T.unroll(3):
                    for si in T.unroll(3):
                        ih = oh + ri - 1
                        iw = ow + si - 1
                        ok = (p < hw) and (ih >= 0) and (ih < h) and (iw >= 0) and (iw < w)
                        acc += (T.if_then_else(ok, T.Cast("float32", X[b, ch, ih, iw]), 0.0)
                                * T.Cast("float32", Wt[ch, 0, ri, si]))
                if p < hw:
                    Y[b, ch, oh, ow] = T.Cast(dtype, acc)

    return tilelang.compile(dwconv3x3, out_idx=[-1])


def depthwise_conv2d(x, weight):
    x = x.contiguous()
    weight = weight.contiguous()
    n, c, h, w = x.shape
    dtype = str(x.dtype).removeprefix("torch.")
    key = (n, c, h, w, dtype)
    if key not in _kernels:
        _kernels[key] = _build(n, c, h, w, dtype)
    return _kernels[key](x, weight)
