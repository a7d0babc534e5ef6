# Idiomatic-looking but slow (defect: scalar_loop): one program per token, written in the order of the
# PyTorch recipe (softmax over all experts, top-k, renormalize), one scalar at a time. A scalar loop zeroes
# the row, one finds the row maximum, one sums exp(x - max) over all E experts (a softmax denominator that
# the renormalization cancels). Selection j rescans the row for the largest logit strictly below the
# previous pick (the rows hold no ties, so this walks the top-k in order; selecting on the logits, not on
# rounded probabilities, keeps it exact); the k picks are found once to sum their probabilities and again
# to store the renormalized weights: (2k + 3) E dependent steps per token. Launched with num_warps=16 (the
# setting Triton's fused-softmax tutorial gives its widest rows), though every step is a scalar that all
# 512 threads of the program redo.
#
# How slow, by an estimate calibrated on the H100 (2026-12-06, results/h100_2026-12-06_owed_tests/call3):
# with num_warps=1 and (2k + 2) E steps this kernel measured 5.56-5.80 ms at [262144, 128] and
# [131072, 256] (library 1.71-1.85 ms, E 0.31-0.32) and 1.82 ms at [300000, 60] (library 1.12 ms, E 0.62);
# [2500000, 8] (library 4.72-4.78 ms) was not reached. "Library" is the task's e_baseline, torch.compile
# (eager where it is missing), the time the test prints as "torch". Fitted per program (32 resident per
# SM, 4224 at once): ~37 ns per load step, ~59 ns per store, plus a fixed cost taken as >= 0.5 us (the
# row's first load goes to DRAM; the three-point fit's 2.3 us is within its noise). 16 warps leave 4
# programs per SM (528 at once): >= 8x the waves of latency-bound steps, and ~12x by RMSNormBackward's slow
# solution, whose 1 -> 8 warps change measured 6.1x (4.97 -> 30.5 ms), not 4x, as redundant warps also
# contend for issue. [2500000, 8] (k 2): 48 loads + 10 stores + 0.5 us = 2.9 us x 592 waves = 1.7 ms at
# 1 warp, so >= 13.6 ms (E <= 0.35) and ~21 ms (E ~0.23). [300000, 60]: ~2.0 ms at 1 warp, 16-24 ms
# (E <= 0.07). [262144, 128] and [131072, 256]: ~5.9 ms at 1 warp, 47-72 ms (E <= 0.04), under the
# 200x-the-library too_slow bound (~350 ms). The optimized triton_rows.py runs 0.06-0.28 ms.
import torch
import triton
import triton.language as tl


@triton.jit
def _topk_scalar(x_ptr, out_ptr, E, K: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = row * E
    for j in range(0, E):
        tl.store(out_ptr + base + j, 0.0)
    top = -float("inf")
    for j in range(0, E):
        top = tl.maximum(top, tl.load(x_ptr + base + j).to(tl.float32))
    denom = 0.0
    for j in range(0, E):
        denom += tl.exp(tl.load(x_ptr + base + j).to(tl.float32) - top)
    total = 0.0
    prev = float("inf")
    for _ in range(0, K):
        best = -float("inf")
        for j in range(0, E):
            v = tl.load(x_ptr + base + j).to(tl.float32)
            best = tl.where((v < prev) & (v > best), v, best)
        total += tl.exp(best - top) / denom
        prev = best
    prev = float("inf")
    for _ in range(0, K):
        best = -float("inf")
        at = 0
        for j in range(0, E):
            v = tl.load(x_ptr + base + j).to(tl.float32)
            take = (v < prev) & (v > best)
            best = tl.where(take, v, best)
            at = tl.where(take, j, at)
        tl.store(out_ptr + base + at, (tl.exp(best - top) / denom) / total)
        prev = best


def moe_topk_routing(logits):
    logits = logits.contiguous()
    t, e = logits.shape
    k = 2 if e <= 8 else 4 if e <= 60 else 6 if e <= 64 else 8
    out = torch.empty((t, e), device=logits.device, dtype=torch.float32)
    _topk_scalar[(t,)](logits, out, e, K=k, num_warps=16)
    return out
