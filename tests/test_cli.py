import json
import subprocess
import sys

from conftest import FIXTURES, ROOT


def cli(*args):
    return subprocess.run([sys.executable, "-m", "kernelgym_gap.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=600)


def test_tasks_json(registry):
    p = cli("tasks", "--json")
    assert p.returncode == 0
    data = json.loads(p.stdout)
    assert len(data) == len(registry)
    for obj in data:
        assert {"id", "category", "dsls", "entry_point", "signature"} <= set(obj)


def test_eval_json_contract_ok_and_failure(registry):
    task = registry.get("LayerNorm")
    for path, status in [(task.solution_path(task.solutions[0]), "ok"),
                         (FIXTURES / "failures" / "mismatch.py", "mismatch")]:
        p = cli("eval", "--task", "LayerNorm", "--backend", "cpu", str(path), "--json")
        assert p.returncode == 0, p.stderr
        obj = json.loads(p.stdout)          # exactly one JSON object
        assert {"task", "dsl", "backend", "status", "correct", "reward", "terms", "message"} <= set(obj)
        assert obj["status"] == status


def test_unknown_task_exits_nonzero():
    p = cli("eval", "--task", "LayerNrom", "--backend", "cpu", str(FIXTURES / "failures" / "mismatch.py"))
    assert p.returncode == 2 and "Did you mean" in p.stderr


def test_run_prints_a_table():
    p = cli("run", "--backend", "cpu", "--task", "LayerNorm", "--dsl", "triton")
    assert p.returncode == 0, p.stderr
    assert "triton_rowwise.py" in p.stdout and "reference solutions evaluated" in p.stdout
