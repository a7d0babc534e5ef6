"""State conditioning of an imported problem (issue 36, importers/state_init.py): a problem the import audit
refuses only because torch's default parameter init makes its output independent of the input is imported
with re-drawn parameters, soundly; one whose algebra makes it so is still refused, with both reasons.

Fixtures are KernelBench-format files of the project's own: state_init/Gemm_GroupNorm_Mean.py (level2 23/27's
mean over a GroupNorm's output: 0 at the default init), soundness/9_Matmul_Subtract_Multiply_ReLU_zero.py
(level2 9: all zero at the default init), soundness/80_Gemm_Max_Subtract_GELU_zero.py (level2 80: x - x)."""
import ast
import shutil
import tempfile
from pathlib import Path

import pytest
import torch

from kernelgym_gap.core.config import EvalConfig
from kernelgym_gap.core.registry import TaskRegistry
from kernelgym_gap.core.status import Status
from kernelgym_gap.engine.pipeline import evaluate
from kernelgym_gap.importers import problem as problem_mod
from kernelgym_gap.importers import state_init
from kernelgym_gap.importers.kernelbench import import_paths
from kernelgym_gap.importers.runtime import FORMAT, build_task

from conftest import FIXTURES

KB = FIXTURES / "kernelbench"
GN_MEAN = KB / "state_init" / "Gemm_GroupNorm_Mean.py"
SOLUTIONS = KB / "solutions"
CFG = EvalConfig(trial_seed=7)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def imported():
    # not under pytest's tmp_path (mode 0700): the sandboxed child runs as another uid and must read it
    out = Path(tempfile.mkdtemp(prefix="kgg-kb-state-"))
    out.chmod(0o755)
    results = import_paths([GN_MEAN, KB / "soundness" / "9_Matmul_Subtract_Multiply_ReLU_zero.py"], out, trust=True)
    assert all(r.ok for r in results), [r.message for r in results if not r.ok]
    # the import line says so, where the user reads the result
    assert all("parameters conditioned (importers/state_init.py)" in r.message for r in results), results
    yield out, TaskRegistry(out)
    shutil.rmtree(out, ignore_errors=True)


def _meta(task) -> dict:
    text = (task.directory / "task.py").read_text()
    return ast.literal_eval(text.split("META = ", 1)[1].split("\n\nTASK = ", 1)[0])


@pytest.mark.parametrize("name, why", [
    ("Gemm_GroupNorm_Mean", "float32 rounding noise"),
    ("9_Matmul_Subtract_Multiply_ReLU_zero", "the reference output is all zeros"),
])
def test_a_problem_degenerate_only_at_the_default_init_is_imported_with_conditioned_state(imported, name, why):
    """Both were refused before ("a degenerate reference on get_inputs()'s own values"); META says why the
    default init was not taken and by what rule the parameters were drawn, and the statement tells the agent."""
    _, reg = imported
    task = reg.get(name)
    meta = _meta(task)
    init = meta["state_init"]
    assert init["kind"] == "conditioned" and init["seed"] == state_init.SEED and init["rule"] == state_init.RULE
    assert "degenerate reference on get_inputs()'s own values" in init["why"] and why in init["why"], init["why"]
    assert "not torch's default initialisation" in task.statement and "by parameter name" in task.statement
    # the trial's state inputs are the conditioned parameters, not the default ones
    module = problem_mod.load_module(task.directory / "problem.py", dict(zip(meta["size_names"],
                                                                              task.workload("cpu").public[0])))
    default = dict(problem_mod.state_tensors(problem_mod.build_model(module)))
    from kernelgym_gap.core.inputs import generator
    ins = task.make_inputs(task.workload("cpu").public[0], "float32", generator(3, "cpu"), "as_given", "cpu")
    state = dict(zip(meta["state_names"], ins[meta["n_data_inputs"]:]))
    conditioned = state_init.conditioned_names(problem_mod.build_model(module))
    assert conditioned and all(not torch.equal(state[n], default[n]) for n in conditioned)


@pytest.mark.parametrize("solution, status", [
    ("Gemm_GroupNorm_Mean_modelnew.py", Status.OK),             # the reference's names: the state is bound
    ("Gemm_GroupNorm_Mean_zeros_modelnew.py", Status.ALL_ZERO),  # the default init's answer
    ("Gemm_GroupNorm_Mean_constant_modelnew.py", Status.MISMATCH),   # the norm bias's mean: a constant
])
def test_the_conditioned_task_passes_a_correct_modelnew_and_catches_constants(imported, solution, status):
    _, reg = imported
    rec = evaluate(reg.get("Gemm_GroupNorm_Mean"), (SOLUTIONS / solution).read_text(), "triton", "cpu", CFG)
    assert rec.status is status, rec.message
    assert (rec.reward > 0) == (status is Status.OK)


def test_a_modelnew_whose_parameter_names_differ_keeps_the_default_init_and_fails(imported):
    """The documented limitation (docs/importing.md): the conditioned values reach a ModelNew by name only."""
    _, reg = imported
    source = (SOLUTIONS / "Gemm_GroupNorm_Mean_modelnew.py").read_text()
    renamed = source.replace("self.gemm", "self.fc").replace("self.group_norm", "self.gn")
    assert renamed != source
    rec = evaluate(reg.get("Gemm_GroupNorm_Mean"), renamed, "triton", "cpu", CFG)
    assert rec.status is Status.MISMATCH, rec.message


def test_an_algebraically_degenerate_problem_is_still_refused_with_both_reasons(tmp_path):
    """level2 80's x - x is zero whatever the parameters: the retry on conditioned ones is refused too."""
    (result,) = import_paths([KB / "soundness" / "80_Gemm_Max_Subtract_GELU_zero.py"], tmp_path, trust=True)
    assert not result.ok
    first, _, second = result.message.partition("; with conditioned parameters (importers/state_init.py) as well: ")
    assert "degenerate reference" in first and "the reference output is all zeros" in first, result.message
    assert second == "the same", result.message
    assert list(tmp_path.glob("*/*/task.py")) == []


def test_a_refusal_on_conditioned_parameters_too_gives_both_reasons():
    """level2 62's pattern (one channel per group): rounding noise at the default init; on conditioned
    parameters each column is its norm's bias, whatever the input, so another seed's reference passes."""
    from kernelgym_gap.importers.analysis import ImportRefused
    from kernelgym_gap.importers.kernelbench import build_meta
    with pytest.raises(ImportRefused) as refused:
        build_meta(KB / "soundness" / "62_Matmul_GroupNorm_one_channel.py", "62_Matmul_GroupNorm_one_channel")
    first, _, second = str(refused.value).partition("; with conditioned parameters (importers/state_init.py) as "
                                                    "well: ")
    assert "degenerate reference" in first and "float32 rounding noise" in first, str(refused.value)
    assert "passed by reference_other_seed" in second, str(refused.value)


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.bn = torch.nn.BatchNorm2d(4)
        self.fc = torch.nn.Linear(4, 5)
        self.ln = torch.nn.LayerNorm(5)
        self.emb = torch.nn.Embedding(7, 5)
        self.token = torch.nn.Parameter(torch.randn(1, 5))


def _built(seed: int = 0) -> _Net:
    with problem_mod.seeded(seed, "cpu"):
        return _Net()


def test_conditioning_is_deterministic_parameters_only_and_independent_of_the_global_seed():
    torch.manual_seed(123)
    a = state_init.condition(_built())
    torch.manual_seed(456)                 # a trial's seed: the rule draws from its own generator
    b = state_init.condition(_built())
    default = _built()
    for (n, pa), (_, pb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert torch.equal(pa, pb), n
    changed = {n for n, p in a.named_parameters() if not torch.equal(p, dict(default.named_parameters())[n])}
    assert changed == {"conv.weight", "conv.bias", "bn.weight", "bn.bias", "fc.weight", "fc.bias", "ln.weight",
                       "ln.bias"} == set(state_init.conditioned_names(a))
    for n, buf in default.named_buffers():          # BatchNorm's running statistics as the Model built them
        assert torch.equal(dict(a.named_buffers())[n], buf), n
    # the rule's scales: He for the dot products' weights, [0.5, 1.5] for the norms' weights
    assert a.bn.weight.min() >= 0.5 and a.bn.weight.max() <= 1.5 and a.bn.weight.std() > 0
    big = state_init.condition(torch.nn.Linear(4096, 256))
    assert float(big.weight.detach().std()) == pytest.approx((2 / 4096) ** 0.5, rel=0.02)


def test_the_rule_has_its_own_seed_and_an_unknown_kind_is_a_clear_error(tmp_path):
    assert state_init.SEED == problem_mod.MODEL_SEED + 1
    with pytest.raises(state_init.UnknownStateInit, match="import the problem again"):
        state_init.apply(_built(), {"kind": "from_checkpoint"})
    meta = {"format": FORMAT, "trusted": True, "name": "x", "state_init": {"kind": "other"}}
    with pytest.raises(state_init.UnknownStateInit, match="'other'"):
        build_task(tmp_path / "task.py", meta)
    kept, default = state_init.apply(_built(), None), _built()      # no META["state_init"]: as today
    assert all(torch.equal(v, default.state_dict()[k]) for k, v in kept.state_dict().items())
