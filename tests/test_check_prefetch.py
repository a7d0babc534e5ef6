"""EvalConfig.read_outputs_outside_lane (issue 35; judge/prefetch.py): the trusted check reads the child's output
files into host memory before it takes the GPU's shared lane. The verdict is the one without the switch (ok,
mismatch, a forged or truncated file after a mismatch, an oversized file, a tiny memory bound); the files are
read while the lane is free (the lane's entry deletes them: a check that still read them under the lane would
fail); in the parent, the warm checker and the one-shot checker process; a checker killed or hung in either
step is handled as today. Outputs are written by the test itself, as in tests/test_warm.py."""
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from kernelgym_gap.api.warm import WarmChecker
from kernelgym_gap.core import inputs as inputs_mod
from kernelgym_gap.core.config import EvalConfig
from kernelgym_gap.core.lane import Lane, LaneTimeout, held
from kernelgym_gap.core.record import ChildReport, Job, TrialOutcome
from kernelgym_gap.core.status import Status
from kernelgym_gap.core.tensor_file import write_tensor
from kernelgym_gap.engine.evaluation import checked_alone_if_failed
from kernelgym_gap.engine.trials import make_trials
from kernelgym_gap.judge import prefetch as prefetch_mod
from kernelgym_gap.judge import trusted
from kernelgym_gap.judge.checker import check
from kernelgym_gap.sandbox.child_io import backend_env
from kernelgym_gap.sandbox.process import child_env

pytestmark = pytest.mark.usefixtures("one_torch_thread")
CONFIG = EvalConfig(seeds_per_shape=1)


@pytest.fixture
def task(registry):
    return registry.get("AddReLU")


def _case(task, tmp_path, kinds: tuple[str, ...]):
    """A job of len(kinds) trials and the outputs a child wrote: per trial "ok" (the reference), "wrong"
    (off by one), "truncated" (the file cut short), "forged" (a valid file far past the expected size),
    "just_over" (a valid file whose data is one element over the check's bound, its size within the slack)."""
    trials = make_trials(task, "cpu", CONFIG, random.Random(0))[:len(kinds)]
    assert len(trials) == len(kinds)
    out_dir = tmp_path / "outputs"
    out_dir.mkdir()
    outcomes = []
    for tr, kind in zip(trials, kinds):
        ins = inputs_mod.make_trial_inputs(task, tr, "cpu")
        with torch.no_grad():
            out = task.reference(*ins).clone()
        path = out_dir / f"{tr.index}.tensor"
        if kind == "wrong":
            out = out + 1
        if kind == "forged":
            out = torch.zeros(out.numel() * 4 + (1 << 16), dtype=torch.float64)   # past the expected bound
        if kind == "just_over":   # within the size rule's header slack, one element over read_tensor's bound
            out = torch.zeros(out.numel() * 2 + (1 << 13) + 1, dtype=torch.float64)
        write_tensor(path, out)
        if kind == "truncated":
            os.truncate(path, path.stat().st_size - 8)
        d = inputs_mod.digest(ins)
        outcomes.append(TrialOutcome(index=tr.index, output_file=path.name, launches=1, programs=1,
                                     seconds=0.0, input_digest_before=d, input_digest_after=d))
    job = Job(task_id=task.id, dsl="triton", backend="cpu", source_file=str(tmp_path / "s.py"),
              outputs_dir=str(out_dir), report_file=str(tmp_path / "report.json"), trials=trials, timing=None)
    return job, ChildReport(status=Status.OK, message="", trials=tuple(outcomes))


def _free(lane_dir) -> bool:
    """Whether nobody holds GPU 0's lane (an exclusive holder could take it now)."""
    with Lane.open(lane_dir, 0) as lane:
        try:
            lane.acquire("exclusive", timeout_s=0.05)
        except LaneTimeout:
            return False
        lane.release()
        return True


def _deleting_lane(lane_dir, outputs: Path, entries: list):
    """The shared lane, whose entry deletes the output files: a check that reads them after it fails."""
    def lane():
        entries.append(time.monotonic())
        for f in outputs.iterdir():
            f.unlink()
        return held(str(lane_dir), 0, "shared")
    return lane


CASES = {"ok": ("ok", "ok", "ok"), "mismatch": ("ok", "wrong", "ok"),
         "truncated_after_mismatch": ("wrong", "truncated", "ok"),
         "forged_after_mismatch": ("wrong", "forged", "ok"), "forged": ("forged", "ok", "ok"),
         "truncated": ("ok", "truncated", "ok"), "just_over": ("ok", "just_over", "ok")}


@pytest.mark.parametrize("name", list(CASES))
def test_the_verdict_is_the_one_without_the_prefetch(task, tmp_path, name):
    job, report = _case(task, tmp_path, CASES[name])
    before = check(task, job, report, "cpu")
    pre = prefetch_mod.prefetch_outputs(job, report)
    after = check(task, job, report, "cpu", prefetched=pre)
    assert after == before and after.message == before.message
    assert "prefetch" in after.seconds and "prefetch" not in before.seconds
    if name == "truncated_after_mismatch":
        # the truncated file is never kept: the check reads it at its own turn, after trial 1's mismatch
        assert after.status is Status.MISMATCH and len(pre.files) == 1
    if name == "forged_after_mismatch":
        assert after.status is Status.MISMATCH and len(pre.files) == 3   # read whole, refused by the check
    if name == "forged":
        assert after.status is before.status is Status.WRONG_SHAPE
    if name == "just_over":     # read whole by the prefetch, refused by read_tensor's own message
        assert after.status is Status.PROTOCOL_ERROR and "over the" in after.message and len(pre.files) == 3


def test_a_tiny_bound_leaves_the_later_files_to_the_check(task, tmp_path):
    job, report = _case(task, tmp_path, ("ok", "ok", "wrong"))
    first = Path(job.outputs_dir) / report.trials[0].output_file
    pre = prefetch_mod.prefetch_outputs(job, report, max_bytes=first.stat().st_size)
    assert list(pre.files) == [first.name]
    assert check(task, job, report, "cpu", prefetched=pre) == check(task, job, report, "cpu")
    assert prefetch_mod.prefetch_outputs(job, report, max_bytes=0).files == {}


def test_in_the_parent_the_files_are_read_while_the_lane_is_free(task, tmp_path, monkeypatch):
    """cpu without a warm checker: the check runs in the parent; the prefetch's reads see a free lane, the
    lane is taken only after them, and the check under it never touches the files (deleted at entry)."""
    job, report = _case(task, tmp_path, ("ok", "wrong", "ok"))
    expected = check(task, job, report, "cpu")
    lane_dir = tmp_path / "lanes"
    reads = []
    real = prefetch_mod.prefetch_outputs

    def spying(job, report, **kw):
        def read(path, max_bytes):
            reads.append(_free(lane_dir))
            from kernelgym_gap.core.tensor_file import read_tensor
            return read_tensor(path, max_bytes)
        return real(job, report, read=read, **kw)
    monkeypatch.setattr(trusted, "prefetch_outputs", spying)
    private = tmp_path / "private"
    private.mkdir()
    entries, latency = [], {}
    run = lambda lane=None: trusted.check_in_process(task, job, report, "cpu", private, CONFIG, lane=lane)  # noqa: E731
    result, flag = checked_alone_if_failed(
        lambda lane=None: run(_deleting_lane(lane_dir, Path(job.outputs_dir), entries) if lane else None),
        str(lane_dir), 0, latency, outside_lane=True)
    assert result == expected and flag is None
    assert reads == [True, True, True] and len(entries) == 1
    assert result.seconds["prefetch"] > 0 and _free(lane_dir)


def test_without_the_switch_the_check_reads_under_the_lane(task, tmp_path):
    """The control of the test above: the same deleting lane taken before the check fails it."""
    job, report = _case(task, tmp_path, ("ok", "ok", "ok"))
    private = tmp_path / "private"
    private.mkdir()
    with _deleting_lane(tmp_path / "lanes", Path(job.outputs_dir), [])():
        got = trusted.check_in_process(task, job, report, "cpu", private, CONFIG)
    assert got.status is Status.PROTOCOL_ERROR


@pytest.mark.parametrize("name", ["ok", "mismatch", "truncated_after_mismatch"])
def test_the_warm_checker_reads_before_the_lane(task, tmp_path, name):
    job, report = _case(task, tmp_path, CASES[name])
    expected = check(task, job, report, "cpu")
    private = tmp_path / "private"
    private.mkdir()
    entries = []
    with WarmChecker(device="cpu") as w:
        got = trusted.check_in_process(task, job, report, "cpu", private, CONFIG, checker=w,
                                       lane=_deleting_lane(tmp_path / "lanes", Path(job.outputs_dir), entries))
        assert w.starts == 1
    assert got == expected and got.message == expected.message and len(entries) == 1
    assert "prefetch" in got.seconds and _free(tmp_path / "lanes")
    spec = json.loads((private / "check_spec.json").read_text())
    assert spec["prefetch"] is True


def test_the_one_shot_checker_reads_before_the_lane(task, tmp_path):
    """The per-evaluation `python -m kernelgym_gap.judge.checker CHECK.json` (cuda without a warm checker),
    run here on the cpu device through the same two steps."""
    job, report = _case(task, tmp_path, ("ok", "wrong", "ok"))
    expected = check(task, job, report, "cpu")
    private = tmp_path / "private"
    private.mkdir()
    (private / "job.json").write_text(job.to_json())
    (private / "report.json").write_text(report.to_json())
    (private / "check_spec.json").write_text(json.dumps({
        "job": str(private / "job.json"), "report": str(private / "report.json"),
        "result": str(private / "check.json"), "device": "cpu", "prefetch": True}))
    entries = []
    argv = [sys.executable, "-m", "kernelgym_gap.judge.checker", str(private / "check_spec.json")]
    trusted.one_shot_prefetched(argv, child_env(private, backend_env("cpu")), private, 120,
                                _deleting_lane(tmp_path / "lanes", Path(job.outputs_dir), entries))
    from kernelgym_gap.core.record import CheckResult
    got = CheckResult.from_json((private / "check.json").read_text())
    assert got == expected and len(entries) == 1 and "prefetch" in got.seconds


def test_a_one_shot_checker_that_dies_or_hangs_before_it_read(tmp_path):
    """Dies: no result and its stderr back (the caller's protocol_error, as a crashed checker today), the
    lane never taken. Hangs: killed at the timeout with subprocess.TimeoutExpired, as subprocess.run raises."""
    entries = []
    lane = lambda: entries.append(1) or held(None, 0, "shared")  # noqa: E731
    dies = [sys.executable, "-c", "import os, signal, sys; sys.stderr.write('dying'); sys.stderr.flush(); "
                                  "os.kill(os.getpid(), signal.SIGKILL)"]
    assert trusted.one_shot_prefetched(dies, dict(os.environ), tmp_path, 60, lane) == b"dying"
    t = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        trusted.one_shot_prefetched([sys.executable, "-c", "import time; time.sleep(60)"], dict(os.environ),
                                    tmp_path, 1.0, lane)
    assert time.monotonic() - t < 15 and entries == []


def _spec(tmp_path, job, report, prefetch: bool) -> tuple[Path, Path]:
    private = tmp_path / "private"
    private.mkdir(exist_ok=True)
    (private / "job.json").write_text(job.to_json())
    (private / "report.json").write_text(report.to_json())
    spec = {"job": str(private / "job.json"), "report": str(private / "report.json"),
            "result": str(private / "check.json"), "device": "cpu", "prefetch": prefetch}
    (private / "check_spec.json").write_text(json.dumps(spec))
    return private / "check_spec.json", private / "check.json"


@pytest.mark.parametrize("prefetch", [False, True], ids=["today", "prefetch"])
def test_a_warm_checker_killed_before_it_read_is_retried_as_today(task, tmp_path, prefetch):
    """Killed while the request waits (SIGSTOPped, then SIGKILLed): once more on a fresh process, with and
    without the prefetch alike."""
    job, report = _case(task, tmp_path, ("ok", "ok", "ok"))
    spec, result = _spec(tmp_path, job, report, prefetch)
    entries = []
    lane = (lambda: entries.append(1) or held(None, 0, "shared")) if prefetch else None
    with WarmChecker(device="cpu") as w:
        w.warm_up()
        os.kill(w.pid, signal.SIGSTOP)
        killer = subprocess.Popen(["sh", "-c", f"sleep 0.5; kill -KILL {w.pid}"])
        try:
            got = w.check_spec(spec, result, timeout=60, lane=lane)
        finally:
            killer.wait()
        assert got.status is Status.OK and w.starts == 2
    assert entries == ([1] if prefetch else [])


def test_a_warm_checker_killed_under_the_lane_gives_the_lane_back_and_is_retried(task, tmp_path):
    job, report = _case(task, tmp_path, ("ok", "ok", "ok"))
    spec, result = _spec(tmp_path, job, report, True)
    lane_dir, free_at_entry = tmp_path / "lanes", []
    with WarmChecker(device="cpu") as w:
        def lane():
            free_at_entry.append(_free(lane_dir))
            if len(free_at_entry) == 1:
                os.kill(w.pid, signal.SIGKILL)          # dies after it read, before it is told to go
            return held(str(lane_dir), 0, "shared")
        got = w.check_spec(spec, result, timeout=60, lane=lane)
        assert got.status is Status.OK and w.starts == 2
    assert free_at_entry == [True, True] and _free(lane_dir)


def test_a_hung_warm_checker_times_out_in_the_prefetch(task, tmp_path):
    job, report = _case(task, tmp_path, ("ok", "ok", "ok"))
    spec, result = _spec(tmp_path, job, report, True)
    entries = []
    with WarmChecker(device="cpu") as w:
        w.warm_up()
        os.kill(w.pid, signal.SIGSTOP)
        with pytest.raises(subprocess.TimeoutExpired):
            w.check_spec(spec, result, timeout=1.0, lane=lambda: entries.append(1) or held(None, 0, "shared"))
        assert not w.alive() and entries == []
        assert w.check_spec(spec, result, timeout=60,
                            lane=lambda: held(None, 0, "shared")).status is Status.OK


def test_a_prefetch_spec_that_raises_is_the_failure_of_today(tmp_path):
    """A spec the server cannot load fails before the prefetch: protocol_error and no reuse, as without it."""
    spec = tmp_path / "check_spec.json"
    spec.write_text(json.dumps({"job": str(tmp_path / "missing.json"), "report": "x", "result": "y",
                                "device": "cpu", "prefetch": True}))
    with WarmChecker(device="cpu") as w:
        got = w.check_spec(spec, tmp_path / "y", timeout=60, lane=lambda: held(None, 0, "shared"))
        assert got.status is Status.PROTOCOL_ERROR and "FileNotFoundError" in got.message and not w.alive()


def test_the_output_names_follow_the_checks_order(task, tmp_path):
    job, report = _case(task, tmp_path, ("ok", "ok", "ok"))
    shuffled = ChildReport(status=Status.OK, message="", trials=tuple(reversed(report.trials)))
    assert prefetch_mod.output_names(job, shuffled) == [f"{t.index}.tensor" for t in job.trials]


def test_an_evaluation_with_the_switch_on_records_the_prefetch(registry, tmp_path):
    """evaluate() on cpu with the switch on: the same verdict as without, and the record's latency says how
    long the reading outside the lane took (check_prefetch). On cpu the trusted side takes no lane
    (Placement.lanes_for): the lane itself is the tests' above, through checked_alone_if_failed."""
    from kernelgym_gap.core.placement import Placement
    from kernelgym_gap.engine.pipeline import evaluate
    task = registry.get("AddReLU")
    sol = next(s for s in task.solutions if s.dsl == "triton" and s.cpu_status == "ok")
    source = task.solution_path(sol).read_text()
    wrong = source.replace("tl.maximum(", "tl.minimum(")
    assert wrong != source
    for code, status in ((source, Status.OK), (wrong, Status.MISMATCH)):
        recs = [evaluate(task, code, "triton", "cpu", CONFIG.replace(trial_seed=0, read_outputs_outside_lane=on),
                         placement=Placement(scratch_root=str(tmp_path))) for on in (False, True)]
        assert [r.status for r in recs] == [status, status], recs[1].message
        assert recs[0].message == recs[1].message and recs[0].trials_checked == recs[1].trials_checked
        assert "check_prefetch" not in recs[0].latency and recs[1].latency["check_prefetch"] > 0


def test_the_switch_is_a_throughput_variant():
    import importlib.util
    script = Path(__file__).resolve().parents[1] / "scripts" / "throughput.py"
    spec = importlib.util.spec_from_file_location("throughput", script)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert "read_outputs_outside_lane=1" in mod.LEVERS
    # on by default since 2026-12-06 evening (docs/measurement.md item 12): the variant turns it off as well
    applied, _ = mod.apply_variant(EvalConfig(), mod.parse_variant("read_outputs_outside_lane=0"))
    assert not applied.read_outputs_outside_lane and EvalConfig().read_outputs_outside_lane
    applied, _ = mod.apply_variant(applied, mod.parse_variant("read_outputs_outside_lane=1"))
    assert applied.read_outputs_outside_lane


def test_a_retried_check_keeps_the_first_attempts_prefetch_in_the_record(tmp_path):
    """A protocol_error beside others is checked again alone, re-reading under the exclusive lane: the
    record's check_prefetch is still the first attempt's, which its `check` seconds include."""
    from kernelgym_gap.core.record import CheckResult
    first = CheckResult(status=Status.PROTOCOL_ERROR, message="out of memory", trials_checked=0,
                        seconds={"prefetch": 0.7, "read": 0.1})
    again = CheckResult(status=Status.OK, message="", trials_checked=3, seconds={"read": 0.9})
    answers, lanes, latency = [first, again], [], {}

    def run(lane=None):
        lanes.append(lane is not None)
        if lane is not None:
            with lane():
                return answers.pop(0)
        return answers.pop(0)
    result, flag = checked_alone_if_failed(run, str(tmp_path), 0, latency, outside_lane=True)
    assert result is again and flag.startswith("check_retried_alone") and lanes == [True, False]
    assert latency["check_prefetch"] == 0.7 and "check_lane_wait" in latency and "check_retry" in latency


def test_a_lane_that_cannot_be_taken_ends_the_waiting_server(task, tmp_path):
    """The server read the outputs and waits for its go line; the lane raises instead (a lane timeout): the
    error reaches the caller, the waiting server is ended rather than reused, and the next check works."""
    job, report = _case(task, tmp_path, ("ok", "ok", "ok"))
    spec, result = _spec(tmp_path, job, report, True)

    def refused():
        raise TimeoutError("the lane was not free in time")
    with WarmChecker(device="cpu") as w:
        with pytest.raises(TimeoutError):
            w.check_spec(spec, result, timeout=60, lane=refused)
        assert not w.alive()
        assert w.check_spec(spec, result, timeout=60, lane=lambda: held(None, 0, "shared")).status is Status.OK
        assert w.starts == 2
