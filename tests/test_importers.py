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
                                              "47_Sum_reduction_over_a_dimension.py")], out, trust=True)
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
    ("dropout_in_forward", "randomness used inside forward"),
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
                     "--out", str(tmp_path), "--trust"]) == 1        # one refused
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
    (result,) = import_paths([KB / "no_init" / "tanh_no_init_inputs.py"], tmp_path, trust=True)
    assert result.ok, result.message
    task = TaskRegistry(tmp_path).get("tanh_no_init_inputs")
    assert task.category == "elementwise"
    assert cli_main(["import", "kernelbench", str(KB / "refused" / "tuple_output.py"), "--out",
                     str(tmp_path / "none")]) == 1
    out = capsys.readouterr().out
    assert "0 imported" in out and "evaluate with" not in out    # nothing to evaluate: no advice to
    assert cli_main(["import", "kernelbench", str(KB / "no_init" / "tanh_no_init_inputs.py"), "--out",
                     str(tmp_path / "untrusted")]) == 0
    out = capsys.readouterr().out
    assert "imported without --trust" in out and "evaluate with" not in out


# ---------------------------------------------------------------------------------------- issue 32: the importer

def test_problem_code_runs_only_in_the_sandbox_and_an_untrusted_task_refuses_to_load(tmp_path, monkeypatch):
    """I1: the problem's module body and get_inputs() ran in the importing process, as its user, with its
    environment (they wrote $KERNELGYM_GAP_TOKEN to a host file). Now they run in the sandbox (clean
    environment, its own uid and scratch) and nothing of the caller's is reached; the task imported without
    --trust then refuses to load in this (trusted) process, so the checker never runs the file here."""
    from kernelgym_gap.core.errors import TaskDefinitionError
    probe = tmp_path / "reached"
    monkeypatch.setenv("KGG_IMPORT_PROBE", str(probe))
    monkeypatch.setenv("KERNELGYM_GAP_TOKEN", "secret-token-32")
    out = tmp_path / "tasks"
    (result,) = import_paths([KB / "hostile" / "host_effects.py"], out)
    assert result.ok, result.message                   # the analysis ran (in the sandbox) and counted it
    assert not probe.exists(), probe.read_text()
    assert "not trusted" in result.message
    meta_text = (result.task_dir / "task.py").read_text()
    assert "'trusted': False" in meta_text and "secret-token-32" not in meta_text
    with pytest.raises(TaskDefinitionError, match="--trust"):
        TaskRegistry(out)
    assert not probe.exists()
    # trusted explicitly: it loads (and its reference would run here, as documented)
    (trusted,) = import_paths([KB / "hostile" / "host_effects.py"], tmp_path / "trusted", trust=True)
    assert trusted.ok and TaskRegistry(tmp_path / "trusted").get("host_effects").origin == "kernelbench"


def test_a_file_name_cannot_inject_code_into_the_generated_task(tmp_path, monkeypatch):
    """I2: the raw file name went into task.py's docstring; one holding triple quotes ran a shell command
    when `tasks --tasks-dir` loaded the task."""
    monkeypatch.chdir(tmp_path)
    src = tmp_path / "src"
    src.mkdir()
    hostile = src / 'x"""; import os; os.system("touch pwned"); """.py'
    hostile.write_text((KB / "19_ReLU.py").read_text())
    out = tmp_path / "tasks"
    (result,) = import_paths([hostile], out, trust=True)
    assert result.ok, result.message
    assert result.name == "x_____import_os__os_system__touch_pwned"
    text = (result.task_dir / "task.py").read_text()
    # four statements (docstring, import, META = <literal>, TASK = ...): the name added no code
    import ast
    body = ast.parse(text).body
    assert [type(n).__name__ for n in body] == ["Expr", "ImportFrom", "Assign", "Assign"]
    ast.literal_eval(body[2].value)
    assert "touch pwned" not in ast.get_docstring(ast.parse(text))
    assert cli_main(["tasks", "--tasks-dir", str(out), "--json"]) == 0
    assert not (tmp_path / "pwned").exists() and not (src / "pwned").exists()
    task = TaskRegistry(out).get(result.name)
    assert task.make_inputs.__self__.meta["source"] == str(hostile)      # kept, as a literal


def test_render_task_writes_only_plain_literals():
    from kernelgym_gap.importers.kernelbench import ImportRefused, render_task
    with pytest.raises(ImportRefused, match="not plain data"):
        render_task({"name": "x", "bad": object()})
    with pytest.raises(ImportRefused, match="finite"):
        render_task({"name": "x", "tol": float("nan")})


def test_links_are_refused_and_refusals_never_quote_the_file(tmp_path):
    """I3: a linked problem file was followed, and a one-word secret file's content appeared in the refusal
    (a NameError naming the word). Links (to a file or a folder, given or found in a folder) are refused by
    lstat; a refusal names the file and the reason's kind, never its content."""
    secret = tmp_path / "secret.txt"
    secret.write_text((KB / "hostile" / "one_word_secret.txt").read_text())
    word = secret.read_text().strip()
    probs = tmp_path / "probs"
    probs.mkdir()
    (probs / "evil.py").symlink_to(secret)
    shutil.copy(KB / "19_ReLU.py", tmp_path / "relu.py")
    linked_dir = tmp_path / "linked"
    linked_dir.symlink_to(probs)
    walked = tmp_path / "walked"
    walked.mkdir()
    (walked / "inner").symlink_to(probs)
    out = tmp_path / "out"
    results = import_paths([probs / "evil.py", linked_dir, walked, linked_dir / "evil.py",
                            KB / "hostile" / "one_word_secret.py", secret], out)
    assert [r.ok for r in results] == [False] * 6, [r.message for r in results]
    evil, ldir, inner, through, direct, txt = (r.message for r in results)
    assert "symbolic link" in evil and "symbolic link" in ldir and "symbolic link" in inner
    assert "goes through a symbolic link" in through
    assert direct.startswith("importing the problem file failed: NameError")
    assert "not a .py file" in txt
    assert all(word not in r.message for r in results)
    assert list(out.glob("*/*/task.py")) == []


def test_cli_out_that_is_a_file_is_a_clear_error(tmp_path, capsys):
    existing = tmp_path / "not_a_dir"
    existing.write_text("keep me\n")
    assert cli_main(["import", "kernelbench", str(KB / "19_ReLU.py"), "--out", str(existing)]) == 2
    err = capsys.readouterr().err
    assert "exists and is not a directory" in err and "Traceback" not in err
    assert existing.read_text() == "keep me\n"


def test_a_report_forged_by_the_problem_is_checked_not_trusted(tmp_path):
    """The problem runs in the analysis child and can write that child's report: the parent accepts only
    plain data whose name, category and problem file are its own (a category of '../../escaped' would have
    put the task folder outside --out)."""
    out = tmp_path / "deep" / "out"
    (result,) = import_paths([KB / "hostile" / "forged_report.py"], out)
    assert not result.ok and "category outside" in result.message, result.message
    assert not (tmp_path / "escaped").exists() and list(tmp_path.rglob("task.py")) == []
