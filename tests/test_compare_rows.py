"""scripts/compare_rows.py (issue 35): two rows of one throughput call compared through the simulator. cpu only;
a synthetic records folder of two rows, one of which holds a longer probe. Every figure is a replay."""
import dataclasses
import importlib.util
import json
from pathlib import Path

import pytest

from kernelgym_gap.sim import study
from kernelgym_gap.sim.pipeline import Job

ROOT = Path(__file__).resolve().parent.parent
OLD = "lanes [clock_warmup_rule=fixed]"


def _script():
    spec = importlib.util.spec_from_file_location("compare_rows", ROOT / "scripts" / "compare_rows.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_LAT = {"gate": 0.02, "child": 7.0, "child_setup": 0.3, "child_import": 0.05, "child_lane_wait_shared": 0.2,
        "child_correctness": 3.4, "child_correctness_inputs": 0.3, "child_correctness_calls": 1.6,
        "child_correctness_save": 0.9, "child_checkpoint_write": 0.45, "child_checkpoint_unlaned": 0.4,
        "child_lane_wait_after_checkpoint": 0.3, "child_lane_wait_exclusive": 0.4, "child_timing": 2.3,
        "child_timing_setup": 0.3, "child_timing_clock_warmup": 0.3, "child_timing_inputs": 0.02,
        "child_timing_first_call": 0.01, "child_timing_probe": 0.6, "child_timing_measure": 1.1,
        "child_timing_recheck": 0.27, "child_outputs_write": 0.2, "child_total": 6.6, "check": 2.4,
        "check_lane_wait": 0.3, "check_inputs": 0.05, "check_reference": 0.05, "check_read": 1.6,
        "check_compare": 0.15, "total": 9.6}


def _record(i: int, mode: str, probe_extra: float) -> dict:
    lat = dict(_LAT)
    # the defaults row's probe is longer by probe_extra seconds (inside child_timing and child_total)
    for k in ("child_timing_probe", "child_timing", "child_total", "child", "total"):
        lat[k] = round(lat[k] + probe_extra, 4)
    return {"mode": mode, "task": f"T{i % 3}", "submission": f"T{i % 3}/s{i}.py", "status": "ok", "E": 1.0,
            "at_s": 4.0 * (i + 1), "started_s": 4.0 * (i + 1) - lat["total"], "latency": lat}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    d = tmp_path_factory.mktemp("call")
    recs = [_record(i, OLD, 0.0) for i in range(8)] + [_record(i, "lanes", 3.0) for i in range(8)]
    (d / "throughput_records.jsonl").write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    summary = {"device": "synthetic", "modes": [{"mode": f"lanes x4 [{OLD[7:-1]}]", "evals_per_gpu_hour": 700.0},
                                                {"mode": "lanes x4", "evals_per_gpu_hour": 600.0}]}
    (d / "throughput_synthetic_2026-12-06.json").write_text(json.dumps(summary))
    return d


def test_the_default_rows_are_the_variant_then_the_defaults_and_the_spread_brackets_the_orders(folder):
    res = _script().compare(str(folder), None, None, orders=4)
    assert (res["row_a"], res["row_b"]) == (OLD, "lanes")
    for m in (OLD, "lanes"):
        r = res["rows"][m]
        assert r["orders"]["min"] <= r["orders"]["mean"] <= r["orders"]["max"]
        assert r["steady_x4"]["min"] <= r["steady_x4"]["max"]
    # the longer probe makes the defaults row slower in every summary
    assert res["rows"]["lanes"]["steady_x4"]["mean"] < res["rows"][OLD]["steady_x4"]["mean"]


def test_only_the_family_that_differs_moves_the_swap(folder):
    res = _script().compare(str(folder), None, None, orders=4)
    swaps = {s["family"]: s["change"] for s in res["swaps_b_with_family_of_a"]}
    timing = next(k for k in swaps if k.startswith("timing"))
    assert swaps[timing] > 0.05            # the old row's shorter probe speeds the defaults row up
    assert all(abs(v) < 1e-9 for k, v in swaps.items() if k != timing)


def test_the_probe_cut_takes_seconds_from_the_probe_and_the_timing_alike_and_keeps_half():
    mod = _script()
    j = Job(name="a", timing=4.0, timing_probe=3.0)
    cut = mod.probe_cut([j], saved_s=0.5)[0]
    assert (cut.timing, cut.timing_probe) == pytest.approx((3.5, 2.5))
    capped = mod.probe_cut([j], saved_s=10.0)[0]    # at most half of the probe goes
    assert capped.timing_probe == pytest.approx(1.5)
    assert mod.probe_cut([dataclasses.replace(j, timing=0.0, timing_probe=0.0)], saved_s=0.5)[0].timing == 0.0
    assert mod.probe_cut([j], factor=0.0)[0].timing_probe == pytest.approx(0.0)


def test_rows_not_in_the_folder_are_refused(folder):
    mod = _script()
    with pytest.raises(mod.CompareError):
        mod.compare(str(folder), "lanes [nope]", None, orders=2)
    assert mod.main([str(folder), "--a", "lanes [nope]"]) == 2
    assert study.variant_of(OLD) == "clock_warmup_rule=fixed"
