"""results/ is indexed by the tools that write it (issue 33): scripts/results_index.py."""
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WRITERS = ["fidelity", "gap_study", "throughput", "gpu_check", "trace_timeline"]


def _module():
    spec = importlib.util.spec_from_file_location("results_index", ROOT / "scripts" / "results_index.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_committed_index_is_current_and_covers_every_committed_result():
    proc = subprocess.run([sys.executable, "scripts/results_index.py", "--check"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_record_indexes_only_what_the_run_wrote(tmp_path):
    ri = _module()
    old = tmp_path / "old.json"
    old.write_text("{}")
    past = time.time() - 3600
    os.utime(old, (past, past))
    started = time.time()
    (tmp_path / "sub").mkdir()
    (tmp_path / "new.json").write_text("{}")
    (tmp_path / "sub" / "rows.csv").write_text("a,b\n")
    data = ri.record(tmp_path, started, "scripts/x.py", ["--out", str(tmp_path)])
    assert set(data) == {"new.json", "sub/rows.csv"}
    assert data["new.json"]["tool"] == "scripts/x.py" and "--out" in data["new.json"]["command"]
    assert json.loads((tmp_path / "INDEX.json").read_text()) == data


def test_an_unindexed_result_makes_the_check_fail(tmp_path):
    ri = _module()
    results = tmp_path / "results"
    (results / "run1").mkdir(parents=True)
    (results / "run1" / "a.json").write_text("{}")
    assert "Not indexed: run1/a.json" in ri.render(results)
    ri.record(results / "run1", 0, "scripts/fidelity.py", [])
    text = ri.render(results)
    assert "| run1/a.json | scripts/fidelity.py |" in text and "Not indexed" not in text


def test_every_script_that_writes_results_records_its_run():
    for name in WRITERS:
        text = (ROOT / "scripts" / f"{name}.py").read_text()
        assert f'record_run("scripts/{name}.py"' in text, name
