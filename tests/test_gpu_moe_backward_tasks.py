"""Issue 34's new MoE, backward, indexing and paged-attention tasks on a real GPU (skipped on a CPU machine): every shipped
Triton solution correct on the cuda workload, and each slow solution proven slow against its optimized
sibling and the library (E < 0.5 and at least 5x slower on every timed shape). The cpu side of the same
solutions runs in tests/test_solutions.py."""
import pytest

pytestmark = pytest.mark.gpu

TASKS = ("SoftmaxBackward", "RMSNormBackward", "CrossEntropyBackward", "LinearBackward", "AttentionBackward",
         "MoeTopkRouting", "MoeTokenPermute", "MoeTokenUnpermute", "MoeAlignBlockSize", "PagedDecodeAttention",
         "FusedMoe", "RowArgsort", "TopPSample")


@pytest.fixture(scope="module")
def cuda_config():
    from kernelgym_gap.core.config import EvalConfig
    return EvalConfig(trial_seed=7)


@pytest.fixture(scope="module")
def where(device_cache_dir):
    """GPU 0, the device caches in temporary files (core/placement.Placement), or in the directory the owed-tests
    step shares across its pytest processes (conftest.device_cache_dir)."""
    from kernelgym_gap.core.placement import Placement
    d = device_cache_dir
    return Placement(calibration_path=str(d / "calibration.json"), library_cache_path=str(d / "library_times.json"))


def _eval(registry, name, file, config, where):
    from kernelgym_gap.engine.pipeline import evaluate
    task = registry.get(name)
    sol = next(s for s in task.solutions if s.file == file)
    return evaluate(task, task.solution_path(sol).read_text(), sol.dsl, "cuda", config, placement=where)


@pytest.mark.parametrize("name", TASKS)
def test_optimized_and_slow_solutions_on_cuda(registry, cuda_config, where, name):
    task = registry.get(name)
    fast_sol = next(s for s in task.solutions if s.dsl == "triton" and s.kind == "optimized")
    slow_sol = next(s for s in task.solutions if s.dsl == "triton" and s.kind == "slow")
    fast = _eval(registry, name, fast_sol.file, cuda_config, where)
    assert fast.status.value == "ok", fast.message
    slow = _eval(registry, name, slow_sol.file, cuda_config, where)
    for p in fast.terms["per_shape"]:       # shown with -s
        print(f"{name} {fast_sol.file} {p['shape']} {p['dtype']}: {p['kernel_ms']:.4f} ms, torch "
              f"{p['library_ms']:.4f} ms, E {p['E']:.2f} U {p['U']:.2f}")
    # a slow solution may also be killed as too slow at its call deadline: that proves it slow as well
    assert slow.status.value in ("ok", "too_slow"), slow.message
    if slow.status.value == "ok":
        by_case = {(tuple(p["shape"]), p["dtype"]): p for p in fast.terms["per_shape"]}
        for p in slow.terms["per_shape"]:
            f = by_case[(tuple(p["shape"]), p["dtype"])]
            print(f"{name} {slow_sol.file} {p['shape']} {p['dtype']}: {p['kernel_ms']:.4f} ms, E {p['E']:.2f}")
            assert p["E"] < 0.5, p
            assert p["kernel_ms"] >= 5 * f["kernel_ms"], (p, f)
