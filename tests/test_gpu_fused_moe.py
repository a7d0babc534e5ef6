"""FusedMoe (issue 34) on a real GPU (skipped on a CPU machine): the optimized Triton solution correct on the
cuda workload, the slow per-token one proven slow (E < 0.5 and >= 5x its optimized sibling on every timed
shape, or killed as too slow), and the declared E baseline (torch._grouped_mm) agreeing with the float64
reference within the task's own tolerance and error bound. The cpu side runs in tests/test_solutions.py."""
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
    return evaluate(task, task.solution_path(sol).read_text(), sol.dsl, "cuda", config)


def test_fused_moe_optimized_is_correct_and_slow_is_proven_slow(registry, cuda_config):
    task = registry.get("FusedMoe")
    fast = _eval(task, "optimized", cuda_config)
    assert fast.status.value == "ok", fast.message
    for p in fast.terms["per_shape"]:       # shown with -s
        print(f"FusedMoe optimized {p['shape']} {p['dtype']}: {p['kernel_ms']:.4f} ms, library "
              f"{p['library_ms']:.4f} ms, E {p['E']:.2f} U {p['U']:.2f}")
    slow = _eval(task, "slow", cuda_config)
    # the per-token loop streams every expert weight once per routed token: it may be stopped as hopeless
    # or killed at its call deadline, which proves it slow as well
    assert slow.status.value in ("ok", "too_slow"), slow.message
    if slow.status.value == "ok":
        by_case = {(tuple(p["shape"]), p["dtype"]): p for p in fast.terms["per_shape"]}
        for p in slow.terms["per_shape"]:
            f = by_case[(tuple(p["shape"]), p["dtype"])]
            print(f"FusedMoe slow {p['shape']} {p['dtype']}: {p['kernel_ms']:.4f} ms, E {p['E']:.2f}")
            assert p["E"] < 0.5, p
            assert p["kernel_ms"] >= 5 * f["kernel_ms"], (p, f)


def test_fused_moe_grouped_mm_baseline_matches_the_reference(registry):
    """The E baseline must compute the task's op: on the smallest cuda shape (Qwen3-30B-A3B's 128 experts,
    top-8) in bfloat16, within the tolerance plus the declared error bound of the float64 reference."""
    import torch
    task = registry.get("FusedMoe")
    shape = min((*task.workloads["cuda"].public, *task.workloads["cuda"].heldout), key=task.flops)
    gen = torch.Generator(device="cuda").manual_seed(3)
    ins = task.make_inputs(shape, "bfloat16", gen, "normal", "cuda")
    got = task.alternatives["grouped_mm"](*ins).double()
    f64 = tuple(x.double() if torch.is_tensor(x) and x.is_floating_point() else x for x in ins)
    ref = task.reference(*f64)
    tol = task.tolerances["bfloat16"]
    allowed = tol.atol + tol.rtol * ref.abs() + task.error_bound(f64, "bfloat16")
    assert bool(((got - ref).abs() <= allowed).all()), float((got - ref).abs().max())
    # and not trivially: a zero output is far outside that
    assert not bool((ref.abs() <= allowed).all())
