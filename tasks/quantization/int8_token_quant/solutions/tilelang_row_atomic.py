# TileLang per-token int8 quantization, one block of 256 threads per row. Each thread walks the row with a
# stride of 256 (every step one coalesced load across the block) keeping its own running max of |x| in a
# float32 register, then folds it into the row's absmax with one atomic max on an int32 scratch slot holding
# the float's bits (zeroed by the wrapper): |x| >= 0, and non-negative floats order like their bit patterns, so
# the GPU's native integer atomicMax does it, where a float max would be a compare-and-swap loop. After the block barrier every thread reads the absmax,
# floors it at 1e-12 (zero rows give zeros, not NaN) and quantizes its elements again: the second read of the
# row comes from L1/L2 (one row is 8-56 KB at the cuda widths), so x crosses HBM once and q is written once.
# Written with plain register variables and an atomic rather than a fragment and T.reduce_max so that it also
# lowers to TileLang's C target and is verified on the cpu backend. |x| is max(x, -x) and the rounding
# (half away from zero) a truncating int cast of |v| + 0.5: the C target resolves neither fabs nor floor.
# M and N are symbolic: one compile per dtype serves every shape.
import torch
import tilelang
import tilelang.language as T

THREADS = 256
_kernels = {}


def _build(dtype):
    m = T.symbolic("m")
    n = T.symbolic("n")

    @T.prim_func
    def int8_quant_kernel(X: T.Tensor((m, n), dtype), A: T.Tensor((m,), "int32"),
                          Q: T.Tensor((m, n), "int8")):
        with T.Kernel(m, threads=THREADS) as row:
            for t in T.Parallel(THREADS):
                acc = T.alloc_var("float32")
                acc = T.float32(0)
                for c in T.serial(T.ceildiv(n, THREADS)):
                    col = c * THREADS + t
                    if col < n:
                        v = T.Cast("float32", X[row, col])
                        acc = T.max(acc, T.max(v, -v))
                T.atomic_max(A[row], T.reinterpret("int32", acc))
            T.sync_threads()
            for t in T.Parallel(THREADS):
                scale = T.float32(127.0) / T.max(T.reinterpret("float32", A[row]), T.float32(1e-12))
                for c in T.serial(T.ceildiv(n, THREADS)):
                    col = c * THREADS + t
                    if col < n:
                        v = T.Cast("float32", X[row, col]) * scale
                        r = T.if_then_else(v >= 0, T.Cast("float32", T.Cast("int32", v + T.float32(0.5))),
                                           -T.Cast("float32", T.Cast("int32", T.float32(0.5) - v)))
                        Q[row, col] = T.Cast("int8", T.min(T.max(r, T.float32(-127.0)), T.float32(127.0)))

    return tilelang.compile(int8_quant_kernel)


def int8_token_quant(x):
    x = x.contiguous()
    m, n = x.shape
    dtype = str(x.dtype).removeprefix("torch.")
    if dtype not in _kernels:
        _kernels[dtype] = _build(dtype)
    amax = torch.zeros((m,), dtype=torch.int32, device=x.device)   # float32 bits
    q = torch.empty((m, n), dtype=torch.int8, device=x.device)
    _kernels[dtype](x, amax, q)
    return q
