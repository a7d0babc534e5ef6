"""scripts/fidelity.py without a GPU: a run split over device calls resumes from the earlier JSON (what it
settled is not evaluated again; what its deadline left out is)."""
import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _script():
    spec = importlib.util.spec_from_file_location("fidelity", ROOT / "scripts" / "fidelity.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_an_earlier_run_settles_its_measured_and_skipped_kernels_not_its_deadline(tmp_path):
    from kernelgym_gap.core.registry import default_registry
    softmax = default_registry().get("Softmax")
    sol = next(s for s in softmax.solutions if s.dsl == "triton" and s.kind == "optimized")
    row = {"task": softmax.id, "kernel": Path(sol.file).stem, "dsl": sol.dsl, "shape": [8192, 4096],
           "dtype": "float16", "ratio": 1.01}
    earlier = tmp_path / "fidelity_h200_part1.json"
    earlier.write_text(json.dumps({"rows": [row], "skipped": [
        "GELU/triton_scalar.py: 120.0 ms per call, over --cap-ms",
        "LayerNorm/triton_two_pass.py: status mismatch",
        "RowSum/triton_loop.py: the independent process failed: exit 1: x",
        "Conv2d/triton_direct.py: deadline"]}))
    rows, skipped, settled = _script().earlier_run(earlier)
    assert rows == [row]
    assert f"Softmax/{sol.file}" in settled
    assert {"GELU/triton_scalar.py", "LayerNorm/triton_two_pass.py", "RowSum/triton_loop.py"} <= settled
    assert "Conv2d/triton_direct.py" not in settled and len(skipped) == 3


class _Pool:
    made: list = []

    def __init__(self):
        self.closed = False
        _Pool.made.append(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.closed = True


def test_jobs_run_every_item_once_each_worker_with_its_own_pool_closed_at_the_end():
    import threading
    _Pool.made = []
    seen, lock = [], threading.Lock()

    def work(item, pool):
        with lock:
            seen.append((item, id(pool), threading.current_thread().name))

    _script().run_jobs(list(range(9)), 3, _Pool, work)
    assert sorted(i for i, _, _ in seen) == list(range(9))
    assert len(_Pool.made) == 3 and all(p.closed for p in _Pool.made)
    # a pool serves one thread only
    by_pool = {}
    for _, pid, name in seen:
        by_pool.setdefault(pid, set()).add(name)
    assert all(len(names) == 1 for names in by_pool.values())


def test_jobs_stop_at_the_first_error_and_raise_it():
    import pytest
    _Pool.made = []
    done = []

    def work(item, pool):
        if item == 0:
            raise RuntimeError("boom")
        done.append(item)

    with pytest.raises(RuntimeError, match="boom"):
        _script().run_jobs(list(range(50)), 1, _Pool, work)
    assert done == [] and all(p.closed for p in _Pool.made)


def test_the_independent_process_is_told_the_environments_lane(monkeypatch):
    """Its do_bench runs hold the lane the environment's timings hold (so --jobs never lets a measurement share
    the GPU): the spec it reads names the resolved lane directory."""
    import subprocess
    from kernelgym_gap.core.placement import Placement
    from kernelgym_gap.core.lane import resolve
    from kernelgym_gap.core.registry import default_registry
    mod = _script()
    task = default_registry().get("Softmax")
    sol = next(s for s in task.solutions if s.kind == "optimized")
    seen = {}

    def fake_run(cmd, **kw):
        seen.update(json.loads(Path(cmd[3]).read_text()))
        Path(cmd[4]).write_text(json.dumps({"results": []}))
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(mod.subprocess, "run", fake_run)
    assert mod.measure_independently(task, sol, [], 10, lane_dir=Placement().lane_dir) == []
    assert seen["lane_dir"] == resolve("auto") and seen["task"] == task.id


def test_main_with_jobs_evaluates_each_kernel_once_and_writes_rows_in_batch_order(monkeypatch, tmp_path):
    """The run's loop without a GPU: the warm pool, the evaluation and the independent process replaced by
    fakes; two workers; every chosen kernel evaluated once, the rows compared and written."""
    import threading
    mod = _script()
    import gap_study
    import kernelgym_gap.api.warm as warm
    calls, lock = [], threading.Lock()

    class FakePool:
        checker = children = None

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

        def close(self):        # the one-slot service stops its pool when it closes
            closed.append(self)

    closed = []

    def fake_evaluate(task, sol, backend, cfg, checker=None, children=None, placement=None):
        with lock:
            calls.append(f"{task.name}/{sol.file}")
        return {"task": task.id, "kernel": Path(sol.file).stem, "dsl": sol.dsl, "status": "ok", "E": 2.0,
                "seconds": 0.1, "per_shape": [{"shape": [8, 8], "dtype": "float16", "kernel_ms": 0.05,
                                               "library_ms": 0.1}],
                "device": {"name": "NVIDIA H200"}, "versions": {"torch": "x"}}

    monkeypatch.setattr(warm, "WarmPool", lambda **kw: FakePool())
    monkeypatch.setattr(gap_study, "evaluate_one", fake_evaluate)
    monkeypatch.setattr(mod, "timing_cases", lambda study, config: [])
    monkeypatch.setattr(mod, "measure_independently", lambda *a, **kw: [
        {"shape": [8, 8], "dtype": "float16", "distribution": "normal", "kernel_ms": 0.05, "library_ms": 0.1}])
    assert mod.main(["--only", "normalization", "--kinds", "optimized", "--jobs", "2", "--out", str(tmp_path)]) == 0
    out = json.loads(next(tmp_path.glob("fidelity_h200_*.json")).read_text())
    assert len(calls) == len(set(calls)) == len(out["rows"]) >= 7
    assert all(r["ratio"] == 1.0 and r["in_goal"] for r in out["rows"]) and out["skipped"] == []
    # without --variant the output is as before: no variant column, no summary
    assert all("variant" not in r for r in out["rows"]) and "variant_summary" not in out
    assert "variants" not in out["meta"]
    assert 1 <= len(closed) <= 2     # a one-slot service per worker (its pool made on first use), each stopped


# ---- --variant (issue 35): the levers' E against do_bench ----------------------------------------------------

# scripts/device_session.sh's ALL_NEW: every lane-time lever, timing, checker and placement fields together
ALL_NEW = ("clock_warmup_rule=steady,warm_once=1,recheck_outside_exclusive=1,read_outputs_outside_lane=1,"
           "read_outputs_while_timing=1,held_device_bytes=1024M,graph_replay=1,stop_rule=interval")


def test_variant_is_throughputs_one_definition_and_a_bad_field_is_refused_before_any_evaluation(monkeypatch,
                                                                                                  tmp_path):
    import pytest
    mod = _script()
    import gap_study
    import throughput
    assert mod.parse_variant is throughput.parse_variant and mod.apply_variant is throughput.apply_variant
    assert mod.expand_variants(None) == [""] and mod.expand_variants(["levers"]) == ["", *throughput.LEVERS]
    assert mod.parse_variant(ALL_NEW)["held_device_bytes"] == 1024 << 20
    evaluated = []
    monkeypatch.setattr(gap_study, "evaluate_one", lambda *a, **kw: evaluated.append(a))
    for bad, said in (("graph_replay=2", "0 or 1"), ("wall_s=3", "is not one of"), ("stop_rule=fast", "one of")):
        with pytest.raises(SystemExit, match=said):
            mod.main(["--only", "Softmax/triton_rowwise", "--variant", "", "--variant", bad, "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="more than once"):
        mod.main(["--only", "Softmax/triton_rowwise", "--variant", "", "--variant", "", "--out", str(tmp_path)])
    assert evaluated == []


def _fake_run(monkeypatch, mod, shapes=((8, 8), (16, 16))):
    """The warm pool, the evaluation and the independent process replaced: records each evaluation's config
    and placement and each independent measurement."""
    import gap_study
    import kernelgym_gap.api.warm as warm

    class FakePool:
        checker = children = None

        def close(self):
            pass

    seen = {"evaluations": [], "independent": []}

    def fake_evaluate(task, sol, backend, cfg, checker=None, children=None, placement=None):
        seen["evaluations"].append((f"{task.name}/{sol.file}", cfg, placement))
        # a lever that moves E: graph replay reads the kernel 10% faster than the loop
        k = 0.09 if cfg.timing.graph_replay else 0.1
        return {"task": task.id, "kernel": Path(sol.file).stem, "dsl": sol.dsl, "status": "ok", "E": 2.0,
                "seconds": 0.1, "per_shape": [{"shape": list(s), "dtype": "float16", "kernel_ms": k,
                                               "library_ms": 0.2} for s in shapes],
                "device": {"name": "NVIDIA H100"}, "versions": {"torch": "x"}}

    def fake_independent(task, sol, cases, timeout_s, lane_dir=None):
        seen["independent"].append(f"{task.name}/{sol.file}")
        return [{"shape": list(s), "dtype": "float16", "distribution": "normal", "kernel_ms": 0.1,
                 "library_ms": 0.2} for s in shapes]

    monkeypatch.setattr(warm, "WarmPool", lambda **kw: FakePool())
    monkeypatch.setattr(gap_study, "evaluate_one", fake_evaluate)
    monkeypatch.setattr(mod, "timing_cases", lambda study, config: [])
    monkeypatch.setattr(mod, "measure_independently", fake_independent)
    return seen


def test_each_variant_reaches_the_evaluations_config_and_placement_and_do_bench_runs_once_per_kernel(
        monkeypatch, tmp_path, capsys):
    import dataclasses

    from kernelgym_gap.core.config import EvalConfig
    from kernelgym_gap.core.placement import Placement
    mod = _script()
    seen = _fake_run(monkeypatch, mod)
    variants = ["", ALL_NEW, "clock_warmup_rule=steady,warm_once=1,recheck_outside_exclusive=0",
                "recheck_outside_exclusive=1,clock_warmup_rule=fixed,warm_once=0",
                "graph_replay=1,stop_rule=interval"]
    argv = ["--only", "Softmax/triton_rowwise,RowSum/triton_tiled", "--kinds", "optimized", "--out", str(tmp_path)]
    for v in variants:
        argv += ["--variant", v]
    assert mod.main(argv) == 0
    kernels = ["Softmax/triton_rowwise.py", "RowSum/triton_tiled.py"]
    # every kernel evaluated once per variant, in the order given; do_bench once per kernel, not per variant
    assert [name for name, _, _ in seen["evaluations"]] == [k for k in kernels for _ in variants]
    assert seen["independent"] == kernels
    # each variant's fields, and only those, on the evaluation's config and placement (whatever the defaults)
    default_cfg, default_where = EvalConfig(), Placement()
    for v, (_, cfg, where) in zip(variants * 2, seen["evaluations"]):
        over = mod.parse_variant(v)
        for f in dataclasses.fields(default_cfg.timing):
            assert getattr(cfg.timing, f.name) == over.get(f.name, getattr(default_cfg.timing, f.name)), (v, f.name)
        for name in ("read_outputs_outside_lane", "read_outputs_while_timing"):
            assert getattr(cfg, name) == over.get(name, getattr(default_cfg, name)), (v, name)
        assert where.held_device_bytes == over.get("held_device_bytes", default_where.held_device_bytes)
        assert where.lane_dir == "auto"
        # the run's fixed seeds kept under every variant
        assert cfg.trial_seed == 20261203 and cfg.seeds_per_shape == 2
    assert seen["evaluations"][1][2].held_device_bytes == 1024 << 20 and seen["evaluations"][1][1].timing.graph_replay

    out = json.loads(next(tmp_path.glob("fidelity_h100_*.json")).read_text())
    assert out["meta"]["variants"] == variants
    assert len(out["rows"]) == len(kernels) * len(variants) * 2
    assert {r["variant"] for r in out["rows"]} == set(variants)
    summary = {s["variant"]: s for s in out["variant_summary"]}
    assert list(summary) == variants and all(s["compared"] == 4 for s in summary.values())
    assert summary[""]["max_abs_ratio_minus_1"] == 0.0
    # graph replay's faster kernel reads E 0.2/0.09 against do_bench's 0.2/0.1: 11.1% off, outside the goal
    for v in (ALL_NEW, "graph_replay=1,stop_rule=interval"):
        assert abs(summary[v]["median_abs_ratio_minus_1"] - 1 / 9) < 1e-9 and summary[v]["in_goal"] == 0
    printed = capsys.readouterr().out
    tail = printed[printed.index("per variant"):]
    assert "defaults" in tail and ALL_NEW in tail and "11.11%" in tail
    assert "variant" in printed.splitlines()[printed.splitlines().index(next(
        line for line in printed.splitlines() if line.startswith("kernel")))]


def test_a_variant_whose_evaluation_fails_is_skipped_alone_and_the_others_still_compared(monkeypatch, tmp_path):
    mod = _script()
    seen = _fake_run(monkeypatch, mod)
    import gap_study
    ok_evaluate = gap_study.evaluate_one

    def flaky(task, sol, backend, cfg, **kw):
        row = ok_evaluate(task, sol, backend, cfg, **kw)
        return dict(row, status="too_slow") if cfg.timing.graph_replay else row

    monkeypatch.setattr(gap_study, "evaluate_one", flaky)
    assert mod.main(["--only", "Softmax/triton_rowwise", "--kinds", "optimized", "--out", str(tmp_path),
                     "--variant", "", "--variant", "graph_replay=1"]) == 0
    out = json.loads(next(tmp_path.glob("fidelity_*.json")).read_text())
    assert seen["independent"] == ["Softmax/triton_rowwise.py"]
    assert {r["variant"] for r in out["rows"]} == {""}
    assert out["skipped"] == ["Softmax/triton_rowwise.py: status too_slow [graph_replay=1]"]
    # the skip still names the kernel as --resume reads it
    rows, skipped, settled = mod.earlier_run(next(tmp_path.glob("fidelity_*.json")))
    assert "Softmax/triton_rowwise.py" in settled


def test_variant_summary_arithmetic_on_synthetic_rows():
    mod = _script()

    def row(variant, ratio, in_goal=True, **extra):
        return {"ratio": ratio, "in_goal": in_goal, **({"variant": variant} if variant is not None else {}), **extra}

    rows = [row("", 1.01), row("", 0.97), row("", 1.02),
            row("graph_replay=1", 1.10, in_goal=False), row("graph_replay=1", 0.95),
            row(None, 1.00)]          # a row of an earlier run without variants: the defaults'
    summary = mod.variant_summary(rows)
    assert [s["variant"] for s in summary] == ["", "graph_replay=1"]
    d, g = summary
    assert d["compared"] == 4 and g["compared"] == 2
    assert abs(d["median_abs_ratio_minus_1"] - 0.015) < 1e-12        # median of 0.00, 0.01, 0.02, 0.03
    assert abs(d["max_abs_ratio_minus_1"] - 0.03) < 1e-12 and d["in_goal"] == 4
    assert abs(g["median_abs_ratio_minus_1"] - 0.075) < 1e-12        # median of 0.05 and 0.10
    assert abs(g["max_abs_ratio_minus_1"] - 0.10) < 1e-12 and g["in_goal"] == 1
    text = mod.summary_table(summary)
    assert text.splitlines()[2].split() == ["4", "1.50%", "3.00%", "4/4", "defaults"]
    assert text.splitlines()[3].split() == ["2", "7.50%", "10.00%", "1/2", "graph_replay=1"]


def test_the_fidelity_levers_step_runs_every_variant_on_the_six_light_triton_solutions(tmp_path):
    """scripts/device_session.sh fidelity-levers, its python replaced by one that records its arguments: the
    defaults, ALL_NEW (the script's own) and each lever group alone, each a --variant fidelity.py accepts; the
    default task list picks the light batch's six optimized Triton solutions and nothing else."""
    import os
    import re
    import subprocess

    mod = _script()
    import gap_study      # scripts/ is on sys.path once _script() ran
    from kernelgym_gap.core.registry import default_registry
    args_file, bin_dir = tmp_path / "args.txt", tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "python3"
    fake.write_text(f'#!/usr/bin/env bash\nprintf "%s\\n" "$@" > {args_file}\n')
    fake.chmod(0o755)
    script = ROOT / "scripts" / "device_session.sh"
    env = dict(os.environ, OUT=str(tmp_path / "out"), PATH=f"{bin_dir}:{os.environ.get('PATH', '')}")
    proc = subprocess.run(["bash", str(script), "fidelity-levers"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    args = args_file.read_text().split("\n")[:-1]
    assert args[0] == "scripts/fidelity.py"
    variants = [args[k + 1] for k, a in enumerate(args) if a == "--variant"]
    all_new = re.search(r"^ALL_NEW=(\S+)$", script.read_text(), re.M).group(1)
    assert variants[:2] == ["", all_new] and len(variants) == 5
    timing = {"clock_warmup_rule", "warm_once", "recheck_outside_exclusive", "graph_replay"}
    groups = [mod.parse_variant(v) for v in variants[2:]]
    # each group alone: every timing lever named, so the group is alone whatever the defaults are
    assert all(timing <= set(g) for g in groups)
    on = [{k for k in timing if g[k] not in (False, "fixed")} for g in groups]
    assert on == [{"clock_warmup_rule", "warm_once"}, {"recheck_outside_exclusive"}, {"graph_replay"}]
    assert groups[2]["stop_rule"] == "interval"
    assert args[args.index("--out") + 1] == str(tmp_path / "out" / "fidelity_levers")
    assert "--deadline-s" in args and args[args.index("--kinds") + 1] == "optimized"
    only = args[args.index("--only") + 1]
    chosen = [(t.name, s.dsl) for t, s in gap_study.select(default_registry(), only, None) if s.kind == "optimized"]
    assert sorted(chosen) == sorted((t, "triton") for t in ("GELU", "LayerNorm", "Softmax", "RMSNorm", "AddReLU",
                                                            "RowSum"))


def test_a_fidelity_row_carries_the_environments_library_source():
    """A cached library hint standing moves E_env by up to library_tolerance whatever the lever (item 13's RMSNorm
    8192x4096: 0.0508 ms cached against do_bench's 0.0470): the row says so; a row without the field gives None."""
    mod = _script()
    env = {"task": "kernelgym_gap/RMSNorm-v1", "kernel": "triton_rowwise", "dsl": "triton", "variant": "x=1",
           "per_shape": [{"shape": [8192, 4096], "dtype": "float16", "kernel_ms": 0.0403, "library_ms": 0.0508,
                          "library_source": "cached", "library_hint_ms": 0.0508, "library_check_ms": 0.0470},
                         {"shape": [4096, 8192], "dtype": "float16", "kernel_ms": 0.05, "library_ms": 0.06}]}
    ind = [{"shape": [8192, 4096], "dtype": "float16", "distribution": "normal", "kernel_ms": 0.0423,
            "library_ms": 0.0470},
           {"shape": [4096, 8192], "dtype": "float16", "distribution": "normal", "kernel_ms": 0.05,
            "library_ms": 0.06}]
    rows = mod.compare(env, ind)
    assert (rows[0]["library_source"], rows[0]["library_hint_ms"], rows[0]["library_check_ms"]) == \
        ("cached", 0.0508, 0.0470)
    assert rows[1]["library_source"] is None and rows[0]["variant"] == "x=1"
