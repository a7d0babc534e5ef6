"""An imported task's check cannot be passed by ignoring the input (issue 36), on KernelBench-format problem
files of the project's own (tests/fixtures/kernelbench/soundness/, each reproducing a KernelBench pattern):
- the tolerance follows each trial's own output scale (not one atol sized at the largest cuda shape and
  applied at the cpu shape: level2 56's atol 92 against outputs of ~64 let a constant kernel score ok);
- degenerate references (all zero, all equal, float32 rounding noise) are refused with the reason;
- what the import audit tried, dropped and why is written in the task file;
- the checker: KernelBench's own allclose is part of an imported problem's verdict on its own dtype and
  inputs, and the input guard narrows a trial's tolerance until no constant passes."""
import dataclasses
import shutil
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from kernelgym_gap.core import tensor_file
from kernelgym_gap.core.config import EvalConfig
from kernelgym_gap.core.inputs import generator
from kernelgym_gap.core.record import Trial
from kernelgym_gap.core.registry import TaskRegistry, default_registry
from kernelgym_gap.core.status import Status
from kernelgym_gap.core.task import Tolerance
from kernelgym_gap.engine.pipeline import evaluate
from kernelgym_gap.importers.kernelbench import import_paths
from kernelgym_gap.judge import scaled_tolerance
from kernelgym_gap.judge.checker import judge_output
from kernelgym_gap.judge.input_audit import CANDIDATES, reference64

from conftest import FIXTURES

SOUND = FIXTURES / "kernelbench" / "soundness"
SOLUTIONS = FIXTURES / "kernelbench" / "solutions"
CFG = EvalConfig(trial_seed=7)
SEED = 11


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def imported():
    # not under pytest's tmp_path (mode 0700): the sandboxed child runs as another uid and must read it
    out = Path(tempfile.mkdtemp(prefix="kgg-kb-sound-"))
    out.chmod(0o755)
    results = import_paths([SOUND / "56_Matmul_Sigmoid_Sum_wide.py", SOUND / "23_Softmax_small_inputs.py"], out,
                           trust=True)
    assert all(r.ok for r in results), [r.message for r in results if not r.ok]
    yield out, TaskRegistry(out)
    shutil.rmtree(out, ignore_errors=True)


def test_a_kernel_writing_half_the_hidden_size_is_rejected(imported):
    """The issue's exploit: it scored ok, reward 1.0, before."""
    _, reg = imported
    cheat = (SOLUTIONS / "56_constant_half_hidden_modelnew.py").read_text()
    rec = evaluate(reg.get("56_Matmul_Sigmoid_Sum_wide"), cheat, "triton", "cpu", CFG)
    assert rec.status is Status.MISMATCH and rec.reward == 0, (rec.status, rec.message)


def test_the_tolerance_is_relative_to_each_trials_own_output_scale(imported):
    _, reg = imported
    task = reg.get("56_Matmul_Sigmoid_Sum_wide")
    tol = task.tolerances["float32"]
    assert tol.atol == 0 and tol.atol_per_rms == pytest.approx(4e-3)      # a dot product's rule
    assert task.contract()["tolerances"]["float32"]["atol_per_rms"] == pytest.approx(4e-3)
    shape = task.workload("cpu").public[0]
    ins = task.make_inputs(shape, "float32", generator(SEED, "cpu"), "as_given", "cpu")
    r = reference64(task, ins).double()
    finite = torch.isfinite(r)
    base = tol.atol + tol.rtol * r.abs()
    small, _ = scaled_tolerance.allowance(dataclasses.replace(task, input_guard=0.0), tol, r, finite, base, "")
    large, _ = scaled_tolerance.allowance(dataclasses.replace(task, input_guard=0.0), tol, 32 * r, finite,
                                          32 * base, "")
    assert torch.allclose(large, 32 * small)         # the allowance follows the output's scale, shape by shape
    rms = float(r.pow(2).mean().sqrt())
    assert float(small.max()) < 0.02 * rms           # ~64 here: well under the old atol of 92 (and of the spread)


DEGENERATE = [
    ("9_Matmul_Subtract_Multiply_ReLU_zero", "the reference output is all zeros"),
    ("80_Gemm_Max_Subtract_GELU_zero", "the reference output is all zeros"),
    ("62_Matmul_GroupNorm_one_channel", "float32 rounding noise"),
    ("83_Conv3d_Min_Clamp_equal", "every output element is equal"),
]


@pytest.mark.parametrize("name, words", DEGENERATE)
def test_degenerate_references_are_named_as_such(name, words):
    """The rule on each pattern's own output, at its own sizes (in this process: the files are the tests')."""
    from kernelgym_gap.importers.problem import build_model, load_module, raw_inputs
    from kernelgym_gap.importers.soundness import degenerate
    module = load_module(SOUND / f"{name}.py")
    model, ins = build_model(module), raw_inputs(module, SEED, "cpu")
    with torch.no_grad():
        r32 = model(*ins)
        r = model.double()(*(x.double() for x in ins))
    assert words in (degenerate(r, r32) or ""), degenerate(r, r32)


def test_a_degenerate_problem_is_refused_at_import_with_the_reason(tmp_path):
    # level2 80's x - x (zero whatever the parameters); level2 9's pattern, all zero only at torch's default
    # init, now imports with conditioned parameters (tests/test_import_state_init.py)
    (result,) = import_paths([SOUND / "80_Gemm_Max_Subtract_GELU_zero.py"], tmp_path, trust=True)
    assert not result.ok and "degenerate reference" in result.message, result.message
    assert "the reference output is all zeros" in result.message and "as_given" not in result.message
    assert list(tmp_path.glob("*/*/task.py")) == []


def test_an_input_dependent_reference_is_not_degenerate():
    from kernelgym_gap.importers.soundness import degenerate
    x = torch.randn(64, 64, generator=torch.Generator().manual_seed(SEED), dtype=torch.float64)
    assert degenerate(torch.softmax(x, -1), torch.softmax(x.float(), -1)) is None


def test_the_task_file_states_what_the_audit_tried_and_dropped(imported):
    out, reg = imported
    task = reg.get("56_Matmul_Sigmoid_Sum_wide")
    text = (task.directory / "task.py").read_text()
    assert "input_audit" in text and "kernelbench_check" in text and "input_guard" in text
    meta = {}
    exec(compile(text.replace("TASK = build_task(__file__, META)", ""), "task.py", "exec"), meta)  # noqa: S102
    audit_meta = meta["META"]["input_audit"]
    assert audit_meta["candidates"] == list(CANDIDATES)
    assert audit_meta["shapes"] == [list(s) for s in task.workload("cpu").all_shapes()]
    # 'small' inputs: the sigmoids all sit at 1/2, the output barely moves: the guard's narrowed check is
    # tighter than bfloat16's own rounding, so the distribution is dropped and the reason written
    assert "small" not in task.distributions and "small" in audit_meta["distributions_dropped"]
    assert task.kernelbench_check == ("float32",) and task.input_guard == 2.0


# ---- the checker's two rules for imported tasks, on a built-in task's reference -----------------------------
def _judge(task, out, ins, dist, tmp_path):
    trial = Trial(index=0, shape=SHAPE, dtype="float32", seed=SEED, distribution=dist, split="public")
    path = tmp_path / "out.bin"
    path.unlink(missing_ok=True)
    tensor_file.write_tensor(path, out.float().contiguous())
    return judge_output(task, trial, path, ins)


SHAPE = (8, 300)


def _row_sum(**changes):
    task = default_registry().get("RowSum")
    return dataclasses.replace(task, **changes)


def test_kernelbench_own_check_is_part_of_the_verdict_on_the_problems_own_dtype_and_inputs(tmp_path):
    loose = {"float32": Tolerance(0.5, 0.0)}
    plain, gated = _row_sum(tolerances=loose), _row_sum(tolerances=loose, kernelbench_check=("float32",))
    timed = plain.timed_distribution
    other = next(d for d in plain.distributions if d != timed)
    for dist, gate_applies in ((timed, True), (other, False)):
        ins = plain.make_inputs(SHAPE, "float32", generator(SEED, "cpu"), dist, "cpu")
        off = reference64(plain, ins) + 0.1            # within atol 0.5, outside allclose(1e-2, 1e-2) near 0
        assert _judge(plain, off, ins, dist, tmp_path)[0] is Status.OK
        status, message = _judge(gated, off, ins, dist, tmp_path)
        if gate_applies:
            assert status is Status.MISMATCH and "KernelBench's own check" in message
        else:
            assert status is Status.OK


def test_the_input_guard_narrows_a_trial_until_no_constant_passes(tmp_path):
    loose = {"float32": Tolerance(1e3, 0.0)}           # far above RowSum's outputs: any constant would pass
    plain, guarded = _row_sum(tolerances=loose), _row_sum(tolerances=loose, input_guard=2.0)
    dist = plain.timed_distribution
    ins = plain.make_inputs(SHAPE, "float32", generator(SEED, "cpu"), dist, "cpu")
    r = reference64(plain, ins)
    honest = plain.reference(*(x.float() for x in ins))
    for const in (float(r.mean()), (float(r.max()) + float(r.min())) / 2, 1e-3):
        out = torch.full_like(r, const)
        assert _judge(plain, out, ins, dist, tmp_path)[0] is Status.OK
        status, message = _judge(guarded, out, ins, dist, tmp_path)
        assert status is Status.MISMATCH and "narrowed" in message, message
    assert _judge(guarded, honest, ins, dist, tmp_path)[0] is Status.OK


def test_a_scalar_output_keeps_its_allowance_under_the_input_guard():
    """A one-element output is its own mean: the guard must not take it as a constant a cheat could write
    (it narrowed every scalar loss's allowance to 0, refusing KernelBench level1's losses); zero still counts."""
    r = torch.tensor(0.1667, dtype=torch.float64)
    finite = torch.isfinite(r)
    allowed = torch.tensor(1e-3, dtype=torch.float64)
    assert scaled_tolerance.constant_miss(r, finite, allowed)[1] == 0.0
    task = SimpleNamespace(input_guard=2.0)
    narrowed, _ = scaled_tolerance.allowance(task, Tolerance(1e-3, 0.0), r, finite, allowed, "")
    assert float(narrowed) == pytest.approx(1e-3)
    tiny = torch.tensor(1e-4, dtype=torch.float64)          # under the allowance: zero would pass, so it narrows
    narrowed, limit = scaled_tolerance.allowance(task, Tolerance(1e-3, 0.0), tiny, torch.isfinite(tiny), allowed, "")
    assert float(narrowed) < 1e-4 / 2 + 1e-12 and "narrowed" in limit


def test_a_problem_whose_own_values_make_it_the_identity_is_kept_and_caught_by_the_others():
    """KernelBench level1's ReLU-family problems on torch.rand inputs: the input itself passes on the
    problem's own values. That is no reason to refuse the problem when the other distributions catch it (it
    refused ReLU, LeakyReLU, ELU and HardTanh); the task file says so, and the copying kernel is a mismatch."""
    out = Path(tempfile.mkdtemp(prefix="kgg-kb-own-"))
    out.chmod(0o755)
    try:
        (result,) = import_paths([SOUND / "20_LeakyReLU_rand_inputs.py"], out, trust=True)
        assert result.ok, result.message
        task = TaskRegistry(out).get("20_LeakyReLU_rand_inputs")
        text = (task.directory / "task.py").read_text()
        assert "passes_on_own_values" in text and "caught_by" in text and "input" in text
        cheat = (SOLUTIONS / "20_LeakyReLU_passthrough_modelnew.py").read_text()
        rec = evaluate(task, cheat, "triton", "cpu", CFG)
        assert rec.status is Status.MISMATCH and rec.reward == 0, (rec.status, rec.message)
    finally:
        shutil.rmtree(out, ignore_errors=True)


def test_the_audit_does_not_offer_a_scalar_its_own_value_as_a_constant():
    """The audit's `mean` candidate on a one-element output is the reference itself: it 'passed' every scalar
    loss (KernelBench level1 94-100 were refused for it). Larger outputs still get it."""
    from kernelgym_gap.judge.input_audit import Cell, candidate_outputs
    task = SimpleNamespace(output_dtype=lambda d: d)
    cell = Cell((4, 4), "float32", "as_given", SEED)
    scalar = torch.tensor(0.25, dtype=torch.float64)
    assert "mean" not in candidate_outputs(task, cell, (), scalar, names=("mean",))
    rows = torch.arange(4, dtype=torch.float64)
    assert float(candidate_outputs(task, cell, (), rows, names=("mean",))["mean"][0]) == 1.5


# ---- a deep network's tolerance follows its own measured float32 error (importers/conditioning.py) ---------
CONDITIONING = FIXTURES / "kernelbench" / "conditioning"


@pytest.fixture(scope="module")
def deep_meta():
    """META of the deep BatchNorm MLP (10_ResNet101's pattern), analysed in this process: the file is ours."""
    from kernelgym_gap.importers.kernelbench import build_meta
    return build_meta(CONDITIONING / "deep_batchnorm_mlp.py", "deep_batchnorm_mlp")


def _task_of(meta, path):
    from kernelgym_gap.importers.runtime import build_task
    return build_task(path, dict(meta, problem_file=Path(path).name, trusted=True))


def test_a_deep_network_gets_a_tolerance_derived_from_its_own_float32_error(deep_meta):
    from kernelgym_gap.importers import conditioning
    from kernelgym_gap.importers.tolerance import RULE_DOT
    cond = deep_meta["rules"]["conditioning"]
    # recorded for a reader of the task file: what was measured, where, on which seeds, the factor
    assert cond["dtype"] == "float32" and cond["seeds"] == list(conditioning.SEEDS)
    assert cond["shapes"] == deep_meta["workloads"]["cpu"]["public"] + deep_meta["workloads"]["cpu"]["heldout"]
    assert cond["factor"] == conditioning.FACTOR and cond["table_atol_per_rms"] == RULE_DOT["float32"][0]
    assert 4e-4 < cond["measured_rms_error"] < conditioning.CAP / conditioning.FACTOR   # compounding, not chaos
    assert cond["widened"] and cond["atol_per_rms"] == pytest.approx(conditioning.FACTOR * cond["measured_rms_error"],
                                                                     rel=1e-2)
    assert deep_meta["tolerances"]["float32"][2] == cond["atol_per_rms"]
    task = _task_of(deep_meta, CONDITIONING / "deep_batchnorm_mlp.py")
    assert task.tolerances["float32"].atol_per_rms == cond["atol_per_rms"]
    # the import audit ran against it and kept the timed distribution
    assert "as_given" in deep_meta["distributions"] and deep_meta["input_audit"]["candidates"] == list(CANDIDATES)


def test_the_deep_network_was_refused_under_the_table_tolerance(monkeypatch):
    """Before the derivation (the table alone: FACTOR 0) the problem's own float32 failed its check, as
    10_ResNet101 did at 1.6x the allowance."""
    from kernelgym_gap.importers import conditioning
    from kernelgym_gap.importers.analysis import ImportRefused
    from kernelgym_gap.importers.kernelbench import build_meta
    monkeypatch.setattr(conditioning, "FACTOR", 0.0)
    with pytest.raises(ImportRefused, match="float32 does not pass"):
        build_meta(CONDITIONING / "deep_batchnorm_mlp.py", "deep_batchnorm_mlp")


def test_a_chaotic_network_is_refused_as_ill_conditioned_with_its_measured_error():
    """24_EfficientNetB2's pattern: BatchNorm over a handful of values per channel, deep enough that float32's
    own result is off by most of the output's rms."""
    from kernelgym_gap.importers.analysis import ImportRefused
    from kernelgym_gap.importers.kernelbench import build_meta
    with pytest.raises(ImportRefused) as caught:
        build_meta(CONDITIONING / "chaotic_batchnorm_mlp.py", "chaotic_batchnorm_mlp")
    message = str(caught.value)
    assert message.startswith("ill-conditioned: float32 itself errs by ") and "of the output's rms" in message
    assert "BatchNorm normalises over as few as" in message and "values per channel" in message


def test_the_widened_tolerance_still_catches_every_input_ignoring_candidate(deep_meta):
    """The audit against the widened tolerance, on every cpu shape and kept distribution: no constant, zero,
    passthrough or other-seed reference passes, and torch's own float32 (the control) does."""
    from kernelgym_gap.judge.input_audit import audit
    report = audit(_task_of(deep_meta, CONDITIONING / "deep_batchnorm_mlp.py"), "cpu")
    assert report.sound and not report.passed and not report.control_failed, report.summary()
    assert {"mean", "zeros", "reference_other_seed"} <= set(report.tried)


def test_no_tolerance_however_wide_lets_a_constant_pass(deep_meta):
    """The input guard narrows any trial on which a constant would pass: at 100x the cap, the constants still
    fail (another seed's reference may pass there: which is why the cap refuses such a problem)."""
    from kernelgym_gap.judge.input_audit import audit
    task = _task_of(deep_meta, CONDITIONING / "deep_batchnorm_mlp.py")
    loose = dataclasses.replace(task, tolerances={"float32": Tolerance(0.0, 4e-3, atol_per_rms=2.0)})
    report = audit(loose, "cpu", candidates=("mean", "mean_other_seed", "zeros"), control=False)
    assert not report.passed, report.summary()


def test_a_shallow_problem_keeps_the_table_tolerance():
    """An ordinary problem's float32 errs far under the table: the derivation changes nothing there."""
    from kernelgym_gap.importers.kernelbench import build_meta
    from kernelgym_gap.importers.tolerance import RULE_POINTWISE, rule
    meta = build_meta(FIXTURES / "kernelbench" / "19_ReLU.py", "19_ReLU")
    cond = meta["rules"]["conditioning"]
    assert not cond["widened"] and cond["measured_rms_error"] < 1e-6
    assert meta["tolerances"]["float32"][2] == RULE_POINTWISE["float32"][0]
    # a widening only ever raises the table's value
    assert rule(("float32",), False, {"float32": 1e-9})["float32"][2] == RULE_POINTWISE["float32"][0]


@pytest.mark.gpu
def test_gpu_the_deep_networks_derived_tolerance_holds_on_cuda(deep_meta):
    """The derivation measures float32 on the cpu; on cuda torch's own float32 (cuBLAS, its default math
    modes) must pass the widened check at the cuda shapes, and no input-ignoring candidate may."""
    from kernelgym_gap.judge.input_audit import audit
    task = _task_of(deep_meta, CONDITIONING / "deep_batchnorm_mlp.py")
    report = audit(task, "cuda", device="cuda", control=True)
    assert report.sound, report.summary()
    assert report.control_failed == (), report.control_failed


def test_rounding_noise_is_refused_as_degenerate_not_as_ill_conditioned():
    """level2 62's pattern: float32 'errs' by most of an output that is float64 rounding noise; the refusal
    names the degenerate reference (what a user can act on), not the conditioning."""
    from kernelgym_gap.importers.analysis import ImportRefused
    from kernelgym_gap.importers.kernelbench import build_meta
    with pytest.raises(ImportRefused, match="degenerate reference .* float32 rounding noise"):
        build_meta(SOUND / "62_Matmul_GroupNorm_one_channel.py", "62_Matmul_GroupNorm_one_channel")


def test_a_dtype_too_coarse_to_see_the_input_is_dropped_not_the_problem():
    """KernelBench level1 100_HingeLoss: a mean over thousands of terms, ~1.0 whatever the values. In bfloat16
    another seed's loss passes on the problem's own values; in float32 (the problem's own dtype) it does not.
    The import used to refuse the problem ("does not depend on the input enough"); it now drops bfloat16 with
    that reason and keeps float32, where a kernel writing the expected loss without reading is a mismatch."""
    out = Path(tempfile.mkdtemp(prefix="kgg-kb-hinge-"))
    out.chmod(0o755)
    try:
        (result,) = import_paths([SOUND / "100_HingeLoss_mean.py"], out, trust=True)
        assert result.ok, result.message
        task = TaskRegistry(out).get("100_HingeLoss_mean")
        text = (task.directory / "task.py").read_text()
        assert "'dtypes_dropped': {'bfloat16'" in text and "does not see the input" in text, text[:2000]
        for backend in ("cpu", "cuda"):
            assert "bfloat16" not in task.workloads[backend].dtypes, (backend, task.workloads[backend].dtypes)
        cheat = (SOLUTIONS / "100_HingeLoss_constant_modelnew.py").read_text()
        rec = evaluate(task, cheat, "triton", "cpu", CFG)
        assert rec.status is Status.MISMATCH and rec.reward == 0, (rec.status, rec.message)
    finally:
        shutil.rmtree(out, ignore_errors=True)
