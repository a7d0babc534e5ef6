"""RowArgsort on a real GPU (skipped on a CPU machine): the optimized Triton solution correct on the cuda
workload and near the library (E >= 0.8 is the issue-34 target; printed with -s, asserted only as correct and
faster than the slow one), the slow one proven slow (E < 0.5 and at least 5x slower than the optimized one on
every timed shape). The cpu side runs in tests/test_solutions.py and tests/test_row_argsort.py."""
import pytest

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cuda_config(tmp_path_factory):
    from kernelgym_gap.core.config import EvalConfig
    d = tmp_path_factory.mktemp("cfg")
    return EvalConfig(calibration_path=str(d / "calibration.json"), trial_seed=7,
                      library_cache_path=str(d / "library_times.json"))


def _eval(task, kind, config):
    from kernelgym_gap.engine.pipeline import evaluate
    sol = next(s for s in task.solutions if s.dsl == "triton" and s.kind == kind)
    return sol, evaluate(task, task.solution_path(sol).read_text(), sol.dsl, "cuda", config)


def test_optimized_and_slow_solutions_on_cuda(registry, cuda_config):
    task = registry.get("RowArgsort")
    fast_sol, fast = _eval(task, "optimized", cuda_config)
    assert fast.status.value == "ok", fast.message
    for p in fast.terms["per_shape"]:       # shown with -s: the E the issue asks to record
        print(f"RowArgsort {fast_sol.file} {p['shape']} {p['dtype']}: {p['kernel_ms']:.4f} ms, library "
              f"{p['library_ms']:.4f} ms, E {p['E']:.2f} U {p['U']:.2f}")
    slow_sol, slow = _eval(task, "slow", cuda_config)
    # killed at its call deadline as too slow also proves it slow
    assert slow.status.value in ("ok", "too_slow"), slow.message
    if slow.status.value == "ok":
        by_case = {(tuple(p["shape"]), p["dtype"]): p for p in fast.terms["per_shape"]}
        for p in slow.terms["per_shape"]:
            f = by_case[(tuple(p["shape"]), p["dtype"])]
            print(f"RowArgsort {slow_sol.file} {p['shape']} {p['dtype']}: {p['kernel_ms']:.4f} ms, E {p['E']:.2f}")
            assert p["E"] < 0.5, p
            assert p["kernel_ms"] >= 5 * f["kernel_ms"], (p, f)
