# Grouped GEMM for MoE in one launch, with no host synchronisation. The grid is 1-D over (row tile, column
# tile) pairs, where the row-tile count is an upper bound known without reading offsets: a group of s rows
# needs cdiv(s, BLOCK_M) tiles, and sum_g cdiv(s_g, BLOCK_M) <= cdiv(T, BLOCK_M) + G. Each program walks
# the G group ends (G scalar loads from L2, negligible next to the K loop) to find which expert owns its
# row tile and where that tile's rows start and stop; programs past the last real tile, and empty groups,
# do nothing. The tile itself is a standard Hopper GEMM: tl.dot (wgmma) over K in BLOCK_K steps against the
# expert's K-contiguous weight, float32 accumulator, software pipelining, one rounding at the store.
# Programs are ordered in groups of GROUP_M row tiles swept column by column, so that the row tiles of one
# expert running together share its weight tiles in L2. Groups averaging under 512 rows get 64-row tiles
# (less padding in each group's last tile), larger ones 128-row tiles.
import torch
import triton
import triton.language as tl


@triton.jit
def _grouped_kernel(x_ptr, w_ptr, y_ptr, offs_ptr, G, N, K, num_pid_m, stride_xm, stride_wg, stride_wn,
                    stride_ym, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                    GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    group_size = GROUP_M * num_pid_n
    first_m = (pid // group_size) * GROUP_M
    group_m = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group_size) % group_m
    pid_n = (pid % group_size) // group_m

    # which expert owns row tile pid_m: walk the group ends, counting each group's row tiles
    tiles_before = 0
    start = 0
    expert = 0
    row_lo = 0
    row_hi = 0
    for g in range(0, G):
        end = tl.load(offs_ptr + g)
        nt = tl.cdiv(end - start, BLOCK_M)
        hit = (pid_m >= tiles_before) & (pid_m < tiles_before + nt)
        expert = tl.where(hit, g, expert)
        row_lo = tl.where(hit, start + (pid_m - tiles_before) * BLOCK_M, row_lo)
        row_hi = tl.where(hit, end, row_hi)
        tiles_before += nt
        start = end
    if pid_m < tiles_before:
        offs_m = row_lo + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        offs_k = tl.arange(0, BLOCK_K)
        # rows past the group's end / columns past N are wrapped onto valid ones and never stored
        rows = tl.where(offs_m < row_hi, offs_m, row_lo)
        x_ptrs = x_ptr + rows[:, None].to(tl.int64) * stride_xm + offs_k[None, :]
        w_ptrs = (w_ptr + expert.to(tl.int64) * stride_wg + (offs_n % N)[None, :].to(tl.int64) * stride_wn
                  + offs_k[:, None])
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BLOCK_K)):
            k_left = K - k * BLOCK_K
            a = tl.load(x_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
            b = tl.load(w_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
            acc = tl.dot(a, b, acc)
            x_ptrs += BLOCK_K
            w_ptrs += BLOCK_K
        y_ptrs = y_ptr + offs_m[:, None].to(tl.int64) * stride_ym + offs_n[None, :]
        tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=(offs_m[:, None] < row_hi) & (offs_n[None, :] < N))


def grouped_gemm(x, weight, offsets):
    assert x.shape[1] == weight.shape[2] and offsets.shape[0] == weight.shape[0], "shapes disagree"
    x = x.contiguous()
    weight = weight.contiguous()
    offsets = offsets.contiguous()
    t, k = x.shape
    g, n, _ = weight.shape
    y = torch.empty((t, n), device=x.device, dtype=x.dtype)
    if t == 0:
        return y
    if t >= 512 * g:
        block_m, num_warps, num_stages = 128, 8, 3
    else:
        block_m, num_warps, num_stages = 64, 4, 4
    block_n, block_k = 128, 64
    num_pid_m = triton.cdiv(t, block_m) + g       # an upper bound on the real row tiles
    grid = (num_pid_m * triton.cdiv(n, block_n),)
    _grouped_kernel[grid](x, weight, y, offsets, g, n, k, num_pid_m, x.stride(0), weight.stride(0),
                          weight.stride(1), y.stride(0), BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
                          GROUP_M=8, num_warps=num_warps, num_stages=num_stages)
    return y
