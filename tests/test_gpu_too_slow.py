"""Issue 38 on a real GPU: a deliberately serial softmax (one program, scalar loops; tests/fixtures/slow/
serial_softmax.py) is correct on the smallest shapes, which run first, and is killed past a later call's
deadline: it must come back too_slow, within the evaluation's time bound, with its bound and a diagnosis,
and its reward between a wrong kernel's and the optimized solution's. Skipped without CUDA; the device
script's gpu-tests step runs it (scripts/device_session.sh)."""
import time

import pytest

from conftest import FIXTURES

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def config():
    from kernelgym_gap.core.config import EvalConfig
    return EvalConfig(trial_seed=38, compile_baseline="off")


@pytest.fixture(scope="module")
def where(tmp_path_factory):
    """GPU 0, the device caches in temporary files (core/placement.Placement)."""
    from kernelgym_gap.core.placement import Placement
    d = tmp_path_factory.mktemp("too_slow")
    return Placement(calibration_path=str(d / "calibration.json"), library_cache_path=str(d / "library_times.json"))


def test_serial_softmax_is_too_slow(registry, config, where):
    from kernelgym_gap.core.status import Status
    from kernelgym_gap.engine.pipeline import evaluate
    from kernelgym_gap.judge.reward import too_slow_reward
    task = registry.get("Softmax")
    # the optimized solution first: a finished correct kernel's reward, and the library's times cached, so
    # that a later call's bound is max(call_floor_s, call_factor x library) and the verdict has its E bound
    sol = next(s for s in task.solutions if s.file == "triton_rowwise.py")
    fast = evaluate(task, task.solution_path(sol).read_text(), "triton", "cuda", config, placement=where)
    assert fast.status is Status.OK, fast.message
    start = time.monotonic()
    slow = evaluate(task, (FIXTURES / "slow" / "serial_softmax.py").read_text(), "triton", "cuda", config, placement=where)
    elapsed = time.monotonic() - start
    print(f"serial softmax: {slow.status.value} in {elapsed:.1f} s, reward {slow.reward}\n{slow.message}\n"
          f"terms: { {k: v for k, v in slow.terms.items() if k != 'per_shape'} }\ndiagnosis: {slow.diagnosis}\n"
          f"latency: {slow.latency}")
    assert slow.status is Status.TOO_SLOW, slow.message
    assert elapsed < config.sandbox.wall_s and elapsed < 120, elapsed     # bounded, as a timeout is
    assert 0.0 < slow.reward == too_slow_reward(config.reward, True) < config.reward.correctness_weight
    assert slow.reward < fast.reward and slow.correct is None
    t = slow.terms
    assert t["reached_s"] >= t["bound_s"] and t["trials_finished"] >= 2 and t["kernelbench_allclose"] is True
    if not t["first_call"]:         # a later call: the library's time is cached, so E and U are bounded
        assert t["E_upper"] is not None and t["E_upper"] < 1 / config.timing.hopeless_factor
        assert t["U_upper"] is not None and t["too_slow_by_rule"] is True
        assert f"E <= {t['E_upper']:.2g}" in slow.message
    assert t["E"] is None and t["U"] is None              # never a figure that was not measured
    d = slow.diagnosis
    assert d is not None and d["verdict"] in ("repairable_defect", "structural_residual"), d
    assert any("1 program(s)" in e for e in d["evidence"]), d      # the grid against the SMs
