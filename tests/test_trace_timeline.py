"""The picture of a run (kernelgym_gap/sim/trace.py, scripts/trace_timeline.py): every record's stages as
Chrome/Perfetto complete events, from a records file and from the simulator alike, and a PNG."""
import importlib.util
import json
from pathlib import Path

import pytest

from kernelgym_gap.sim import trace
from kernelgym_gap.sim.pipeline import Job, Setup, simulate

ROOT = Path(__file__).resolve().parent.parent
FULL = ROOT / "results" / "h200_2026-12-05" / "throughput_full_records.jsonl"


def _script():
    spec = importlib.util.spec_from_file_location("trace_timeline", ROOT / "scripts" / "trace_timeline.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _record(at_s, total, mode="lanes", **lat):
    base = {"gate": 0.0, "child": 6.0, "child_total": 5.5, "child_setup": 0.5, "child_import": 0.0,
            "child_lane_wait_shared": 0.0, "child_correctness": 2.0, "child_lane_wait_exclusive": 1.0,
            "child_timing": 1.5, "child_outputs_write": 0.5, "check_lane_wait": 0.5, "check": 1.5, "total": total}
    base.update(lat)
    return {"mode": mode, "task": "T", "status": "ok", "at_s": at_s, "latency": base}


def test_a_record_becomes_its_stages_in_order():
    ivs = trace.intervals_from_records([_record(10.0, 7.6)])
    stages = [(iv.stage, round(iv.start, 3), round(iv.end, 3)) for iv in ivs]
    assert stages[0] == ("child start / hand-off", 2.4, 2.9)
    assert [s for s, _, _ in stages] == ["child start / hand-off", "setup", "correctness", "wait exclusive", "timing",
                                        "outputs write", "parent", "wait shared (check)", "check"]
    assert stages[-1][2] == pytest.approx(10.0)            # the check ends at the record's end time
    lanes = {iv.stage: iv.lane for iv in ivs}
    assert lanes["correctness"] == "shared" and lanes["timing"] == "exclusive" and lanes["check"] == "shared"
    assert all(iv.wait == iv.stage.startswith("wait") for iv in ivs)


def test_slots_are_rebuilt_from_start_and_end_times():
    # two at once, then a third that starts as the first ends: it takes the first one's slot
    recs = [_record(10.0, 10.0), _record(12.0, 12.0), _record(20.0, 10.0)]
    slots = {iv.job: iv.slot for iv in trace.intervals_from_records(recs)}
    assert slots[0] != slots[1] and slots[2] == slots[0]


def test_the_chrome_trace_of_the_full_mix(tmp_path):
    rows = [json.loads(line) for line in FULL.read_text().splitlines() if line.strip()]
    ivs = trace.intervals_from_records(rows)
    data = trace.chrome_trace(ivs, "full mix")
    events = data["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    assert complete and all({"name", "pid", "tid", "ts", "dur"} <= set(e) and e["dur"] > 0 for e in complete)
    names = {e["args"]["name"] for e in events if e["ph"] == "M"}
    assert {"GPU 0", "lane: exclusive", "lane: shared", "slot 0", "slot 3"} <= names
    # each lane hold appears on the lane's own thread too
    ex = [e for e in complete if e["tid"] == trace.TID_EXCLUSIVE]
    assert len(ex) == sum(1 for r in rows if r["latency"].get("child_timing"))
    by_thread: dict = {}
    for e in complete:
        if e["tid"] < trace.TID_EXCLUSIVE:
            by_thread.setdefault(e["tid"], []).append((e["ts"], e["ts"] + e["dur"]))
    for spans in by_thread.values():            # the records' rounding clipped: no stage crosses another
        spans.sort()
        assert all(a[1] <= b[0] + 1 for a, b in zip(spans, spans[1:]))
    hung = [iv for iv in ivs if iv.stage == "hung"]
    assert len(hung) == 2                                   # the two timeouts of that run
    path = trace.write_trace(ivs, tmp_path / "t.trace.json")
    assert json.loads(path.read_text())["traceEvents"] == json.loads(json.dumps(events))


def test_the_simulators_trace_keeps_one_stage_at_a_time_per_thread():
    jobs = [Job(name=f"e{i}") for i in range(12)]
    r = simulate(jobs, Setup(slots_per_gpu=3, compile_outside_lane=True, precompute_reference=True))
    events = [e for e in trace.chrome_trace(r.trace)["traceEvents"] if e["ph"] == "X" and e["tid"] < 1000]
    by_thread: dict = {}
    for e in events:
        by_thread.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for spans in by_thread.values():
        spans.sort()
        assert all(a[1] <= b[0] + 1 for a, b in zip(spans, spans[1:]))     # Perfetto needs them not to cross
    assert any(e["tid"] >= 101 for e in events)          # the pre-started children have their own rows


def test_the_script_writes_trace_and_png(tmp_path, capsys):
    recs = tmp_path / "throughput_records.jsonl"
    recs.write_text("\n".join(json.dumps(r) for r in (_record(10.0, 7.6), _record(9.0, 9.0, mode="serial"))) + "\n")
    assert _script().main([str(recs), "--out", str(tmp_path / "out"), "--mode", "lanes"]) == 0
    assert json.loads((tmp_path / "out" / "throughput_records_lanes.trace.json").read_text())["traceEvents"]
    png = tmp_path / "out" / "throughput_records_lanes.png"
    pytest.importorskip("matplotlib")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (tmp_path / "out" / "throughput_records_serial.trace.json").exists()


def test_the_script_refuses_bad_input(tmp_path, capsys):
    bad = tmp_path / "r.jsonl"
    bad.write_text("{oops\n")
    assert _script().main([str(bad), "--out", str(tmp_path)]) == 2
    assert "not JSON" in capsys.readouterr().err
    bad.write_text(json.dumps(_record(1.0, 1.0)) + "\n")
    assert _script().main([str(bad), "--out", str(tmp_path), "--mode", "nope"]) == 2
    assert _script().main([str(tmp_path / "missing.jsonl"), "--out", str(tmp_path)]) == 2
