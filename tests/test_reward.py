"""The reward: zero for failures, bounded in [0, 1], monotone in kernel time, and (the point of the project)
almost nothing of the performance part for a kernel 300x slower than the library."""
import math

import pytest

from kernelgym_gap.judge.reward import RewardConfig, geomean, log_shape, performance, reward_for

CFG = RewardConfig()
T_LIB, T_FLOOR = 1.0, 0.4      # library 1 ms, roofline floor 0.4 ms (the library at 40% of roofline)


def score(t_kernel, shapes=1, cfg=CFG):
    p = performance([T_LIB / t_kernel] * shapes, [T_FLOOR / t_kernel] * shapes, cfg)
    return reward_for(True, p["performance"], cfg), p


TIMES = [T_FLOOR, 0.5, 0.8, 1.0, 1.5, 2, 3, 5, 10, 30, 100, 300, 1000, 1e5]


def test_bounded():
    for t in TIMES + [1e-6, 1e9]:
        r, p = score(t)
        assert 0.0 <= r <= 1.0
        for key in ("f_E", "g_U", "performance"):
            assert 0.0 <= p[key] <= 1.0


def test_monotone_in_kernel_time():
    rewards = [score(t)[0] for t in TIMES]
    assert all(a >= b for a, b in zip(rewards, rewards[1:])), rewards
    assert rewards[0] > rewards[-1]
    # strictly better inside the shaped range: every speed-up in it earns something
    inside = [score(t)[0] for t in (1.0, 2.0, 5.0, 20.0)]
    assert all(a > b for a, b in zip(inside, inside[1:]))


def test_monotone_per_shape():
    """Slowing down one shape of several never raises the reward."""
    base = performance([1.0, 0.5], [0.4, 0.2], CFG)["performance"]
    slower = performance([1.0, 0.25], [0.4, 0.1], CFG)["performance"]
    assert slower <= base


def test_300x_slower_gets_almost_none_of_the_performance_part():
    r, p = score(300.0 * T_LIB)
    assert p["performance"] < 0.02
    assert p["f_E"] == 0.0
    assert r == pytest.approx(CFG.correctness_weight, abs=0.02)   # the correctness part and nothing more


def test_the_paper_gap_is_visible():
    """The H200 numbers of FACTS.md: Triton rowwise 1.46x torch at 79% of roofline; scalar loops 0.013x."""
    fast = reward_for(True, performance([1.46], [0.79], CFG)["performance"], CFG)
    slow = reward_for(True, performance([0.013], [0.013 * 0.54], CFG)["performance"], CFG)
    assert fast > 0.8 and slow < 0.35 and fast - slow > 0.5


def test_matching_the_library_scores_well_but_not_fully():
    r, p = score(T_LIB)
    assert 0.5 < r < 1.0
    assert score(T_FLOOR)[0] > r    # running at the floor is better still


def test_failures_get_zero_whatever_the_speed():
    for perf in (None, 0.0, 0.5, 1.0):
        assert reward_for(False, perf, CFG) == 0.0
        assert reward_for(False, perf, RewardConfig(mode="correctness")) == 0.0


def test_correctness_mode_and_unmeasured():
    assert reward_for(True, None, CFG) == 1.0                           # cpu backend: nothing measured
    assert reward_for(True, 0.0, RewardConfig(mode="correctness")) == 1.0
    assert reward_for(True, 0.9, RewardConfig(mode="correctness")) == 1.0


def test_weights_are_configurable():
    p = performance([1.0], [0.01], RewardConfig(weight_e=1.0, weight_u=0.0))
    assert p["performance"] == pytest.approx(p["f_E"])
    p = performance([1.0], [0.01], RewardConfig(weight_e=0.0, weight_u=1.0))
    assert p["performance"] == pytest.approx(p["g_U"]) == pytest.approx(0.0)
    assert reward_for(True, 0.5, RewardConfig(correctness_weight=0.0)) == pytest.approx(0.5)
    assert reward_for(True, 0.0, RewardConfig(correctness_weight=1.0)) == 1.0


@pytest.mark.parametrize("kwargs", [dict(mode="speed"), dict(correctness_weight=1.5), dict(correctness_weight=-0.1),
                                    dict(weight_e=-1.0), dict(weight_e=0.0, weight_u=0.0), dict(e_floor=0.0),
                                    dict(e_floor=3.0, e_ceiling=2.0), dict(u_floor=1.0, u_ceiling=1.0)])
def test_bad_configs_are_refused(kwargs):
    with pytest.raises(ValueError):
        RewardConfig(**kwargs)


def test_unknown_mode_suggests():
    with pytest.raises(ValueError, match="Did you mean 'full'"):
        RewardConfig(mode="ful")


def test_log_shape():
    assert log_shape(0.01, 0.01, 2.0) == 0.0
    assert log_shape(2.0, 0.01, 2.0) == 1.0
    assert log_shape(50.0, 0.01, 2.0) == 1.0
    assert log_shape(0.0, 0.01, 2.0) == 0.0 and log_shape(-1.0, 0.01, 2.0) == 0.0
    assert log_shape(float("nan"), 0.01, 2.0) == 0.0
    mid = math.sqrt(0.01 * 2.0)
    assert log_shape(mid, 0.01, 2.0) == pytest.approx(0.5)   # every halving of time is worth the same


def test_geomean_keeps_one_shape_from_dominating():
    assert geomean([4.0, 0.25]) == pytest.approx(1.0)
    # one tiny shape 100x faster does not make up for another 100x slower
    balanced = performance([1.0, 1.0], [0.4, 0.4], CFG)["performance"]
    lopsided = performance([100.0, 0.01], [40.0, 0.004], CFG)["performance"]
    assert lopsided <= balanced + 1e-12
