"""The evaluation's disk limits, derived per job from what its honest outputs need (sandbox/disk.py,
sandbox/output_sizes.py). On the H100 (2026-12-06) the fixed 6 GiB quota and 1 GiB file limit failed honest
solutions: CrossEntropyBackward's gradients over its trials (quota), MoeTokenPermute's 1.5 GiB output (EFBIG).
"""
from __future__ import annotations

import dataclasses
import math
import random
from pathlib import Path

import pytest

from kernelgym_gap.core.config import EvalConfig, SandboxConfig
from kernelgym_gap.core.placement import Placement
from kernelgym_gap.core.status import Status
from kernelgym_gap.core.task import itemsize
from kernelgym_gap.engine.pipeline import evaluate
from kernelgym_gap.engine.trials import make_timing_trials, make_trials, output_cases
from kernelgym_gap.sandbox import disk, launch, output_sizes

HOSTILE = Path(__file__).resolve().parent / "fixtures" / "hostile"
CONFIGURED = SandboxConfig()


def _from_shapes(task, cases) -> list[int]:
    """Each output's bytes from the task's statement alone (not from output_sizes): CrossEntropyBackward's
    gradient is [T, V] in the logits' dtype, MoeTokenPermute's [T * K, H] in x's."""
    if task.name == "CrossEntropyBackward":
        return [s[0] * s[1] * itemsize(d) for s, d in cases]
    if task.name == "MoeTokenPermute":
        return [s[0] * s[3] * s[1] * itemsize(d) for s, d in cases]
    raise AssertionError(task.name)


@pytest.mark.parametrize("name", ["CrossEntropyBackward", "MoeTokenPermute"])
def test_the_derived_limits_hold_the_largest_honest_cuda_outputs(registry, name):
    task = registry.get(name)
    cases = output_cases(task, "cuda", EvalConfig())
    sizes = _from_shapes(task, cases)
    limits = disk.job_limits(CONFIGURED, task, cases, with_probe=False)
    # what failed on the H100: the configured limits cannot hold these outputs
    assert sum(sizes) > CONFIGURED.scratch_quota_bytes or max(sizes) > CONFIGURED.fsize_bytes
    assert limits.derived and limits.need.total == sum(sizes) and limits.need.count == len(cases)
    assert limits.fsize >= max(sizes) + 4096 + 9          # the largest file with its header
    assert limits.quota >= sum(sizes) + len(sizes) * (4096 + 9) + disk.CACHE_ALLOWANCE
    # and no more than the stated margin allows on top of them
    assert limits.quota <= math.ceil(1.10 * sum(sizes)) + max(sizes) + len(sizes) * disk.HEADER_BYTES \
        + disk.CACHE_ALLOWANCE
    assert limits.fsize == max(CONFIGURED.fsize_bytes, max(sizes) + disk.HEADER_BYTES)


def test_a_job_whose_outputs_fit_keeps_the_configured_limits(registry):
    task = registry.get("LayerNorm")
    for backend in ("cpu", "cuda"):
        limits = disk.job_limits(CONFIGURED, task, output_cases(task, backend, EvalConfig()), with_probe=False)
        assert not limits.derived
        assert (limits.quota, limits.fsize) == (CONFIGURED.scratch_quota_bytes, CONFIGURED.fsize_bytes)
    # with the compile probe the child keeps the configured total less the probes' shares (disk.split)
    with_probe = disk.job_limits(CONFIGURED, task, output_cases(task, "cpu", EvalConfig()), with_probe=True)
    assert with_probe.quota == disk.split(CONFIGURED.scratch_quota_bytes)[0]


def test_a_derived_quota_keeps_the_probes_share(registry):
    """The probes write no outputs: a derived quota raises the child's share only, and a probe's share taken
    from the child's (prestart and launch both use probe_sandbox) is still PROBE_DISK_BYTES."""
    task = registry.get("CrossEntropyBackward")
    limits = disk.job_limits(CONFIGURED, task, output_cases(task, "cuda", EvalConfig()), with_probe=True)
    assert limits.derived and limits.quota > disk.split(CONFIGURED.scratch_quota_bytes)[0]
    assert disk.probe_quota(limits.quota) == disk.split(CONFIGURED.scratch_quota_bytes)[1] == disk.PROBE_DISK_BYTES


def test_output_cases_are_the_trials_of_every_evaluation(registry):
    """A pre-started child's spec is built from output_cases (api/service.py); the evaluation's from its own
    trials: they must agree whatever the seeds, or the pre-started child is never used."""
    task = registry.get("MoeTokenPermute")
    config = EvalConfig()
    for seed in (1, 2):
        rng = random.Random(seed)
        trials = (*make_trials(task, "cuda", config, rng), *make_timing_trials(task, config, rng))
        assert tuple((tuple(t.shape), t.dtype) for t in trials) == output_cases(task, "cuda", config)
    spec = launch.child_spec(task, "triton", "cuda", config, outputs=output_cases(task, "cuda", config))
    again = launch.child_spec(task, "triton", "cuda", config, outputs=output_cases(task, "cuda", config))
    assert spec == again and spec.sandbox.fsize_bytes > CONFIGURED.fsize_bytes


def test_every_builtin_tasks_output_sizes_agree_and_are_bounded(registry):
    """Over every built-in task's cuda cases: where fake mode follows the task it agrees with the task's
    declared written_bytes, and the cheap bound (min_bytes) is never below the exact size, so that the
    shortcut (the bound fits: the configured limits stand) is sound. Every case gets a size."""
    config = EvalConfig()
    checked = 0
    for task in registry:
        for shape, dtype in sorted(set(output_cases(task, "cuda", config))):
            got = output_sizes.expected_bytes(task, shape, dtype)
            assert got is not None, (task.id, shape, dtype)
            size, source = got
            assert source in ("fake", "declared"), (task.id, shape, dtype, source)
            if source == "fake" and task.written_bytes is not None:
                assert size == task.written_bytes(shape, dtype), (task.id, shape, dtype)
            assert output_sizes.bound_bytes(task, shape, dtype) >= size, (task.id, shape, dtype)
            checked += 1
    assert checked > 300


def test_an_unknown_output_size_keeps_the_configured_limits_and_says_so(registry, caplog):
    """A task none of whose sources can size its output (each raises): the configured limits stand, with a
    warning that names the task."""
    base = registry.get("LayerNorm")

    def broken(*a, **k):
        raise RuntimeError("no size")

    task = dataclasses.replace(base, name="LayerNormBrokenSizes", make_inputs=broken, min_bytes=broken)
    small = dataclasses.replace(CONFIGURED, scratch_quota_bytes=1 << 10)
    with caplog.at_level("WARNING"):
        limits = disk.job_limits(small, task, output_cases(base, "cpu", EvalConfig()), with_probe=False)
    assert not limits.derived and limits.quota == 1 << 10
    assert "LayerNormBrokenSizes" in caplog.text and "cannot be computed" in caplog.text


def test_a_host_without_room_for_the_honest_outputs_is_a_typed_failure(registry, tmp_path, monkeypatch):
    task = registry.get("MoeTokenPermute")
    limits = disk.job_limits(CONFIGURED, task, output_cases(task, "cuda", EvalConfig()), with_probe=False)
    monkeypatch.setattr(disk.shutil, "disk_usage", lambda p: type("U", (), {"free": 10 << 30})())
    with pytest.raises(disk.ScratchSpaceError, match="GiB free; this job's honest outputs need 23"):
        disk.ensure_free(str(tmp_path), limits)
    monkeypatch.setattr(disk.shutil, "disk_usage", lambda p: type("U", (), {"free": 24 << 30})())
    disk.ensure_free(str(tmp_path), limits)        # the honest outputs fit: it runs (docstring: the quota may not)


# ------------------------------------------------------------------- scaled down, end to end on the cpu

class _NoProbe:
    """The cpu backend's compile probe left out: the test is about the main child's disk."""

    def __init__(self, job, directory, source, sandbox, env, pre=None):
        self.wall_s, self.inconclusive, self.specs_wall_s = 0.0, None, None

    def start(self):
        pass

    def compile_error(self):
        return None

    def cover(self, launched, scratch_root):
        return None

    def over_disk_quota(self):
        return False


def _tiny() -> EvalConfig:
    """A configured disk far below LayerNorm's cpu outputs (12 files, 44,640 B, the largest 8,192 B): a
    32 KiB evaluation quota (16 KiB for the child beside the probes' shares) and 4 KiB per file."""
    sandbox = SandboxConfig(wall_s=120.0, pids_max=64, memory_bytes=1 << 30, scratch_quota_bytes=32 << 10,
                            fsize_bytes=4 << 10)
    return EvalConfig(trial_seed=20261206, sandbox=sandbox)


def test_honest_outputs_over_a_tiny_configured_quota_pass_and_hostile_writers_still_fail(
        registry, tmp_path, monkeypatch):
    monkeypatch.setattr(launch, "CompileProbe", _NoProbe)
    task = registry.get("LayerNorm")
    config = _tiny()
    need = output_sizes.need(task, output_cases(task, "cpu", config))
    assert need.total > 16 << 10 and need.largest > 4 << 10      # the configured limits cannot hold them
    honest = next(s for s in task.solutions if s.dsl == "triton" and s.kind == "optimized")
    where = Placement(scratch_root=str(tmp_path))
    record = evaluate(task, task.solution_path(honest).read_text(), "triton", "cpu", config, placement=where)
    assert record.status is Status.OK, (record.status, record.message)

    # a file over the derived largest-file limit (2 GB, big_file.py), and many files each under it
    for fixture in (HOSTILE / "big_file.py", HOSTILE / "disk" / "many_small_files.py"):
        source = fixture.read_text()
        assert source.startswith("# expect: output_too_large\n")
        record = evaluate(task, source, "triton", "cpu", config, placement=where)
        assert record.status is Status.OUTPUT_TOO_LARGE, (fixture.name, record.status, record.message)
        assert record.reward == 0.0
    assert "quota" in record.message


def test_an_evaluation_on_a_host_without_room_raises_before_its_child_starts(registry, tmp_path, monkeypatch):
    """Scaled down: LayerNorm's cpu outputs under the tiny configured disk (a derived job) on a scratch file
    system that reports 1 KiB free. evaluate raises ScratchSpaceError (the machine, not the submission) and
    starts no child; the evaluation service makes it that request's protocol_error record, never cached."""
    from kernelgym_gap.engine.evaluation import harness_failure_record, is_misuse

    task = registry.get("LayerNorm")
    honest = next(s for s in task.solutions if s.dsl == "triton" and s.kind == "optimized")
    monkeypatch.setattr(disk.shutil, "disk_usage", lambda p: type("U", (), {"free": 1 << 10})())
    with pytest.raises(disk.ScratchSpaceError) as caught:
        evaluate(task, task.solution_path(honest).read_text(), "triton", "cpu", _tiny(),
                 placement=Placement(scratch_root=str(tmp_path)))
    assert "has 0.00 GiB free" in str(caught.value) and "Placement.scratch_root" in str(caught.value)
    assert not list(tmp_path.glob("kgg-eval-*"))            # no child, no scratch directory left
    assert not is_misuse(caught.value)
    record = harness_failure_record(task, "x", "triton", "cpu", _tiny(), caught.value)
    assert record.status is Status.PROTOCOL_ERROR and "ScratchSpaceError" in record.message


def test_an_imported_problem_is_sized_by_its_bound_never_under_fake_mode(registry, monkeypatch):
    """An importer-made task (origin set) is not run under fake mode (its Problem caches real models per
    shape that the checker then calls): with no written_bytes its outputs are sized by min_bytes, widened
    where the output is wider than the trial's dtype (here float32 outputs at a float16 trial: x2)."""
    base = registry.get("LayerNorm")
    calls = []

    def make_inputs(*a, **k):
        calls.append(a)
        return base.make_inputs(*a, **k)

    task = dataclasses.replace(base, name="ImportedLayerNorm", origin="kernelbench", make_inputs=make_inputs,
                               output_dtype=lambda d: "float32")
    size, source = output_sizes.expected_bytes(task, (16, 128), "float16")
    assert source == "bound" and calls == []
    assert size == 2 * task.min_bytes((16, 128), "float16") >= 16 * 128 * 4
