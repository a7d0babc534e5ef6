"""Float64 references computed in pieces, for the trusted checker (TaskSpec.float64_reference).

The checker recomputes every trial's reference in float64 (judge/checker.py). For attention, torch's
float64 scaled_dot_product_attention is the math backend: it materialises the [B, H, Sq, Sk] scores and
their softmax in float64, 16 GiB each at [8, 16, 4096, 4096] and 32 GiB at [2, 32, 8192, 8192]. On the H200
(2026-12-04) that is the likely reason a check failed beside three other evaluations (CausalAttention
`protocol_error` under lanes; its message was lost). Attention is independent per batch element and per
head (per group of query heads that share a kv head), so the same call over slices of the batch and the
heads gives the same values with a bounded score matrix.
"""
from __future__ import annotations

from collections.abc import Callable

import torch

SCORES_BUDGET_BYTES = 2 << 30      # the float64 score matrix of one piece at most (its softmax is as large)


def _head_parts(b: int, hq: int, hkv: int, sq: int, sk: int, budget: int) -> int:
    """The fewest equal slices of the kv heads (a divisor of hkv) that bring one slice's float64 scores
    under `budget`; hkv when none does."""
    for parts in range(1, hkv + 1):
        if hkv % parts == 0 and b * (hq // parts) * sq * sk * 8 <= budget:
            return parts
    return hkv


def attention_in_parts(fn: Callable[..., torch.Tensor], q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                       budget_bytes: int = SCORES_BUDGET_BYTES) -> torch.Tensor:
    """`fn(q, k, v)` for q [B, Hq, Sq, D] and k, v [B, Hkv, Sk, D] (Hq a multiple of Hkv: query head h reads kv
    head h // (Hq / Hkv)), one batch element at a time and over equal slices of the heads when one call's
    float64 scores would pass `budget_bytes`. Other dtypes (the library's call) go to `fn` whole."""
    b, hq, sq = q.shape[0], q.shape[1], q.shape[-2]
    hkv, sk = k.shape[1], k.shape[-2]
    if q.dtype != torch.float64 or b * hq * sq * sk * 8 <= budget_bytes:
        return fn(q, k, v)
    parts = _head_parts(1, hq, hkv, sq, sk, budget_bytes)
    rows = []
    for i in range(b):
        qi, ki, vi = q[i:i + 1], k[i:i + 1], v[i:i + 1]
        rows.append(torch.cat([fn(qc, kc, vc) for qc, kc, vc in
                               zip(qi.chunk(parts, dim=1), ki.chunk(parts, dim=1), vi.chunk(parts, dim=1))], dim=1))
    return torch.cat(rows, dim=0)
