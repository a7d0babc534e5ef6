"""The engine's side of the outputs handed over on the device (engine/handover.py, Evaluation.check's hand-over
branch; issue 35, docs/measurement.md "The outputs handed over on the device"). On cpu with in-process fakes of
the other sides (the held child, the warm checker's hand_over_check, the opener and the checker's wire plan), so
that the order of the exchange is asserted here whatever their real code does: after a final report the held
child stays stopped until the verdict, and a non_finite or all_zero from the hand-over is checked again by its
files, flagged (a child held at a call's deadline is killed after the copies, before the go line); an opener that fails aborts, the child is asked for files, the report is read
again and checked by files, flagged; a child held at a call's deadline is checked under its own lane cover and,
when the hand-over fails, is a flagged timeout; and the flag's rule (off, cpu, no warm checker: nothing
changes)."""
import contextlib
import dataclasses
import random
import types

import pytest

from kernelgym_gap.core.backend import backend as backend_info
from kernelgym_gap.core.config import HAND_OVER_ARENA_BYTES, EvalConfig, check_hand_over
from kernelgym_gap.core.errors import ConfigConflictError
from kernelgym_gap.core.placement import Placement
from kernelgym_gap.core.record import CheckResult, ChildReport, Job, OutputHandle, TrialOutcome
from kernelgym_gap.core.status import Status
from kernelgym_gap.engine import evaluation as evaluation_mod
from kernelgym_gap.engine import handover
from kernelgym_gap.engine.evaluation import Evaluation, is_misuse
from kernelgym_gap.engine.stages import TrustedCheck
from kernelgym_gap.engine.trials import make_trials
from kernelgym_gap.judge import ipc_records, opener_client
from kernelgym_gap.judge.ipc_records import OutputKey, OutputKind, Plan, Planned
from kernelgym_gap.judge.opener import SchemaError
from kernelgym_gap.judge.opener_client import CopyResult, HandOver, OpenerFailed

CONFIG = EvalConfig(seeds_per_shape=1, hand_over_outputs=True)


@pytest.fixture(scope="module")
def task():
    from kernelgym_gap.core.registry import default_registry
    return default_registry().get("AddReLU")


@pytest.fixture(scope="module")
def trials(task):
    return make_trials(task, "cpu", CONFIG, random.Random(0))[:2]


def _record(trial) -> OutputHandle:
    size = 2 if trial.dtype == "float16" else 4
    n = 1
    for d in trial.shape:
        n *= d
    return OutputHandle(handle="ab" * 64, offset=0, nbytes=n * size, dtype=trial.dtype, shape=tuple(trial.shape))


def _report(trials, handles=True) -> ChildReport:
    return ChildReport(status=Status.OK, message="", trials=tuple(
        TrialOutcome(index=t.index, output_file=None if handles else f"outputs/trial_{t.index}.pt", launches=1,
                     programs=1, seconds=0.0, input_digest_before="d", input_digest_after="d",
                     output_handle=_record(t) if handles else None) for t in trials))


@dataclasses.dataclass
class FakeChild:
    """ChildResult as the engine reads it, with the contract's `held`."""
    outcome: object
    report: ChildReport | None
    held: object = None


class FakeHeld:
    """sandbox's HeldChild: records kill, resume and the lane cover in the shared event list; `resume_for_files`
    rewrites the report with files in place of handles, as the child's fallback does."""

    def __init__(self, events, report_path, trials, writes=True):
        self.events, self.report_path, self.trials, self.writes = events, report_path, trials, writes
        self.killed = False

    def kill(self):
        if not self.killed:
            self.events.append("kill")
        self.killed = True

    def resume_for_files(self, timeout_s):
        self.events.append("resume_for_files")
        if self.writes:
            self.report_path.write_text(_report(self.trials, handles=False).to_json())
        return types.SimpleNamespace(returncode=0, stderr_tail="", timed_out=False)

    cover_fails = False                 # a LaneTimeout from the cover, as HeldChild.lane_cover raises past its bound
    cover_timeouts: list

    @contextlib.contextmanager
    def lane_cover(self, timeout_s=None):
        from kernelgym_gap.core.lane import LaneTimeout
        self.events.append("lane_cover")
        self.cover_timeouts = [*getattr(self, "cover_timeouts", []), timeout_s]
        if self.cover_fails:
            raise LaneTimeout("shared", timeout_s)
        yield


class FakeWarmChecker:
    """WarmChecker.hand_over_check as the contract has it: the lane, the handover line to `exchange`, its go line;
    None after an abort. check_spec: the ordinary file check, recording whether its report names handles."""

    def __init__(self, events, trials, rows=None, verdict=Status.OK):
        self.events, self.trials, self.rows, self.verdict = events, trials, rows, verdict

    def hand_over_check(self, spec_path, result_path, timeout, lane, exchange, prefetch=False):
        import json
        # the spec and the call must say the same: the server reads the files before the lane only when told
        assert json.loads(spec_path.read_text())["prefetch"] is prefetch
        self.events.append(("hand_over_check", "prefetch" if prefetch else "lane first"))
        with lane():
            rows = self.rows if self.rows is not None else [
                ["trial", t.index, i * 4096, t.dtype, list(t.shape)] for i, t in enumerate(self.trials)]
            go = exchange({"arena": {"handle": "cd" * 64, "offset": 512, "nbytes": 1 << 20}, "planned": rows})
            self.events.append(("go", go))
        if go.get("abort"):
            return None
        return CheckResult(status=self.verdict, trials_checked=len(self.trials),
                           message="" if self.verdict is Status.OK else f"trial 0: the hand-over's {self.verdict.value}")

    def check_spec(self, spec_path, result_path, timeout, lane=None):
        import json
        spec = json.loads(spec_path.read_text())
        report = ChildReport.from_json(open(spec["report"]).read())
        self.events.append(("check_spec", ipc_records.record_count(report)))
        return CheckResult(status=Status.OK, trials_checked=len(report.trials), message="")


class FakeOpener:
    def __init__(self, events):
        self.events = events

    def ready(self, timeout_s):
        return "proc"

    def close(self):
        self.events.append("opener_close")


@pytest.fixture
def wire(monkeypatch, trials):
    """The fakes of the opener's copies and of the wire plan (see _wire)."""
    return _wire(monkeypatch, fake_plan=True)


@pytest.fixture
def real_plan(monkeypatch, trials):
    """The opener's copies faked, judge/ipc_records.plan_from_wire real."""
    return _wire(monkeypatch, fake_plan=False)


def _wire(monkeypatch, fake_plan):
    """plan_from_wire and hand_over replaced: the plan from the rows, the copies recorded; `fail` makes the
    opener fail (OpenerFailed)."""
    state = types.SimpleNamespace(fail=None, events=None)

    def plan_from_wire(rows, job, report):
        by = {o.index: o for o in report.trials}
        return Plan(entries=tuple(
            Planned(key=OutputKey(OutputKind.TRIAL, idx), trial=next(t for t in job.trials if t.index == idx),
                    record=by[idx].output_handle, arena_offset=off, dtype=dt, shape=tuple(sh))
            for _, idx, off, dt, sh in rows), arena_bytes=1 << 20)

    def hand_over(proc, plan, arena_handle, timeout_s, arena_offset=0):
        if state.fail is not None:
            raise state.fail
        state.events.append(("copies", arena_offset))
        return HandOver(results=tuple(CopyResult(e.key, "copied", None, None) for e in plan.planned),
                        arena_error=None, seconds={"total": 0.25})

    if fake_plan:
        monkeypatch.setattr(ipc_records, "plan_from_wire", plan_from_wire)
    monkeypatch.setattr(opener_client, "hand_over", hand_over)
    return state


def _evaluation(task, trials, tmp_path, events, wire, handles=True, overdue=False, writes=True, rows=None,
                lane_dir=None, verdict=Status.OK):
    checker = FakeWarmChecker(events, trials, rows, verdict)
    ev = Evaluation(task, b"", "triton", backend_info("cuda"), CONFIG, checker=checker,
                    placement=Placement(lane_dir=lane_dir, scratch_root=str(tmp_path)))
    report_path = tmp_path / "report.json"
    ev.job = Job(task_id=task.id, dsl="triton", backend="cuda", source_file="/s.py", outputs_dir=str(tmp_path),
                 report_file=str(report_path), trials=tuple(trials), timing=None, outputs_by_handle=True)
    ev.trials = tuple(trials)
    report = _report(trials, handles)
    report_path.write_text(report.to_json())
    held_child = FakeHeld(events, report_path, trials, writes)
    ev.child = FakeChild(outcome=types.SimpleNamespace(layers=()), report=report, held=held_child)
    ev._opener = FakeOpener(events)
    if overdue:
        ev.killed = (0, 1.0, 2.0)
    wire.events = events
    return ev, held_child


def _go(events):
    return next(e for e in events if isinstance(e, tuple) and e[0] == "go")


def test_after_a_final_report_the_child_stays_stopped_until_the_verdict(task, trials, tmp_path, wire):
    """Killed after the hand-over's verdict, not before the go line: a verdict that bytes other than the output's
    give is then checked again by files (the tests below)."""
    events = []
    ev, _ = _evaluation(task, trials, tmp_path, events, wire)
    result = ev.check()
    assert result.status is Status.OK
    go = _go(events)
    assert events.index(("copies", 512)) < events.index(go) < events.index("kill"), events
    assert events.count("kill") == 1
    assert go[1] == {"copies": {OutputKey(OutputKind.TRIAL, t.index).file_name: "copied" for t in trials}}
    assert "resume_for_files" not in events and not ev.flags
    assert ev.latency["check_handover_copies"] == 0.25 and ev.latency["outputs_handed"] == len(trials)
    assert "check_handover" in ev.latency


@pytest.mark.parametrize("verdict", sorted(handover.RECHECKED, key=lambda s: s.value))
def test_a_verdict_that_foreign_bytes_give_is_checked_again_by_files_flagged(task, trials, tmp_path, wire, verdict):
    """The H100 runs of 2026-12-07: the hand-over gave non_finite to honest solutions the files judge ok. Such a
    verdict is never final: the stopped child writes its outputs, the file check decides, and the record's flags
    keep the hand-over's verdict."""
    events = []
    ev, _ = _evaluation(task, trials, tmp_path, events, wire, verdict=verdict)
    result = ev.check()
    assert result.status is Status.OK, result.message           # the file check's (FakeWarmChecker.check_spec)
    assert events.index(_go(events)) < events.index("resume_for_files") < events.index("kill"), events
    assert ("check_spec", 0) in events                           # the re-read report names files, no handles
    assert len(ev.flags) == 1 and ev.flags[0].startswith(f"{handover.RECHECK_FLAG}: {verdict.value}: trial 0"), \
        ev.flags


@pytest.mark.parametrize("verdict", [Status.MISMATCH, Status.PROTOCOL_ERROR, Status.WRONG_SHAPE,
                                     Status.INPUT_MUTATED])
def test_any_other_failure_of_the_hand_over_stands_and_the_child_goes(task, trials, tmp_path, wire, verdict):
    """A mismatch is as often a record naming other memory on purpose (the hostile twins end there), and the
    rest are decided from the report or the records alone: the files are not asked for."""
    assert verdict not in handover.RECHECKED
    events = []
    ev, _ = _evaluation(task, trials, tmp_path, events, wire, verdict=verdict)
    result = ev.check()
    assert result.status is verdict
    assert "resume_for_files" not in events and not ev.flags
    assert events.index(_go(events)) < events.index("kill"), events


def test_an_overdue_child_goes_after_the_copies_and_its_non_finite_stands(task, trials, tmp_path, wire):
    """A child held at a call's deadline runs no harness that could write files: it is killed after the copies,
    before the go line, as before, and the hand-over's verdict is the check's."""
    events = []
    ev, _ = _evaluation(task, trials, tmp_path, events, wire, overdue=True, verdict=Status.NON_FINITE)
    result = ev.check()
    assert result.status is Status.NON_FINITE
    assert events.index(("copies", 512)) < events.index("kill") < events.index(_go(events)), events
    assert "resume_for_files" not in events and not ev.flags


def test_a_child_that_does_not_write_when_a_non_finite_is_checked_again_is_a_protocol_error(task, trials, tmp_path,
                                                                                          wire):
    events = []
    ev, _ = _evaluation(task, trials, tmp_path, events, wire, writes=False, verdict=Status.NON_FINITE)
    result = ev.check()
    assert result.status is Status.PROTOCOL_ERROR and "did not" in result.message, result.message
    assert ev.flags[0].startswith(f"{handover.RECHECK_FLAG}: non_finite")
    assert "kill" in events


def test_the_final_hold_takes_the_checks_shared_lane(task, trials, tmp_path, wire, monkeypatch):
    events = []
    taken = []

    @contextlib.contextmanager
    def held(lane_dir, index, mode, waits=None, key=None):
        taken.append(mode)
        yield

    monkeypatch.setattr(evaluation_mod, "held", held)
    ev, _ = _evaluation(task, trials, tmp_path, events, wire)
    ev.check()
    assert taken == ["shared"] and "lane_cover" not in events


@pytest.mark.parametrize("why", [OpenerFailed("the opener died"), OpenerFailed("no IPC", unsupported=True),
                                 SchemaError("copies[0].nbytes must be a positive int")])
def test_an_opener_failure_aborts_asks_the_child_for_files_and_checks_them_flagged(task, trials, tmp_path, wire, why):
    events = []
    wire.fail = why
    ev, held_child = _evaluation(task, trials, tmp_path, events, wire)
    result = ev.check()
    assert result.status is Status.OK
    assert ("go", {"abort": True}) in events
    # the abort first, then the child resumed for its files, then the file check on the re-read report
    assert events.index(("go", {"abort": True})) < events.index("resume_for_files") < events.index(("check_spec", 0))
    assert ipc_records.record_count(ev.child.report) == 0      # the re-read report names files
    assert held_child.killed
    assert len(ev.flags) == 1 and ev.flags[0].startswith(f"{handover.FLAG}: ")
    assert ("CUDA IPC unsupported" in ev.flags[0]) == getattr(why, "unsupported", False)


def test_a_child_that_does_not_write_its_files_when_asked_is_a_protocol_error(task, trials, tmp_path, wire):
    events = []
    wire.fail = OpenerFailed("the opener died")
    ev, held_child = _evaluation(task, trials, tmp_path, events, wire, writes=False)   # the report keeps handles
    result = ev.check()
    assert result.status is Status.PROTOCOL_ERROR and "still names outputs by handle" in result.message
    assert held_child.killed and not any(isinstance(e, tuple) and e[0] == "check_spec" for e in events)


def test_a_final_hold_reads_its_file_outputs_before_the_lane_and_an_overdue_one_takes_its_cover_first(
        task, trials, tmp_path, wire):
    """The outputs past the device budget are files; after a final report the checker reads them before the lane
    (about half the light batch's outputs on the H100, 2026-12-07, read under the lane until then). A child held
    at a call's deadline gets its cover before anything: no read first."""
    events = []
    ev, _ = _evaluation(task, trials, tmp_path, events, wire)
    assert ev.check().status is Status.OK and ("hand_over_check", "prefetch") in events
    events = []
    (tmp_path / "overdue").mkdir()
    ev, _ = _evaluation(task, trials, tmp_path / "overdue", events, wire, overdue=True)
    assert ev.check().status is Status.OK and ("hand_over_check", "lane first") in events


def test_an_overdue_hold_is_checked_under_the_childs_lane_cover(task, trials, tmp_path, wire, monkeypatch):
    events = []
    monkeypatch.setattr(evaluation_mod, "held", lambda *a, **k: pytest.fail("the shared lane was taken"))
    ev, _ = _evaluation(task, trials, tmp_path, events, wire, overdue=True)
    assert ev.check().status is Status.OK
    assert events.index("lane_cover") < events.index(("copies", 512)) < events.index("kill")


def test_an_overdue_hold_without_the_childs_descriptions_takes_the_exclusive_lane_afresh(task, trials, tmp_path,
                                                                                         wire, monkeypatch):
    # HeldChild.lane_cover yields None when the child's lane descriptions were not taken (pidfd_getfd refused):
    # the check must then hold the GPU's exclusive lane itself, never run with no lane at all
    from kernelgym_gap.core.lane import Lane, LaneTimeout
    lanes = tmp_path / "lanes"
    lanes.mkdir()
    events, seen = [], []
    ev, _ = _evaluation(task, trials, tmp_path, events, wire, overdue=True, lane_dir=str(lanes))
    exchange = handover.Exchange.__call__

    def looking(self, line):        # during the copies: can anyone else take the lane, even shared?
        with Lane.open(str(lanes), 0) as other:
            try:
                other.acquire("shared", 0.05)
                other.release()
                seen.append("free")
            except LaneTimeout:
                seen.append("held")
        return exchange(self, line)
    monkeypatch.setattr(handover.Exchange, "__call__", looking)
    assert ev.check().status is Status.OK
    assert seen == ["held"] and "lane_cover" in events


def test_an_overdue_hold_whose_lane_cannot_be_taken_afresh_is_a_flagged_timeout(task, trials, tmp_path, wire,
                                                                                 monkeypatch):
    # the stopped child (here: another holder) keeps the lane: the cover gives up after COVER_WAIT_S, nothing
    # is opened, the child is killed and the verdict is the flagged timeout
    from kernelgym_gap.core.lane import Lane
    monkeypatch.setattr(handover, "COVER_WAIT_S", 0.2)
    lanes = tmp_path / "lanes"
    lanes.mkdir()
    events = []
    ev, held_child = _evaluation(task, trials, tmp_path, events, wire, overdue=True, lane_dir=str(lanes))
    with Lane.open(str(lanes), 0) as stopped_child:
        stopped_child.acquire("shared")
        verdict = TrustedCheck().run(ev)
        stopped_child.release()
    assert verdict.status is Status.TIMEOUT and "could not be taken" in verdict.message
    assert held_child.killed and not any(isinstance(e, tuple) and e[0] == "copies" for e in events)
    assert ev.flags and ev.flags[0].startswith(f"{handover.FLAG}: the lane could not be taken")


def test_an_overdue_hold_whose_cover_runs_out_is_a_flagged_timeout(task, trials, tmp_path, wire, monkeypatch):
    # the cover waits for a timing in progress at most COVER_WAIT_S (it waited without bound before, and
    # deadlocked with a timing waiting at the gate: tests/test_held.py), then the flagged timeout, nothing opened
    monkeypatch.setattr(handover, "COVER_WAIT_S", 0.2)
    events = []
    ev, held_child = _evaluation(task, trials, tmp_path, events, wire, overdue=True)
    held_child.cover_fails = True
    verdict = TrustedCheck().run(ev)
    assert held_child.cover_timeouts == [0.2]
    assert verdict.status is Status.TIMEOUT and "could not be held beside the stopped child" in verdict.message
    assert held_child.killed and not any(isinstance(e, tuple) and e[0] == "copies" for e in events)
    assert ev.flags and ev.flags[0].startswith(f"{handover.FLAG}: the lane could not be held")


def test_a_hung_child_whose_hand_over_fails_is_a_flagged_timeout(task, trials, tmp_path, wire):
    events = []
    wire.fail = OpenerFailed("the opener was silent past the timeout")
    ev, held_child = _evaluation(task, trials, tmp_path, events, wire, overdue=True)
    verdict = TrustedCheck().run(ev)
    assert verdict.status is Status.TIMEOUT and verdict.stage == "trusted_check"
    assert "resume_for_files" not in events and held_child.killed     # it cannot write: killed, not asked
    assert ev.flags and ev.flags[0].startswith(f"{handover.FLAG}: ")


def test_a_held_child_without_handle_records_is_killed_and_checked_by_files(task, trials, tmp_path, wire):
    events = []
    ev, held_child = _evaluation(task, trials, tmp_path, events, wire, handles=False)
    assert ev.check().status is Status.OK
    assert events[0] == "kill" and not any(isinstance(e, tuple) and e[0] == "hand_over_check" for e in events) \
        and ("check_spec", 0) in events


def _checker_rows(task, trials, tmp_path, cap):
    """The rows the real checker sends: plan_outputs on the report, then plan_to_wire."""
    job = Job(task_id=task.id, dsl="triton", backend="cuda", source_file="/s.py", outputs_dir=str(tmp_path),
              report_file=str(tmp_path / "report.json"), trials=tuple(trials), timing=None, outputs_by_handle=True)
    plan = ipc_records.plan_outputs(job, _report(trials), task, lambda t: tuple(t.shape), max_arena_bytes=cap)
    return ipc_records.plan_to_wire(plan)


def test_the_real_wire_plan_is_copied_in_the_checkers_offsets(task, trials, tmp_path, real_plan):
    events = []
    rows = _checker_rows(task, trials, tmp_path, ipc_records.ARENA_BYTES)
    ev, _ = _evaluation(task, trials, tmp_path, events, real_plan, rows=rows)
    assert ev.check().status is Status.OK and not ev.flags
    assert events.index(("copies", 512)) < events.index(
        ("go", {"copies": {OutputKey(OutputKind.TRIAL, t.index).file_name: "copied" for t in trials}})) \
        < events.index("kill")


def test_an_output_that_needs_a_file_aborts_to_the_fallback(task, trials, tmp_path, real_plan):
    events = []
    rows = _checker_rows(task, trials, tmp_path, 0)          # no room: every output NeedsFile
    assert all(r[2] is None for r in rows)
    ev, _ = _evaluation(task, trials, tmp_path, events, real_plan, rows=rows)
    assert ev.check().status is Status.OK
    assert ("go", {"abort": True}) in events and not any(isinstance(e, tuple) and e[0] == "copies" for e in events)
    assert events.index("resume_for_files") < events.index(("check_spec", 0))
    assert ev.flags == [f"{handover.FLAG}: an output has no room in the checker's arena"]


def test_a_plan_naming_an_output_the_report_lacks_aborts_and_is_not_the_childs(task, trials, tmp_path, real_plan):
    events = []
    rows = [["trial", 999, 0, "float32", [4]]]
    ev, _ = _evaluation(task, trials, tmp_path, events, real_plan, rows=rows)
    assert ev.check().status is Status.OK                    # checked by files after the abort
    assert ev.flags[0].startswith(f"{handover.FLAG}: the checker's plan could not be rebuilt (ValueError")


# ---- the flag's rule -----------------------------------------------------------------------------------------------

def _launch(task, monkeypatch, tmp_path, config, backend, checker):
    """Evaluation.launch with the child replaced: the job it builds and whether an opener was started."""
    seen = types.SimpleNamespace(job=None, openers=0)

    class FakeLauncher:
        def __init__(self, spec, pool=None):
            self.scratch = tmp_path / "scratch"
            (self.scratch / "outputs").mkdir(parents=True, exist_ok=True)

        def run(self, job, source):
            seen.job = job
            return FakeChild(outcome=None, report=None)

        def close(self, keep=False):
            pass

    class CountingOpener:
        def __init__(self, gpu_index, *a, **k):
            seen.openers += 1

        def close(self):
            pass

    monkeypatch.setattr(evaluation_mod, "Launcher", FakeLauncher)
    monkeypatch.setattr(handover, "OpenerStart", CountingOpener)
    monkeypatch.setattr(Evaluation, "_library_plan", lambda self, timing_trials: ((), ()))
    FakeChild.latency = {}
    ev = Evaluation(task, b"", "triton", backend_info(backend), config, checker=checker,
                    placement=Placement(lane_dir=None, scratch_root=str(tmp_path)))
    try:
        ev.launch()
    finally:
        ev.close()
    return seen


@pytest.mark.parametrize("config, backend, checker, expected", [
    (EvalConfig(seeds_per_shape=1), "cuda", object(), False),                           # the flag off
    (CONFIG, "cpu", None, False),                                                       # the cpu backend
    (CONFIG, "cuda", None, False),                                                      # no warm checker
    (CONFIG.replace(read_outputs_while_timing=True), "cuda", object(), False),          # the early read's files
    (CONFIG, "cuda", object(), True),
])
def test_the_job_says_outputs_by_handle_only_when_every_condition_holds(task, monkeypatch, tmp_path, config, backend,
                                                                        checker, expected):
    monkeypatch.setattr("kernelgym_gap.judge.early_check.start", lambda *a, **k: None)
    seen = _launch(task, monkeypatch, tmp_path, config, backend, checker)
    assert seen.job.outputs_by_handle is expected
    assert seen.openers == (1 if expected else 0)


def test_no_device_budget_means_no_hand_over():
    assert not handover.applies(CONFIG, "cuda", object(), Placement(held_device_bytes=0))
    assert not handover.applies(CONFIG.replace(precompute_reference=True), "cuda", object(), Placement())
    assert handover.applies(CONFIG, "cuda", object(), Placement())


def test_a_device_budget_past_the_arena_is_refused_as_misuse():
    with pytest.raises(ConfigConflictError, match="held_device_bytes") as e:
        check_hand_over(CONFIG, Placement(held_device_bytes=HAND_OVER_ARENA_BYTES + 1))
    assert is_misuse(e.value)
    check_hand_over(CONFIG.replace(hand_over_outputs=False), Placement(held_device_bytes=HAND_OVER_ARENA_BYTES + 1))
    with pytest.raises(TypeError, match="hand_over_outputs"):
        EvalConfig(hand_over_outputs=1)


def test_core_repeats_the_arenas_cap():
    assert HAND_OVER_ARENA_BYTES == ipc_records.ARENA_BYTES


# ---- the pre-started opener ----------------------------------------------------------------------------------------

def test_the_opener_start_gives_opener_failed_when_it_cannot_start_and_close_kills_it():
    def broken():
        raise OSError("no such file")

    with pytest.raises(OpenerFailed, match="did not start: OSError"):
        handover.OpenerStart(0, start=broken).ready(5)

    import subprocess
    import sys
    proc_box = []

    def silent():        # an opener that never says ready
        proc_box.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
        return proc_box[0]

    opener = handover.OpenerStart(0, ready_s=30, start=silent)
    with pytest.raises(OpenerFailed, match="not ready within"):
        opener.ready(0.2)
    opener.close()
    assert proc_box[0].poll() is not None      # killed, not left to run


def test_the_opener_start_reads_the_ready_line():
    import subprocess
    import sys
    opener = handover.OpenerStart(0, start=lambda: subprocess.Popen(
        [sys.executable, "-c", "import sys, time; sys.stdout.write('{\"ready\": true}\\n'); sys.stdout.flush(); "
                               "time.sleep(60)"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, bufsize=0))
    proc = opener.ready(30)
    assert proc.poll() is None
    opener.close()
    assert proc.poll() is not None


# ---- through the real warm checker's process (cpu: it can make no arena, so planned outputs abort) ----------------

class HonestHeld(FakeHeld):
    """A held child whose outputs are AddReLU's references: asked for files, it writes them and the report that
    names them (with the inputs' real digests), as the child's fallback does."""

    def __init__(self, events, report_path, trials, task, outputs_dir):
        super().__init__(events, report_path, trials)
        self.task, self.outputs_dir = task, outputs_dir

    def resume_for_files(self, timeout_s):
        import torch

        from kernelgym_gap.core import inputs as inputs_mod
        from kernelgym_gap.core.tensor_file import output_name, write_tensor
        self.events.append("resume_for_files")
        outcomes = []
        for t in self.trials:
            ins = inputs_mod.make_trial_inputs(self.task, t, "cpu")
            d = inputs_mod.digest(ins)
            with torch.no_grad():
                write_tensor(self.outputs_dir / output_name("trial", t.index), self.task.reference(*ins))
            outcomes.append(TrialOutcome(index=t.index, output_file=output_name("trial", t.index), launches=1,
                                         programs=1, seconds=0.0, input_digest_before=d, input_digest_after=d))
        self.report_path.write_text(ChildReport(status=Status.OK, message="", trials=tuple(outcomes)).to_json())
        return types.SimpleNamespace(returncode=0, stderr_tail="", timed_out=False)


@pytest.fixture(scope="module")
def warm_cpu():
    from kernelgym_gap.api.warm import WarmChecker
    with WarmChecker(device="cpu") as w:
        yield w


def _real_evaluation(task, trials, tmp_path, warm_cpu, report):
    ev = Evaluation(task, b"", "triton", backend_info("cpu"), CONFIG, checker=warm_cpu,
                    placement=Placement(lane_dir=None, scratch_root=str(tmp_path)))
    out_dir = tmp_path / "outputs"
    out_dir.mkdir()
    ev.job = Job(task_id=task.id, dsl="triton", backend="cpu", source_file="/s.py", outputs_dir=str(out_dir),
                 report_file=str(tmp_path / "report.json"), trials=tuple(trials), timing=None,
                 outputs_by_handle=True)
    ev.trials = tuple(trials)
    (tmp_path / "report.json").write_text(report.to_json())
    events = []
    held_child = HonestHeld(events, tmp_path / "report.json", trials, task, out_dir)
    ev.child = FakeChild(outcome=types.SimpleNamespace(layers=()), report=report, held=held_child)
    ev._opener = FakeOpener(events)
    return ev, events


def test_the_real_warm_checker_without_an_arena_aborts_and_checks_the_childs_files(task, trials, tmp_path,
                                                                                     warm_cpu):
    ev, events = _real_evaluation(task, trials, tmp_path, warm_cpu, _report(trials))
    result = ev.check()
    assert result.status is Status.OK and result.trials_checked == len(trials), result.message
    assert events.index("resume_for_files") < events.index("kill")
    assert ev.flags == [f"{handover.FLAG}: the checker allocated no arena for the planned outputs"]
    assert "check_handover" in ev.latency


def test_the_real_warm_checker_judges_a_refused_record_after_the_child_is_killed(task, trials, tmp_path, warm_cpu):
    wrong = dataclasses.replace(_record(trials[0]), dtype="int8", nbytes=_record(trials[0]).nbytes // 4 or 1)
    from kernelgym_gap.core import inputs as inputs_mod
    d = inputs_mod.digest(inputs_mod.make_trial_inputs(task, trials[0], "cpu"))
    report = _report(trials[:1])
    report = dataclasses.replace(report, trials=(dataclasses.replace(
        report.trials[0], output_handle=wrong, input_digest_before=d, input_digest_after=d),))
    ev, events = _real_evaluation(task, trials[:1], tmp_path, warm_cpu, report)
    result = ev.check()
    assert result.status is Status.WRONG_DTYPE, result.message
    assert events == ["kill"] and not ev.flags      # nothing to copy: killed, then judged; no fallback


# ------------------------------------------------------------------------------------------------- gpu

# The H100 runs of 2026-12-07 (results/h100_2026-12-07_session49/handover_light and handover_full16): with the
# flag, these honest solutions got non_finite from the hand-over (RowSum-v2's trial 8: 1.51% of its values nan;
# Attention-v1's trial 8: 5.25%), and ok with the defaults. The cause is not found (docs/measurement.md, "The
# hand-over on the GPU: false verdicts").
FALSELY_FAILED = (("RowSum", "triton_tiled.py"), ("Attention", "triton_flash.py"))


def _evaluate_with_the_flag(name, solution, warm_cuda):
    from kernelgym_gap.core.registry import default_registry
    from kernelgym_gap.engine.pipeline import evaluate
    task = default_registry().get(name)
    source = (task.directory / "solutions" / solution).read_text()
    record = evaluate(task, source, "triton", "cuda", EvalConfig(hand_over_outputs=True),
                      checker=warm_cuda.checker, children=warm_cuda.children)
    flags = record.terms.get("flags", ()) if record.terms else ()
    print(f"{name}/{solution}: {record.status.value}; flags {list(flags)}")
    return record, flags


@pytest.mark.gpu
@pytest.mark.timeout(600)
@pytest.mark.parametrize("name,solution", FALSELY_FAILED)
def test_gpu_a_solution_the_hand_over_once_failed_is_ok_with_the_flag(name, solution, warm_cuda):
    """The safety net: whatever the hand-over gives it, the non_finite is checked again by files."""
    record, flags = _evaluate_with_the_flag(name, solution, warm_cuda)
    assert record.ok, (record.status, record.message, flags)


@pytest.mark.gpu
@pytest.mark.timeout(600)
@pytest.mark.parametrize("name,solution", FALSELY_FAILED)
def test_gpu_the_hand_over_itself_judges_those_solutions_ok(name, solution, warm_cuda):
    """The cause mended (judge/arena.Arena.export waits for the checker's queued kernels, 2026-12-07 10:10):
    the hand-over alone judges them ok, with no recheck by files."""
    record, flags = _evaluate_with_the_flag(name, solution, warm_cuda)
    assert record.ok and "check_handover" in record.latency
    assert not any(f.startswith((handover.RECHECK_FLAG, handover.FLAG)) for f in flags), flags
