"""scripts/kb_library_times.py, issue 36's survey of imported tasks' library times (the H200 table): the share
of KernelBench problems whose torch eager runs under 20 us. On the cpu only its plumbing is checked (wall
clock, cpu shapes): the figures it exists for are GPU ones (owed, docs/measurement.md)."""
import importlib.util
import json
import shutil
import tempfile
from pathlib import Path

from kernelgym_gap.importers.kernelbench import import_paths

from conftest import FIXTURES

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("kb_library_times", ROOT / "scripts" / "kb_library_times.py")
kblt = importlib.util.module_from_spec(spec)
spec.loader.exec_module(kblt)


def test_the_summary_counts_cases_and_tasks_under_20_us():
    rows = [{"task": "a", "library_ms": 0.005}, {"task": "a", "library_ms": 0.012},
            {"task": "b", "library_ms": 0.004}, {"task": "b", "library_ms": 0.5},
            {"task": "c", "library_ms": 2.0}]
    s = kblt.summary(rows)
    assert (s["cases"], s["cases_under_20us"], s["tasks"], s["tasks_all_cases_under_20us"]) == (5, 3, 3, 1)
    assert s["share_cases_under_20us"] == 0.6 and s["share_tasks_under_20us"] == round(1 / 3, 4)
    assert s["median_library_ms"] == 0.012
    assert kblt.summary([])["share_cases_under_20us"] is None


def test_the_survey_runs_over_an_imported_directory_on_the_cpu(capsys):
    out = Path(tempfile.mkdtemp(prefix="kgg-kblt-"))
    out.chmod(0o755)
    try:
        (result,) = import_paths([FIXTURES / "kernelbench" / "19_ReLU.py"], out / "kb", trust=True)
        assert result.ok, result.message
        report = out / "survey.json"
        assert kblt.main(["--tasks-dir", str(out / "kb"), "--backend", "cpu", "--out", str(report)]) == 0
        data = json.loads(report.read_text())
        from kernelgym_gap.core.registry import TaskRegistry
        (task,) = list(TaskRegistry(out / "kb"))
        w = task.workloads["cpu"]
        assert len(data["rows"]) == (len(w.public) + len(w.heldout)) * len(w.dtypes) and not data["failed"]
        assert all(r["library_ms"] > 0 and r["task"] == task.id for r in data["rows"])
        assert data["summary"]["cases"] == len(data["rows"]) and data["device"] == "cpu (wall clock)"
        assert "not GPU figures" in capsys.readouterr().out
    finally:
        shutil.rmtree(out, ignore_errors=True)
