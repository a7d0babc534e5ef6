"""The child's held outputs (child/outputs.py): kept as private host copies until written, within a budget."""
import torch

from kernelgym_gap.child.outputs import HeldOutputs
from kernelgym_gap.core.tensor_file import read_tensor


def test_outputs_are_held_until_written_and_keep_what_the_call_returned(tmp_path):
    held = HeldOutputs(tmp_path, budget_bytes=1 << 20)
    returned = torch.arange(8.0)
    held.add("trial_0.tensor", returned)
    returned.fill_(-1)                       # the submission reuses its buffer in the next call
    assert not (tmp_path / "trial_0.tensor").exists() and held.held_bytes == 32
    assert held.write() >= 0
    assert torch.equal(read_tensor(tmp_path / "trial_0.tensor", 1 << 20), torch.arange(8.0))
    assert held.held == [] and held.held_bytes == 0 and held.written_at_once == 0


def test_past_the_budget_an_output_is_written_at_once(tmp_path):
    held = HeldOutputs(tmp_path, budget_bytes=40)
    held.add("a.tensor", torch.zeros(8))          # 32 bytes: held
    held.add("b.tensor", torch.zeros(8))          # 64 > 40: written now
    assert not (tmp_path / "a.tensor").exists() and (tmp_path / "b.tensor").exists()
    assert held.written_at_once == 1
    held.write()
    assert (tmp_path / "a.tensor").exists()


def test_a_zero_budget_writes_everything_as_it_comes(tmp_path):
    held = HeldOutputs(tmp_path, budget_bytes=0)
    held.add("a.tensor", torch.zeros(1))
    assert (tmp_path / "a.tensor").exists() and held.held == []


def test_device_copies_are_held_within_their_budget_and_reach_the_host_when_written(tmp_path, monkeypatch):
    """Placement.held_device_bytes (issue 35): outputs on the GPU are kept as private device copies up to the
    budget, past it as host copies (then written at once past the host budget), and every one is written with
    what the call returned, whatever the submission does to its buffer afterwards. The GPU is pretended here
    (a cpu tensor taken for a device one); tests/test_gpu.py runs it on cuda."""
    from kernelgym_gap.child import outputs
    monkeypatch.setattr(outputs, "_on_gpu", lambda t: True)
    held = HeldOutputs(tmp_path, budget_bytes=32, device_budget_bytes=64)
    returned = torch.arange(8.0)                  # 32 bytes each
    held.add("a.tensor", returned)
    returned.fill_(-1)
    held.add("b.tensor", torch.full((8,), 2.0))
    held.add("c.tensor", torch.full((8,), 3.0))   # the device budget is full: a host copy
    held.add("d.tensor", torch.full((8,), 4.0))   # the host budget too: written at once
    assert held.device_bytes == 64 and held.on_device == {"a.tensor", "b.tensor"} and held.held_bytes == 32
    assert [p.name for p in tmp_path.iterdir()] == ["d.tensor"] and held.written_at_once == 1
    held.write()
    assert held.device_bytes == 0 and held.held_bytes == 0 and not held.on_device
    for name, value in (("b", 2.0), ("c", 3.0), ("d", 4.0)):
        assert torch.equal(read_tensor(tmp_path / f"{name}.tensor", 1 << 20), torch.full((8,), value))
    assert torch.equal(read_tensor(tmp_path / "a.tensor", 1 << 20), torch.arange(8.0))


def test_without_a_device_budget_nothing_is_held_on_the_device(tmp_path, monkeypatch):
    from kernelgym_gap.child import outputs
    monkeypatch.setattr(outputs, "_on_gpu", lambda t: True)
    held = HeldOutputs(tmp_path, budget_bytes=1 << 20)
    held.add("a.tensor", torch.zeros(8))
    assert held.device_bytes == 0 and held.held_bytes == 32 and not held.on_device


def test_the_device_budget_is_placement_and_reaches_the_job_on_cuda_only():
    import pytest
    from kernelgym_gap.core.placement import Placement
    p = Placement(held_device_bytes=1 << 30)
    assert p.held_device_bytes_for("cuda") == 1 << 30 and p.held_device_bytes_for("cpu") == 0
    for bad in (-1, True, 1.5):
        with pytest.raises(ValueError, match="held_device_bytes"):
            Placement(held_device_bytes=bad)


def test_through_the_engine_a_full_budget_writes_at_once_and_times_it():
    """The real child on the cpu backend: with room for no output, every output is written as it comes, the
    check still reads them all, and the latency says how long those writes took."""
    from kernelgym_gap.core.config import EvalConfig
    from kernelgym_gap.core.placement import Placement
    from kernelgym_gap.core.registry import default_registry
    from kernelgym_gap.core.status import Status
    from kernelgym_gap.engine.pipeline import evaluate
    task = default_registry().get("AddReLU")
    sol = next(s for s in task.solutions if s.kind == "optimized" and s.dsl == "triton")
    source = task.solution_path(sol).read_text()
    held = evaluate(task, source, "triton", "cpu", EvalConfig(trial_seed=1))
    at_once = evaluate(task, source, "triton", "cpu", EvalConfig(trial_seed=1),
                       placement=Placement(held_output_bytes=0))
    assert held.status is Status.OK and at_once.status is Status.OK, (held.message, at_once.message)
    assert held.trials_checked == at_once.trials_checked > 0
    assert "child_outputs_write_in_lane" in at_once.latency and "child_outputs_write_in_lane" not in held.latency
    assert "child_outputs_write" in held.latency
