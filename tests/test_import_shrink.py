"""Issue 36's import findings, one test each, on KernelBench-format problem files of our own
(tests/fixtures/kernelbench/shrink, level3, slow) that reproduce each pattern of KernelBench's level1-3:
derived globals, 5-D batches, tuple sizes, SDPA with dropout_p=0, square and kernel sizes kept, the cpu budget
in work, streaming with one failure not losing the others, the time limit, the memory guard before any
allocation, categories by op, refusals a user can act on, and --keep-modelnew.

Most run the analysis in this process (build_meta: these fixtures are ours, so trusted) to stay fast; the
sandboxed path itself is covered by tests/test_importers.py and by the time-limit test here."""
import shutil
import tempfile
import time
from pathlib import Path

import pytest
import torch

from kernelgym_gap.core.config import EvalConfig, SandboxConfig
from kernelgym_gap.importers import analysis, kernelbench
from kernelgym_gap.importers.kernelbench import ImportRefused, build_meta, iter_import
from kernelgym_gap.importers.shrink import CPU_ELEMENTS, CPU_FLOPS, plan
from kernelgym_gap.importers.sizes import compile_with_sizes, find_sizes

from conftest import FIXTURES

KB = FIXTURES / "kernelbench"
SHRINK = KB / "shrink"


def _meta(name: str, folder: Path = SHRINK) -> dict:
    return build_meta(folder / f"{name}.py", name)


def _plan(name: str, folder: Path = SHRINK):
    """(cpu sizes, their meta facts, the problem's own sizes, the path): the shrinking alone, without the
    tolerance audit that follows it in build_meta (tests/test_import_tolerance.py covers that)."""
    path = folder / f"{name}.py"
    sizes, _, _, cpu, _, heavy = plan(path)
    assert heavy is None
    return cpu, analysis.meta_facts(path, cpu), sizes, path


def _within(facts: dict) -> bool:
    return facts["elements"] <= CPU_ELEMENTS and facts["flops"] <= CPU_FLOPS


def _category(name: str, folder: Path = SHRINK) -> str:
    cpu, _, _, path = _plan(name, folder)
    return analysis.category(analysis.real_run(path, cpu)["ops"], kernelbench._level(path))


def test_derived_globals_are_recomputed_from_the_shrunk_sizes():
    # bias_shape = (out_features,): refused before ("no cpu shape ... leaves N elements"), the bias staying 8192
    cpu, facts, sizes, _ = _plan("derived_bias_shape")
    assert "bias_shape" not in sizes and cpu["out_features"] < 8192 and _within(facts)
    assert [cpu["out_features"]] in facts["signature"][1:]          # the bias parameter follows out_features


def test_a_5d_problem_shrinks_its_batch_below_8_and_keeps_the_window_and_the_cube():
    cpu, facts, _, _ = _plan("max_pool_3d_batch16")
    assert cpu["batch_size"] < 8 and _within(facts)
    assert cpu["dim1"] == cpu["dim2"] == cpu["dim3"] < 128                      # a cube stays a cube
    assert (cpu["kernel_size"], cpu["stride"], cpu["padding"], cpu["dilation"]) == (3, 2, 1, 3)


def test_sizes_written_as_tuples_are_seen_and_shrunk():
    cpu, facts, sizes, _ = _plan("cumsum_tuple_shape")
    assert list(sizes) == ["batch_size", "input_shape[0]", "dim"] and sizes["input_shape[0]"] == 32768
    assert cpu["input_shape[0]"] < 32768 and cpu["dim"] == 1 and _within(facts)
    assert facts["signature"][0] == [cpu["batch_size"], cpu["input_shape[0]"]]


def test_sizes_are_written_into_their_literals_before_the_module_runs():
    src = "a = 2048 * 2\nb = c = 3\nd, e = 24, 48\nshape = (16, 7)\nderived = (a, e)\n" \
          "def get_inputs():\n    return [a, b, c, d, e, shape, derived]\n"
    # derived (a, e) is no size: it is recomputed from them
    assert find_sizes(src) == {"a": 4096, "b": 3, "c": 3, "d": 24, "e": 48, "shape[0]": 16, "shape[1]": 7}
    code, rest = compile_with_sizes(src, "p.py", {"a": 8, "c": 1, "e": 5, "shape[1]": 2})
    g: dict = {}
    exec(code, g)
    assert rest == {} and g["get_inputs"]() == [8, 3, 1, 24, 5, (16, 2), (8, 5)]


def test_a_tuple_mixing_names_and_literals_shrinks_its_large_literals_only():
    # level3 9_ResNet18 writes `input_shape = (batch_size, 3, 224, 224)`: its sides were no size, so it stayed
    # over the cpu budget; its 3 (the channels its first conv is built for) and a bias shape's broadcast ones
    # (`(out_channels, 1, 1)`, 22 level2 problems) must stay as written
    src = "batch_size = 2\nout_channels = 16\ninput_shape = (batch_size, 3, 224, 224)\n" \
          "bias_shape = (out_channels, 1, 1)\ndef get_inputs():\n    return [input_shape, bias_shape]\n"
    assert find_sizes(src) == {"batch_size": 2, "out_channels": 16, "input_shape[2]": 224, "input_shape[3]": 224}
    code, rest = compile_with_sizes(src, "p.py", {"batch_size": 1, "out_channels": 8, "input_shape[2]": 56,
                                                  "input_shape[3]": 56})
    g: dict = {}
    exec(code, g)
    assert rest == {} and g["get_inputs"]() == [(1, 3, 56, 56), (8, 1, 1)]


def test_sdpa_with_dropout_p_0_is_deterministic_so_it_imports():
    # refused before: "randomness inside forward", by the op's tag; its outputs agree bitwise across seeds
    cpu, facts, _, path = _plan("sdpa_dropout_zero")
    run = analysis.real_run(path, cpu)
    assert analysis.category(run["ops"]) == "attention" and _within(facts)


def test_randomness_that_is_used_is_refused_by_running_twice():
    with pytest.raises(ImportRefused, match="randomness used inside forward.*differ between two seeds"):
        _meta("dropout_in_forward", KB / "refused")


def test_square_is_kept_and_a_5x5_kernel_stays_5x5():
    cpu, facts, _, _ = _plan("square_conv_5x5")
    assert cpu["height"] == cpu["width"] < 256 and cpu["kernel_size"] == 5
    assert facts["signature"][1][2:] == [5, 5]                                  # the conv weight


def test_the_cpu_budget_counts_work_not_elements():
    # the conv's elements fit at a shape whose multiply-adds would take minutes in the interpreter: the
    # counted flops are bounded too, so it shrinks further than the element count alone asks
    cpu, facts, sizes, path = _plan("square_conv_5x5")
    assert 0 < facts["flops"] <= CPU_FLOPS
    bigger = dict(cpu, height=cpu["height"] * 2, width=cpu["width"] * 2)
    wider = analysis.meta_facts(path, bigger)
    assert wider["flops"] > CPU_FLOPS


def test_a_problem_that_cannot_be_shrunk_at_all_says_so():
    with pytest.raises(ImportRefused, match="cannot be shrunk to a cpu shape: .* over the budget"):
        _meta("fixed_huge_state")


def test_a_missing_package_is_named():
    with pytest.raises(ImportRefused, match="the package 'a_module_that_does_not_exist' is not installed"):
        _meta("import_error", KB / "refused")


def test_memory_is_bounded_from_metadata_before_any_allocation(monkeypatch):
    def allocates(*a, **k):
        raise AssertionError("inputs allocated before the size guard")
    monkeypatch.setattr(analysis, "raw_inputs", allocates)
    analysis._meta_facts.cache_clear()
    with pytest.raises(ImportRefused, match="too large to run for real"):
        analysis.meta_facts(SHRINK / "huge_data_dependent.py", {"batch_size": 131072, "dim": 131072})


def test_categories_come_from_the_problems_ops():
    assert _category("triplet_loss") == "loss"
    assert _category("max_pool_3d_batch16") == "pooling"
    assert _category("square_conv_5x5") == "convolution"
    assert _category("tiny_mlp", KB / "level3") == "architecture"
    assert analysis.category(["convolution", "max_pool2d_with_indices"]) == "convolution"
    assert analysis.category(["relu"]) == "elementwise"


def _in_process_analyse(fail: set[str]):
    """sandboxed.analyse done in this process (our fixtures are trusted), failing for the names in `fail`."""
    def analyse(source: bytes, name: str, config=None) -> dict:
        if name in fail:
            raise RuntimeError("the analysis crashed")
        d = Path(tempfile.mkdtemp(prefix="kgg-a-"))
        try:
            (d / f"{name}.py").write_bytes(source)
            return build_meta(d / f"{name}.py", name)
        finally:
            shutil.rmtree(d, ignore_errors=True)
    return analyse


def test_results_stream_and_one_failure_loses_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(kernelbench.sandboxed, "analyse", _in_process_analyse({"triplet_loss"}))   # crashes
    files = [KB / "19_ReLU.py", SHRINK / "triplet_loss.py", KB / "40_LayerNorm.py"]
    stream = iter_import(files, tmp_path, trust=True)
    first = next(stream)
    # yielded as soon as made: the later files are not analysed yet
    assert first.ok and [p.parent.name for p in tmp_path.glob("*/*/task.py")] == ["19_ReLU"]
    second, third = list(stream)
    assert not second.ok and second.message == "the import failed: RuntimeError"
    assert third.ok and (third.task_dir / "task.py").is_file()


def test_the_per_problem_time_limit_refuses_that_problem_only(monkeypatch):
    out = Path(tempfile.mkdtemp(prefix="kgg-kb-slow-"))
    out.chmod(0o755)
    try:
        cfg = EvalConfig(sandbox=SandboxConfig(wall_s=8.0))
        t0 = time.monotonic()
        (slow,) = list(iter_import([KB / "slow" / "sleeps_forever.py"], out, config=cfg))
        assert not slow.ok and "time limit of 8 s" in slow.message, slow.message
        assert time.monotonic() - t0 < 60
    finally:
        shutil.rmtree(out, ignore_errors=True)


def test_keep_modelnew_ships_the_problems_own_modelnew_for_replay(tmp_path, monkeypatch):
    from agents.replay import ReplayAgent
    from kernelgym_gap.core.registry import TaskRegistry
    monkeypatch.setattr(kernelbench.sandboxed, "analyse", _in_process_analyse(set()))
    (r,) = list(iter_import([SHRINK / "relu_with_modelnew.py"], tmp_path, trust=True, keep_modelnew=True))
    assert r.ok and "ModelNew kept as a triton solution" in r.message, r.message
    task = TaskRegistry(tmp_path).get("relu_with_modelnew")
    (sol,) = task.solutions
    assert (sol.dsl, sol.kind) == ("triton", "optimized") and task.solution_path(sol).is_file()
    assert ReplayAgent(TaskRegistry(tmp_path)).solutions(task.id, "triton") and task.validate() == []
    # without the option nothing is kept, and every DSL still solves it
    (r2,) = list(iter_import([SHRINK / "relu_with_modelnew.py"], tmp_path / "plain", trust=True))
    plain = TaskRegistry(tmp_path / "plain").get("relu_with_modelnew")
    assert r2.ok and plain.solutions == () and set(plain.dsls) >= {"triton", "tilelang"}


def test_imported_tasks_list_their_dsls():
    from kernelgym_gap.core.task import DSLS
    meta = _meta("19_ReLU", KB)
    assert meta["dsls"] and set(meta["dsls"]) == set(DSLS)


def test_state_the_sizes_cannot_reach_imports_as_cpu_heavy_and_says_so():
    sizes, _, _, cpu, _, heavy = plan(SHRINK / "fixed_wide_state.py")
    assert heavy is not None and "cpu shape over the interpreter's budget" in heavy and "meant for cuda" in heavy
    facts = analysis.meta_facts(SHRINK / "fixed_wide_state.py", cpu)
    assert facts["elements"] > CPU_ELEMENTS and cpu["batch_size"] <= sizes["batch_size"]


def test_a_model_whose_forward_closes_over_its_own_layers_runs_in_float64():
    # a deep copy converted to float64 kept calling the original float32 layers through the lambda
    from kernelgym_gap.core.inputs import generator
    from kernelgym_gap.importers.problem import Problem
    meta = _meta("lambda_over_submodules")
    problem = Problem(SHRINK / "lambda_over_submodules.py", meta)
    shape = meta["workloads"]["cpu"]["public"][0]
    ins = problem.make_inputs(shape, "float32", generator(1, "cpu"), "as_given", "cpu")
    out = problem.reference(*(t.double() if t.is_floating_point() else t for t in ins))
    assert out.dtype == torch.float64 and out.shape == ins[0].shape


def test_sizes_the_op_ties_are_halved_together():
    cpu, facts, _, _ = _plan("tied_by_the_op")
    assert cpu["features"] == 2 * cpu["width"] < 4096 and _within(facts)


def test_a_heldout_shape_grows_the_batch_where_shrinking_it_starves_a_batchnorm():
    """10_ResNet101's cpu held-out shape at 3/4 of batch 10 left its 1x1 BatchNorms 7 values per channel and
    made float32 err by 4x more (refused as ill-conditioned): there the batch grows by 3/2 instead. A problem
    without a training-mode BatchNorm keeps the 3/4 rule."""
    from kernelgym_gap.importers.shrink import BATCHNORM_FEW, heldout_of
    deep = KB / "conditioning" / "deep_batchnorm_mlp.py"
    assert analysis.meta_facts(deep, {"batch_size": 12, "width": 16})["bn_fewest"] == 12 < BATCHNORM_FEW
    assert heldout_of(deep, {"batch_size": 12, "width": 16}, "batch_size") == {"batch_size": 18, "width": 16}
    relu = KB / "19_ReLU.py"
    sizes = analysis.size_globals(relu)
    batch = next(iter(sizes))
    assert analysis.meta_facts(relu, sizes)["bn_fewest"] is None
    assert heldout_of(relu, sizes, batch)[batch] == sizes[batch] * 3 // 4


def test_a_heavy_problem_that_cannot_reach_2_30_flops_is_kept_up_to_2_31(monkeypatch):
    """19_MobileNetV1 was refused 6% over 2^30 counted flops at batch 1, though its float64 reference takes
    0.24 s a forward there (the cap was meant as ~1 s). The smallest shape it reaches is kept up to 2^31; a
    problem that reaches 2^30 is shrunk to it as before."""
    from kernelgym_gap.importers import shrink
    path = SHRINK / "fixed_conv_over_heavy.py"
    _, _, _, cpu, _, heavy = plan(path)
    flops = analysis.meta_facts(path, cpu)["flops"]
    assert cpu == {"batch_size": 1} and shrink.HEAVY_FLOPS < flops <= shrink.HEAVY_FLOPS_MAX and heavy
    monkeypatch.setattr(shrink, "HEAVY_FLOPS_MAX", shrink.HEAVY_FLOPS)      # the rule before: refused
    with pytest.raises(ImportRefused, match="cannot be shrunk to a cpu shape"):
        plan(path)
    _, _, _, cpu, _, _ = plan(SHRINK / "fixed_wide_state.py")      # reaches 2^30: the shape it had
    assert analysis.meta_facts(SHRINK / "fixed_wide_state.py", cpu)["flops"] <= shrink.HEAVY_FLOPS


def test_a_group_count_shrinks_with_its_features_keeping_members_in_each_group():
    """level2 37: with num_groups kept whole, 1024 features in 64 groups shrank to 64 in 64, one value per group,
    and the reference became rounding noise (refused as degenerate). The count shrinks with what it divides."""
    from kernelgym_gap.importers.shrink import MIN_PER_GROUP, keeps_groups
    cpu, facts, sizes, _ = _plan("groupnorm_many_groups")
    assert _within(facts) and cpu["num_groups"] < sizes["num_groups"]
    assert cpu["out_features"] % cpu["num_groups"] == 0 and cpu["out_features"] // cpu["num_groups"] >= MIN_PER_GROUP
    original = {"out_features": 1024, "num_groups": 64, "groups": 1, "channels": 6, "D": 128, "batch_size": 64}
    assert keeps_groups(original, dict(original, out_features=256, num_groups=64))        # 4 a group
    assert not keeps_groups(original, dict(original, out_features=128, num_groups=64))    # 2 a group
    assert not keeps_groups(original, dict(original, out_features=100, num_groups=8))     # not divisible
    assert keeps_groups({"c": 8, "num_groups": 4}, {"c": 4, "num_groups": 2})     # 2 a group, as the problem had
    assert keeps_groups(original, dict(original, channels=1))                    # groups = 1 divides anything
    assert keeps_groups(original, dict(original, D=2, batch_size=1))       # depth and batch are not grouped



def test_a_group_count_the_sizes_do_not_show_still_keeps_channels_a_group():
    """level2 27: GroupNorm's num_groups=4 is an __init__ default, so the size rule above cannot see it, and
    out_channels 16 -> 4 left one channel a group: the per-channel spatial mean after the norm is its bias
    whatever the input, refused as degenerate. The groups are counted on the model (analysis.group_members)."""
    from kernelgym_gap.importers.shrink import MIN_PER_GROUP
    cpu, facts, sizes, path = _plan("groupnorm_default_groups")
    assert _within(facts) and facts["group_members"] >= MIN_PER_GROUP, (cpu, facts["group_members"])
    meta = _meta("groupnorm_default_groups")          # imported, at torch's default init
    assert "state_init" not in meta and meta["workloads"]["cpu"]["public"] == [[cpu[n] for n in sizes]]


def test_a_problem_degenerate_at_a_cpu_batch_of_one_is_imported_at_a_batch_of_two():
    """level2 77: the cpu batch 2's held-out 3/4 is 1, where a training-mode BatchNorm's statistics are the one
    sample's own and the global pool returns the norm's bias whatever the input: refused as degenerate. The
    import tries the cpu batch kept >= 2 (public and held-out), at torch's default init, and says so."""
    meta = _meta("batchnorm_global_pool")
    rule = meta["rules"]["cpu_batch"]
    assert rule["min"] == 2 and "degenerate reference" in rule["why"] and "state_init" not in meta
    cpu = meta["workloads"]["cpu"]
    batch = meta["size_names"].index("batch_size")
    assert cpu["public"][0][batch] >= 2 and cpu["heldout"][0][batch] >= 2, cpu
    assert meta["workloads"]["cuda"]["heldout"][0][batch] == 12          # the cuda shapes keep their own rule