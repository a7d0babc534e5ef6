"""scripts/device_session.sh, the runbook of the device runs: its replay step tried on the cpu backend (the
bench, the store copied with sqlite's backup API, the JSON report), and an unknown step refused."""
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "device_session.sh"


def _env(tmp_path, **extra):
    env = dict(os.environ, OUT=str(tmp_path / "out"), DB=str(tmp_path / "bench.sqlite3"),
               PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    env.update(extra)
    return env


@pytest.mark.timeout(240)
def test_the_replay_step_stores_copies_and_reports(tmp_path):
    proc = subprocess.run(["bash", str(SCRIPT), "replay"], cwd=ROOT, capture_output=True, text=True, timeout=220,
                          env=_env(tmp_path, BACKEND="cpu", TASKS="AddReLU"))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    out = tmp_path / "out"
    report = json.loads((out / "bench_replay.json").read_text())
    assert report["label"] == "replay-h200" and report["backend"] == "cpu"
    with sqlite3.connect(out / "bench_store.sqlite3") as db:       # the copy is a whole database
        tables = {r[0] for r in db.execute("select name from sqlite_master where type = 'table'")}
    assert tables, "the copied store has no tables"


def test_an_unknown_step_is_refused(tmp_path):
    proc = subprocess.run(["bash", str(SCRIPT), "nonsense"], cwd=ROOT, capture_output=True, text=True, timeout=30,
                          env=_env(tmp_path))
    assert proc.returncode == 2 and "unknown step nonsense" in proc.stdout
