"""Every reference solution of every registered task, through the real environment on the cpu backend, gets
the status its Solution.cpu_status declares. Parametrized over the registry: new tasks are picked up."""
import os

import pytest

from kernelgym_gap.core.config import EvalConfig
from kernelgym_gap.api.env import KernelEnv
from kernelgym_gap.core.registry import default_registry

CASES = [(t.id, s) for t in default_registry() for s in t.solutions]
# scripts/test.sh runs the suite in two halves side by side and shares these cases between them (the replays
# are most of the suite's time): KGG_SOLUTIONS="0,1,2/4" keeps the cases whose index modulo 4 is 0, 1 or 2.
# Unset: every case.
if os.environ.get("KGG_SOLUTIONS"):
    _keep, _n = os.environ["KGG_SOLUTIONS"].split("/")
    CASES = [c for i, c in enumerate(CASES) if i % int(_n) in {int(k) for k in _keep.split(",")}]
CONFIG = EvalConfig(trial_seed=20261202)     # the default evaluation, with seeds fixed for reproducibility


@pytest.mark.parametrize("task_id,solution", CASES,
                         ids=[f"{t.removeprefix('kernelgym_gap/')}:{s.file}" for t, s in CASES])
def test_reference_solution(task_id, solution, registry):
    task = registry.get(task_id)
    env = KernelEnv(task_id=task_id, dsl=solution.dsl, backend="cpu", max_steps=1, config=CONFIG)
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(task.solution_path(solution).read_text())
    assert info["status"] == solution.cpu_status, info["message"]
    assert info["dsl"] == solution.dsl and info["backend"] == "cpu"
    # no CPU time is ever passed off as a GPU figure
    assert info["terms"]["E"] is None and info["terms"]["U"] is None and info["terms"]["performance"] is None
    if solution.cpu_status == "ok":
        assert info["correct"] is True and reward == 1.0
        assert terminated is True and truncated is False
        assert info["record"]["trials_checked"] > 0
        assert info["terms"]["launches_per_call"] >= 1
        if solution.dsl == "triton":
            # the compile probe ran, and it or its follow-up (sandbox/probe.CompileProbe.cover) compiled every
            # specialization the interpreter launched: no flag. Whether the follow-up was needed is not
            # asserted: on a loaded 2-core host LinearReLU's autotuned triton_fused.py needed it in 2 of 3
            # runs (its probe 68 s) and not in the third (103 s), on the same code (2026-12-06): a load-dependent
            # cause not found yet (docs/journal.md, 2026-12-06 clean-clone CI run)
            latency = env.unwrapped.last_record.latency
            assert "compile_probe" in latency, latency
            assert not info["terms"].get("flags"), info["terms"]["flags"]
    else:
        assert info["correct"] is None and reward == 0.0
        assert terminated is False and truncated is True
        assert "sm_90a" in info["message"]
