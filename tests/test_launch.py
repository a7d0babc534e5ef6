"""sandbox/launch.py: the child's end after its report (after_report_s), a diagnostic in every record's latency,
bounded whatever the child did to its report file."""
import os
import time

from kernelgym_gap.core.config import EvalConfig
from kernelgym_gap.core.placement import Placement
from kernelgym_gap.core.status import Status
from kernelgym_gap.engine.pipeline import evaluate
from kernelgym_gap.sandbox.launch import after_report_s
from kernelgym_gap.sandbox.outcome import ChildOutcome


def _outcome(wall_s=2.0, held=False):
    return ChildOutcome(returncode=0 if not held else None, signal=None, timed_out=False, wall_s=wall_s,
                        stdout_tail="", stderr_tail="", output_bytes=0, layers=(), held=held)


def test_the_seconds_from_the_report_to_the_end(tmp_path):
    report = tmp_path / "report.json"
    report.write_text("{}")
    now = time.time()
    os.utime(report, (now - 0.75, now - 0.75))
    assert abs(after_report_s(report, now, _outcome()) - 0.75) < 0.01


def test_a_hostile_mtime_stays_within_the_childs_wall(tmp_path):
    report = tmp_path / "report.json"
    report.write_text("{}")
    now = time.time()
    os.utime(report, (now + 3600, now + 3600))       # in the future: not negative
    assert after_report_s(report, now, _outcome()) == 0.0
    os.utime(report, (0, 0))                         # 1970: not 56 years
    assert after_report_s(report, now, _outcome(wall_s=2.0)) == 2.0


def test_none_without_a_regular_report_or_for_a_held_child(tmp_path):
    now = time.time()
    assert after_report_s(tmp_path / "missing.json", now, _outcome()) is None
    (tmp_path / "dir.json").mkdir()
    assert after_report_s(tmp_path / "dir.json", now, _outcome()) is None
    target = tmp_path / "elsewhere.json"
    target.write_text("{}")
    (tmp_path / "link.json").symlink_to(target)      # a link is not followed
    assert after_report_s(tmp_path / "link.json", now, _outcome()) is None
    assert after_report_s(target, now, _outcome(held=True)) is None     # stopped, not ended


def test_an_evaluation_records_it(registry, tmp_path):
    task = registry.get("AddReLU")
    sol = next(s for s in task.solutions if s.dsl == "triton" and s.kind == "optimized")
    record = evaluate(task, task.solution_path(sol).read_text(), "triton", "cpu", EvalConfig(trial_seed=0),
                      placement=Placement(scratch_root=str(tmp_path)))
    assert record.status is Status.OK
    assert 0.0 <= record.latency["child_after_report"] <= record.latency["child"]
