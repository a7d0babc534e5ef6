"""The stages of one evaluation (engine/stages.py): which stage decides which status, read off the stages
themselves, and the child-report stage's distrust of what the child claims."""
import dataclasses

import pytest

from kernelgym_gap.core.backend import backend
from kernelgym_gap.core.config import EvalConfig
from kernelgym_gap.core.record import ChildReport, Trial
from kernelgym_gap.core.status import Status
from kernelgym_gap.engine import stages
from kernelgym_gap.engine.evaluation import Evaluation
from kernelgym_gap.sandbox.launch import ChildResult
from kernelgym_gap.sandbox.process import ChildOutcome

OUTCOME = ChildOutcome(returncode=0, signal=None, timed_out=False, wall_s=1.0, stdout_tail="", stderr_tail="",
                       output_bytes=0, layers=("session",))


def test_every_failure_kind_is_decided_by_some_stage():
    undecided = [s.value for s in Status if not stages.STAGE_OF[s]]
    assert undecided == []
    assert stages.STAGE_OF[Status.OK] == ("score",)


def test_the_order_is_gate_first_score_last_and_names_are_unique():
    names = [s.name for s in stages.STAGES]
    assert names[0] == "gate" and names[-1] == "score" and len(set(names)) == len(names)
    assert names.index("launch") < names.index("sandbox") < names.index("child_report") < names.index("trusted_check")


def test_a_stage_cannot_decide_a_status_it_does_not_declare():
    with pytest.raises(AssertionError, match="does not decide"):
        stages.Gate().stop(Status.MISMATCH, "not the gate's to say")


def _evaluation(registry, report: ChildReport | None, outcome=OUTCOME) -> Evaluation:
    ev = Evaluation(registry.get("LayerNorm"), b"", "triton", backend("cpu"), EvalConfig())
    ev.trials = (Trial(index=0, shape=(4, 8), dtype="float32", seed=1, distribution="normal", split="public"),)
    ev.child = ChildResult(outcome=outcome, report=report, report_error=None if report else "no report")
    return ev


@pytest.mark.parametrize("claimed", [Status.MISMATCH, Status.FASTER_THAN_FLOOR, Status.WRONG_DTYPE])
def test_a_child_claiming_a_parent_verdict_is_a_protocol_error(registry, claimed):
    """The child is compromised once the submission loads: it may only report what a child can observe."""
    verdict = stages.ChildReportStage().run(_evaluation(registry, ChildReport(status=claimed, message="trust me")))
    assert verdict.status is Status.PROTOCOL_ERROR and verdict.stage == "child_report"
    assert claimed.value in verdict.message


def test_the_traceback_is_a_field_and_the_message_shows_it_once(registry):
    report = ChildReport(status=Status.RUNTIME_ERROR, message="trial 0: ValueError: boom", failed_trial=0,
                         traceback='  File "submission.py", line 3\nValueError: boom')
    verdict = stages.ChildReportStage().run(_evaluation(registry, report))
    assert verdict.status is Status.RUNTIME_ERROR
    assert verdict.failure.traceback_tail == report.traceback and verdict.failure.trial.index == 0
    assert verdict.message == report.message + "\n" + report.traceback


def test_no_report_after_a_nonzero_exit_is_a_crash(registry):
    ev = _evaluation(registry, None, dataclasses.replace(OUTCOME, returncode=1))
    assert stages.ChildReportStage().run(ev).status is Status.CRASH
    ev = _evaluation(registry, None)
    assert stages.ChildReportStage().run(ev).status is Status.PROTOCOL_ERROR


def test_the_sandbox_stage_reads_limits_before_signals(registry):
    ev = _evaluation(registry, None, dataclasses.replace(OUTCOME, limits_hit=("memory",), signal="SIGKILL"))
    assert stages.Sandbox().run(ev).status is Status.OUT_OF_MEMORY
    ev = _evaluation(registry, None, dataclasses.replace(OUTCOME, timed_out=True, signal="SIGKILL"))
    assert stages.Sandbox().run(ev).status is Status.TIMEOUT
    ev = _evaluation(registry, None, dataclasses.replace(OUTCOME, signal="SIGSEGV", returncode=-11))
    verdict = stages.Sandbox().run(ev)
    assert verdict.status is Status.CRASH and "segmentation fault" in verdict.message
