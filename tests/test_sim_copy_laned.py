"""The outputs' copies off the GPU under the shared lane as a change of the simulator's jobs (sim/copy_laned.py) and its
table (sim/copy_laned_table.py): hand-made jobs whose every second is known, a synthetic batch whose timings and
copies compete, then the committed light batch of 2026-12-07 on the H200 (staging_2: the pageable and the pinned
rows). cpu only, no GPU."""
import dataclasses
import json
import random
from pathlib import Path

import pytest

from kernelgym_gap.sim import copy_laned as cl
from kernelgym_gap.sim import copy_laned_table, study
from kernelgym_gap.sim.pipeline import Job, Setup, simulate

ROOT = Path(__file__).resolve().parent.parent
H200 = ROOT / "results" / "h200_2026-12-07_session53" / "staging_2"
CORPUS = ROOT / "results" / "h200_2026-12-04_corpus" / "gap_study_cuda.json"
DURATIONS = ("gate", "cold_start", "handoff", "setup", "correctness", "unlaned", "timing", "recheck", "write", "misc",
             "check", "rest")


def _job(name="k", **kw):
    base = dict(name=name, setup=0.2, handoff=0.0, cold_start=1.0, correctness=2.0, unlaned=2.0, checkpoints=4,
                timing=1.5, write=1.0, misc=0.5, check=0.5, rest=0.0)
    return Job(**{**base, **kw})


def _seconds(j: Job) -> float:
    return sum(getattr(j, k) for k in DURATIONS)


def _lane_s(run, lane):
    return sum(iv.end - iv.start for iv in run.trace if iv.lane == lane)


def test_the_shares_are_the_estimates_the_docstring_gives():
    assert cl.copy_share("NVIDIA H100 80GB HBM3", True) == pytest.approx(2 ** 30 / 20e9 / 0.261, rel=1e-9)
    assert cl.copy_share("NVIDIA H100 80GB HBM3", False) == pytest.approx(0.79 / 0.923)
    assert cl.copy_share("NVIDIA H200", True) == pytest.approx(0.128, abs=5e-4)
    assert cl.copy_share("NVIDIA H200", False) == pytest.approx(0.533, abs=5e-4)
    assert cl.copy_share("some GPU", True) == cl.copy_share("H100", True)        # the H100's figures elsewhere
    assert cl.pinned("output_staging_bytes=64M") and cl.pinned("a=1,output_staging_bytes=64M")
    assert not cl.pinned("") and not cl.pinned("output_staging_bytes=0") and not cl.pinned("library_warm_before_lane=0")
    assert cl.laned_variant("") == cl.COPY_LANED == "outputs_copy_laned=1"
    assert cl.laned_variant("output_staging_bytes=64M") == "output_staging_bytes=64M,outputs_copy_laned=1"


def test_the_change_moves_only_the_copy_share_under_the_lane():
    j = _job()
    pre = {"k": 0.4}
    c = cl.copies_laned(0.25, pre)(j)
    # each let-go checkpoint (0.5 s) becomes a 0 s let-go, its copy kept in the hold, the file write let go
    assert c.checkpoints == 4 * 3 + 2
    writes = [c.unlaned * s for s in c.checkpoint_shares]
    assert writes[:3] == pytest.approx([0.0, 0.125, 0.375])
    assert c.kept_checkpoints[:3] == (False, True, False)
    kept = sum(w for w, k in zip(writes, c.kept_checkpoints) if k)
    let_go = sum(w for w, k in zip(writes, c.kept_checkpoints) if not k)
    assert kept == pytest.approx(0.25 * 2.0 + 0.25 * 0.4)       # the let-go copies and the one before the timing
    assert let_go == pytest.approx(0.75 * 2.0)                   # the file writes stay host stages
    assert (c.recheck, c.write, c.misc) == pytest.approx((0.25, 0.75, 0.5 - 0.1))
    assert c.correctness == j.correctness and c.timing == j.timing and c.check == j.check
    assert cl.copy_s(j, 0.25, pre) == pytest.approx(0.25 * (2.0 + 0.4 + 1.0))
    assert _seconds(c) == pytest.approx(_seconds(j))             # moved, not added
    # the in-the-hold approximation: the same seconds, no let-go of its own
    h = cl.copies_laned(0.25, pre, own_acquire=False)(j)
    assert h.checkpoints == 4 * 2 + 1 and h.kept_checkpoints[:2] == (True, False)
    assert (h.unlaned, h.recheck, h.write, h.misc) == pytest.approx((c.unlaned, c.recheck, c.write, c.misc))
    # with the compiles let go: the copies join the stretch, its let-gos as they were
    s = cl.copies_laned(0.25, pre, compiles_let_go=True)(j)
    assert (s.checkpoints, s.unlaned, s.correctness) == pytest.approx((4, 1.5, 2.0 + 0.5 + 0.1))
    assert _seconds(s) == pytest.approx(_seconds(j))


def test_alone_on_the_gpu_the_copies_change_the_lane_held_seconds_and_not_the_wall():
    j = _job()
    c = cl.copies_laned(0.25, {"k": 0.4})(j)
    off, on = simulate([j], Setup(slots_per_gpu=1)), simulate([c], Setup(slots_per_gpu=1))
    assert on.makespan == pytest.approx(off.makespan)
    assert _lane_s(on, "shared") - _lane_s(off, "shared") == pytest.approx(cl.copy_s(j, 0.25, {"k": 0.4}))
    assert _lane_s(on, "exclusive") == pytest.approx(_lane_s(off, "exclusive"))


@pytest.mark.parametrize("share", [0.0, 0.13, 0.5, 0.86, 1.0])
@pytest.mark.parametrize("own", [True, False])
def test_never_negative(share, own):
    jobs = [_job(), _job(misc=0.05), _job(write=0.0), _job(checkpoints=1, unlaned=0.3, hang_s=5.0, hang_lane="shared",
                                                            timed=False, write=0.0, misc=0.0),
            _job(checkpoint_shares=(0.1, 0.2, 0.3, 0.4)), _job(kept_checkpoints=(True, False, True, False))]
    for compiles in (False, True):
        for j in jobs:
            c = cl.copies_laned(share, {"k": 0.4}, own, compiles)(j)
            assert all(getattr(c, k) >= 0 for k in DURATIONS) and all(s >= 0 for s in c.checkpoint_shares)
            assert _seconds(c) == pytest.approx(_seconds(j))
            assert len(c.checkpoint_shares) in (0, c.checkpoints)
            assert not c.kept_checkpoints or len(c.kept_checkpoints) == c.checkpoints
            if c.checkpoint_shares:
                assert sum(c.checkpoint_shares) == pytest.approx(1.0)
            simulate([c, j], Setup(slots_per_gpu=2))        # runs


def test_a_job_without_checkpoint_writes_is_left():
    bare = _job(unlaned=0.0, checkpoints=0)
    assert cl.copies_laned(0.5, {"other": 0.4})(bare) == bare
    assert cl.copies_laned(0.5)(_job(unlaned=0.0)) == _job(unlaned=0.0)     # checkpoints but no let-go seconds
    assert not cl.has_writes(bare) and cl.copy_s(bare, 0.5) == 0.0
    assert cl.copies_laned(0.0, {"k": 0.4})(_job()) == _job()                # share 0
    kept = _job(kept_checkpoints=(True,) * 4)               # every checkpoint under the lane already: the final write
    c = cl.copies_laned(0.5)(kept)
    assert c.unlaned == pytest.approx(2.0) and c.kept_checkpoints == (True,) * 4 and c.recheck == pytest.approx(0.5)
    with pytest.raises(ValueError, match="share"):
        cl.copies_laned(1.5)


def test_the_writes_before_the_timing_are_read_from_the_records():
    def rec(name, cw, cu, mode="lanes"):
        return {"mode": mode, "submission": name, "latency": {"child_checkpoint_write": cw,
                                                              "child_checkpoint_unlaned": cu}}
    records = [rec("a", 2.0, 1.6), rec("b", 0.5, 0.7), rec("c", 1.0, 0.8), rec("c", 1.0, 0.5),
               rec("d", 3.0, 1.0, mode="other"), {"mode": "lanes", "submission": "e", "latency": {"child": 1.0}}]
    got = cl.pre_timing_writes(records, "lanes")
    assert got == pytest.approx({"a": 0.4, "b": 0.0})       # c met twice with different seconds; e has no writes


def test_laned_copies_cost_a_batch_whose_timings_and_copies_compete():
    """Checkpoint writes beside other evaluations' timings (4 slots, one GPU): laning the copies puts their seconds on
    the lane the timings need, so the rate does not rise beyond an ordering's noise, and falls with the whole write."""
    rng = random.Random(3)
    jobs = [_job(str(i), correctness=rng.uniform(1, 3), unlaned=rng.uniform(1, 4), checkpoints=8,
                 timing=rng.uniform(1, 2.5), write=rng.uniform(0.5, 1.5), misc=0.6, check=rng.uniform(0.5, 2),
                 cold_start=3.0) for i in range(40)]
    pre = {j.name: 0.3 for j in jobs}
    setup = Setup(slots_per_gpu=4)
    base = simulate(jobs, setup).evals_per_gpu_hour
    for own in (True, False):
        rates = {s: simulate([cl.copies_laned(s, pre, own)(j) for j in jobs], setup).evals_per_gpu_hour
                 for s in (0.13, 0.5, 0.86, 1.0)}
        assert all(r <= base * 1.02 for r in rates.values())
        assert rates[1.0] < base * 0.98


@pytest.mark.skipif(not (H200 / study.LIGHT_RECORDS).is_file(), reason="the H200 light batch is not in this checkout")
def test_the_table_has_every_row_and_model_and_the_script_prints_it_alone(tmp_path, capsys):
    rows = copy_laned_table.copy_rows(study.load_light(H200, CORPUS), seeds=(1, 2))
    assert [(r["row"], r["model"]) for r in rows] == [
        (m, n) for m, kind in (("lanes", "pageable copies"), ("lanes [output_staging_bytes=64M]", "pinned chunks"))
        for n in ("as recorded", f"{kind} laned", f"{kind} laned, in the hold (no own wait)",
                  "whole writes laned (pessimistic)")]
    by = {(r["row"], r["model"]): r for r in rows}
    for r in rows:
        assert r["evaluations"] == r["with_writes"] == 13 and r["rate"] > 0 and r["steady"] > 0
        assert set(copy_laned_table.COLUMNS) <= set(r) | {"rate_gain", "steady_gain", "steady_range"}
    pin = by[("lanes [output_staging_bytes=64M]", "pinned chunks laned")]
    page = by[("lanes", "pageable copies laned")]
    assert pin["share"] == pytest.approx(0.128, abs=1e-3) and page["share"] == pytest.approx(0.533, abs=1e-3)
    assert 0 < pin["copy_s"] < page["copy_s"] < by[("lanes", "whole writes laned (pessimistic)")]["copy_s"]
    assert pin["variant"] == "output_staging_bytes=64M,outputs_copy_laned=1"
    assert by[("lanes", "as recorded")]["measured"] == 547.9
    from test_sim_library_trust import one_table
    out = tmp_path / "t.json"
    assert one_table("--copy-laned-only", H200, out) == 0
    text = capsys.readouterr().out
    assert "copies off the GPU under the shared lane" in text and "SIMULATED" in text
    assert "library check" not in text                       # the table alone
    assert {r["model"] for r in json.loads(out.read_text())["copy_laned"]} >= {"as recorded", "pinned chunks laned"}


def test_the_modules_import_no_gpu_code():
    from test_sim_library_trust import import_no_gpu_code
    import_no_gpu_code("copy_laned", "copy_laned_table")


def test_the_placement_switch_and_the_variant_exist():
    from kernelgym_gap.core.placement import Placement
    assert {f.name for f in dataclasses.fields(Placement)} >= {"outputs_copy_laned", "output_staging_bytes"}
    assert Placement().outputs_copy_laned is True                  # on by default since 2026-12-08
    assert "outputs_copy_laned=0" in (ROOT / "scripts" / "device_session.sh").read_text()   # staging-laned, against it


def test_the_copies_waits_are_not_replayed_as_host_writes():
    """A record of the laned copies (2026-12-08 on) has child_lane_wait_copies inside its checkpoints' unlaned writes
    and its final write: workload leaves it out of both host stages, split by their seconds, never below 0; a record
    without it replays as before."""
    from kernelgym_gap.sim import workload
    lat = {"total": 20.0, "child": 16.0, "child_total": 15.0, "check": 3.0, "child_setup": 0.5,
           "child_correctness": 8.0, "child_checkpoint_unlaned": 3.0, "child_timing": 2.0, "child_outputs_write": 1.0,
           "child_lane_wait_copies": 2.0}
    r = {"task": "Softmax", "status": "ok", "at_s": 20.0, "latency": lat}
    assert workload.copy_waits(lat) == pytest.approx((1.5, 0.5))
    j = workload.job_from_record(r)
    assert j.unlaned == pytest.approx(1.5) and j.write == pytest.approx(0.5)
    before = workload.job_from_record({**r, "latency": {k: v for k, v in lat.items() if k != "child_lane_wait_copies"}})
    assert before.unlaned == 3.0 and before.write == 1.0 and before.misc == j.misc
    assert workload.copy_waits({**lat, "child_lane_wait_copies": 99.0}) == (3.0, 1.0)     # never past the stages


def test_a_record_whose_copies_were_laned_replays_them_under_the_lane_once():
    """A record with child_copies_laned (the child held the shared lane for its copies) is replayed with the copies'
    share of its writes under the lane (copies_laned, the pinned share where the record made the buffer), and the
    change never applies twice: the table's lever leaves such a job as it is."""
    from kernelgym_gap.sim import copy_laned as cl
    from kernelgym_gap.sim import workload
    lat = {"total": 20.0, "child": 16.0, "child_total": 15.0, "check": 3.0, "child_setup": 0.5,
           "child_correctness": 8.0, "child_checkpoint_unlaned": 3.0, "child_timing": 2.0, "child_outputs_write": 1.0,
           "child_lane_wait_copies": 2.0, "child_copies_laned": 40.0, "child_outputs_staging_alloc": 0.04}
    j = workload.job_from_record({"task": "Softmax", "status": "ok", "at_s": 20.0, "latency": lat})
    share = cl.copy_share(cl.DEFAULT_DEVICE, True)
    assert j.copies_laned and j.recheck == pytest.approx(share * 0.5) and j.write == pytest.approx((1 - share) * 0.5)
    assert any(j.kept_checkpoints) and j.unlaned == pytest.approx(1.5)
    assert cl.copies_laned(share)(j) is j
