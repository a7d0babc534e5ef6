# TileLang BatchNorm inference: x viewed as [N*C planes, H*W]; the grid is (planes, spatial tiles of 1024),
# each block covers its tile with T.Parallel (the compiler maps it onto 256 threads), guarded at the spatial
# tail. The channel's scale and shift are recomputed per element in float32 (a few extra flops on a
# memory-bound op) and the result rounded once. Compiled once per (shape, dtype) and cached.
import tilelang
import tilelang.language as T

BLOCK, THREADS = 1024, 256
EPS = 1e-5
_kernels = {}


def _build(planes, c, hw, dtype):
    @T.prim_func
    def bn_kernel(X: T.Tensor((planes, hw), dtype), Mean: T.Tensor((c,), dtype), Var: T.Tensor((c,), dtype),
                  W: T.Tensor((c,), dtype), B: T.Tensor((c,), dtype), Y: T.Tensor((planes, hw), dtype)):
        with T.Kernel(planes, T.ceildiv(hw, BLOCK), threads=THREADS) as (p, bx):
            for j in T.Parallel(BLOCK):
                col = bx * BLOCK + j
                if col < hw:
                    ch = p % c
                    scale = T.Cast("float32", W[ch]) * T.rsqrt(T.Cast("float32", Var[ch]) + T.float32(EPS))
                    y = (T.Cast("float32", X[p, col]) - T.Cast("float32", Mean[ch])) * scale \
                        + T.Cast("float32", B[ch])
                    Y[p, col] = T.Cast(dtype, y)

    return tilelang.compile(bn_kernel, out_idx=[-1])


def batchnorm_inference(x, running_mean, running_var, weight, bias):
    x = x.contiguous()
    n, c, h, w = x.shape
    dtype = str(x.dtype).removeprefix("torch.")
    key = (n * c, c, h * w, dtype)
    if key not in _kernels:
        _kernels[key] = _build(n * c, c, h * w, dtype)
    y = _kernels[key](x.view(n * c, h * w), running_mean.contiguous(), running_var.contiguous(),
                      weight.contiguous(), bias.contiguous())
    return y.view(n, c, h, w)
