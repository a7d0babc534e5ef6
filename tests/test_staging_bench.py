"""scripts/staging_bench.py: a GPU figure or nothing. Without CUDA it says why and exits 2, writing no figures
(host-only timings would be read as the GPU's copies)."""
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "staging_bench.py"


@pytest.mark.skipif(torch.cuda.is_available(), reason="the cpu-only refusal")
def test_without_cuda_it_refuses_and_writes_nothing(tmp_path):
    out = tmp_path / "figures.json"
    r = subprocess.run([sys.executable, str(SCRIPT), "--dir", str(tmp_path), "--json", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "needs a CUDA device" in r.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.gpu
def test_gpu_the_bench_runs_one_small_size_and_checks_its_bytes(tmp_path):
    out = tmp_path / "figures.json"
    r = subprocess.run([sys.executable, str(SCRIPT), "--dir", str(tmp_path), "--mib", "8", "--reps", "2",
                        "--staging-mib", "2", "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    import json
    row = json.loads(out.read_text())["rows"][0]
    assert row["mib"] == 8 and all(v is not None for k, v in row["median_s"].items() if k != "pin")
