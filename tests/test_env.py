import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import kernelgym_gap.env as kenv

IDS = sorted(i for i in gym.registry if i.startswith("kernelgym_gap/"))


def test_every_task_is_registered(registry):
    assert {t.id for t in registry} | {kenv.SUITE_ID} == set(IDS)


@pytest.mark.parametrize("env_id", IDS)
def test_check_env(env_id):
    env = gym.make(env_id, backend="cpu")
    check_env(env.unwrapped, skip_render_check=True)
    env.close()


def test_reset_deterministic_and_step_contract(registry):
    env = gym.make(kenv.SUITE_ID, backend="cpu", max_steps=2)
    a, _ = env.reset(seed=3)
    b, _ = env.reset(seed=3)
    assert a == b and "Entry point" in a and "Feedback" in a
    obs, reward, terminated, truncated, info = env.step("def broken(:\n")
    assert reward == 0.0 and info["status"] == "syntax_error" and not terminated and not truncated
    for key in ("terms", "record", "correct", "diagnosis"):
        assert key in info
    assert "syntax_error" in obs
    obs, reward, terminated, truncated, info = env.step("def broken(:\n")
    assert truncated


def test_correct_kernel_through_gym_make(registry):
    task = registry.get("LayerNorm")
    env = gym.make(task.id, backend="cpu")
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step(task.solution_path(task.solutions[0]).read_text())
    assert info["status"] == "ok" and reward == 1.0 and terminated
    assert info["terms"]["E"] is None
