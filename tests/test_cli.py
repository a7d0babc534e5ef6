"""The console script, run as a user runs it: a subprocess, its stdout, its exit code."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES, ROOT

SCRIPT = Path(sys.executable).parent / "kernelgym-gap"
RECORD_KEYS = {"task", "dsl", "backend", "status", "correct", "reward", "terms", "message"}


def cli(*args, timeout=600):
    argv = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "kernelgym_gap.cli.main"]
    return subprocess.run(argv + [str(a) for a in args], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout)


def one_json_object(stdout: str) -> dict:
    obj = json.loads(stdout)            # the whole of stdout is one JSON document ("Extra data" otherwise)...
    assert isinstance(obj, dict)        # ...and it is an object
    return obj


def test_console_script_is_installed():
    assert SCRIPT.exists() or shutil.which("kernelgym-gap"), "pip install -e . installs kernelgym-gap"


def test_help():
    p = cli("--help")
    assert p.returncode == 0 and "tasks" in p.stdout and "eval" in p.stdout and "run" in p.stdout


def test_tasks_json(registry):
    p = cli("tasks", "--json")
    assert p.returncode == 0, p.stderr
    data = json.loads(p.stdout)
    assert isinstance(data, list) and len(data) == len(registry)
    by_id = {obj["id"]: obj for obj in data}
    assert set(by_id) == set(registry.ids())
    for task in registry:
        obj = by_id[task.id]
        assert {"id", "category", "dsls", "entry_point", "signature"} <= set(obj)
        assert obj["category"] == task.category and obj["entry_point"] == task.entry_point
        assert obj["dsls"] == list(task.dsls) and obj["signature"] == task.signature


def test_tasks_table(registry):
    p = cli("tasks")
    assert p.returncode == 0
    for task in registry:
        assert task.id in p.stdout


@pytest.mark.parametrize("fixture,status", [("ok", "ok"), ("mismatch", "mismatch"), ("syntax_error", "syntax_error"),
                                            ("source_not_utf8", "source_not_utf8")])
def test_eval_json_prints_exactly_one_record(registry, fixture, status):
    task = registry.get("LayerNorm")
    if fixture == "ok":
        path = task.solution_path(next(s for s in task.solutions if s.dsl == "triton" and s.kind == "optimized"))
    else:
        path = FIXTURES / "failures" / f"{fixture}.py"
    p = cli("eval", "--task", "LayerNorm", "--backend", "cpu", "--seed", "3", path, "--json")
    assert p.returncode == 0, p.stderr            # a failing submission is still a command that ran
    obj = one_json_object(p.stdout)
    assert RECORD_KEYS <= set(obj)
    assert obj["task"] == task.id and obj["dsl"] == "triton" and obj["backend"] == "cpu"
    assert obj["status"] == status
    assert isinstance(obj["terms"], dict) and isinstance(obj["message"], str)
    if status == "ok":
        assert obj["correct"] is True and obj["reward"] == 1.0
    else:
        assert obj["correct"] is False and obj["reward"] == 0.0 and obj["message"]
    from kernelgym_gap.core.record import EvalRecord
    EvalRecord.from_dict(obj)                     # the JSON is the record itself, schema and all


def test_eval_text_output(registry):
    p = cli("eval", "--task", "kernelgym_gap/LayerNorm-v0", "--backend", "cpu", FIXTURES / "failures" / "wrong_dsl.py")
    assert p.returncode == 0, p.stderr
    assert "status: wrong_dsl" in p.stdout and "reward: 0.0000" in p.stdout


def test_unknown_task_exits_nonzero_with_a_hint():
    p = cli("eval", "--task", "LayerNrom", "--backend", "cpu", FIXTURES / "failures" / "mismatch.py", "--json")
    assert p.returncode == 2
    assert "Did you mean 'LayerNorm'" in p.stderr
    assert p.stdout == ""


def test_missing_file_exits_nonzero():
    p = cli("eval", "--task", "LayerNorm", "--backend", "cpu", "does/not/exist.py")
    assert p.returncode == 2 and "exist.py" in p.stderr


def test_bad_choice_is_a_usage_error():
    p = cli("eval", "--task", "LayerNorm", "--backend", "tpu", "x.py")
    assert p.returncode == 2 and "invalid choice" in p.stderr


@pytest.mark.skipif(os.path.exists("/dev/nvidia0"), reason="this machine has a GPU")
def test_cuda_backend_without_a_gpu_exits_3():
    p = cli("eval", "--task", "LayerNorm", "--backend", "cuda", FIXTURES / "failures" / "mismatch.py")
    assert p.returncode == 3 and "--backend cpu" in p.stderr


def test_run_prints_a_table(registry):
    task = registry.get("LayerNorm")
    p = cli("run", "--backend", "cpu", "--task", "LayerNorm", "--seed", "1")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    header = lines[0].split()
    assert header[:6] == ["task", "dsl", "solution", "kind", "status", "reward"]
    assert set(lines[1].replace(" ", "")) == {"-"}
    for sol in task.solutions:
        row = next((ln for ln in lines if sol.file in ln), None)
        assert row is not None, f"{sol.file} missing from the table"
        assert f" {sol.cpu_status} " in row and sol.dsl in row
    assert f"{len(task.solutions)} reference solutions evaluated" in p.stdout
    assert "0 failed" in p.stdout
    assert "[" in p.stderr                        # progress goes to stderr, not into the table


def test_suite_runs_episodes_in_parallel_and_keeps_plan_order(registry):
    """Two workers on the cpu backend, with a stub evaluator (the real path is test_run_prints_a_table):
    every solution of the chosen tasks gets one row, in plan order, whichever worker finished first."""
    import threading
    import time as time_mod
    from kernelgym_gap.engine.pipeline import evaluate
    from kernelgym_gap.api.suite import run_suite
    seen = set()

    def stub(task, source, dsl, backend, config):
        seen.add(threading.current_thread().name)
        time_mod.sleep(0.2)
        return evaluate(task, "def broken(:\n", dsl, backend, config)      # fails at the gate, no child
    rows = run_suite(backend="cpu", dsls=("triton",), task_ids=["LayerNorm", "RMSNorm", "GELU"], evaluator=stub,
                     workers=2)
    expected = [(t, s.file) for t in ("LayerNorm", "RMSNorm", "GELU") for s in registry.get(t).solutions
                if s.dsl == "triton"]
    assert [(r.task.removeprefix("kernelgym_gap/").removesuffix("-v0"), r.solution) for r in rows] == expected
    assert all(r.status == "syntax_error" for r in rows)
    assert len(seen) == 2
