"""The trusted check started while the child still runs (issue 35; EvalConfig.precompute_reference).

The trials' inputs are known from their seeds before the child ends, so the checker's most expensive part,
the float64 references (judge/checker.precompute), can be made meanwhile; once the child's report is in, only
the outputs are read and compared. The verdict is the same as the ordinary check's: the same functions on
the same inputs (tests/test_early_check.py compares them).

Where it runs follows judge/trusted.check_in_process:
- cpu, no warm checker: a thread of the parent (`InProcess`);
- cuda, no warm checker: the trusted checker's process started at once with `--early` (`Process`): it imports
  torch, then waits until a thread of the parent holds the GPU's shared lane for it, makes the references
  on the GPU and says so, and the lane is let go (a timing on that GPU waits for them, as it waits for any
  shared stretch); then it waits for the report and checks;
- a warm checker (api/warm.py): not started early (its protocol takes one finished report at a time); the
  ordinary check runs, and `start` returns None.
The child never sees any of it: the process's files are in the parent's private directory."""
from __future__ import annotations

import json
import logging
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from kernelgym_gap.core.config import EvalConfig
from kernelgym_gap.core.placement import Placement
from kernelgym_gap.core.record import CheckResult, ChildReport, Job
from kernelgym_gap.core.status import Status
from kernelgym_gap.core.task import TaskSpec

log = logging.getLogger(__name__)
_WARNED_WARM = False        # the warm-checker warning, once per process


class InProcess:
    """The references made by a thread of the parent (cpu). `started`, `made`: perf_counter stamps (made is
    None until they are)."""

    def __init__(self, task: TaskSpec, job: Job, device: str):
        self.task, self.job, self.device = task, job, device
        self.started, self.made = time.perf_counter(), None
        self._ready: dict = {}
        self._error: BaseException | None = None
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="kgg-early-reference", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from kernelgym_gap.judge.checker import precompute
        try:
            self._ready = precompute(self.task, self.job, self.device, stop=lambda: self._stop)
        except BaseException as e:  # noqa: BLE001 - the check then makes them itself
            self._error = e
        self.made = time.perf_counter()

    def wait(self, timeout: float | None = None) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def check(self, task: TaskSpec, job: Job, report: ChildReport, backend: str, private: Path,
              config: EvalConfig) -> CheckResult:
        from kernelgym_gap.judge.checker import check
        t = time.perf_counter()
        self.wait()
        waited = time.perf_counter() - t
        ready, self._ready = self._ready, {}
        return _with_wait(check(task, job, report, backend, ready), waited)

    def close(self) -> None:
        self._stop = True
        self._ready = {}


class Process:
    """The trusted checker's process started with `--early` (cuda): see the module docstring."""

    def __init__(self, task: TaskSpec, job: Job, backend: str, config: EvalConfig, placement: Placement):
        from kernelgym_gap.sandbox.child_io import backend_env
        from kernelgym_gap.sandbox.process import child_env
        self.config, self.placement = config, placement
        self.private = Path(tempfile.mkdtemp(prefix="kgg-early-", dir=placement.scratch_root))
        (self.private / "job.json").write_text(job.to_json())
        self.spec = {"job": str(self.private / "job.json"), "report": str(self.private / "report.json"),
                     "result": str(self.private / "check.json"), "device": backend}
        (self.private / "check_spec.json").write_text(json.dumps(self.spec))
        env = child_env(self.private, backend_env(backend) | {"CUDA_VISIBLE_DEVICES": str(placement.gpu_index)})
        # a file, not a pipe: nobody reads the process's stderr until it ends, and a full pipe would stall it
        self._err = open(self.private / "checker.err", "wb")
        self.started, self.made = time.perf_counter(), None
        self.waits: dict = {}
        self.lane_dir = placement.lanes_for(backend)
        self.used = False
        self.proc = subprocess.Popen([sys.executable, "-m", "kernelgym_gap.judge.checker", "--early",
                                      str(self.private / "check_spec.json")], env=env, cwd=self.private,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err)
        self._line: bytes = b""
        self._watcher = threading.Thread(target=self._watch, name="kgg-early-check", daemon=True)
        self._watcher.start()

    def _watch(self) -> None:
        """Takes the shared lane (waiting in this thread, never in the evaluation's), lets the process start,
        and lets the lane go once its references are made (or it ended)."""
        from kernelgym_gap.core.lane import held
        try:
            with held(self.lane_dir, self.placement.gpu_index, "shared", self.waits, "check_early_lane_wait"):
                self.proc.stdin.write(b"start\n")
                self.proc.stdin.flush()
                self._line = self.proc.stdout.readline(1 << 16)
        except (OSError, ValueError):      # the process ended (or was closed) first: the check says so
            pass
        finally:
            self.made = time.perf_counter()

    def wait(self, timeout: float | None = None) -> bool:
        self._watcher.join(timeout)
        return not self._watcher.is_alive()

    def check(self, task: TaskSpec, job: Job, report: ChildReport, backend: str, private: Path,
              config: EvalConfig) -> CheckResult:
        deadline = config.sandbox.wall_s
        if self.used or job != Job.from_json((self.private / "job.json").read_text()):
            # a retry (engine/evaluation.checked_alone_if_failed), or a killed child's check of the trials it
            # finished (the early process has the whole job): the ordinary check
            self.close()
            from kernelgym_gap.judge.trusted import check_in_process
            return check_in_process(task, job, report, backend, private, config, placement=self.placement)
        self.used = True
        t = time.perf_counter()
        self.wait(deadline)
        waited = time.perf_counter() - t
        Path(self.spec["report"]).write_text(report.to_json())
        try:
            self.proc.communicate(b"go\n", timeout=deadline)
        except subprocess.TimeoutExpired:
            self.close()
            return CheckResult(status=Status.PROTOCOL_ERROR, trials_checked=0,
                               message=f"the trusted checker did not finish within {deadline} s")
        result = Path(self.spec["result"])
        if not result.is_file():
            err = (self.private / "checker.err").read_bytes()[-2000:]
            return CheckResult(status=Status.PROTOCOL_ERROR, trials_checked=0,
                               message="the trusted checker failed: " + err.decode(errors="replace"))
        return _with_wait(CheckResult.from_json(result.read_text()), waited)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout, self._err):
            if f is not None and not f.closed:
                f.close()
        import shutil
        if not self.placement.keep_scratch:
            shutil.rmtree(self.private, ignore_errors=True)


def _with_wait(result: CheckResult, waited: float) -> CheckResult:
    """The check's parts with `early_wait`: how long the check waited for the references still being made
    (the record's latency check_early_wait; 0 where they were made before the child ended)."""
    import dataclasses
    return dataclasses.replace(result, seconds={**result.seconds, "early_wait": round(waited, 6)})


def start(task: TaskSpec, job: Job, backend: str, config: EvalConfig, checker=None,
          placement: Placement | None = None):
    """The early check for this evaluation, started now; None where it does not apply (not asked for, a
    warm checker, no trials)."""
    if not getattr(config, "precompute_reference", False) or not job.trials:
        return None
    if checker is not None:
        # the warm checker's protocol takes one finished report, so the lever does nothing on the warm path
        # (env, service, the throughput script's lanes rows): said once, not left for a run to find out that
        # its "precompute_reference=1" row ran without it, as the H100 light batch of 2026-12-06 did
        global _WARNED_WARM
        if not _WARNED_WARM:
            _WARNED_WARM = True
            log.warning("precompute_reference has no effect beside a warm checker: the references are made by "
                        "the warm checker after the child (cold checker: warm=False)")
        return None
    if backend == "cpu":
        return InProcess(task, job, "cpu")
    try:
        return Process(task, job, backend, config, placement or Placement())
    except OSError as e:        # no process to be had: the ordinary check runs at the end, as without this
        log.warning("the early check could not start (%s); the check runs after the child", e)
        return None
