"""FusedMoe (issue 34) on a real GPU (skipped on a CPU machine): the declared E baseline (torch._grouped_mm)
agreeing with the float64 reference within the task's own tolerance and error bound. Its solutions on cuda
are tests/test_gpu_moe_backward_tasks.py's; the cpu side runs in tests/test_solutions.py."""
import pytest

pytestmark = pytest.mark.gpu


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
