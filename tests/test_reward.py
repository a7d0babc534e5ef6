import pytest

from kernelgym_gap.reward import RewardConfig, performance, reward_for


def score(t_kernel, t_lib=1.0, t_floor=0.5, cfg=RewardConfig()):
    p = performance([t_lib / t_kernel], [t_floor / t_kernel], cfg)
    return reward_for(True, p["performance"], cfg), p


def test_bounded_and_monotone():
    times = [0.3, 0.5, 1, 2, 5, 10, 50, 300, 3000]
    rewards = [score(t)[0] for t in times]
    assert all(0 <= r <= 1 for r in rewards)
    assert rewards == sorted(rewards, reverse=True)


def test_300x_slower_gets_almost_nothing():
    _, p = score(300.0)
    assert p["performance"] < 0.05
    assert score(1.0)[1]["performance"] > 0.7


def test_failures_and_modes():
    cfg = RewardConfig()
    assert reward_for(False, 0.9, cfg) == 0.0
    assert reward_for(True, None, cfg) == 1.0
    assert reward_for(True, 0.0, RewardConfig(mode="correctness")) == 1.0
    with pytest.raises(Exception):
        RewardConfig(mode="speed")


def test_geomean_keeps_one_shape_from_dominating():
    cfg = RewardConfig()
    a = performance([1.0, 1.0], [0.5, 0.5], cfg)["performance"]
    b = performance([100.0, 0.01], [0.5, 0.5], cfg)["performance"]
    assert b <= a
