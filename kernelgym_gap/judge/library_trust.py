"""Which timed shapes' cached library time stands without a check (TimingConfig.library_check_shapes, issue 35).

Each timed shape's probe checks the parent's cached library time with library_check_reps repetitions of the library,
after a warm-up of it (device/bench.Bench.probe): on the H200 light batch of 2026-12-07 the library's warm-up alone
was 0.10-0.14 s of an optimized kernel's 1.2-2.2 s exclusive stretch, and its check repetitions about as much again.
The check is the cache's drift guard: a device whose clocks moved, or an entry a hostile child poisoned, disagrees
with the hint and the library is measured afresh (judge/library_cache.py). This module keeps that guard while
checking fewer shapes: a shape's hint is trusted unchecked only where

- SETTLED_N or more ok evaluations' checks confirmed it (library_source "cached") since a check of it last
  disagreed (the library then measured afresh, library_source "measured" where a hint was sent), the latest of
  them within library_trust_s seconds;

and every evaluation still checks at least library_check_shapes of its shapes: those among the trustworthy
confirmed longest ago (so the checks rotate over the shapes), plus every shape that is not trustworthy.

What it gives up: between two checks of a shape, a drift of the device's clocks goes unseen on that shape for at
most library_trust_s (the shapes still checked see it, and each disagreement un-trusts its own entry until it is
confirmed SETTLED_N times again). Per entry, not per device: short kernels' checks drift past the tolerance now
and then (tests/test_gpu.py), and one such check must not un-trust every entry of the device. E moves with such
a drift as it does between two honest runs on different clocks; the ranking of evaluations made together does
not.

What a hostile child can do with it: a false measurement it reports is a disagreement, which un-trusts the entry;
to have an honest evaluation trust a poisoned hint, the poison must first be the entry's median and then be
confirmed SETTLED_N times with no honest check of the entry between (an honest check of a moved median disagrees
and writes an honest measurement). So only a submitter with every evaluation of that task in a row can do it,
and then for at most library_trust_s. Times are the parent's clock (time.time: the cache may be shared by the
processes of one host).
"""
from __future__ import annotations

SETTLED_N = 3       # confirmations an entry needs (since its last disagreement) before its hint may stand unchecked


def _when(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def confirmations(value, since: float | None) -> list[float]:
    """The confirmation times kept for an entry (the cache's "confirmed" value: a list of the parent's times),
    those after `since` (its last disagreement; None: none), in order."""
    times = [t for t in (_when(v) for v in value) if t is not None] if isinstance(value, list) else []
    return sorted(t for t in times if since is None or t > since)


def trusted_keys(keys: list[str], confirmed: dict, drift: dict, check_shapes: int, trust_s: float,
                 now: float) -> set[str]:
    """Of `keys` (one per timed shape with a hint, in the evaluation's order), those whose hint stands unchecked.
    `confirmed`, `drift`: the cache's sections (key -> its last confirmations' times; key -> its last
    disagreement's time). At least `check_shapes` keys stay checked; 0 (off) trusts none."""
    if check_shapes <= 0:
        return set()
    eligible = []
    for key in keys:
        seen = confirmations(confirmed.get(key), _when(drift.get(key)))
        if len(seen) < SETTLED_N or not 0 <= now - seen[-1] <= trust_s:
            continue
        eligible.append((seen[-1], key))
    checked_anyway = len(keys) - len(eligible)
    rotate = max(0, check_shapes - checked_anyway)     # the oldest confirmations are checked first
    eligible.sort()
    return {key for _, key in eligible[rotate:]}
