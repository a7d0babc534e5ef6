"""RowArgsort's check (tasks/indexing/row_argsort): the output view accepts every correct tie order and
rejects what is not a permutation, and a naive rank sort whose tied values collide is a mismatch through the
real environment. The solutions themselves run in tests/test_solutions.py; the cuda side in
tests/test_gpu_moe_backward_tasks.py."""
from pathlib import Path

import pytest
import torch

from kernelgym_gap.core.registry import default_registry

FIXTURE = Path(__file__).parent / "fixtures" / "row_argsort" / "rank_collides_on_ties.py"


@pytest.fixture(scope="module")
def task():
    return default_registry().get("RowArgsort")


def test_any_order_among_ties_gives_the_same_view(task):
    x = torch.tensor([[1.0, 3.0, 3.0, -2.0, 3.0, 0.0]])
    ref = task.reference(x)
    other = torch.tensor([[4, 2, 1, 0, 5, 3]])      # the three 3.0s in another order than any stable sort
    assert torch.equal(task.output_view((x,), other), task.output_view((x,), ref))
    assert task.output_view((x,), other).tolist() == [[3.0, 3.0, 3.0, 1.0, 0.0, -2.0]]


def test_a_wrong_order_differs_in_the_view(task):
    x = torch.tensor([[1.0, 3.0, 2.0]])
    wrong = torch.tensor([[1, 0, 2]])
    assert not torch.equal(task.output_view((x,), wrong), task.output_view((x,), task.reference(x)))


@pytest.mark.parametrize("idx,words", [
    (torch.tensor([[1, 1, 0]]), "appears twice"),           # gathers the right values on a tied row
    (torch.tensor([[1, 2, 3]]), "outside"),
    (torch.tensor([[1, 2, -1]]), "outside"),
    (torch.tensor([[1, 2, 0]], dtype=torch.int32), "int64"),
    (torch.tensor([[1, 2]]), "shape"),
])
def test_what_no_correct_kernel_gives_raises(task, idx, words):
    x = torch.tensor([[2.0, 2.0, 1.0]])
    with pytest.raises(ValueError, match=words):
        task.output_view((x,), idx)


def test_negative_zero_ties_with_zero(task):
    """torch ranks -0.0 and +0.0 equal; a kernel that orders them either way gathers equal values."""
    x = torch.tensor([[-0.0, 1.0, 0.0]])
    assert torch.equal(task.output_view((x,), torch.tensor([[1, 0, 2]])),
                       task.output_view((x,), torch.tensor([[1, 2, 0]])))


def test_a_rank_sort_that_collides_on_ties_is_a_mismatch():
    from kernelgym_gap.api.env import KernelEnv
    from kernelgym_gap.core.config import EvalConfig
    env = KernelEnv(task_id="RowArgsort", dsl="triton", backend="cpu", max_steps=1,
                    config=EvalConfig(trial_seed=20261202))
    env.reset(seed=0)
    _, reward, _, _, info = env.step(FIXTURE.read_text())
    assert info["status"] == "mismatch" and reward == 0.0, info["message"]
    assert "appears twice" in info["message"], info["message"]     # rejected by the permutation check
