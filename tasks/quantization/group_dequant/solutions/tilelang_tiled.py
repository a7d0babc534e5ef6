# TileLang group dequantization: the grid covers [M, N] with [8, 512] tiles, one 256-thread block each, and
# T.Parallel maps the tile onto the threads (consecutive threads on consecutive columns: coalesced loads of q
# and stores of y); every element reads its group's float32 scale (scale[i, j // 128], from L1: 4 per 512
# columns), multiplies in float32 and stores the bfloat16 result. One read of q and of the scales, one write
# of y.
# Written for TileLang's C target too, so it is verified on the cpu backend, which has neither bfloat16 nor
# float8 there: float8 q arrives as its uint8 bits (a view) and is decoded in integer arithmetic (exponent
# rebiased 7 -> 127 into a float32 bit pattern; exponent 0 is the subnormal m * 2^-9), and the product is
# rounded to bfloat16 by hand (round-to-nearest-even on the float32 bits: add 0x7FFF plus the kept lowest bit,
# keep the high 16) into a uint16 buffer the wrapper returns viewed as bfloat16 (views: no extra pass). Both
# conversions are exact or correctly rounded, as the GPU's own casts are. M, N and the group count are
# symbolic: one compile per input dtype serves every shape.
import torch
import tilelang
import tilelang.language as T

GROUP = 128
BLOCK_M, BLOCK_N, THREADS = 8, 512, 256
_kernels = {}


def _build(fp8):
    m = T.symbolic("m")
    n = T.symbolic("n")
    groups = T.symbolic("groups")
    qdtype = "uint8" if fp8 else "int8"

    @T.prim_func
    def group_dequant_kernel(Q: T.Tensor((m, n), qdtype), S: T.Tensor((m, groups), "float32"),
                             Y: T.Tensor((m, n), "uint16")):
        with T.Kernel(T.ceildiv(n, BLOCK_N), T.ceildiv(m, BLOCK_M), threads=THREADS) as (bx, by):
            for i, j in T.Parallel(BLOCK_M, BLOCK_N):
                r = by * BLOCK_M + i
                c = bx * BLOCK_N + j
                if r < m and c < n:
                    if fp8:
                        b = T.Cast("int32", Q[r, c])
                        e = (b >> 3) & 15
                        mag = T.if_then_else(
                            e == 0, T.Cast("float32", b & 7) * T.float32(0.001953125),
                            T.reinterpret("float32", ((e + 120) << 23) | ((b & 7) << 20)))
                        qv = T.if_then_else(b >= 128, -mag, mag)
                    else:
                        qv = T.Cast("float32", Q[r, c])
                    bits = T.reinterpret("int32", qv * S[r, c // GROUP])
                    Y[r, c] = T.Cast("uint16", ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF)

    return tilelang.compile(group_dequant_kernel)


def group_dequant(q, scale):
    q, scale = q.contiguous(), scale.contiguous()
    m, n = q.shape
    fp8 = q.dtype == torch.float8_e4m3fn
    if fp8 not in _kernels:
        _kernels[fp8] = _build(fp8)
    y = torch.empty((m, n), dtype=torch.uint16, device=q.device)
    _kernels[fp8](q.view(torch.uint8) if fp8 else q, scale, y)
    return y.view(torch.bfloat16)
