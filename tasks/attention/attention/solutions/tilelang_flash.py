# Flash attention forward (non-causal) in TileLang, GPU style. One block of 256 threads per (128-query tile,
# head, batch): the Q tile is copied once to shared memory; K and V tiles (128 keys) are copied to shared
# memory inside a T.Pipelined loop (2 stages, cp.async/TMA prefetch overlapping the math); T.gemm computes
# Q K^T into a float32 fragment (wgmma on sm_90a), the online softmax runs on the fragment in base 2
# (T.reduce_max, exp2, T.reduce_sum, a rescale of the float32 output accumulator), and P (cast to the input
# dtype; staged through shared memory for float32, whose tf32 wgmma cannot read A from registers) times
# V is a second T.gemm. Keys past S are masked to -inf before the max, so a tail tile counts
# only real keys. It does not lower to TileLang's C target (shared/fragment buffers, T.gemm): the cpu backend
# only compiles it for CUDA sm_90a (cpu_status "unverified").
import math

import tilelang
import tilelang.language as T

BLOCK_M, BLOCK_N = 128, 128
STAGES = 2
THREADS = 256

_kernels = {}


def _build(b, h, s, d, dtype):
    shape = (b, h, s, d)
    accum = "float32"
    scale = (1.0 / math.sqrt(d)) * 1.4426950408889634   # softmax scale * log2(e)

    @T.prim_func
    def flash_fwd(Q: T.Tensor(shape, dtype), K: T.Tensor(shape, dtype), V: T.Tensor(shape, dtype),
                  O: T.Tensor(shape, dtype)):
        with T.Kernel(T.ceildiv(s, BLOCK_M), h, b, threads=THREADS) as (bx, by, bz):
            q_s = T.alloc_shared((BLOCK_M, d), dtype)
            k_s = T.alloc_shared((BLOCK_N, d), dtype)
            v_s = T.alloc_shared((BLOCK_N, d), dtype)
            acc_s = T.alloc_fragment((BLOCK_M, BLOCK_N), accum)
            if dtype == "float32":
                # tf32 wgmma takes its A operand from shared memory only: stage P there
                acc_p = T.alloc_shared((BLOCK_M, BLOCK_N), dtype)
            else:
                acc_p = T.alloc_fragment((BLOCK_M, BLOCK_N), dtype)
            acc_o = T.alloc_fragment((BLOCK_M, d), accum)
            m_cur = T.alloc_fragment((BLOCK_M,), accum)
            m_prev = T.alloc_fragment((BLOCK_M,), accum)
            alpha = T.alloc_fragment((BLOCK_M,), accum)
            row_sum = T.alloc_fragment((BLOCK_M,), accum)
            l_run = T.alloc_fragment((BLOCK_M,), accum)

            T.copy(Q[bz, by, bx * BLOCK_M:(bx + 1) * BLOCK_M, :], q_s)
            T.fill(acc_o, 0)
            T.fill(l_run, 0)
            T.fill(m_cur, -1.0e30)
            for kb in T.Pipelined(T.ceildiv(s, BLOCK_N), num_stages=STAGES):
                T.copy(K[bz, by, kb * BLOCK_N:(kb + 1) * BLOCK_N, :], k_s)
                for i, j in T.Parallel(BLOCK_M, BLOCK_N):
                    acc_s[i, j] = T.if_then_else(kb * BLOCK_N + j < s, 0, -T.infinity(accum))
                T.gemm(q_s, k_s, acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
                T.copy(m_cur, m_prev)
                T.reduce_max(acc_s, m_cur, dim=1, clear=False)
                for i in T.Parallel(BLOCK_M):
                    alpha[i] = T.exp2(m_prev[i] * scale - m_cur[i] * scale)
                for i, j in T.Parallel(BLOCK_M, BLOCK_N):
                    acc_s[i, j] = T.exp2(acc_s[i, j] * scale - m_cur[i] * scale)
                T.reduce_sum(acc_s, row_sum, dim=1)
                for i in T.Parallel(BLOCK_M):
                    l_run[i] = l_run[i] * alpha[i] + row_sum[i]
                T.copy(acc_s, acc_p)
                for i, j in T.Parallel(BLOCK_M, d):
                    acc_o[i, j] *= alpha[i]
                T.copy(V[bz, by, kb * BLOCK_N:(kb + 1) * BLOCK_N, :], v_s)
                T.gemm(acc_p, v_s, acc_o, policy=T.GemmWarpPolicy.FullRow)
            for i, j in T.Parallel(BLOCK_M, d):
                acc_o[i, j] /= l_run[i]
            T.copy(acc_o, O[bz, by, bx * BLOCK_M:(bx + 1) * BLOCK_M, :])

    return tilelang.compile(flash_fwd, out_idx=[-1])


def attention(q, k, v):
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    b, h, s, d = q.shape
    dtype = str(q.dtype).removeprefix("torch.")
    key = (b, h, s, d, dtype)
    if key not in _kernels:
        _kernels[key] = _build(b, h, s, d, dtype)
    return _kernels[key](q, k, v)
