"""`import kernelbench` (issue 18): problem files written for these tests (tests/fixtures/kernelbench/) become
task folders; the counted flops and bytes match hand-computed values; the problems the importer must refuse
are refused with their reason; and a correct Triton ModelNew, a correct function submission, a wrong one and
a cheating one are judged on the cpu backend like any task's submissions."""
import json
import shutil
import tempfile
from pathlib import Path

import gymnasium as gym
import pytest

from kernelgym_gap.cli.main import main as cli_main
from kernelgym_gap.core.config import EvalConfig
from kernelgym_gap.core.registry import TaskRegistry
from kernelgym_gap.core.status import Status
from kernelgym_gap.engine.pipeline import evaluate
from kernelgym_gap.importers.kernelbench import CPU_ELEMENTS, import_paths

from conftest import FIXTURES

KB = FIXTURES / "kernelbench"
SOLUTIONS = KB / "solutions"
CFG = EvalConfig(trial_seed=7)


@pytest.fixture(scope="module")
def imported():
    # not under pytest's tmp_path (mode 0700): the sandboxed child runs as another uid and must read it
    out = Path(tempfile.mkdtemp(prefix="kgg-kb-tasks-"))
    out.chmod(0o755)
    results = import_paths([KB / p for p in ("19_ReLU.py", "2_Standard_matrix_multiplication_.py",
                                              "76_Gemm_Add_ReLU.py", "40_LayerNorm.py",
                                              "47_Sum_reduction_over_a_dimension.py")], out)
    assert all(r.ok for r in results), [r.message for r in results if not r.ok]
    yield out, TaskRegistry(out)
    shutil.rmtree(out, ignore_errors=True)


def test_folders_categories_and_the_copy_of_the_problem(imported):
    out, reg = imported
    cats = {t.name: t.category for t in reg}
    assert cats == {"19_ReLU": "elementwise", "2_Standard_matrix_multiplication": "gemm",
                    "76_Gemm_Add_ReLU": "gemm", "40_LayerNorm": "normalization",
                    "47_Sum_reduction_over_a_dimension": "reduction"}
    for t in reg:
        assert t.validate() == [] and t.origin == "kernelbench" and t.module_entry_point == "ModelNew"
        assert (t.directory / "problem.py").read_text() == t.reference_source()
        assert t.directory == out / t.category / t.directory.name


def test_counted_flops_and_bytes_match_hand_computed_values(imported):
    _, reg = imported
    relu, mm, lin, ln, red = (reg.get(n) for n in ("19_ReLU", "2_Standard_matrix_multiplication",
                                                    "76_Gemm_Add_ReLU", "40_LayerNorm",
                                                    "47_Sum_reduction_over_a_dimension"))
    assert relu.workload("cuda").public == ((16, 16384),)
    assert relu.flops((16, 16384)) == 0                         # FlopCounterMode counts matmul-like ops only
    assert relu.min_bytes((16, 16384), "float32") == 2 * 16 * 16384 * 4
    assert mm.workload("cuda").public == ((1024, 4096, 2048),)   # (M, K, N): the size globals in file order
    assert mm.flops((1024, 4096, 2048)) == 2 * 1024 * 4096 * 2048
    assert mm.min_bytes((1024, 4096, 2048), "float16") == (1024 * 4096 + 4096 * 2048 + 1024 * 2048) * 2
    assert lin.flops((128, 1024, 512)) == 2 * 128 * 1024 * 512   # addmm; the bias add and ReLU are not counted
    assert lin.min_bytes((128, 1024, 512), "float32") == (128 * 1024 + 512 * 1024 + 512 + 128 * 512) * 4
    assert ln.min_bytes((64, 4096), "bfloat16") == (2 * 64 * 4096 + 2 * 4096) * 2
    assert red.min_bytes((16, 256, 256, 1), "float32") == (16 * 256 * 256 + 16 * 256) * 4
    assert lin.flops(lin.workload("cpu").public[0]) == 2 * 64 * 64 * 64


def test_cpu_shapes_follow_the_rule_and_heldout_shapes_scale_the_batch(imported):
    _, reg = imported
    for t in reg:
        for backend in ("cpu", "cuda"):
            w = t.workload(backend)
            (pub,), (held,) = w.public, w.heldout
            assert pub != held and held[0] == pub[0] * 3 // 4 and held[1:] == pub[1:], (t.name, backend)
        cpu = t.workload("cpu").public[0]
        entry = json.loads(json.dumps(t.make_inputs.__self__.meta["shapes"][",".join(map(str, cpu))]))
        assert sum(_numel(s) for s in entry["signature"] if s) + _numel(entry["out_shape"]) <= CPU_ELEMENTS
        assert "bfloat16" not in t.workload("cpu").dtypes
    assert reg.get("19_ReLU").workload("cuda").dtypes == ("float32", "float16", "bfloat16")


def test_distributions_that_overflow_a_dtype_at_the_cuda_shape_are_dropped(imported):
    # 2_Standard_matrix_multiplication: float16 outputs on 'offset' (+4) inputs fit at the cpu K = 64 (~1e3)
    # but sum K = 4096 terms of ~16 at the cuda shape (~6.6e4 > float16's 65504): found on the H200
    _, reg = imported
    matmul = reg.get("2_Standard_matrix_multiplication")
    assert "float16" in matmul.workload("cuda").dtypes
    assert "offset" not in matmul.distributions and "large" not in matmul.distributions
    assert {"as_given", "small", "sparse"} <= set(matmul.distributions)
    # a shallow reduction keeps them: LayerNorm's outputs are normalised whatever the shift
    assert "offset" in reg.get("40_LayerNorm").distributions


def _numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def test_inputs_are_deterministic_per_seed_and_carry_the_state(imported):
    import torch
    from kernelgym_gap.core.inputs import generator
    _, reg = imported
    lin = reg.get("76_Gemm_Add_ReLU")
    shape = lin.workload("cpu").public[0]
    a = lin.make_inputs(shape, "float16", generator(3, "cpu"), "as_given", "cpu")
    b = lin.make_inputs(shape, "float16", generator(3, "cpu"), "as_given", "cpu")
    c = lin.make_inputs(shape, "float16", generator(4, "cpu"), "large", "cpu")
    assert [t.shape for t in a] == [torch.Size([64, 64]), torch.Size([64, 64]), torch.Size([64])]
    assert all(torch.equal(x, y) and x.dtype == torch.float16 for x, y in zip(a, b))
    assert not torch.equal(a[0], c[0]) and torch.equal(a[1], c[1])    # fresh inputs, the same parameters
    ref = lin.reference(*a)
    assert ref.dtype == torch.float16 and ref.shape == (64, 64)


@pytest.mark.parametrize("name, words", [
    ("dropout_in_forward", "randomness inside forward"),
    ("tuple_output", "not a torch.Tensor"),
    ("no_get_inputs", "no get_inputs()"),
    ("import_error", "importing the problem file failed: ModuleNotFoundError"),
    ("broken_forward", "forward does not run"),
])
def test_refusals_say_why_and_write_nothing(tmp_path, name, words):
    (result,) = import_paths([KB / "refused" / f"{name}.py"], tmp_path)
    assert not result.ok and words in result.message, result.message
    assert list(tmp_path.glob("*/*/task.py")) == []


def test_cli_import_and_tasks_json_show_flops_and_bytes(tmp_path, capsys):
    assert cli_main(["import", "kernelbench", str(KB / "19_ReLU.py"), str(KB / "refused" / "tuple_output.py"),
                     "--out", str(tmp_path)]) == 1        # one refused
    out = capsys.readouterr().out
    assert "imported" in out and "REFUSED" in out and "tuple_output" in out
    assert cli_main(["tasks", "--tasks-dir", str(tmp_path), "--json"]) == 0
    (task,) = json.loads(capsys.readouterr().out)
    assert task["origin"] == "kernelbench"
    row = next(r for r in task["per_shape"] if r["backend"] == "cuda" and r["split"] == "public")
    assert row["shape"] == [16, 16384] and row["flops"] == 0 and row["min_bytes"]["float16"] == 2 * 16 * 16384 * 2


@pytest.mark.parametrize("task, solution, status", [
    ("19_ReLU", "19_ReLU_modelnew.py", Status.OK),                      # KernelBench's shape: ModelNew
    ("76_Gemm_Add_ReLU", "76_Gemm_Add_ReLU_function.py", Status.OK),    # ours: a function taking the state
    ("76_Gemm_Add_ReLU", "76_Gemm_Add_ReLU_modelnew.py", Status.OK),    # ModelNew with the reference's Linear
    ("19_ReLU", "19_ReLU_wrong.py", Status.MISMATCH),
    ("19_ReLU", "19_ReLU_torch.py", Status.LIBRARY_COMPUTE),            # torch does the work
])
def test_submissions_are_judged_like_any_task(imported, task, solution, status):
    _, reg = imported
    rec = evaluate(reg.get(task), (SOLUTIONS / solution).read_text(), "triton", "cpu", CFG)
    assert rec.status is status, rec.message
    assert (rec.reward > 0) == (status is Status.OK)


def test_gym_make_and_evaluate_many_take_tasks_dir(imported):
    from kernelgym_gap.api.batch import evaluate_many
    from kernelgym_gap.api.env import make
    from kernelgym_gap.api.lanes import EvalRequest
    out, reg = imported
    try:
        env = make("19_ReLU", tasks_dir=str(out), backend="cpu")
        obs, _ = env.reset(seed=0)
        assert "class Model(nn.Module)" in obs and "ModelNew" in obs
        obs, reward, *_ = env.step("def model_forward(:\n")           # the gate: no child
        assert reward == 0.0
        env.close()
    finally:
        for t in reg:               # other tests check that gym's registry holds exactly the built-in ids
            gym.registry.pop(t.id, None)
    (rec,) = evaluate_many([EvalRequest("19_ReLU", (SOLUTIONS / "19_ReLU_modelnew.py").read_text(), "triton",
                                        "cpu", CFG)], workers=1, tasks_dir=str(out))
    assert rec.status is Status.OK


def test_a_problem_without_get_init_inputs_takes_no_init_arguments(tmp_path, capsys):
    """Every load of the problem (its facts at the own sizes, the per-shape modules) gets the default, not
    only the first: the missing function refused the file as 'forward does not run' before (2026-12-05)."""
    (result,) = import_paths([KB / "no_init" / "tanh_no_init_inputs.py"], tmp_path)
    assert result.ok, result.message
    task = TaskRegistry(tmp_path).get("tanh_no_init_inputs")
    assert task.category == "elementwise"
    assert cli_main(["import", "kernelbench", str(KB / "refused" / "tuple_output.py"), "--out",
                     str(tmp_path / "none")]) == 1
    out = capsys.readouterr().out
    assert "0 imported" in out and "evaluate with" not in out    # nothing to evaluate: no advice to
