# Skinny GEMM (M <= 64 tokens) for decode: the weight read is the whole cost, so the kernel is organised
# around streaming the weight through as many SMs as possible. Each program owns BLOCK_N = 64 output columns
# (64 weight rows) for all M tokens (BLOCK_M = M rounded up to 16..64) and a contiguous slice of K; it runs
# tl.dot on [BLOCK_M, 128] x [128, 64] tiles with a float32 accumulator, the weight tile read K-contiguous
# (16-byte loads, software pipelined over num_stages). When the N tiles alone would leave SMs idle
# (N = 4096: 64 tiles on 132 SMs) K is split into SPLIT_K slices; each slice writes float32 partials to a
# small workspace [SPLIT_K, M, N] and a second kernel sums them in a fixed order and rounds once
# (deterministic, no atomics, no memset). With SPLIT_K = 1 the first kernel rounds and stores y directly.
import torch
import triton
import triton.language as tl

BLOCK_N = 64
BLOCK_K = 128
_SM_COUNT = {}


@triton.jit
def _skinny_kernel(x_ptr, w_ptr, out_ptr, M, N, K, stride_xm, stride_wn, k_per_split,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                   SPLIT: tl.constexpr):
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    k_start = pid_k * k_per_split
    k_end = tl.minimum(K, k_start + k_per_split)
    # rows past M / N are wrapped onto valid ones (never stored): only the K edge needs a mask
    x_ptrs = x_ptr + (offs_m % M)[:, None].to(tl.int64) * stride_xm + (k_start + offs_k)[None, :]
    # the B operand is weight^T: element (k, n) at w_ptr + n * stride_wn + k
    w_ptrs = w_ptr + (offs_n % N)[None, :].to(tl.int64) * stride_wn + (k_start + offs_k)[:, None]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(k_start, k_end, BLOCK_K):
        k_left = k_end - k0
        a = tl.load(x_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        b = tl.load(w_ptrs, mask=offs_k[:, None] < k_left, other=0.0, eviction_policy="evict_first")
        acc = tl.dot(a, b, acc)
        x_ptrs += BLOCK_K
        w_ptrs += BLOCK_K
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    if SPLIT:
        # float32 partials: out is the workspace [SPLIT_K, M, N]
        p_ptrs = out_ptr + pid_k.to(tl.int64) * M * N + offs_m[:, None] * N + offs_n[None, :]
        tl.store(p_ptrs, acc, mask=mask)
    else:
        tl.store(out_ptr + offs_m[:, None] * N + offs_n[None, :], acc.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _reduce_partials(ws_ptr, y_ptr, MN, SPLIT_K: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < MN
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for s in tl.static_range(SPLIT_K):
        acc += tl.load(ws_ptr + s * MN + offs, mask=mask, other=0.0)
    tl.store(y_ptr + offs, acc.to(y_ptr.dtype.element_ty), mask=mask)


def _sm_count(device):
    if device.type != "cuda":
        return 132
    idx = device.index if device.index is not None else torch.cuda.current_device()
    if idx not in _SM_COUNT:
        _SM_COUNT[idx] = torch.cuda.get_device_properties(idx).multi_processor_count
    return _SM_COUNT[idx]


def small_m_linear(x, weight):
    assert x.shape[1] == weight.shape[1], "x and weight disagree on K"
    x = x.contiguous()
    weight = weight.contiguous()
    m, k = x.shape
    n = weight.shape[0]
    assert m <= 64, "this kernel keeps all M tokens in one tile"
    block_m = max(16, triton.next_power_of_2(m))
    y = torch.empty((m, n), device=x.device, dtype=x.dtype)
    n_tiles = triton.cdiv(n, BLOCK_N)
    k_steps = triton.cdiv(k, BLOCK_K)
    # enough programs for >= 2 per SM, each slice still >= 2 K steps long
    split = max(1, min(triton.cdiv(2 * _sm_count(x.device), n_tiles), k_steps // 2))
    k_per_split = triton.cdiv(k_steps, split) * BLOCK_K
    split = triton.cdiv(k, k_per_split)              # no empty slice
    if split == 1:
        _skinny_kernel[(n_tiles, 1)](x, weight, y, m, n, k, x.stride(0), weight.stride(0), k_per_split,
                                     BLOCK_M=block_m, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, SPLIT=False,
                                     num_warps=4, num_stages=4)
        return y
    ws = torch.empty((split, m, n), device=x.device, dtype=torch.float32)
    _skinny_kernel[(n_tiles, split)](x, weight, ws, m, n, k, x.stride(0), weight.stride(0), k_per_split,
                                     BLOCK_M=block_m, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, SPLIT=True,
                                     num_warps=4, num_stages=4)
    block = 1024
    _reduce_partials[(triton.cdiv(m * n, block),)](ws, y, m * n, SPLIT_K=split, BLOCK=block, num_warps=4)
    return y
