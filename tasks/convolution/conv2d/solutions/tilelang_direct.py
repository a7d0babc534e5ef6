# Idiomatic TileLang, slow (defect: no_tiling): a direct convolution. Each block owns one (image n,
# output channel k) pair and a run of output pixels, one pixel per thread, and every thread walks the
# whole C*R*S reduction with serial loops of scalar multiply-adds. Nothing is staged in shared memory
# and nothing is tiled over output channels, so each input value is fetched again for every one of the
# K output channels, and the tensor cores sit idle. Simple enough to run on TileLang's C target.
import tilelang
import tilelang.language as T

_kernels = {}

BLOCK = 128   # output pixels per block, one per thread


def _build(n, c, h, w, k, r, s, dtype):
    hw = h * w
    ph, pw = r // 2, s // 2

    @T.prim_func
    def conv2d_direct(X: T.Tensor((n, c, h, w), dtype), Wt: T.Tensor((k, c, r, s), dtype),
                      Y: T.Tensor((n, k, h, w), dtype)):
        with T.Kernel(T.ceildiv(hw, BLOCK), k, n, threads=BLOCK) as (bx, kk, b):
            for i in T.Parallel(BLOCK):
                acc = T.alloc_var("float32")
                acc = 0.0
                p = bx * BLOCK + i
                oh = p // w
                ow = p % w
                for ci in T.serial(c):
                    for ri in T.serial(r):
                        for si in T.serial(s):
                            ih = oh + ri - ph
                            iw = ow + si - pw
                            ok = (p < hw) and (ih >= 0) and (ih < h) and (iw >= 0) and (iw < w)
                            acc += (T.if_then_else(ok, T.Cast("float32", X[b, ci, ih, iw]), 0.0)
                                    * T.Cast("float32", Wt[kk, ci, ri, si]))
                if p < hw:
                    Y[b, kk, oh, ow] = T.Cast(dtype, acc)

    return tilelang.compile(conv2d_direct, out_idx=[-1])


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
