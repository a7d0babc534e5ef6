"""KernelBench's own check in the trusted checker (judge/checker.py, issue 35, 2026-12-06): the same-dtype
reference behind `kernelbench_allclose` is computed only on the trials of the task's timed distribution
(KernelBench's inputs), never twice where the first reference already is it, and on the raw output (no
output_view); the rechecks and the input audit compute it only where the verdict applies it
(`task.kernelbench_check`). No verdict changes: the stress distributions were never KernelBench's check's."""
import dataclasses
import random
import re
from pathlib import Path

import pytest
import torch

from kernelgym_gap.core import inputs as inputs_mod
from kernelgym_gap.core.config import EvalConfig
from kernelgym_gap.core.record import ChildReport, Job, Trial, TrialOutcome
from kernelgym_gap.core.status import Status
from kernelgym_gap.core.task import Tolerance
from kernelgym_gap.core.tensor_file import write_tensor
from kernelgym_gap.engine.trials import make_trials
from kernelgym_gap.judge import checker, kernelbench_check

from conftest import FIXTURES

pytestmark = pytest.mark.usefixtures("one_torch_thread")
ROOT = Path(__file__).resolve().parent.parent


class Counting:
    """`task.reference` wrapped: counts its calls in the trial's own dtype (the second reference) apart
    from those on float64 inputs (the checker's first reference of a float64-reference task)."""

    def __init__(self, reference):
        self.reference, self.same_dtype, self.float64 = reference, 0, 0

    def __call__(self, *ins):
        floats = [x for x in ins if isinstance(x, torch.Tensor) and x.is_floating_point()]
        if floats and all(x.dtype == torch.float64 for x in floats):
            self.float64 += 1
        else:
            self.same_dtype += 1
        return self.reference(*ins)


def counted(task, **changes):
    counter = Counting(task.reference)
    return dataclasses.replace(task, reference=counter, **changes), counter


def _exact(task, ins):
    """The output in the trial's dtype: the first reference rounded, which every tolerance admits."""
    ref = checker._reference(task, ins)
    return ref.to(getattr(torch, task.output_dtype(str(ins[0].dtype).removeprefix("torch."))))


def _case(task, tmp_path, trials, output):
    """A job of `trials` and the files a child wrote: `output(trial, ins)` per trial."""
    out_dir = tmp_path / "outputs"
    out_dir.mkdir(exist_ok=True)
    outcomes = []
    for tr in trials:
        ins = inputs_mod.make_trial_inputs(task, tr, "cpu")
        path = out_dir / f"{tr.index}.tensor"
        write_tensor(path, output(tr, ins).contiguous())
        d = inputs_mod.digest(ins)
        outcomes.append(TrialOutcome(index=tr.index, output_file=path.name, launches=1, programs=1,
                                     seconds=0.0, input_digest_before=d, input_digest_after=d))
    job = Job(task_id=task.id, dsl="triton", backend="cpu", source_file=str(tmp_path / "s.py"),
              outputs_dir=str(out_dir), report_file=str(tmp_path / "report.json"), trials=tuple(trials), timing=None)
    return job, ChildReport(status=Status.OK, message="", trials=tuple(outcomes))


def test_the_second_reference_runs_only_on_the_timed_distributions_trials(registry, tmp_path):
    task, counter = counted(registry.get("GELU"))
    trials = make_trials(task, "cpu", EvalConfig(), random.Random(0))
    timed = [t for t in trials if t.distribution == task.timed_distribution]
    assert 0 < len(timed) < len(trials)          # 3 of 12: the other 9 were a second reference each
    job, report = _case(task, tmp_path, trials, lambda tr, ins: task.reference(*ins))
    counter.same_dtype = counter.float64 = 0     # the outputs' own calls above are not the checker's
    result = checker.check(task, job, report, "cpu")
    assert result.status is Status.OK and result.kernelbench_allclose is True
    assert counter.same_dtype == len(timed)      # was len(trials) before 2026-12-06
    assert counter.float64 == len(trials)        # the first reference, every trial, as before
    assert "allclose" in result.seconds          # the record keeps its check_allclose key


def _one_trial(task, dist, dtype="float32", shape=(8, 300)):
    return Trial(index=0, shape=shape, dtype=dtype, seed=1234, distribution=dist, split="public")


def _judge_counted(task, counter, trial, out, tmp_path, **kw):
    ins = inputs_mod.make_trial_inputs(task, trial, "cpu")
    path = tmp_path / f"o{trial.index}-{trial.distribution}-{trial.dtype}.tensor"
    path.unlink(missing_ok=True)
    write_tensor(path, out(ins).contiguous())
    counter.same_dtype = counter.float64 = 0
    return checker._judge(task, trial, path, ins, "trial 0", "cpu", **kw)


def test_a_recheck_or_an_audit_computes_it_only_where_the_verdict_applies_it(registry, tmp_path):
    plain, counter = counted(registry.get("RowSum"))
    trial = _one_trial(plain, plain.timed_distribution)
    exact = lambda ins: _exact(plain, ins)   # noqa: E731
    assert _judge_counted(plain, counter, trial, exact, tmp_path) is True and counter.same_dtype == 1
    assert _judge_counted(plain, counter, trial, exact, tmp_path, flag=False) is None
    assert counter.same_dtype == 0
    gated, counter = counted(registry.get("RowSum"), kernelbench_check=("float32",))
    assert _judge_counted(gated, counter, trial, exact, tmp_path, flag=False) is True
    assert counter.same_dtype == 1               # the imported problem's verdict needs it: computed


def test_the_first_reference_is_reused_where_it_is_the_same_dtype_one(registry, tmp_path):
    # a float64 trial of a task whose float64 reference is its own reference: one call, not two
    gelu = registry.get("GELU")
    task, counter = counted(gelu, tolerances={**gelu.tolerances, "float64": Tolerance(1e-7, 1e-7)})
    trial = _one_trial(task, task.timed_distribution, dtype="float64", shape=(4, 256))
    assert _judge_counted(task, counter, trial, lambda ins: task.reference(*ins), tmp_path) is True
    assert (counter.float64, counter.same_dtype) == (1, 0)
    # a task whose reference runs in the input dtype (reference_in_float64=False): its first reference is it
    argmax, counter = counted(registry.get("RowArgmax"))
    trial = _one_trial(argmax, argmax.timed_distribution, shape=tuple(argmax.workload("cpu").public[0]))
    assert _judge_counted(argmax, counter, trial, lambda ins: argmax.reference(*ins), tmp_path) is True
    assert counter.same_dtype == 1               # the first reference's call only (two before)
    # attention's float64 reference is computed in parts, not by `reference`: the same-dtype call stays
    attn = registry.get("Attention")
    assert attn.float64_reference is not None and not kernelbench_check.first_is_same_dtype(
        attn, (torch.zeros(1, dtype=torch.float64),))


def _row_sum_trials(task):
    """One float32 trial on the timed distribution and one on a stress distribution, cpu shapes."""
    trials = [t for t in make_trials(task, "cpu", EvalConfig(), random.Random(0)) if t.dtype == "float32"]
    timed = next(t for t in trials if t.distribution == task.timed_distribution)
    stress = next(t for t in trials if t.distribution != task.timed_distribution)
    return [timed, stress]


def _loose_row_sum(registry, gated: bool):
    """RowSum with a tolerance (atol 0.5, rtol 0.05) that admits `_off`; `gated`: as an imported problem whose
    verdict applies KernelBench's check in float32."""
    loose = {"float32": Tolerance(0.5, 0.05), "float16": Tolerance(0.5, 0.05)}
    base = dataclasses.replace(registry.get("RowSum"), tolerances=loose)
    return dataclasses.replace(base, kernelbench_check=("float32",)) if gated else base


def _off(exact: torch.Tensor) -> torch.Tensor:
    """Off by 0.1 + 2% everywhere: within atol 0.5 + rtol 0.05, outside allclose's 0.01 + 1% on every element."""
    return exact + 0.1 + 0.02 * exact.abs()


@pytest.mark.parametrize("gated", [False, True])
def test_a_kernel_off_only_on_a_stress_distribution_keeps_its_verdict_and_passes_kernelbench(registry, tmp_path,
                                                                                             gated):
    """Within RowSum's (loosened) tolerance but outside allclose(1e-2, 1e-2) on the stress trial alone: ok,
    as before, for a built-in task and for an imported one whose verdict applies KernelBench's check (only
    ever on the timed distribution). The flag is KernelBench's check on KernelBench's inputs: true (it was
    false when it ran on every trial)."""
    task = _loose_row_sum(registry, gated)
    timed, stress = _row_sum_trials(task)

    def output(tr, ins):
        exact = checker._reference(task, ins).float()
        return _off(exact) if tr is stress else exact
    job, report = _case(task, tmp_path, [timed, stress], output)
    result = checker.check(task, job, report, "cpu")
    assert result.status is Status.OK and result.kernelbench_allclose is True


@pytest.mark.parametrize("gated", [False, True])
def test_a_kernel_off_on_the_timed_distribution_is_judged_as_before(registry, tmp_path, gated):
    task = _loose_row_sum(registry, gated)
    timed, stress = _row_sum_trials(task)

    def output(tr, ins):
        exact = checker._reference(task, ins).float()
        return _off(exact) if tr is timed else exact
    job, report = _case(task, tmp_path, [timed, stress], output)
    result = checker.check(task, job, report, "cpu")
    if gated:
        assert result.status is Status.MISMATCH and "KernelBench's own check" in result.message
    else:
        assert result.status is Status.OK and result.kernelbench_allclose is False


def test_no_trial_of_the_timed_distribution_leaves_the_flag_unknown(registry, tmp_path):
    task = registry.get("RowSum")
    stress = _row_sum_trials(task)[1]
    job, report = _case(task, tmp_path, [stress], lambda tr, ins: checker._reference(task, ins).float())
    result = checker.check(task, job, report, "cpu")
    assert result.status is Status.OK and result.kernelbench_allclose is None


@pytest.mark.parametrize("name", ["TopK", "RowArgsort"])
def test_kernelbench_compares_the_raw_indices_not_the_view(registry, tmp_path, name):
    """A task compared through output_view (tied indices): the old flag compared the view of the output
    (the values its indices select) with the reference's raw indices, false for every correct kernel."""
    task = registry.get(name)
    trials = [t for t in make_trials(task, "cpu", EvalConfig(), random.Random(0))
              if t.distribution == task.timed_distribution]
    job, report = _case(task, tmp_path, trials, lambda tr, ins: task.reference(*ins))
    result = checker.check(task, job, report, "cpu")
    assert result.status is Status.OK and result.kernelbench_allclose is True


def _expected_fixture_status(path: Path) -> str:
    return re.search(r"Expected status: (\w+)", path.read_text().splitlines()[0]).group(1)


# the failure fixtures whose verdict the check itself gives, and reference solutions of three tasks
FIXTURE_NAMES = ("mismatch", "all_zero", "non_finite", "wrong_dtype", "wrong_shape", "input_mutated")
SOLUTIONS = (("LayerNorm", "triton_rowwise.py"), ("GELU", "triton_blocked.py"), ("TopK", "triton_chunk_sort.py"))


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_the_failure_fixtures_keep_their_verdict_through_the_environment(name):
    from kernelgym_gap.engine.pipeline import evaluate
    path = FIXTURES / "failures" / f"{name}.py"
    rec = evaluate("LayerNorm", path.read_bytes(), backend="cpu", config=EvalConfig(trial_seed=7))
    assert rec.status.value == _expected_fixture_status(path)
    assert (rec.terms or {}).get("kernelbench_allclose") is None


@pytest.mark.parametrize("task_name,solution", SOLUTIONS)
def test_reference_solutions_keep_their_verdict_through_the_environment(registry, task_name, solution):
    from kernelgym_gap.engine.pipeline import evaluate
    task = registry.get(task_name)
    sol = next(s for s in task.solutions if s.file == solution)
    rec = evaluate(task_name, task.solution_path(sol).read_bytes(), backend="cpu", config=EvalConfig(trial_seed=7))
    assert rec.status.value == sol.cpu_status == "ok"
    assert rec.terms["kernelbench_allclose"] is True      # TopK's was false: the view against raw indices
