"""Every failure kind the cpu backend can produce, from a real fixture file, through the real engine."""
import re

import pytest

from kernelgym_gap.config import EvalConfig
from kernelgym_gap.engine import evaluate
from kernelgym_gap.sandbox import SandboxConfig
from kernelgym_gap.status import Status

from conftest import FIXTURES

FAILURES = sorted((FIXTURES / "failures").glob("*.py"))


def expected_status(path) -> Status:
    first = path.read_bytes().split(b"\n", 1)[0].decode("utf-8", "replace")
    m = re.search(r"Expected status: (\w+)", first)
    assert m, f"{path.name}: first line must say 'Expected status: <kind>'"
    return Status(m.group(1))


@pytest.mark.parametrize("path", FAILURES, ids=[p.stem for p in FAILURES])
def test_fixture_gets_its_status(path, registry):
    task = registry.get("LayerNorm")
    source = path.read_bytes()
    cfg = EvalConfig(trial_seed=1234)
    status = expected_status(path)
    if status is Status.SOURCE_TOO_LARGE:
        source = source + b"#" * (cfg.max_source_bytes + 1)
    if status is Status.TIMEOUT:
        cfg = cfg.replace(sandbox=SandboxConfig(wall_s=15))
    dsl = "tilelang" if b"import tilelang" in source else "triton"
    record = evaluate(task, source, dsl, "cpu", cfg)
    assert record.status is status, record.message
    assert record.reward == 0.0
    assert record.correct is (None if status is Status.UNVERIFIED else False)
    assert record.message
    if status is Status.MISMATCH:
        assert record.failure is not None and record.failure.trial is not None
        assert record.failure.max_abs_err > 0 and record.failure.max_rel_err > 0
    if status is Status.RUNTIME_ERROR:
        assert "ValueError" in record.message


def test_honest_evaluation_after_crash_and_timeout(registry):
    task = registry.get("LayerNorm")
    honest = task.solution_path(task.solutions[0]).read_text()
    cfg = EvalConfig(trial_seed=7)
    first = evaluate(task, honest, "triton", "cpu", cfg)
    assert evaluate(task, (FIXTURES / "failures" / "crash.py").read_text(), "triton", "cpu", cfg).status is Status.CRASH
    timeout_cfg = cfg.replace(sandbox=SandboxConfig(wall_s=10))
    assert evaluate(task, (FIXTURES / "failures" / "timeout.py").read_text(), "triton", "cpu",
                    timeout_cfg).status is Status.TIMEOUT
    again = evaluate(task, honest, "triton", "cpu", cfg)
    assert first.status is again.status is Status.OK
    assert first.reward == again.reward == 1.0
