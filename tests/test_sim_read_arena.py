"""The checker's read arena in the simulator (pipeline.Setup.read_arena_speedup, sim/read_arena.py): hand-made jobs
whose every second is known, then the warm env.step of the H200 rows of 2026-12-07, simulated against the same
arithmetic on the measured steps. cpu only, no GPU."""
import json
from pathlib import Path

import pytest

from kernelgym_gap.sim import levers, read_arena, read_arena_table, study
from kernelgym_gap.sim.pipeline import Job, Setup, simulate, step_p50

ROOT = Path(__file__).resolve().parent.parent
STEPS = ROOT / "results" / "h200_2026-12-07_session53" / "staging_steps_1"
CORPUS = ROOT / "results" / "h200_2026-12-04_corpus" / "gap_study_cuda.json"


def _job(name="a", prefetch=2.0):
    return Job(name=name, setup=0.0, handoff=0.0, cold_start=1.0, correctness=1.0, timing=1.0, write=0.0, misc=0.0,
               check=0.5, check_read=0.4, check_prefetch=prefetch, rest=0.0)


def _stages(run, stage):
    return [(iv.end - iv.start, iv.lane) for iv in run.trace if iv.stage == stage]


def test_the_speedup_divides_the_prefetch_before_the_lane_and_leaves_the_lane_held_check():
    jobs = [_job(str(k)) for k in range(3)]
    off, on = simulate(jobs, Setup(slots_per_gpu=1)), simulate(jobs, Setup(slots_per_gpu=1, read_arena_speedup=4.0))
    assert _stages(off, "check prefetch") == [(2.0, "")] * 3          # a host stage: no lane held
    assert _stages(on, "check prefetch") == [(0.5, "")] * 3
    assert _stages(on, "check") == _stages(off, "check") == [(0.5, "shared")] * 3
    lane = lambda r: sum(iv.end - iv.start for iv in r.trace if iv.lane)       # noqa: E731
    assert lane(on) == pytest.approx(lane(off))
    # one slot: each evaluation's wall, and so the run, shortens by the prefetch's cut
    assert [d.wall for d in off.done] == pytest.approx([d.wall + 1.5 for d in on.done])
    assert off.makespan - on.makespan == pytest.approx(3 * 1.5)
    assert step_p50(jobs) - step_p50(jobs, Setup(read_arena_speedup=4.0)) == pytest.approx(1.5)


def test_a_speedup_of_one_changes_nothing_and_a_job_without_a_prefetch_is_left():
    jobs = [_job("a"), _job("b", prefetch=0.0), _job("c", prefetch=1.3)]
    base, one = simulate(jobs), simulate(jobs, Setup(read_arena_speedup=1.0))
    assert one.trace == base.trace and one.makespan == base.makespan
    only = [_job("b", prefetch=0.0)]
    assert simulate(only, Setup(read_arena_speedup=5.0)).trace == simulate(only).trace
    with pytest.raises(ValueError, match="read_arena_speedup"):
        simulate(jobs, Setup(read_arena_speedup=0.0))


def test_the_levers_name_the_arena_rows_with_the_variant_that_runs_them():
    rows = [sc for sc in levers.scenarios(levers.fit_timing(CORPUS)) if sc.name in read_arena.NAMES]
    assert [sc.setup(Setup()).read_arena_speedup for sc in rows] == list(read_arena.SPEEDUPS)
    assert {sc.variant for sc in rows} == {read_arena.READ_ARENA}
    assert levers.scenarios(levers.fit_timing(CORPUS))[-1].name not in read_arena.NAMES   # study.sensitivity's last


@pytest.mark.skipif(not STEPS.is_dir(), reason="the H200 step records are not in this checkout")
def test_the_simulated_warm_step_agrees_with_the_arithmetic_on_the_measured_steps():
    inp = study.load_light(STEPS, CORPUS)
    rows = read_arena_table.step_rows(inp)
    assert [r["steps"] for r in rows] == ["defaults", "env-step variant"]
    summary = json.loads(next(STEPS.glob(study.SUMMARY)).read_text())["env_step"]
    for row in rows:
        assert row["sim_x1"] == pytest.approx(row["measured_p50_s"], abs=0.05)       # the replay is the record
        for s in read_arena.SPEEDUPS:
            x = f"x{s:g}"
            assert row[f"sim_{x}"] == pytest.approx(row[f"arith_{x}"], abs=0.05)
            assert row[f"sim_{x}"] < row["sim_x1"]
    walls = sorted(s["wall_s"] - s["latency"]["check_prefetch"] * (1 - 1 / 5.0) for s in summary["steps"])
    assert read_arena.step_arithmetic(summary["steps"], 5.0) == pytest.approx((walls[1] + walls[2]) / 2)
