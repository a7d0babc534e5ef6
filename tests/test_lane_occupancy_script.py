"""scripts/lane_occupancy.py: lane intervals rebuilt from the records' end times and stage durations, their
union per lane, and the table per mode."""
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "lane_occupancy.py"


def _module():
    spec = importlib.util.spec_from_file_location("lane_occupancy", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _record(at_s, mode="lanes", **lat):
    base = {"gate": 0.0, "child_preimport": 1.0, "child_setup": 0.0, "child_import": 0.0,
            "child_lane_wait_shared": 0.0, "child_correctness": 2.0, "child_lane_wait_exclusive": 0.0,
            "child_timing": 1.0, "check_lane_wait": 0.0, "check": 1.0}
    base.update(lat)
    return {"mode": mode, "task": "T", "status": "ok", "at_s": at_s, "latency": base}


def test_one_evaluation_is_rebuilt_in_stage_order():
    """start 0: pre-import [0, 1), correctness [1, 3) shared, a 0.5 s wait, timing [3.5, 4.5) exclusive, the
    check [5, 6) shared less its 0.25 s lane wait."""
    mod = _module()
    rec = _record(6.0, total=6.0, child_lane_wait_exclusive=0.5, check_lane_wait=0.25)
    iv = mod.lane_intervals(rec)
    assert iv["shared"] == [(1.0, 3.0), (5.25, 6.0)]
    assert iv["exclusive"] == [(3.5, 4.5)]


def test_compiles_with_the_lane_let_go_are_not_counted_as_held():
    """compile_outside_lane: the compile time and the waits to take the lane back leave the shared stretch."""
    mod = _module()
    rec = _record(6.0, total=6.0, child_compile_unlaned=0.5, child_lane_wait_after_compile=0.25)
    assert mod.lane_intervals(rec)["shared"][0] == (1.75, 3.0)


def test_overlapping_holders_count_once_and_the_gaps_are_idle():
    mod = _module()
    assert mod.union_length([(0, 2), (1, 3), (5, 6), (6, 6)]) == pytest.approx(4.0)
    a = _record(6.0, total=6.0)                              # shared [1,3) [5,6), exclusive [3,4)
    b = _record(7.0, total=6.0)                              # shared [2,4) [6,7), exclusive [4,5)
    o = mod.occupancy([a, b])
    assert o["span_s"] == pytest.approx(7.0)
    assert o["shared_s"] == pytest.approx(3.0 + 2.0)         # [1,4) and [5,7)
    assert o["exclusive_s"] == pytest.approx(2.0)            # [3,5)
    assert o["either_s"] == pytest.approx(6.0)               # [1,7)
    assert o["idle_s"] == pytest.approx(1.0)
    assert o["rebuild_overlap_s"] == pytest.approx(1.0)      # [3,4): b's correctness under a's timing


def test_the_script_prints_one_row_per_mode(tmp_path):
    path = tmp_path / "records.jsonl"
    rows = [_record(6.0, total=6.0), _record(7.0, total=6.0), _record(9.0, mode="serial", total=6.0),
            {"mode": "lanes", "task": "U", "status": "timeout", "at_s": 60.0, "latency": {"total": 60.0}}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    proc = subprocess.run([sys.executable, str(SCRIPT), str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 3 and lines[1].split()[:3] == ["lanes", "2", "7"] and lines[2].startswith("serial")


def test_the_exclusive_stretchs_parts_are_averaged_over_the_records_that_have_them(tmp_path):
    mod = _module()
    parts = dict(child_timing_setup=0.4, child_timing_inputs=0.2, child_timing_first_call=0.1,
                 child_timing_probe=0.3, child_timing_measure=1.0, child_timing_recheck=0.2)
    a = _record(6.0, total=6.0, child_timing=2.2, **parts)
    b = _record(7.0, total=6.0, child_timing=4.4, **{k: 2 * v for k, v in parts.items()})
    old = _record(8.0, total=6.0)                  # from before the parts were recorded: left out
    got = mod.timing_parts([a, b, old])
    assert got["child_timing_measure"] == pytest.approx(1.5) and got["child_timing"] == pytest.approx(3.3)
    assert mod.timing_parts([old]) is None
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in (a, b)))
    proc = subprocess.run([sys.executable, str(SCRIPT), str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "lanes: the exclusive stretch" in proc.stdout and "measure 1.50" in proc.stdout


def test_the_checks_parts_are_averaged_and_printed(tmp_path):
    mod = _module()
    parts = dict(check_inputs=0.2, check_reference=0.5, check_read=0.1, check_compare=0.3, check_allclose=0.2,
                 check_other=0.0)
    a = _record(6.0, total=6.0, check=1.4, **parts)
    b = _record(7.0, total=6.0, check=2.0, **{k: 2 * v for k, v in parts.items()})
    got = mod.check_parts([a, b, _record(8.0, total=6.0)])
    assert got["check_reference"] == pytest.approx(0.75) and got["check"] == pytest.approx(1.7)
    assert mod.check_parts([_record(8.0, total=6.0)]) is None
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in (a, b)))
    proc = subprocess.run([sys.executable, str(SCRIPT), str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "lanes: the trusted check" in proc.stdout and "reference 0.75" in proc.stdout


def test_outputs_read_before_the_checks_lane_are_not_counted_as_held():
    """read_outputs_outside_lane: the check reads its outputs (check_prefetch), then waits, then holds the lane."""
    mod = _module()
    rec = _record(6.0, total=6.0, check_lane_wait=0.25, check_prefetch=0.5)
    assert mod.lane_intervals(rec)["shared"][1] == (5.75, 6.0)
    got = mod.check_parts([rec, _record(7.0, total=6.0, check_read=0.1)])   # a part of the check, printed first
    assert got["check_prefetch"] == pytest.approx(0.25) and mod.CHECK_PARTS[0] == "check_prefetch"


def test_rechecks_after_the_timing_are_a_shared_hold_after_their_own_wait():
    """TimingConfig.recheck_outside_exclusive: the timing [3, 4) exclusive, a 0.5 s wait, the rechecks [4.5, 5)
    shared; the check [5, 6). Without child_recheck nothing is added."""
    mod = _module()
    rec = _record(6.0, total=6.0, child_lane_wait_recheck=0.5, child_recheck=0.5)
    iv = mod.lane_intervals(rec)
    assert iv["exclusive"] == [(3.0, 4.0)]
    assert iv["shared"] == [(1.0, 3.0), (4.5, 5.0), (5.0, 6.0)]
    assert len(mod.lane_intervals(_record(6.0, total=6.0))["shared"]) == 2
