"""The probe's library check amortized and its warm-up shortened as changes of the simulator's jobs
(sim/library_trust.py) and their table (sim/library_trust_table.py): hand-made jobs whose every second is known, then
the committed light batches of 2026-12-07 whose records split their probe (H200 staging_2, H100 light_warm). cpu
only, no GPU."""
import ast
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernelgym_gap.sim import library_trust as lt
from kernelgym_gap.sim import library_trust_table, study, workload
from kernelgym_gap.sim.pipeline import Job

ROOT = Path(__file__).resolve().parent.parent
H200 = ROOT / "results" / "h200_2026-12-07_session53" / "staging_2"
H100 = ROOT / "results" / "h100_2026-12-07_session52" / "light_warm"
CORPUS = ROOT / "results" / "h200_2026-12-04_corpus" / "gap_study_cuda.json"
FOLDERS = [f for f in (H200, H100) if (f / study.LIGHT_RECORDS).is_file()]
FAST = ("AddReLU/triton_blocked.py", "GELU/triton_blocked.py")      # optimized: 0.5 ms first calls
SLOW = ("AddReLU/triton_single_program.py", "GELU/triton_scalar.py")  # every shape exited early: 31-45 ms calls


def _job(**kw):
    base = dict(name="k", timing=1.5, timing_probe=0.35, timing_measure=1.0, timing_first_call=0.004)
    return Job(**{**base, **kw})


PARTS = {"k": lt.ProbeParts(warm_kernel=0.12, warm_library=0.13, reps=0.08)}


def _batch(folder):
    records = workload.read_records(folder / study.LIGHT_RECORDS)
    jobs = workload.jobs_of_mode(records, study.DEFAULTS_MODE)
    parts = lt.probe_parts(records, study.DEFAULTS_MODE)
    return jobs, parts, lt.library_rep_s(jobs, parts)


def test_the_constants_are_the_timing_configs_and_the_benchs():
    from kernelgym_gap.core.config import TimingConfig
    cfg = TimingConfig()
    assert cfg.warmup_ms == lt.WARMUP_MS and cfg.library_check_reps == lt.PROBE_REPS
    assert getattr(cfg, "library_check_shapes", 0) == 0          # off as built (0: every shape checked)
    src = (ROOT / "kernelgym_gap" / "device" / "bench.py").read_text()
    assert f"min(int(self.cfg.warmup_ms / per_call), {lt.MAX_WARM_CALLS})" in src
    assert lt.LIBRARY_CHECK == "library_check_shapes=1" and lt.WARMUP_SHORT == f"warmup_ms={lt.SHORT_WARMUP_MS:g}"


@pytest.mark.parametrize("change", [
    lt.library_check_amortized(PARTS, 1), lt.warmup_shortened(PARTS), lt.probe_levers_applied(PARTS, 1, 5.0)])
def test_a_job_with_nothing_to_cut_is_left(change):
    assert change(_job(name="no parts")) == _job(name="no parts")      # its record does not split its probe
    assert change(_job(timing=0.0)) == _job(timing=0.0)                # no timing
    none = lt.probe_levers_applied(PARTS)                              # both levers as built
    assert none(_job()) == _job()


def test_checking_all_eight_shapes_cuts_nothing():
    assert lt.library_check_amortized(PARTS, lt.SHAPES)(_job()) == _job()
    assert lt.library_check_amortized(PARTS, 12)(_job()) == _job()


def test_the_library_check_cut_is_seven_eighths_of_the_librarys_parts():
    j = lt.library_check_amortized(PARTS, 1)(_job())
    cut = 7 / 8 * (0.13 + 0.08 / 2)                     # its warm-up and half the reps (the kernel is comparable)
    assert (j.timing, j.timing_probe) == pytest.approx((1.5 - cut, 0.35 - cut))
    # the library's first calls (made in the probe: library_warm_before_lane off) are per process and stay
    first = lt.library_check_amortized(PARTS, 1)(_job(library_first_call=0.05))
    assert 1.5 - first.timing == pytest.approx(7 / 8 * (0.08 + 0.04))


def test_a_kernel_that_dominates_its_reps_leaves_the_library_a_small_share():
    p = lt.ProbeParts(warm_kernel=0.5, warm_library=0.1, reps=2.6)
    hopeless = _job(timing=3.8, timing_probe=3.2, timing_measure=0.0, timing_first_call=0.25)
    assert lt.kernel_dominated(hopeless, p)
    assert lt.library_reps_s(hopeless, p, 0.5e-3) == pytest.approx(10 * 8 * 0.5e-3)
    # measured after its probe but its 4 ms calls hold the reps: the same
    slow = _job(timing_measure=0.3, timing_first_call=0.034)
    assert lt.kernel_dominated(slow, lt.ProbeParts(0.25, 0.1, 0.39))
    assert not lt.kernel_dominated(_job(), PARTS["k"])


def test_the_warm_up_keeps_its_two_calls_and_a_fifth_of_the_rest():
    j = lt.warmup_shortened(PARTS)(_job())
    two = 2 * 0.0005 * 8                                 # 2 calls of first_call / 8 per shape, each callable
    assert 1.5 - j.timing == pytest.approx((0.12 - two + 0.13 - two) * (1 - 5 / 25))
    assert lt.rest_kept(0.0005, 5.0) == pytest.approx(0.2)
    assert lt.rest_kept(0.018, 5.0) == 0.0              # 2 + int(25/18) = 3 calls at 25 ms, 2 at 5 ms
    assert lt.rest_kept(0.031, 5.0) == 1.0              # 2 calls alone either way
    assert lt.rest_kept(0.0, 5.0) == pytest.approx(0.2)
    assert lt.rest_kept(10e-6, 5.0) == pytest.approx(0.5)   # the 1000-call bound binds at 25 ms
    low = lt.warmup_shortened(PARTS, kept=lt.REST_KEPT_LOW)(_job())
    assert low.timing > j.timing


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda f: f.parent.name)
def test_the_cuts_are_bounded_by_the_recorded_phases(folder):
    jobs, parts, rep_s = _batch(folder)
    assert len(parts) == len(jobs) == 13
    assert 0.4e-3 < rep_s < 0.6e-3
    for j in jobs:
        p = parts[j.name]
        lib = lt.probe_cut_s(j, p, shapes_checked=1, rep_s=rep_s)
        assert 0 < lib <= 7 / 8 * (p.warm_library + p.reps / 2) + 1e-12
        for checked, ms in ((1, 25.0), (0, 5.0), (1, 5.0), (1, 1.0)):
            cut = lt.probe_cut_s(j, p, checked, ms, rep_s)
            assert 0 <= cut <= min(p.total, j.timing_probe)
            changed = lt.probe_levers_applied(parts, checked, ms, rep_s)(j)
            assert changed.timing == pytest.approx(j.timing - cut) and changed.timing_probe >= 0
    # a probe shorter than its parts say (rounded records): the cut stops at the probe
    j = jobs[0]
    tiny = lt.probe_cut_s(Job(name=j.name, timing=0.05, timing_probe=0.05, timing_measure=1.0,
                              timing_first_call=0.004), parts[j.name], 1, 5.0, rep_s)
    assert tiny == pytest.approx(0.05)


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda f: f.parent.name)
def test_hopeless_jobs_lose_less_from_the_warm_up(folder):
    jobs, parts, rep_s = _batch(folder)
    by = {j.name: j for j in jobs}
    warm = {n: lt.probe_cut_s(by[n], parts[n], 0, 5.0, rep_s) for n in FAST + SLOW}
    assert max(warm[n] for n in SLOW) < 0.6 * min(warm[n] for n in FAST)
    # their kernel's warm-up is 2 calls: only the library's warm-up moves
    for n in SLOW:
        kernel_only = lt.probe_cut_s(by[n], lt.ProbeParts(parts[n].warm_kernel, 0.0, 0.0), 0, 5.0, rep_s)
        assert kernel_only == pytest.approx(0.0, abs=0.04 * parts[n].warm_kernel)


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda f: f.parent.name)
def test_the_per_call_estimate_gives_the_slow_kernels_warm_up(folder):
    """2 + int(25 / per_call) calls at child_timing_first_call / 8 each: LayerNorm/triton_single_program's 18 ms
    calls make 3 per shape, its record's child_timing_probe_warm_kernel within 10%."""
    jobs, parts, _ = _batch(folder)
    j = next(j for j in jobs if j.name == "LayerNorm/triton_single_program.py")
    pc = lt.per_call_s(j)
    assert lt.SHAPES * (2 + lt.warm_calls(lt.WARMUP_MS, pc)) * pc == pytest.approx(parts[j.name].warm_kernel, rel=0.1)


@pytest.mark.skipif(H200 not in FOLDERS, reason="the H200 light batch is not in this checkout")
def test_the_tables_levers_never_fall_below_the_row_as_recorded():
    rows = library_trust_table.trust_rows(study.load_light(H200, CORPUS), seeds=(1, 2))
    mine = [r for r in rows if r["row"] == study.DEFAULTS_MODE]
    base, levers = mine[0], mine[1:]
    assert base["lever"] == "as recorded" and base["with_parts"] == base["evaluations"] == 13
    assert [r["lever"] for r in levers][-2:] == ["both", "both + hopeless probe ends at 3"]
    for r in levers:
        assert r["cut_s"] > 0 and r["probe_s"] < base["probe_s"]
        assert r["rate"] >= base["rate"] and r["steady"] >= base["steady"] and r["rate_gain"] >= 0
    by = {r["lever"]: r for r in levers}
    assert by["both"]["cut_s"] < by["library checked on 1 of 8 shapes"]["cut_s"] + by["warm-up 5 ms"]["cut_s"]
    assert by["both + hopeless probe ends at 3"]["cut_s"] > by["both"]["cut_s"]


def one_table(flag: str, records: Path, out: Path) -> int:
    """scripts/simulate_throughput.py --light-only with one lever's table alone (`flag`), its JSON to `out` (shared
    with tests/test_sim_copy_laned.py)."""
    spec = importlib.util.spec_from_file_location("simulate_throughput", ROOT / "scripts" / "simulate_throughput.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script.main(["--light-only", flag, "--records", str(records), "--json", str(out)])


@pytest.mark.skipif(H200 not in FOLDERS, reason="the H200 light batch is not in this checkout")
def test_the_script_prints_the_table_alone(tmp_path, capsys):
    out = tmp_path / "t.json"
    assert one_table("--library-trust-only", H200, out) == 0
    text = capsys.readouterr().out
    assert "library check on 1 of 8 shapes" in text and "SIMULATED" in text
    assert {r["lever"] for r in json.loads(out.read_text())["library_trust"]} >= {"as recorded", "both"}


def import_no_gpu_code(*names: str) -> None:
    """Each of sim's modules `names` imports nothing of torch, triton or the child's and device's code, and the last
    one imports with no GPU visible (shared with tests/test_sim_copy_laned.py)."""
    for name in names:
        tree = ast.parse((ROOT / "kernelgym_gap" / "sim" / f"{name}.py").read_text())
        mods = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        mods |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert not any(m.startswith(("torch", "triton", "kernelgym_gap.device", "kernelgym_gap.child")) for m in mods)
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    subprocess.run([sys.executable, "-c", f"import kernelgym_gap.sim.{names[-1]}"], check=True, env=env, cwd=ROOT,
                   timeout=60)


def test_the_modules_import_no_gpu_code():
    import_no_gpu_code("library_trust", "library_trust_table")
