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


@pytest.mark.timeout(120)
def test_merge_remeasure_merges_rewrites_the_table_updates_best_known_and_keeps_the_fidelity_file(tmp_path):
    """Run here after a remeasure call: the 2026-12-05 LinearSwiGLU call's files merged into a copy of the
    committed corpus (its row replaces the same row: the corpus stays 60 kernels)."""
    import shutil
    corpus, files, dest = tmp_path / "corpus", tmp_path / "files", tmp_path / "dest"
    shutil.copytree(ROOT / "results" / "h200_2026-12-04_corpus", corpus)
    (files / "gap_remeasure").mkdir(parents=True)
    day = ROOT / "results" / "h200_2026-12-05"
    shutil.copy(day / "gap_swiglu" / "gap_study_cuda.json", files / "gap_remeasure" / "gap_study_cuda.json")
    shutil.copy(day / "fidelity_h200_2026-12-05.json", files / "fidelity_h200_2026-12-05.json")
    best = tmp_path / "best_known.json"
    best.write_text(json.dumps({"NVIDIA H200": {"kernelgym_gap/Softmax-v0": {"triton": 6.7}}}))
    proc = subprocess.run(["bash", str(SCRIPT), "merge-remeasure"], cwd=ROOT, capture_output=True, text=True,
                          timeout=110, env=_env(tmp_path, FILES=str(files), CORPUS=str(corpus), BEST=str(best),
                                                DEST=str(dest)))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = json.loads((corpus / "gap_study_cuda.json").read_text())["rows"]
    assert len(rows) == 60 and sum(r["task"].endswith("LinearSwiGLU-v1") for r in rows) == 1
    assert "60 kernels" in (corpus / "gap_study_table.txt").read_text()
    merged = json.loads(best.read_text())["NVIDIA H200"]
    assert merged["kernelgym_gap/Softmax-v0"] == {"triton": 6.7}          # an older version's entry kept
    assert "kernelgym_gap/LinearSwiGLU-v1" in merged and len(merged) == 41
    assert (dest / "remeasure_fidelity_h200_2026-12-05.json").is_file()


def test_merge_remeasure_without_files_says_what_it_needs(tmp_path):
    proc = subprocess.run(["bash", str(SCRIPT), "merge-remeasure"], cwd=ROOT, capture_output=True, text=True,
                          timeout=30, env=_env(tmp_path, FILES=str(tmp_path / "nothing")))
    assert proc.returncode == 2 and "FILES must name" in proc.stdout


def _fake_python(tmp_path) -> Path:
    """A python3 that prints the command line it was given, first on PATH: the step's commands, not run."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "python3"
    fake.write_text("#!/bin/bash\nprintf 'ARGS'; printf ' [%s]' \"$@\"; echo\n")
    fake.chmod(0o755)
    return bin_dir


@pytest.mark.parametrize("part, picks", [("light", "[--tasks] [GELU,LayerNorm,Softmax,RMSNorm,AddReLU,RowSum]"),
                                         ("full", "[--max] [16]")])
def test_the_defaults_check_runs_the_old_defaults_beside_the_new(tmp_path, part, picks):
    """Issue 35's defaults switched on 2026-12-06 evening: the step runs the old defaults (every switched lever
    named off) and the new ('') side by side, one part per call."""
    bin_dir = _fake_python(tmp_path)
    proc = subprocess.run(["bash", str(SCRIPT), "defaults-check"], cwd=ROOT, capture_output=True, text=True,
                          timeout=30, env=dict(_env(tmp_path, PART=part), PATH=f"{bin_dir}:{os.environ['PATH']}"))
    args = next(line for line in proc.stdout.splitlines() if line.startswith("ARGS"))
    assert "[scripts/throughput.py]" in args and picks in args and f"[{tmp_path}/out/defaults_{part}]" in args
    old = ("[clock_warmup_rule=fixed,warm_once=0,recheck_outside_exclusive=0,read_outputs_outside_lane=0,"
           "held_device_bytes=0]")
    assert f"[--variant] {old} [--variant] []" in args
    # every field the old row names parses, and each one differs from today's default
    spec = __import__("importlib.util").util.spec_from_file_location("throughput", ROOT / "scripts" / "throughput.py")
    mod = __import__("importlib.util").util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    from kernelgym_gap.core.config import EvalConfig
    old_config, old_place = mod.apply_variant(EvalConfig(), mod.parse_variant(old.strip("[]")))
    new_config, new_place = mod.apply_variant(EvalConfig(), {})
    assert old_config.timing != new_config.timing and old_place.held_device_bytes != new_place.held_device_bytes
    assert old_config.read_outputs_outside_lane != new_config.read_outputs_outside_lane


def test_the_defaults_check_refuses_an_unknown_part(tmp_path):
    bin_dir = _fake_python(tmp_path)
    proc = subprocess.run(["bash", str(SCRIPT), "defaults-check"], cwd=ROOT, capture_output=True, text=True,
                          timeout=30, env=dict(_env(tmp_path, PART="both"), PATH=f"{bin_dir}:{os.environ['PATH']}"))
    assert "PART must be light or full" in proc.stdout and "ARGS" not in proc.stdout


def test_the_owed_gpu_tests_share_one_device_cache_when_the_step_names_it(tmp_path):
    """owed-tests exports KGG_GPU_TEST_CACHE_DIR: each test process then uses that one directory for its
    calibration and library cache (conftest.device_cache_dir); without it a module makes its own."""
    from conftest import GPU_TEST_CACHE_ENV, shared_or_own_cache_dir
    shared = tmp_path / "shared" / "cache"
    assert shared_or_own_cache_dir({GPU_TEST_CACHE_ENV: str(shared)}, lambda: tmp_path / "own") == shared
    assert shared.is_dir()
    assert shared_or_own_cache_dir({}, lambda: tmp_path / "own") == tmp_path / "own"
    text = SCRIPT.read_text()
    assert f"export {GPU_TEST_CACHE_ENV}=" in text and "faulthandler_timeout" in text
