# GroupNorm(32), split reduction. A group is C/32 consecutive channels, i.e. L = C/32 * H * W contiguous
# values, but there are only N * 32 groups (256-512 on the cuda shapes), too few programs to stream at full
# bandwidth. So:
#   1. _gn_partial_stats, grid (N*32, S): each program reduces one chunk of its group in BLOCK-wide tiles,
#      keeping (count, mean, M2) and folding each tile in with Chan's parallel-variance formula (stable for
#      a large mean, unlike sum / sum of squares). S is chosen so that ~1024 programs run.
#   2. _gn_apply, grid (plane tiles, spatial blocks): each program takes ROWS (n, c) planes, combines the S
#      partials of each plane's group (a [ROWS, S] gather from L2), folds rstd * weight[c] and
#      bias[c] - mean * scale into per-plane scalars, and streams y = x * scale + shift.
# x is read twice (the second pass mostly hits L2 for the smaller shapes), y written once.
import torch
import triton
import triton.language as tl

GROUPS = 32


@triton.jit
def _gn_partial_stats(x_ptr, cnt_ptr, mean_ptr, m2_ptr, group_len, chunk, n_split, BLOCK: tl.constexpr):
    grp = tl.program_id(0)
    part = tl.program_id(1)
    base = grp.to(tl.int64) * group_len
    start = part * chunk
    n_a = 0.0
    mean_a = 0.0
    m2_a = 0.0
    for off in range(0, chunk, BLOCK):
        idx = start + off + tl.arange(0, BLOCK)
        mask = (off + tl.arange(0, BLOCK) < chunk) & (idx < group_len)
        x = tl.load(x_ptr + base + idx, mask=mask, other=0.0).to(tl.float32)
        n_b = tl.sum(mask.to(tl.float32), axis=0)
        mean_b = tl.sum(x, axis=0) / tl.maximum(n_b, 1.0)
        d = tl.where(mask, x - mean_b, 0.0)
        m2_b = tl.sum(d * d, axis=0)
        n_ab = n_a + n_b
        delta = mean_b - mean_a
        frac = n_b / tl.maximum(n_ab, 1.0)
        mean_a = mean_a + delta * frac
        m2_a = m2_a + m2_b + delta * delta * n_a * frac
        n_a = n_ab
    out = grp * n_split + part
    tl.store(cnt_ptr + out, n_a)
    tl.store(mean_ptr + out, mean_a)
    tl.store(m2_ptr + out, m2_a)


@triton.jit
def _gn_apply(x_ptr, w_ptr, b_ptr, cnt_ptr, mean_ptr, m2_ptr, y_ptr, n_planes, n_channels, ch_per_group, hw,
              n_split, eps, ROWS: tl.constexpr, SPLIT: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < n_planes
    ch = rows % n_channels
    grp = (rows // n_channels) * (n_channels // ch_per_group) + ch // ch_per_group
    # combine the group's S partial (count, mean, M2) triples
    sp = tl.arange(0, SPLIT)
    pmask = row_ok[:, None] & (sp < n_split)[None, :]
    poffs = grp[:, None] * n_split + sp[None, :]
    cnt = tl.load(cnt_ptr + poffs, mask=pmask, other=0.0)
    pmean = tl.load(mean_ptr + poffs, mask=pmask, other=0.0)
    pm2 = tl.load(m2_ptr + poffs, mask=pmask, other=0.0)
    total = tl.maximum(tl.sum(cnt, axis=1), 1.0)
    mean = tl.sum(cnt * pmean, axis=1) / total
    dm = tl.where(pmask, pmean - mean[:, None], 0.0)
    m2 = tl.sum(pm2 + cnt * dm * dm, axis=1)
    rstd = 1.0 / tl.sqrt(m2 / total + eps)
    w = tl.load(w_ptr + ch, mask=row_ok, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + ch, mask=row_ok, other=0.0).to(tl.float32)
    scale = rstd * w
    shift = b - mean * scale
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    offs = rows.to(tl.int64)[:, None] * hw + cols[None, :]
    mask = row_ok[:, None] & (cols < hw)[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + offs, (x * scale[:, None] + shift[:, None]).to(y_ptr.dtype.element_ty), mask=mask)


def group_norm(x, weight, bias):
    x = x.contiguous()
    n, c, h, w = x.shape
    hw = h * w
    cpg = c // GROUPS
    groups = n * GROUPS
    group_len = cpg * hw
    # statistics: tiles of up to 2048 values, ~1024 programs in all, at most 128 partials per group
    block = max(64, min(2048, triton.next_power_of_2(group_len) // 4))
    n_split = max(1, min(triton.cdiv(group_len, block), triton.cdiv(1024, groups), 128))
    chunk = triton.cdiv(triton.cdiv(group_len, n_split), block) * block
    n_split = triton.cdiv(group_len, chunk)
    cnt = torch.empty(groups * n_split, device=x.device, dtype=torch.float32)
    mean = torch.empty_like(cnt)
    m2 = torch.empty_like(cnt)
    _gn_partial_stats[(groups, n_split)](x, cnt, mean, m2, group_len, chunk, n_split, BLOCK=block,
                                         num_warps=8)
    y = torch.empty_like(x)
    block_hw = min(triton.next_power_of_2(hw), 2048)
    rows = max(1, 2048 // block_hw)
    grid = (triton.cdiv(n * c, rows), triton.cdiv(hw, block_hw))
    _gn_apply[grid](x, weight.contiguous(), bias.contiguous(), cnt, mean, m2, y, n * c, c, cpg, hw, n_split,
                    1e-5, ROWS=rows, SPLIT=triton.next_power_of_2(n_split), BLOCK=block_hw, num_warps=8)
    return y
