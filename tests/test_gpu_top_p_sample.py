"""TopPSample on a real GPU (skipped on a CPU machine): the float32 torch reference inside the checker's
window at the full vocabularies. Its solutions on cuda (correct, the slow one proven slow) are
tests/test_gpu_moe_backward_tasks.py's, with the other new tasks'. The cpu side runs in
tests/test_solutions.py and tests/test_top_p_sample.py."""
import pytest

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("distribution", ["normal", "large", "small", "uniform"])
def test_the_float32_reference_lies_in_the_window_at_full_vocabularies(registry, distribution):
    import torch
    task = registry.get("TopPSample")
    w = task.workloads["cuda"]
    window = task.output_view.__globals__["_window"]      # the task file's own float64 window
    for shape in w.public + w.heldout:
        gen = torch.Generator(device="cuda").manual_seed(11)
        ins = task.make_inputs(shape, "float32", gen, distribution, "cuda")
        ref = task.reference(*ins)
        view = task.output_view(ins, ref)
        # the view maps an accepted token to the exact float64 pick; a rejected one to itself
        order, j, lo, hi = window(*ins)
        exact = order.gather(-1, j).squeeze(-1).double()
        assert bool((view == exact).all()), (shape, distribution, int((view != exact).sum()))
