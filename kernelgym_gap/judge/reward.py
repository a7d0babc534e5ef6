"""The reward: zero for any failure; for a correct kernel, a correctness part plus a performance part built
from library-relative efficiency E = t_library / t_kernel and roofline utilization U = t_floor / t_kernel.

Shaping (defaults and why):
  * Per shape, E and U are ratios of times, so shapes are aggregated by geometric mean: a shape ten times
    faster counts as much as one ten times slower, and no tiny shape dominates an arithmetic mean.
  * Each aggregate is mapped to [0, 1] on a log scale between a floor and a ceiling:
        f(E) = clip(log(E / e_floor) / log(e_ceiling / e_floor), 0, 1)
    with e_floor = 0.01 (100x slower than the library earns nothing: the paper's 300x-slow LayerNorm gets
    zero) and e_ceiling = 2.0 (twice as fast as torch earns the whole term; beating the library is
    possible on fused ops). U uses u_floor = 0.01 and u_ceiling = 1.0 (the floor itself). The log scale
    makes every halving of time worth the same, which is what an optimising agent needs as a gradient.
  * performance = w_e * f(E) + w_u * g(U), w_e = w_u = 0.5: E alone rewards matching a weak library
    kernel, U alone punishes ops the hardware cannot run near its floor (small GEMM); both together are the
    screening pair of the source paper.
  * reward = correctness_weight + (1 - correctness_weight) * performance, correctness_weight = 0.2: a
    correct kernel is worth something, but 80% of the reward is speed, so 'passes allclose' is no longer
    nearly the whole score.
Monotone: a slower kernel lowers every per-shape E and U, so the aggregates and the reward never rise.

Too slow (Status.TOO_SLOW, issue 38): a kernel correct on every trial it finished (the smallest shape of
each dtype at least) and killed past a call's stage deadline on a larger one. It gets
        reward = too_slow_fraction * correctness_weight          (0.5 * 0.2 = 0.1 by default)
and, where no performance part exists (the cpu backend, 'correctness' mode, whose correct kernels get 1.0),
too_slow_fraction * 1.0 = 0.5. Why a fraction of the correctness part and not a performance part from its
E upper bound: a deadline is at least hopeless_factor x the library's time, so E <= 1/50 and f(E) is near
or at 0 already; the bound says how slow, not how correct, and the kernel was not checked on the shapes it
never finished. The order this gives, for any too_slow_fraction in (0, 1) and correctness_weight > 0:
        wrong (0) < too_slow (fraction * cw) < every finished correct kernel (>= cw)
so a policy learns "correct, 10,000x too slow" is better than wrong and worse than anything that finishes.
(With correctness_weight = 0 a finished kernel can score 0 too; too_slow then scores 0 as well.)
"""
from __future__ import annotations

import math
from collections.abc import Sequence

from kernelgym_gap.core.config import RewardConfig



def log_shape(x: float, floor: float, ceiling: float) -> float:
    if x <= 0 or math.isnan(x):
        return 0.0
    return min(1.0, max(0.0, math.log(x / floor) / math.log(ceiling / floor)))


def geomean(xs: Sequence[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def performance(efficiencies: Sequence[float], utilizations: Sequence[float], cfg: RewardConfig) -> dict:
    e, u = geomean(efficiencies), geomean(utilizations)
    fe, gu = log_shape(e, cfg.e_floor, cfg.e_ceiling), log_shape(u, cfg.u_floor, cfg.u_ceiling)
    perf = (cfg.weight_e * fe + cfg.weight_u * gu) / (cfg.weight_e + cfg.weight_u)
    return {"E": e, "U": u, "f_E": fe, "g_U": gu, "performance": perf}


def too_slow_reward(cfg: RewardConfig, measures_time: bool) -> float:
    """A too_slow kernel's reward (see the module's docstring): a fraction of what correctness alone earns."""
    if cfg.mode == "correctness" or not measures_time:
        return cfg.too_slow_fraction
    return cfg.too_slow_fraction * cfg.correctness_weight


def reward_for(correct: bool, perf: float | None, cfg: RewardConfig) -> float:
    """Zero for anything not verified correct; the correctness gate alone in 'correctness' mode or when no
    performance could be measured (the cpu backend)."""
    if not correct:
        return 0.0
    if cfg.mode == "correctness" or perf is None:
        return 1.0
    return cfg.correctness_weight + (1.0 - cfg.correctness_weight) * perf
