"""Every failure kind the cpu backend can produce, from a real fixture file, through the real engine.

Each file under tests/fixtures/failures/ is a LayerNorm submission (`layernorm(x, weight, bias)`) whose first
line says what it does and ends with `Expected status: <kind>`. The test reads the kind from there, so a
new fixture is picked up without touching this file.
"""
import os
import re
import time
from pathlib import Path

import pytest

from kernelgym_gap.core.config import EvalConfig
from kernelgym_gap.core.placement import Placement
from kernelgym_gap.engine.pipeline import evaluate
from kernelgym_gap.core.record import EvalRecord
from kernelgym_gap.sandbox.process import SandboxConfig
from kernelgym_gap.core.status import Status
from kernelgym_gap.engine.stages import STAGE_OF, Gate

from conftest import FIXTURES

FAILURE_DIR = FIXTURES / "failures"
FAILURES = sorted(FAILURE_DIR.glob("*.py"))

# Only the cuda backend measures time: these kinds cannot come out of the cpu backend.
CUDA_ONLY = {Status.FASTER_THAN_FLOOR}
GATE_KINDS = Gate.produces

TIMEOUT_WALL_S = 8.0
# One seed per (shape, dtype): the failure shows on the first trial, and the interpreter is slow.
BASE = EvalConfig(trial_seed=1234, seeds_per_shape=1)


def expected_status(path: Path) -> Status:
    first = path.read_bytes().split(b"\n", 1)[0].decode("ascii")   # the first line is plain ASCII
    assert first.startswith("# "), f"{path.name}: the first line must be a comment"
    m = re.search(r"Expected status: (\w+)\s*$", first)
    assert m, f"{path.name}: the first line must end with 'Expected status: <kind>'"
    return Status(m.group(1))


def dsl_of(path: Path) -> str:
    return "tilelang" if re.search(rb"^import tilelang", path.read_bytes(), re.M) else "triton"


def config_for(status: Status) -> EvalConfig:
    if status is Status.TOO_SLOW:       # tight call bounds: the fixture's largest shape is killed in seconds
        return BASE.replace(sandbox=SandboxConfig(compile_call_s=8.0, call_unknown_s=8.0))
    if status is Status.TIMEOUT:
        return BASE.replace(sandbox=SandboxConfig(wall_s=TIMEOUT_WALL_S))
    return BASE


def source_for(path: Path, status: Status, cfg: EvalConfig) -> bytes:
    source = path.read_bytes()
    if status is Status.SOURCE_TOO_LARGE:
        pad = b"# padding\n" * (cfg.max_source_bytes // 10 + 1)
        source += pad
        assert len(source) > cfg.max_source_bytes
    return source


def test_every_fixture_names_its_kind():
    assert FAILURES, "no fixtures found"
    for path in FAILURES:
        expected_status(path)


def test_every_cpu_failure_kind_has_a_fixture():
    covered = {expected_status(p) for p in FAILURES}
    wanted = {s for s in Status if s.is_failure} - CUDA_ONLY
    assert wanted - covered == set(), f"failure kinds without a fixture: {sorted(s.value for s in wanted - covered)}"


_RECORDS: dict[str, EvalRecord] = {}   # one evaluation per fixture, shared by the tests below


def _evaluate_fixture(registry, name: str) -> EvalRecord:
    if name not in _RECORDS:
        path = FAILURE_DIR / f"{name}.py"
        status = expected_status(path)
        cfg = config_for(status)
        _RECORDS[name] = evaluate(registry.get("LayerNorm"), source_for(path, status, cfg), dsl_of(path), "cpu",
                                  cfg)
    return _RECORDS[name]


@pytest.mark.parametrize("path", FAILURES, ids=[p.stem for p in FAILURES])
def test_fixture_gets_its_status(path, registry):
    task = registry.get("LayerNorm")
    status = expected_status(path)
    record = _evaluate_fixture(registry, path.stem)

    assert record.status is status, f"{path.name}: got {record.status.value}: {record.message}"
    if status is Status.TOO_SLOW:       # ranked above every wrong kernel (tests/test_too_slow.py)
        assert 0.0 < record.reward < 1.0 and record.correct is None
    else:
        assert record.reward == 0.0
        assert record.correct is (None if status is Status.UNVERIFIED else False)
    assert record.message.strip()
    assert record.backend == "cpu" and record.task == task.id
    # the cpu backend never reports a performance figure
    assert record.terms["E"] is None and record.terms["U"] is None and record.terms["performance"] is None
    # the record is what callers store and print: it survives JSON
    assert EvalRecord.from_json(record.to_json()) == record

    assert record.stage in STAGE_OF[status], (record.stage, STAGE_OF[status])
    if record.stage == "gate":
        assert "child" not in record.latency, "a gate failure must not start a child process"
    else:
        assert "child" in record.latency and record.sandbox_layers


def test_mismatch_names_its_errors_and_trial(registry):
    record = _evaluate_fixture(registry, "mismatch")
    assert record.status is Status.MISMATCH
    f = record.failure
    assert f is not None and f.trial is not None
    assert f.max_abs_err > 0 and f.max_rel_err > 0 and 0 < f.mismatched_fraction <= 1
    assert f.trial.shape and f.trial.seed and f.trial.dtype in ("float32", "float16")
    # the message says where: shape and seed on a public shape; a held-out one (LayerNorm's smallest, run first
    # since issue 38) only in kind, its whole trial and reproduce line kept in the failure detail
    if f.trial.split == "public":
        assert str(list(f.trial.shape)) in record.message and str(f.trial.seed) in record.message
    else:
        assert "held-out shape" in record.message and str(f.trial.seed) not in record.message
        assert f.reproduce and str(f.trial.seed) in f.reproduce


def test_runtime_error_carries_the_exceptions_last_lines(registry):
    record = _evaluate_fixture(registry, "runtime_error")
    assert record.status is Status.RUNTIME_ERROR
    last = "ValueError: kgg-fixture: deliberate failure after the kernel ran"
    assert last in record.message
    assert "_check_layout" in record.message            # the traceback, not just the exception
    assert record.failure is not None and record.failure.traceback_tail.rstrip().endswith(last)
    # the first trial the child ran: the smallest shape's (issue 38's order), LayerNorm's held-out [7, 96]
    assert record.failure.trial is not None and record.failure.trial.shape == (7, 96)


def test_crash_says_which_signal(registry):
    record = _evaluate_fixture(registry, "crash")
    assert record.status is Status.CRASH
    assert "SIGSEGV" in record.message


def test_timeout_kills_at_the_deadline(registry):
    record = _evaluate_fixture(registry, "timeout")
    assert record.status is Status.TIMEOUT
    assert record.latency["child"] < TIMEOUT_WALL_S + 5


def _processes_mentioning(text: str) -> list[str]:
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmd:
            found.append(f"{pid}: {cmd[:200]}")
    return found


def test_honest_evaluation_after_crash_and_timeout(registry, tmp_path):
    """A crash or a timeout leaves nothing behind: no process of it survives, and the next honest
    evaluation scores exactly as one before it."""
    task = registry.get("LayerNorm")
    honest = task.solution_path(task.solutions[0]).read_text()
    cfg, where = BASE, Placement(scratch_root=str(tmp_path))
    before = evaluate(task, honest, "triton", "cpu", cfg, placement=where)
    assert before.status is Status.OK and before.correct is True and before.reward == 1.0

    crash = evaluate(task, (FAILURE_DIR / "crash.py").read_bytes(), "triton", "cpu", cfg, placement=where)
    assert crash.status is Status.CRASH
    timeout = evaluate(task, (FAILURE_DIR / "timeout.py").read_bytes(), "triton", "cpu",
                       cfg.replace(sandbox=SandboxConfig(wall_s=TIMEOUT_WALL_S)), placement=where)
    assert timeout.status is Status.TIMEOUT
    assert _processes_mentioning(str(tmp_path)) == [], "a child of a failed evaluation is still running"
    assert list(tmp_path.iterdir()) == [], "scratch directories were left behind"

    after = evaluate(task, honest, "triton", "cpu", cfg, placement=where)
    assert after.status is Status.OK and after.correct is True and after.reward == 1.0
    assert after.trials_checked == before.trials_checked > 0


def test_a_hang_at_import_ends_as_timeout_within_60_s_with_the_default_settings(registry):
    """Issue 15: a submission that busy-loops at import held its slot (and its compile probe's) for the whole
    300 s deadline; the import's stage deadline ends both: 30 s by default for a function entry point (it was
    60 s, which cost a slot 60.4 s on the H100, 2026-12-06; docs/security.md)."""
    source = (Path(__file__).resolve().parent / "fixtures" / "hostile" / "import_busy_loop.py").read_bytes()
    start = time.monotonic()
    record = evaluate(registry.get("LayerNorm"), source, "triton", "cpu", EvalConfig(trial_seed=1))
    elapsed = time.monotonic() - start
    assert record.status is Status.TIMEOUT and record.stage == "sandbox", record.message
    assert "import" in record.message and "30 s stage deadline" in record.message
    assert elapsed < 60, elapsed
