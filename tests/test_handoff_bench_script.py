"""scripts/handoff_bench.py: both hand-offs timed side by side at a small size, the JSON and the table."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_it_times_both_ways_and_writes_the_rows(tmp_path):
    out = tmp_path / "h.json"
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "handoff_bench.py"), "--dirs", str(tmp_path),
                           "--mib", "1", "--dtypes", "bfloat16", "--reps", "2", "--json", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (row,) = json.loads(out.read_text())["rows"]
    assert row["mib"] == 1 and row["dtype"] == "bfloat16"
    assert all(row[k] > 0 for k in ("old_write_s", "new_write_s", "old_read_s", "new_read_s", "write_ratio"))
    assert proc.stdout.splitlines()[-1].startswith(str(tmp_path)[:10])
    assert list(tmp_path.iterdir()) == [out]          # nothing left behind
