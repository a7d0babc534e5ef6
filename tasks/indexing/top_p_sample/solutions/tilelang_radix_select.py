# TileLang top-p sampling without a sort (TileLang has none), one 128-thread block per row: the Triton
# reference's radix-select algorithm with the block's threads sharing each pass. Every logit gets an
# order-preserving key (float32 bits, -0.0 made +0.0, magnitude bits flipped for negatives, shifted into
# [0, 2^32)); G(tau), the unnormalised mass of the tokens with key >= tau, falls as tau grows, so "where the
# cumulative mass in sorted order reaches a target" is a search for the largest tau with G(tau) >= target.
# Passes over the row (re-read from L2): the max (an integer atomic max on the key), the sum of exp; then two
# searches (the nucleus boundary, then the pick), each 8 rounds of radix 16 (each thread bins the mass of its
# keys at or above the bound by their next digit in a local array, the bins are folded into the row's 15
# counters with float atomic adds, and after a barrier every thread counts the candidates that still reach
# the target) and one pass for the mass strictly above tau and tau's ties; equal logits share a key and a
# probability, so the rank within the key follows from the leftover mass. A last pass finds that rank's token
# id among the tied keys: each thread counts the ties in its own contiguous slice of the row, and the thread
# whose prefix of counts brackets the rank walks its slice for the id (ties go to the lower id).
# The C target has no bfloat16: a bfloat16 row arrives as its uint16 bits (a view) and is widened to float32
# by a shift, which is exact. The atomics add in no fixed order: float32 sums, within the contract's rounding window. Register/local
# variables, atomics and barriers only, so it lowers to TileLang's C target as well and is verified on the
# cpu backend. B and V are symbolic: one compile per dtype.
import torch
import tilelang
import tilelang.language as T

THREADS = 128
_kernels = {}


def _build(dtype):
    b = T.symbolic("b")
    v = T.symbolic("v")
    bf16 = dtype == "bfloat16"
    xdtype = "uint16" if bf16 else dtype

    @T.macro
    def logit(x):
        if bf16:        # bfloat16 is the top half of a float32: exact
            f = T.reinterpret("float32", T.shift_left(T.Cast("int32", x), 16))
        else:
            f = T.Cast("float32", x)
        return T.if_then_else(f == T.float32(0), T.float32(0), f)       # -0.0 == +0.0: one key

    @T.macro
    def ukey(f):
        bits = T.reinterpret("int32", f)
        return T.Cast("int64", bits ^ ((bits >> 31) & 0x7FFFFFFF)) + T.int64(2147483648)

    @T.macro
    def key_logit(key):
        ordered = T.Cast("int32", key - T.int64(2147483648))
        return T.reinterpret("float32", ordered ^ ((ordered >> 31) & 0x7FFFFFFF))

    @T.prim_func
    def top_p_kernel(X: T.Tensor((b, v), xdtype), Temp: T.Tensor((b,), "float32"), TopP: T.Tensor((b,), "float32"),
                     U: T.Tensor((b,), "float32"), F: T.Tensor((b, 17), "float32"), I: T.Tensor((b, 2), "int32"),
                     Ties: T.Tensor((b, THREADS), "int32"), Out: T.Tensor((b,), "int64")):
        with T.Kernel(b, threads=THREADS) as row:
            inv_t = T.float32(1) / Temp[row]
            for t in T.Parallel(THREADS):
                if t < 17:
                    F[row, t] = T.float32(0)
                if t == 0:
                    I[row, 0] = -2147483647
                if t == 1:
                    I[row, 1] = 0
            T.sync_threads()
            # pass 1: the max logit, as the largest signed order-preserving key
            for t in T.Parallel(THREADS):
                mx = T.alloc_var("int32")
                mx = -2147483647
                for c in T.serial(T.ceildiv(v, THREADS)):
                    col = c * THREADS + t
                    if col < v:
                        bits = T.reinterpret("int32", logit(X[row, col]))
                        mx = T.max(mx, bits ^ ((bits >> 31) & 0x7FFFFFFF))
                T.atomic_max(I[row, 0], mx)
            T.sync_threads()
            mbits = I[row, 0] ^ ((I[row, 0] >> 31) & 0x7FFFFFFF)
            m = T.reinterpret("float32", mbits) * inv_t
            # pass 2: the softmax denominator Z
            for t in T.Parallel(THREADS):
                s = T.alloc_var("float32")
                s = T.float32(0)
                for c in T.serial(T.ceildiv(v, THREADS)):
                    col = c * THREADS + t
                    if col < v:
                        s += T.exp(logit(X[row, col]) * inv_t - m)
                T.atomic_add(F[row, 16], s)
            T.sync_threads()
            tgt = T.alloc_var("float32")
            tgt = TopP[row] * F[row, 16]
            lo = T.alloc_var("int64")
            rank = T.alloc_var("int32")
            rank = 1
            T.sync_threads()
            for t in T.Parallel(THREADS):
                if t == 0:
                    F[row, 16] = T.float32(0)
            T.sync_threads()
            # two searches: phase 0 the nucleus boundary (G >= top_p Z), phase 1 the pick (G > u * nucleus)
            for ph in T.serial(2):
                lo = T.int64(0)
                for r in T.serial(8):
                    shift = 28 - 4 * r
                    for t in T.Parallel(THREADS):
                        hist = T.alloc_local((16,), "float32")
                        for j in T.serial(16):
                            hist[j] = T.float32(0)
                        for c in T.serial(T.ceildiv(v, THREADS)):
                            col = c * THREADS + t
                            if col < v:
                                f = logit(X[row, col])
                                key = ukey(f)
                                if key >= lo:
                                    dd = T.Cast("int32", T.min((key - lo) >> shift, T.int64(15)))
                                    hist[dd] += T.exp(f * inv_t - m)
                        acc = T.alloc_var("float32")    # G(lo + d << shift) = sum of bins d..15, d = 1..15
                        acc = T.float32(0)
                        for e in T.serial(15):
                            acc += hist[15 - e]
                            if acc > T.float32(0):
                                T.atomic_add(F[row, 14 - e], acc)
                    T.sync_threads()
                    nsat = T.alloc_var("int32")
                    nsat = 1
                    for j in T.serial(15):
                        if (ph == 0 and F[row, j] >= tgt) or (ph == 1 and F[row, j] > tgt):
                            nsat += 1
                    lo = lo + T.shift_left(T.Cast("int64", nsat - 1), shift)
                    T.sync_threads()
                    for t in T.Parallel(THREADS):
                        if t < 15:
                            F[row, t] = T.float32(0)
                    T.sync_threads()
                # the mass strictly above the key found, and its ties
                for t in T.Parallel(THREADS):
                    above = T.alloc_var("float32")
                    ties = T.alloc_var("int32")
                    above = T.float32(0)
                    ties = 0
                    for c in T.serial(T.ceildiv(v, THREADS)):
                        col = c * THREADS + t
                        if col < v:
                            f = logit(X[row, col])
                            key = ukey(f)
                            if key > lo:
                                above += T.exp(f * inv_t - m)
                            if key == lo:
                                ties += 1
                    T.atomic_add(F[row, 16], above)
                    T.atomic_add(I[row, 1], ties)
                T.sync_threads()
                g_up = F[row, 16]
                n_lo = I[row, 1]
                e_lo = T.exp(key_logit(lo) * inv_t - m)
                if ph == 0:
                    # tau's ties are taken in id order until the mass reaches top_p
                    need = (tgt - g_up) / e_lo
                    rr = T.alloc_var("int32")
                    rr = T.Cast("int32", need)
                    if T.Cast("float32", rr) < need:
                        rr += 1
                    rr = T.min(T.max(rr, 1), n_lo)
                    tgt = U[row] * (g_up + T.Cast("float32", rr) * e_lo)
                else:
                    rank = T.min(T.max(T.Cast("int32", (tgt - g_up) / e_lo) + 1, 1), n_lo)
                T.sync_threads()
                for t in T.Parallel(THREADS):
                    if t == 0:
                        F[row, 16] = T.float32(0)
                    if t == 1:
                        I[row, 1] = 0
                T.sync_threads()
            # the rank-th lowest id whose key is lo: each thread counts the ties in its contiguous slice
            for t in T.Parallel(THREADS):
                cnt = T.alloc_var("int32")
                cnt = 0
                for c in T.serial(T.ceildiv(v, THREADS)):
                    col = t * T.ceildiv(v, THREADS) + c
                    if col < v:
                        if ukey(logit(X[row, col])) == lo:
                            cnt += 1
                Ties[row, t] = cnt
            T.sync_threads()
            for t in T.Parallel(THREADS):
                before = T.alloc_var("int32")
                before = 0
                for tt in T.serial(t):
                    before += Ties[row, tt]
                if before < rank and rank <= before + Ties[row, t]:
                    seen = T.alloc_var("int32")
                    seen = before
                    for c in T.serial(T.ceildiv(v, THREADS)):
                        col = t * T.ceildiv(v, THREADS) + c
                        if col < v:
                            if ukey(logit(X[row, col])) == lo:
                                seen += 1
                                if seen == rank:
                                    Out[row] = T.Cast("int64", col)

    return tilelang.compile(top_p_kernel)


def top_p_sample(logits, temperature, top_p, u):
    logits = logits.contiguous()
    bsz = logits.shape[0]
    dtype = str(logits.dtype).removeprefix("torch.")
    if dtype not in _kernels:
        _kernels[dtype] = _build(dtype)
    dev = logits.device
    f = torch.empty((bsz, 17), dtype=torch.float32, device=dev)         # zeroed in the kernel
    i = torch.empty((bsz, 2), dtype=torch.int32, device=dev)
    ties = torch.empty((bsz, THREADS), dtype=torch.int32, device=dev)
    out = torch.empty((bsz,), dtype=torch.int64, device=dev)
    x = logits.view(torch.uint16) if dtype == "bfloat16" else logits
    _kernels[dtype](x, temperature.contiguous(), top_p.contiguous(), u.contiguous(), f, i, ties, out)
    return out
