"""scripts/throughput.py on the cpu backend: both modes over a tiny batch through the real engine, the JSON it
writes, the records file it appends as evaluations complete, and the table rebuilt from that file."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "throughput.py"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_cpu_run_writes_the_table_the_json_and_the_records(tmp_path):
    proc = subprocess.run([sys.executable, str(SCRIPT), "--backend", "cpu", "--tasks", "AddReLU", "--max", "3",
                           "--fixtures", "fast", "--serial", "2", "--per-gpu", "2", "--out", str(tmp_path),
                           "--variant", "held_output_bytes=0", "--variant", ""],
                          capture_output=True, text=True, timeout=280, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(next(tmp_path.glob("throughput_cpu_*.json")).read_text())
    # --max 3 with the five fast fixtures leaves no solution: the batch is the fixtures alone
    subs = out["submissions"]
    assert [s["submission"] for s in subs] == [f"fixture/{n}" for n in (
        "failures/syntax_error.py", "failures/out_of_memory.py", "failures/crash.py", "hostile/segfault.py",
        "failures/mismatch.py")]
    assert out["fixtures_unexpected"] == []
    assert [m["mode"] for m in out["modes"]] == ["serial", "lanes x2 [held_output_bytes=0]", "lanes x2"]
    assert out["agreement"]["compared"] == 2 and out["agreement"]["same_status"] == 2
    records = [json.loads(x) for x in (tmp_path / "throughput_records.jsonl").read_text().splitlines()]
    assert sum(r["mode"] == "serial" for r in records) == 2 and sum(r["mode"] == "lanes" for r in records) == 5
    assert sum(r["mode"] == "lanes [held_output_bytes=0]" for r in records) == 5
    assert all(r["status"] != "ok" and r["message"] and "total" in r["latency"] for r in records)
    # which submission each record is, and when its evaluation started on the mode's clock
    assert {r["submission"] for r in records if r["mode"] == "lanes"} == {s["submission"] for s in subs}
    assert all(0 <= r["started_s"] <= r["at_s"] for r in records)
    assert (tmp_path / "throughput_serial_partial.json").is_file()
    assert "== throughput, cpu" in proc.stdout and proc.stdout.rstrip().splitlines()[-1].startswith("lanes x2")

    again = subprocess.run([sys.executable, str(SCRIPT), "--from-records", str(tmp_path / "throughput_records.jsonl")],
                           capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert again.returncode == 0, again.stderr
    lines = again.stdout.splitlines()
    assert [line.split()[0] for line in lines[-3:]] == ["serial", "lanes", "lanes"]
    assert lines[-1].split()[:2] == ["lanes", "5"] and "held_output_bytes=0" in lines[-2]


def test_the_table_from_records_counts_what_completed(tmp_path):
    spec = __import__("importlib.util").util.spec_from_file_location("throughput", SCRIPT)
    mod = __import__("importlib.util").util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    path = tmp_path / "r.jsonl"
    lines = [{"mode": "lanes", "status": s, "at_s": at, "latency": {"total": w}}
             for s, at, w in (("ok", 10.0, 8.0), ("ok", 20.0, 12.0), ("timeout", 36.0, 30.0))]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    (row,) = mod.from_records(path, n_gpus=1)
    assert row["evaluations"] == 3 and row["seconds"] == 36.0
    assert row["evals_per_gpu_hour"] == 300.0            # 3 in 36 s
    assert row["wall_p50_s"] == 12.0 and row["wall_max_s"] == 30.0
    assert row["statuses"] == {"ok": 2, "timeout": 1}
    assert mod.from_records(path, n_gpus=2)[0]["evals_per_gpu_hour"] == 150.0


def test_records_of_a_batch_split_over_two_calls_add_up(tmp_path):
    spec = __import__("importlib.util").util.spec_from_file_location("throughput", SCRIPT)
    mod = __import__("importlib.util").util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text(json.dumps({"mode": "lanes", "status": "ok", "at_s": 30.0, "latency": {"total": 9.0}}) + "\n")
    b.write_text("".join(json.dumps({"mode": "lanes", "status": "ok", "at_s": t, "latency": {"total": 5.0}}) + "\n"
                         for t in (10.0, 42.0)))
    (row,) = mod.from_records([a, b])
    assert row["evaluations"] == 3 and row["seconds"] == 72.0 and row["evals_per_gpu_hour"] == 150.0


def test_a_variant_is_a_set_of_config_overrides():
    spec = __import__("importlib.util").util.spec_from_file_location("throughput", SCRIPT)
    mod = __import__("importlib.util").util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.parse_variant("") == {}
    assert mod.parse_variant("held_output_bytes=4096M,timed_shapes=2") == {"held_output_bytes": 4 << 30,
                                                                          "timed_shapes": 2}
    assert mod.parse_variant("compile_outside_lane=1") == {"compile_outside_lane": True}
    with pytest.raises(SystemExit, match="not one of"):
        mod.parse_variant("wall_s=3")


def _script():
    spec = __import__("importlib.util").util.spec_from_file_location("throughput", SCRIPT)
    mod = __import__("importlib.util").util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_lever_of_issue_35_is_a_variant_and_lands_on_its_config_field():
    """One GPU call runs the levers side by side: each parses, and lands on EvalConfig or its TimingConfig."""
    from kernelgym_gap.core.config import EvalConfig
    from kernelgym_gap.core.placement import Placement
    mod = _script()
    config = EvalConfig()
    for lever in mod.LEVERS:
        overrides = mod.parse_variant(lever)
        assert overrides
        applied, placement = mod.apply_variant(config, overrides)
        # the one lever that is placement (scheduling: the same outputs reach the checker) leaves the config alone
        assert placement == Placement() or (set(overrides) <= set(mod.PLACEMENT_FIELDS) and applied == config)
        for key, value in overrides.items():
            where = (applied.timing if key in mod.TIMING_FIELDS else
                     applied.sandbox if key in mod.SANDBOX_FIELDS else
                     placement if key in mod.PLACEMENT_FIELDS else applied)
            assert getattr(where, key) == value
    # held_output_bytes is scheduling: it lands on the evaluations' Placement, the config (the cache key) unchanged
    same, placement = mod.apply_variant(config, mod.parse_variant("held_output_bytes=0"))
    assert same == config and placement == Placement(held_output_bytes=0)
    both, _ = mod.apply_variant(config, mod.parse_variant(mod.LEVERS[-1]))
    assert both.compile_outside_lane and both.precompute_reference
    assert both.timing.graph_replay and both.timing.stop_rule == "interval"
    assert both.sandbox.launch_bound_after_compile and both.sandbox.wall_s == config.sandbox.wall_s
    assert both.timing.min_reps == config.timing.min_reps            # the rest of the timing untouched


def test_the_hand_over_switch_is_a_variant_on_the_config():
    """scripts/device_session.sh's handover step runs --variant hand_over_outputs=1 (issue 35's wiring)."""
    from kernelgym_gap.core.config import EvalConfig
    from kernelgym_gap.core.placement import Placement
    mod = _script()
    assert mod.parse_variant("hand_over_outputs=1") == {"hand_over_outputs": True}
    applied, placement = mod.apply_variant(EvalConfig(), mod.parse_variant("hand_over_outputs=1"))
    assert applied.hand_over_outputs is True and placement == Placement()
    with pytest.raises(SystemExit, match="0 or 1"):
        mod.parse_variant("hand_over_outputs=yes")


@pytest.mark.parametrize("bad,match", [("stop_rule=fixed", "spread"), ("graph_replay=yes", "0 or 1"),
                                       ("timed_shapes=two", "integer")])
def test_a_bad_variant_value_is_refused_by_name(bad, match):
    with pytest.raises(SystemExit, match=match):
        _script().parse_variant(bad)


def test_the_run_says_which_levers_to_adopt_from_its_own_rows():
    mod = _script()
    rows = [{"mode": "serial", "evals_per_gpu_hour": 100.0},
            {"mode": "lanes x4", "evals_per_gpu_hour": 500.0},
            {"mode": "lanes x4 [compile_outside_lane=1]", "evals_per_gpu_hour": 600.0},
            {"mode": "lanes x4 [graph_replay=1]", "evals_per_gpu_hour": 520.0}]
    gains = {g["variant"]: g for g in mod.lever_gains(rows)}
    assert gains["compile_outside_lane=1"]["gain"] == pytest.approx(0.2) and gains["compile_outside_lane=1"]["adopt"]
    assert not gains["graph_replay=1"]["adopt"]               # 4%: inside a 12-evaluation run's noise
    assert mod.lever_gains(rows[:1]) == []                    # no defaults row in this call: no verdict


def test_a_levers_E_is_compared_with_the_defaults_submission_by_submission():
    """Issue 35 asks every lever to keep E within 2% of the defaults on the same submissions: the run says
    each variant's ratios, leaving out submissions without an E on either side."""
    from types import SimpleNamespace as R
    mod = _script()
    defaults = [R(terms={"E": 1.0}), R(terms={"E": 2.0}), R(terms=None), R(terms={"E": 0.5})]
    lever = [R(terms={"E": 1.01}), R(terms={"E": 1.9}), R(terms={"E": 3.0}), R(terms={"E": None})]
    got = mod.e_against_defaults(defaults, lever)
    assert got["E_compared"] == 2
    assert got["max_abs_E_ratio_minus_1"] == pytest.approx(0.05)
    assert got["min_E_ratio"] == pytest.approx(0.95) and got["max_E_ratio"] == pytest.approx(1.01)
    assert mod.e_against_defaults([], [])["median_abs_E_ratio_minus_1"] is None


def test_the_host_sampler_writes_memory_and_load_on_the_modes_clock(tmp_path):
    import time
    spec = __import__("importlib.util").util.spec_from_file_location("throughput", SCRIPT)
    mod = __import__("importlib.util").util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    path = tmp_path / "throughput_host.jsonl"
    with mod.HostSampler(path, "lanes", time.perf_counter(), every_s=0.05):
        time.sleep(0.3)
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert len(lines) >= 2 and all(x["mode"] == "lanes" for x in lines)
    assert lines[0]["mem_available_gib"] > 0 and lines[0]["load1"] >= 0
    assert lines == sorted(lines, key=lambda x: x["at_s"])


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_library_warm_up_runs_first_and_is_not_counted(tmp_path):
    """`--warm-library on`: one optimized solution per task is evaluated before the variants, into its own
    records file, so that no variant pays the library's measurements for the others (the H100 light batch of
    2026-12-06 had the defaults, always first, 20-30% slower for that alone)."""
    proc = subprocess.run([sys.executable, str(SCRIPT), "--backend", "cpu", "--tasks", "AddReLU", "--max", "2",
                           "--fixtures", "none", "--serial", "0", "--per-gpu", "2", "--warm-library", "on",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=280, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(next(tmp_path.glob("throughput_cpu_*.json")).read_text())
    assert out["library_warm_up"]["warm_up_evaluations"] == 1
    assert [m["mode"] for m in out["modes"]] == ["lanes x2"]
    warm = [json.loads(x) for x in (tmp_path / "throughput_warmup_records.jsonl").read_text().splitlines()]
    assert [(r["mode"], r["submission"]) for r in warm] == [("warm-up", "AddReLU/triton_blocked.py")]
    records = [json.loads(x) for x in (tmp_path / "throughput_records.jsonl").read_text().splitlines()]
    assert len(records) == 2 and {r["mode"] for r in records} == {"lanes"}
    assert "warm-up: 1 optimized solutions" in proc.stderr


def test_the_warm_steps_take_the_variants_placement_fields_too(monkeypatch):
    """`--env-steps-variant held_device_bytes=...`: the steps' KernelEnv gets the variant's Placement, not only its
    EvalConfig (the H100 step rows of 2026-12-06 ran without the device-held outputs for that reason)."""
    import kernelgym_gap.api.env as env_mod
    made = []

    class FakeEnv:
        def __init__(self, task_id, **kw):
            made.append(kw)
            self.last_record = type("R", (), {"latency": {"total": 0.1}})()

        def reset(self, seed=None):
            return None, {}

        def step(self, source):
            return None, 0.0, True, False, {"status": "ok", "terms": {"E": 1.0}}

        def close(self):
            pass

    monkeypatch.setattr(env_mod, "KernelEnv", FakeEnv)
    mod = _script()
    out = mod.env_steps(["Softmax"], "cpu", 0.0, mod.parse_variant("held_device_bytes=64M,warm_once=1"))
    assert [r["status"] for r in out["steps"]] == ["ok", "ok"]
    assert made[0]["placement"].held_device_bytes == 64 << 20
    assert made[0]["config"].timing.warm_once is True
    out = mod.env_steps(["Softmax"], "cpu", 0.0, mod.parse_variant("held_device_bytes=0"))
    assert made[1]["placement"].held_device_bytes == 0


def test_the_library_warm_up_covers_the_fixtures_task_too():
    """The fixtures are LayerNorm submissions: the warm-up evaluates LayerNorm's optimized solution as well, even
    where the batch holds none of LayerNorm's own (the H100 full mix of 2026-12-06 evening did not, and its first
    row met LayerNorm's library time unknown)."""
    mod = _script()
    batch = mod.make_batch(["AddReLU"], 5, "cpu", "fast")     # 5 fast fixtures and no solution
    assert all(tag.startswith("fixture/") for tag, _, _ in batch)
    assert [(tag, kind) for tag, kind, _ in mod.warm_up_batch(batch, "cpu")] == [
        ("LayerNorm/triton_rowwise.py", "optimized")]
    batch = mod.make_batch(["AddReLU", "GELU"], 9, "cpu", "fast")
    firsts = mod.warm_up_batch(batch, "cpu")
    assert [tag for tag, _, _ in firsts] == ["AddReLU/triton_blocked.py", "GELU/triton_blocked.py",
                                            "LayerNorm/triton_rowwise.py"]
    assert all(kind == "optimized" and req.backend == "cpu" for _, kind, req in firsts)
    assert mod.warm_up_batch(mod.make_batch(["AddReLU"], 2, "cpu", "none"), "cpu")[0][0] == "AddReLU/triton_blocked.py"


def test_the_hand_overs_rechecks_and_fallbacks_are_counted_from_the_records_flags():
    """The flag's rows of 2026-12-07 had false non_finite verdicts; the recheck by files now corrects them, and a
    row must say how often it did (the script reads the flags' strings: they must stay the engine's)."""
    import types
    from kernelgym_gap.engine import handover
    spec = __import__("importlib.util").util.spec_from_file_location("throughput", SCRIPT)
    mod = __import__("importlib.util").util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.HANDOVER_FLAGS == {"handover_rechecks": handover.RECHECK_FLAG, "handover_fallbacks": handover.FLAG}
    records = [types.SimpleNamespace(terms={"flags": [f"{handover.RECHECK_FLAG}: non_finite: trial 8 ..."]}),
               types.SimpleNamespace(terms={"flags": [f"{handover.FLAG}: no opener was started", "other"]}),
               types.SimpleNamespace(terms={"flags": []}), types.SimpleNamespace(terms=None)]
    assert mod.handover_flags(records) == {"handover_rechecks": 1, "handover_fallbacks": 1}


def test_a_rows_held_children_say_their_memory_and_how_many_outputs_went_by_handle():
    import types
    spec = __import__("importlib.util").util.spec_from_file_location("throughput", SCRIPT)
    mod = __import__("importlib.util").util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    records = [types.SimpleNamespace(latency={"child_hold_reserved_mib": 812.5, "outputs_handed": 14}),
               types.SimpleNamespace(latency={"child_hold_reserved_mib": 2048.0, "outputs_handed": 11}),
               types.SimpleNamespace(latency={"total": 3.0})]
    assert mod.handover_memory(records) == {"hold_reserved_max_mib": 2048.0, "outputs_handed_mean": 8.3}
    assert mod.handover_memory([types.SimpleNamespace(latency={})]) == {"hold_reserved_max_mib": None,
                                                                        "outputs_handed_mean": 0.0}



def test_a_row_says_where_the_librarys_first_calls_went():
    import types
    spec = __import__("importlib.util").util.spec_from_file_location("throughput", SCRIPT)
    mod = __import__("importlib.util").util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    records = [types.SimpleNamespace(latency={"child_timing_probe_warm_library": 0.2, "child_library_warm": 2.5}),
               types.SimpleNamespace(latency={"child_timing_probe_warm_library": 0.25, "child_library_warm": 0.1,
                                              "child_preimport_library_warm": 3.0}),
               types.SimpleNamespace(latency={"child_timing_probe_warm_library": 4.0})]
    assert mod.library_warm_figures(records) == {
        "library_warm_in_timing_s": 4.45, "library_warm_shared_s": 2.6, "library_warm_shared_n": 2,
        "library_warm_prestarted_s": 3.0, "library_warm_prestarted_n": 1}


def test_a_row_says_how_long_its_children_took_to_end_after_their_reports():
    import types
    mod = _script()
    records = [types.SimpleNamespace(latency={"child_after_report": s}) for s in (0.12, 0.2, 0.1)]
    records.append(types.SimpleNamespace(latency={"total": 1.0}))          # refused at the gate: no child
    assert mod.after_report_figures(records) == {"after_report_p50_s": 0.12, "after_report_max_s": 0.2,
                                                 "after_report_n": 3}
    assert mod.after_report_figures(records[3:]) == {"after_report_p50_s": None, "after_report_max_s": None,
                                                     "after_report_n": 0}


def test_a_row_says_what_its_pre_started_children_took():
    import types
    mod = _script()
    records = [types.SimpleNamespace(latency={"child_preimport": 4.0, "child_preimport_startup": 2.0,
                                              "child_preimport_lane_wait": 1.5}),
               types.SimpleNamespace(latency={"child_preimport": 0.5, "child_preimport_startup": 2.2,
                                              "child_preimport_lane_wait": 0.1}),
               types.SimpleNamespace(latency={"child": 5.0})]                        # a cold child
    assert mod.prestart_figures(records) == {"prestart_preimport_p50_s": 2.25, "prestart_startup_p50_s": 2.1,
                                             "prestart_lane_wait_p50_s": 0.8, "prestart_bind_wait_p50_s": None,
                                             "prestart_bound_n": 0}
    assert set(mod.prestart_figures(records[2:]).values()) == {None, 0}
    # started early (Placement.prestart_early): the wait for its task after its imports
    early = [types.SimpleNamespace(latency={"child_preimport": 0.4, "child_preimport_bind_wait": w}) for w in (1.0, 3.0)]
    figures = mod.prestart_figures(early)
    assert figures["prestart_bind_wait_p50_s"] == 2.0 and figures["prestart_bound_n"] == 2
    assert mod.parse_variant("prestart_early=1") == {"prestart_early": True}
    from kernelgym_gap.core.config import EvalConfig
    _, where = mod.apply_variant(EvalConfig(), {"prestart_early": True})
    assert where.prestart_early is True


def test_a_row_says_how_long_its_outputs_took_to_write_and_read_and_how_they_were_staged():
    import types
    mod = _script()
    records = [types.SimpleNamespace(latency={"child_checkpoint_write": 1.5, "child_outputs_write": 0.5,
                                              "check_prefetch": 1.0, "check_read": 0.25,
                                              "child_outputs_staging_alloc": 0.02}),
               types.SimpleNamespace(latency={"child_outputs_write": 1.0, "check_read": 0.5,
                                              "child_outputs_staging_refused": 1.0}),
               types.SimpleNamespace(latency={"child_checkpoint_write": 0.5, "check_prefetch": 0.5}),
               types.SimpleNamespace(latency={"total": 1.0})]          # refused at the gate: nothing written
    assert mod.output_write_figures(records) == {
        "outputs_write_p50_s": 1.0, "outputs_read_p50_s": 0.5, "staging_n": 1, "staging_alloc_p50_s": 0.02,
        "staging_refused_n": 1}
    assert mod.output_write_figures(records[3:]) == {
        "outputs_write_p50_s": None, "outputs_read_p50_s": None, "staging_n": 0, "staging_alloc_p50_s": None,
        "staging_refused_n": 0}
    assert mod.parse_variant("output_staging_bytes=64M") == {"output_staging_bytes": 64 << 20}
