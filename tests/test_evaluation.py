"""engine/evaluation.py: the trusted check under the GPU's lane, and its retry alone on the GPU when it failed
beside other evaluations (a float64 reference that ran the GPU out of memory next to three others)."""
import pytest

from kernelgym_gap.core.lane import Lane, LaneTimeout
from kernelgym_gap.core.record import CheckResult
from kernelgym_gap.core.status import Status
from kernelgym_gap.engine.evaluation import checked_alone_if_failed

OK = CheckResult(status=Status.OK, message="", trials_checked=4)
FAILED = CheckResult(status=Status.PROTOCOL_ERROR, trials_checked=0,
                     message="the trusted checker failed: torch.OutOfMemoryError: CUDA out of memory")


def others_can_hold(lane_dir, mode: str) -> bool:
    """Whether another process-like holder could take the lane in `mode` right now."""
    with Lane.open(lane_dir, 0) as lane:
        try:
            lane.acquire(mode, timeout_s=0.05)
        except LaneTimeout:
            return False
        lane.release()
        return True


def test_a_passing_check_runs_once_under_the_shared_lane(tmp_path):
    seen = []

    def run():
        seen.append((others_can_hold(tmp_path, "shared"), others_can_hold(tmp_path, "exclusive")))
        return OK

    latency = {}
    result, flag = checked_alone_if_failed(run, str(tmp_path), 0, latency)
    assert result is OK and flag is None
    assert seen == [(True, False)]          # shared: other checks and trials may run, a timing may not
    assert "check_lane_wait" in latency and "check_retry" not in latency


def test_a_failed_check_is_retried_alone_and_flagged(tmp_path):
    seen, answers = [], [FAILED, OK]

    def run():
        seen.append(others_can_hold(tmp_path, "shared"))
        return answers.pop(0)

    latency = {}
    result, flag = checked_alone_if_failed(run, str(tmp_path), 0, latency)
    assert result is OK
    assert seen == [True, False]            # the second time nobody else holds the GPU
    assert flag.startswith("check_retried_alone") and "out of memory" in flag
    assert latency["check_retry"] >= 0 and "check_retry_lane_wait" in latency
    assert others_can_hold(tmp_path, "exclusive")      # and the lane is given back


def test_a_verdict_that_fails_again_stands(tmp_path):
    calls = []

    def run():
        calls.append(1)
        return FAILED

    result, flag = checked_alone_if_failed(run, str(tmp_path), 0, {})
    assert result.status is Status.PROTOCOL_ERROR and len(calls) == 2 and flag


@pytest.mark.parametrize("status", [Status.MISMATCH, Status.NON_FINITE, Status.OK])
def test_other_verdicts_are_not_retried(tmp_path, status):
    calls = []

    def run():
        calls.append(1)
        return CheckResult(status=status, message="", trials_checked=1)

    assert checked_alone_if_failed(run, str(tmp_path), 0, {})[1] is None and len(calls) == 1


def test_without_lanes_nothing_is_retried():
    calls = []

    def run():
        calls.append(1)
        return FAILED

    result, flag = checked_alone_if_failed(run, None, 0, {})
    assert result is FAILED and flag is None and len(calls) == 1
