"""Every reference solution of every registered task, through the real environment on the cpu backend."""
import pytest

from kernelgym_gap.env import KernelEnv
from kernelgym_gap.registry import default_registry

CASES = [(t.id, s) for t in default_registry() for s in t.solutions]


@pytest.mark.parametrize("task_id,solution", CASES, ids=[f"{t.split('/')[-1]}:{s.file}" for t, s in CASES])
def test_reference_solution(task_id, solution, registry):
    task = registry.get(task_id)
    env = KernelEnv(task_id=task_id, dsl=solution.dsl, backend="cpu", max_steps=1)
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(task.solution_path(solution).read_text())
    assert info["status"] == solution.cpu_status, info["message"]
    if solution.cpu_status == "ok":
        assert info["correct"] is True and reward == 1.0 and terminated
        assert info["terms"]["E"] is None and info["terms"]["U"] is None   # no CPU time as a GPU figure
    else:
        assert info["correct"] is None and reward == 0.0
