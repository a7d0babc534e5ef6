"""The Gymnasium environment on the cpu backend: every registered id passes Gymnasium's own checker, resets
are deterministic, a step returns the five-tuple with every reward term and the record, and the step budget
truncates. Steps whose action fails at the gate are cheap; only two tests run a real child."""
import subprocess
import sys

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import kernelgym_gap.api.env as kenv
from kernelgym_gap.api.registration import register_envs
from kernelgym_gap.core.ids import SUITE_ID
from kernelgym_gap.core.config import EvalConfig
from kernelgym_gap.core.record import EvalRecord
from kernelgym_gap.core.registry import default_registry
from kernelgym_gap.core.status import Status

TASKS = list(default_registry())
IDS = sorted(i for i in gym.registry if i.startswith("kernelgym_gap/"))
TERM_KEYS = {"correctness", "performance", "E", "U", "per_shape", "kernelbench_allclose", "flags"}
INFO_KEYS = {"task", "dsl", "backend", "step", "status", "correct", "reward", "reward_mode", "terms", "diagnosis",
             "message", "record"}
BROKEN = "def layernorm(:\n"          # fails at the gate: no child process


def test_every_task_and_the_suite_are_registered(registry):
    assert {t.id for t in registry} | {SUITE_ID} == set(IDS)
    assert register_envs() == [t.id for t in registry] + [SUITE_ID]   # idempotent


def test_importing_the_package_registers_the_ids_for_gymnasium_users():
    """What a Gymnasium user writes, in a fresh interpreter: `import kernelgym_gap; gym.make(...)`."""
    code = ("import gymnasium as gym, kernelgym_gap\n"
            "env = gym.make('kernelgym_gap/LayerNorm-v1', backend='cpu')\n"
            "print(env.unwrapped.task.id, kernelgym_gap.make('layernorm', backend='cpu').unwrapped.task.id)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["kernelgym_gap/LayerNorm-v1"] * 2


@pytest.mark.parametrize("env_id", IDS)
def test_check_env(env_id):
    env = gym.make(env_id, backend="cpu")
    try:
        check_env(env.unwrapped, skip_render_check=True)
    finally:
        env.close()


@pytest.mark.filterwarnings("ignore:.*is different from the unwrapped version")
@pytest.mark.filterwarnings("ignore:.*No render fps was declared")
@pytest.mark.parametrize("env_id", IDS)
def test_check_env_through_the_wrappers(env_id):
    env = gym.make(env_id, backend="cpu", render_mode="ansi")
    try:
        check_env(env)
    finally:
        env.close()


def test_reset_is_deterministic_and_shows_the_task(registry):
    env = gym.make("kernelgym_gap/LayerNorm-v1", backend="cpu")
    a, info_a = env.reset(seed=3)
    b, info_b = env.reset(seed=3)
    assert a == b and info_a == info_b
    assert env.observation_space.contains(a)
    task = registry.get("LayerNorm")
    assert task.signature in a and task.statement[:40] in a and "triton" in a
    for shape in task.workload("cpu").public:
        assert str(list(shape)) in a
    assert info_a == {"task": task.id, "dsl": "triton", "backend": "cpu", "max_steps": 4}


@pytest.mark.parametrize("task", TASKS, ids=[t.id for t in TASKS])
def test_heldout_shapes_are_never_shown(task):
    env = kenv.KernelEnv(task_id=task.id, backend="cpu")
    obs, _ = env.reset(seed=0)
    public = {str(list(s)) for b in ("cpu", "cuda") for s in task.workload(b).public}
    for backend in ("cpu", "cuda"):
        for shape in task.workload(backend).heldout:
            text = str(list(shape))
            if text not in public:
                assert text not in obs, f"held-out shape {text} appears in the observation"


def test_reset_options_choose_task_and_dsl(registry):
    env = gym.make(SUITE_ID, backend="cpu")
    obs, info = env.reset(seed=0, options={"task": "LayerNorm", "dsl": "tilelang"})
    assert info["task"] == "kernelgym_gap/LayerNorm-v1" and info["dsl"] == "tilelang"
    assert "DSL: tilelang" in obs
    _, info = env.reset(seed=0)
    assert info["dsl"] == "triton"                  # options last for one episode only
    with pytest.raises(ValueError, match="Did you mean"):
        env.reset(options={"dsl": "tritonn"})
    with pytest.raises(KeyError, match="Did you mean"):
        env.reset(options={"task": "LayerNrom"})


def test_suite_draws_tasks_by_seed(registry):
    env = gym.make(SUITE_ID, backend="cpu")
    drawn = [env.reset(seed=s)[1]["task"] for s in range(40)]
    again = [env.reset(seed=s)[1]["task"] for s in range(40)]
    assert drawn == again
    assert set(drawn) <= set(registry.ids())
    assert len(set(drawn)) >= min(3, len(registry))


def test_suite_of_chosen_tasks(registry):
    env = kenv.KernelEnv(task_ids=["LayerNorm", "kernelgym_gap/RMSNorm-v1"], backend="cpu")
    drawn = {env.reset(seed=s)[1]["task"] for s in range(20)}
    assert drawn == {"kernelgym_gap/LayerNorm-v1", "kernelgym_gap/RMSNorm-v1"}


def test_step_returns_the_five_tuple_with_every_term():
    env = gym.make("kernelgym_gap/LayerNorm-v1", backend="cpu", max_steps=3)
    env.reset(seed=0)
    result = env.step(BROKEN)
    assert isinstance(result, tuple) and len(result) == 5
    obs, reward, terminated, truncated, info = result
    assert env.observation_space.contains(obs)
    assert type(reward) is float and reward == 0.0
    assert terminated is False and truncated is False
    assert INFO_KEYS <= set(info)
    assert TERM_KEYS <= set(info["terms"])
    assert info["status"] == "syntax_error" and info["correct"] is False and info["step"] == 1
    record = EvalRecord.from_dict(info["record"])
    assert record.status is Status.SYNTAX_ERROR and record.reward == reward
    assert "syntax_error" in obs and "step 2 of 3" in obs      # the feedback comes back in the observation


def test_step_budget_truncates_and_then_refuses():
    env = gym.make("kernelgym_gap/LayerNorm-v1", backend="cpu", max_steps=2)
    env.reset(seed=0)
    assert env.step(BROKEN)[3] is False
    _, _, terminated, truncated, info = env.step(BROKEN)
    assert truncated is True and terminated is False and info["step"] == 2
    with pytest.raises(RuntimeError, match="reset"):
        env.unwrapped.step(BROKEN)
    env.reset(seed=0)
    assert env.step(BROKEN)[4]["step"] == 1


def test_max_steps_validated():
    with pytest.raises(ValueError):
        kenv.KernelEnv(task_id="LayerNorm", backend="cpu", max_steps=0)
    with pytest.raises(ValueError, match="Did you mean"):
        kenv.KernelEnv(task_id="LayerNorm", backend="cpu", dsl="tilelnag")


def test_evaluator_is_injectable_and_sees_the_action(registry):
    seen = []

    def evaluator(task, source, dsl, backend, config):
        seen.append((task.id, source, dsl, backend))
        from kernelgym_gap.engine.pipeline import evaluate
        return evaluate(task, BROKEN, dsl, backend, config)

    env = kenv.KernelEnv(task_id="LayerNorm", backend="cpu", evaluator=evaluator)
    env.reset(seed=0)
    env.step("my kernel")
    assert seen == [("kernelgym_gap/LayerNorm-v1", "my kernel", "triton", "cpu")]


def test_render_ansi_returns_the_observation():
    env = kenv.KernelEnv(task_id="LayerNorm", backend="cpu", render_mode="ansi")
    obs, _ = env.reset(seed=0)
    assert env.render() == obs
    with pytest.raises(ValueError):
        kenv.KernelEnv(task_id="LayerNorm", backend="cpu", render_mode="human")


def test_sync_vector_env():
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("kernelgym_gap/LayerNorm-v1", backend="cpu")] * 2)
    obs, infos = envs.reset(seed=[1, 2])
    assert len(obs) == 2 and all("LayerNorm" in o for o in obs)
    obs, rewards, terminated, truncated, infos = envs.step((BROKEN, BROKEN))
    assert list(rewards) == [0.0, 0.0] and not terminated.any()
    envs.close()


def test_a_correct_kernel_ends_the_episode_with_reward_one(registry):
    task = registry.get("LayerNorm")
    env = gym.make(task.id, backend="cpu", config=EvalConfig(trial_seed=5, seeds_per_shape=1))
    env.reset(seed=0)
    sol = next(s for s in task.solutions if s.dsl == "triton" and s.kind == "optimized")
    obs, reward, terminated, truncated, info = env.step(task.solution_path(sol).read_text())
    assert info["status"] == "ok" and info["correct"] is True and reward == 1.0
    assert terminated is True and truncated is False
    assert info["terms"]["correctness"] == 1.0
    assert info["terms"]["E"] is None and info["terms"]["U"] is None and info["terms"]["performance"] is None
    assert info["reward_mode"] == "correctness"       # the cpu backend never claims a speed reward
    assert "status: ok" in obs


def test_a_failing_child_keeps_the_episode_going(registry):
    from conftest import FIXTURES
    env = gym.make("kernelgym_gap/LayerNorm-v1", backend="cpu", max_steps=2,
                   config=EvalConfig(trial_seed=5, seeds_per_shape=1))
    env.reset(seed=0)
    _, reward, terminated, truncated, info = env.step((FIXTURES / "failures" / "mismatch.py").read_text())
    assert info["status"] == "mismatch" and reward == 0.0 and not terminated and not truncated
    assert info["record"]["failure"]["max_abs_err"] > 0


def test_readme_python_snippet_prints_status_reward_and_terms_on_cpu(registry, tmp_path, monkeypatch, capsys):
    """The README's Python block, run as written with a reference solution as my_kernel.py: on the cpu
    backend it prints the status and the reward, and E/U as None (the cpu backend measures no time)."""
    import re
    from conftest import ROOT
    block = re.search(r"```python\n(import gymnasium.*?)```", (ROOT / "README.md").read_text(), re.S).group(1)
    task = registry.get("LayerNorm")
    sol = next(s for s in task.solutions if s.dsl == "triton" and s.kind == "optimized")
    (tmp_path / "my_kernel.py").write_text(task.solution_path(sol).read_text())
    monkeypatch.chdir(tmp_path)
    exec(compile(block, "README.md", "exec"), {})               # noqa: S102 - the README's own code
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "ok 1.0" and lines[-1] == "E None U None"
