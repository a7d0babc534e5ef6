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


def test_the_staging_buffer_is_made_once_for_device_copies_only(tmp_path, monkeypatch):
    """Placement.output_staging_bytes (issue 35): a child writes its device copies through one pinned host buffer,
    made at its first device write and reused; a host tensor, or staging off, gets none. The GPU and the pinned
    allocation are pretended here (a cpu tensor taken for a device one, a plain buffer for the pinned one); the
    gpu test in tests/test_tensor_file.py writes through a real one."""
    from kernelgym_gap.child import outputs
    made = []

    def fake_empty(n, dtype=None, pin_memory=False):
        made.append((n, dtype, pin_memory))
        return torch.zeros(n, dtype=dtype)

    monkeypatch.setattr(outputs, "_empty", fake_empty)
    off = HeldOutputs(tmp_path, budget_bytes=1 << 20, device_budget_bytes=1 << 20)
    monkeypatch.setattr(outputs, "_on_gpu", lambda t: False)
    on = HeldOutputs(tmp_path, budget_bytes=1 << 20, device_budget_bytes=1 << 20, staging_bytes=4096)
    assert on.staging_for(torch.zeros(4)) is None and made == []          # a host tensor: no buffer
    monkeypatch.setattr(outputs, "_on_gpu", lambda t: True)
    assert off.staging_for(torch.zeros(4)) is None and made == []         # staging off
    first = on.staging_for(torch.zeros(4))
    assert first is on.staging_for(torch.zeros(4)) is on.staging
    assert made == [(4096, torch.uint8, True)] and on.staging_s >= 0 and on.staging_refused == ""


def test_a_refused_pinned_buffer_leaves_the_pageable_writes_and_says_why(tmp_path, monkeypatch):
    """Pinned memory refused (the host's locked-memory limit, or exhausted): the outputs are still written, by
    the pageable copy as with staging off, the refusal is kept and not asked again."""
    from kernelgym_gap.child import outputs
    calls = []

    def refuse(n, dtype=None, pin_memory=False):
        calls.append(n)
        raise RuntimeError("CUDA error: out of memory (pinned)")

    monkeypatch.setattr(outputs, "_empty", refuse)
    monkeypatch.setattr(outputs, "_on_gpu", lambda t: True)
    held = HeldOutputs(tmp_path, budget_bytes=1 << 20, device_budget_bytes=1 << 20, staging_bytes=4096)
    held.add("a.tensor", torch.arange(8.0))
    held.add("b.tensor", torch.arange(4.0))
    held.write()
    assert calls == [4096] and "out of memory" in held.staging_refused and held.staging is None
    assert torch.equal(read_tensor(tmp_path / "a.tensor", 1 << 20), torch.arange(8.0))
    assert torch.equal(read_tensor(tmp_path / "b.tensor", 1 << 20), torch.arange(4.0))


def test_the_staging_buffer_is_placement_and_reaches_the_job_on_cuda_only(tmp_path):
    """Placement.output_staging_bytes is bounded and typed, and only a cuda job is given it; on the cpu backend
    the real child writes as before, whatever the placement says."""
    import pytest
    from kernelgym_gap.core.config import EvalConfig
    from kernelgym_gap.core.placement import MAX_OUTPUT_STAGING_BYTES, Placement
    from kernelgym_gap.core.registry import default_registry
    from kernelgym_gap.core.status import Status
    from kernelgym_gap.engine.pipeline import evaluate
    p = Placement(output_staging_bytes=64 << 20)
    assert p.output_staging_bytes_for("cuda") == 64 << 20 and p.output_staging_bytes_for("cpu") == 0
    assert Placement().output_staging_bytes == 64 << 20        # on by default since 2026-12-08 (H100)
    for bad in (-1, True, 1.5, MAX_OUTPUT_STAGING_BYTES + 1):
        with pytest.raises(ValueError, match="output_staging_bytes"):
            Placement(output_staging_bytes=bad)
    task = default_registry().get("AddReLU")
    sol = next(s for s in task.solutions if s.kind == "optimized" and s.dsl == "triton")
    record = evaluate(task, task.solution_path(sol).read_text(), "triton", "cpu", EvalConfig(trial_seed=1),
                      placement=p)
    assert record.status is Status.OK, record.message
    assert not any(k.startswith("child_outputs_staging") for k in record.latency)


def test_the_write_phases_say_how_the_outputs_went(tmp_path, monkeypatch):
    from kernelgym_gap.child import outputs
    monkeypatch.setattr(outputs, "_on_gpu", lambda t: True)
    monkeypatch.setattr(outputs, "_empty", lambda n, dtype=None, pin_memory=False: torch.zeros(n, dtype=dtype))
    held = HeldOutputs(tmp_path, budget_bytes=0, device_budget_bytes=1 << 20, staging_bytes=64)
    assert held.write_phases() == {}
    held.add("a.tensor", torch.arange(8.0))
    held.write()
    assert set(held.write_phases()) == {"outputs_staging_alloc"}
    monkeypatch.setattr(outputs, "_on_gpu", lambda t: False)
    full = HeldOutputs(tmp_path / "x", budget_bytes=0)
    (tmp_path / "x").mkdir()
    full.add("b.tensor", torch.zeros(2))                  # no host budget: written at once, in the lane
    full.staging_refused = "RuntimeError: refused"
    assert set(full.write_phases()) == {"outputs_write_in_lane", "outputs_staging_refused"}
    assert full.write_phases()["outputs_staging_refused"] == 1.0


# ---- Placement.outputs_copy_laned: each copy off the GPU under the shared lane, the file writes outside it ---------

class _Guard:
    """A copy guard that logs its entries and exits; `log` also gets each file write, with whether it was inside."""

    def __init__(self):
        self.log, self.inside = [], False

    def __call__(self):
        import contextlib

        @contextlib.contextmanager
        def held():
            self.log.append("enter")
            self.inside = True
            try:
                yield
            finally:
                self.inside = False
                self.log.append("exit")
        return held()


def test_the_copy_guard_wraps_each_chunks_copy_and_no_file_write(tmp_path, monkeypatch):
    """Staged (the pinned buffer): the guard is entered around each chunk's copy into the buffer and left before
    that chunk is written; the file is the same as without the guard. The GPU is pretended (a cpu tensor)."""
    from kernelgym_gap.core import tensor_file
    guard = _Guard()
    write = tensor_file._write

    def logged_write(fd, buf):
        guard.log.append("write inside" if guard.inside else "write")
        return write(fd, buf)

    monkeypatch.setattr(tensor_file, "_on_device", lambda t: True)
    monkeypatch.setattr(tensor_file, "_write", logged_write)
    t = torch.arange(100, dtype=torch.float32)             # 400 bytes through a 128-byte buffer: 4 chunks
    tensor_file.write_tensor(tmp_path / "a.tensor", t, staging=torch.empty(128, dtype=torch.uint8), guard=guard)
    copies = [e for e in guard.log if e in ("enter", "exit")]
    assert copies == ["enter", "exit"] * 4 and "write inside" not in guard.log
    assert guard.log[-2:] == ["exit", "write"]
    assert torch.equal(read_tensor(tmp_path / "a.tensor", 1 << 20), t)


def test_the_copy_guard_wraps_a_whole_pageable_copy_and_never_a_host_tensor(tmp_path, monkeypatch):
    from kernelgym_gap.core import tensor_file
    guard = _Guard()
    t = torch.arange(8.0)
    tensor_file.write_tensor(tmp_path / "host.tensor", t, guard=guard)        # a host tensor: nothing to copy
    assert guard.log == []
    monkeypatch.setattr(tensor_file, "_on_device", lambda t: True)
    tensor_file.write_tensor(tmp_path / "dev.tensor", t, guard=guard)         # staging off: one whole copy
    assert guard.log == ["enter", "exit"]
    assert torch.equal(read_tensor(tmp_path / "dev.tensor", 1 << 20), t)


def test_held_outputs_guard_only_their_device_copies(tmp_path, monkeypatch):
    """HeldOutputs.write enters its copy guard for the outputs it kept on the device, not for its host copies."""
    from kernelgym_gap.child import outputs
    from kernelgym_gap.core import tensor_file
    guard = _Guard()
    monkeypatch.setattr(outputs, "_on_gpu", lambda t: True)
    held = HeldOutputs(tmp_path, budget_bytes=1 << 20, device_budget_bytes=32, copy_guard=guard)
    held.add("a.tensor", torch.arange(8.0))                  # 32 bytes: kept on the "device"
    held.add("b.tensor", torch.arange(8.0))                  # past the device budget: a host copy
    device_copy = held.held[0][1].data_ptr()
    monkeypatch.setattr(tensor_file, "_on_device", lambda t: t.data_ptr() == device_copy)
    held.write()
    assert guard.log == ["enter", "exit"]
    assert {p.name for p in tmp_path.iterdir()} == {"a.tensor", "b.tensor"}


def test_the_switch_is_placement_and_reaches_the_job_on_cuda_only():
    import pytest
    from kernelgym_gap.core.placement import Placement
    assert Placement().outputs_copy_laned is True             # on by default since 2026-12-08 (H100)
    p = Placement(outputs_copy_laned=True)
    assert p.outputs_copy_laned_for("cuda") is True and p.outputs_copy_laned_for("cpu") is False
    with pytest.raises(ValueError, match="outputs_copy_laned"):
        Placement(outputs_copy_laned=1)
