"""The engine's side of the outputs handed over on the device (issue 35; docs/measurement.md, "The outputs handed
over on the device"): when it applies, the per-evaluation opener pre-started while the child runs, and the
exchange that runs inside the warm checker's hand-over (api/warm.WarmChecker.hand_over_check).

The exchange's order is the protocol's: rebuild the checker's plan from its wire rows (judge/ipc_records.
plan_from_wire), have the opener copy every planned output into the checker's arena (judge/opener_client.
hand_over; it closes every handle before it answers), and only then return the go line. What the checker
compares is its own copy in its own memory, so nothing the stopped child does later can change it. The held
child is killed there (`keep_child` False: a child held at a call's deadline, which cannot write files) or
kept stopped until the verdict (`keep_child` True, after a final report): a verdict other than ok is then
checked again by files when it is one that bytes not the output's give (RECHECKED; engine/evaluation.py):
on the H100 (2026-12-07) the hand-over gave non_finite to 8 honest solutions that the files judge ok.
Anything that is not the child's doing (the opener failed or could not start CUDA, an arena that cannot be trusted, an output with no room in the arena, a plan we cannot rebuild) is an abort:
the child is still alive, stopped, and the evaluation falls back to asking it for files (engine/evaluation.py).
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kernelgym_gap.core.config import EvalConfig
from kernelgym_gap.core.placement import Placement
from kernelgym_gap.core.status import Status

log = logging.getLogger(__name__)

# How long the opener may take to make its CUDA context and say it is ready, counted from its start (it starts
# when the child does, so this normally overlaps the child's whole run).
OPENER_READY_S = 120.0
FLAG = "outputs_ipc_fallback"
# A verdict of these from the hand-over is checked again by files (the child, kept stopped, writes its outputs;
# engine/evaluation.py); the flag keeps the hand-over's own verdict. These are what copied bytes that are not
# the output give: the H100 runs of 2026-12-07 gave non_finite to 8 honest solutions that the files judged ok
# (docs/measurement.md, "The hand-over on the GPU: false verdicts"), and an arena a copy never reached reads as
# zeros. A mismatch stands: a record naming other memory is as often the child's own doing (the hostile twins
# ipc_foreign_handle, ipc_free_after_export and ipc_write_during_copy end there), and files would give such a
# child the verdict of the outputs it kept. Every verdict a record decides unopened stands too.
RECHECKED = frozenset({Status.NON_FINITE, Status.ALL_ZERO})
RECHECK_FLAG = "outputs_ipc_recheck"
# An overdue hold whose lane descriptions were not taken (sandbox/held.py: pidfd_getfd refused, or the child
# replaced its descriptors): how long the check waits for the exclusive lane on fresh descriptors. A stopped
# child that still holds the lane, in either mode, never lets it go, so the wait ends here and the hand-over
# is given up (a flagged timeout) rather than run beside a lane we cannot prove is ours.
COVER_WAIT_S = 30.0


def applies(config: EvalConfig, backend: str, checker: Any, placement: Placement) -> bool:
    """Job.outputs_by_handle: the flag, on cuda, with a warm checker (its arena lives in that process), a device
    budget to hold outputs in, and neither of the checks that read outputs early (precompute_reference's early
    check and read_outputs_while_timing's early read keep their own protocols, by files)."""
    return (config.hand_over_outputs and backend == "cuda" and checker is not None
            and placement.held_device_bytes_for(backend) > 0
            and not config.precompute_reference and not config.read_outputs_while_timing)


class OpenerStart:
    """One evaluation's opener (judge/opener.py), started in a thread so that its CUDA context is made while the
    child runs; never reused. `ready` gives the started process or raises OpenerFailed (it failed to start,
    could not start CUDA, or is not ready in time); `close` kills it whatever state it is in (idempotent)."""

    def __init__(self, gpu_index: int, ready_s: float = OPENER_READY_S,
                 start: Callable[[], subprocess.Popen] | None = None):
        self._start = start or (lambda: _start_opener(gpu_index))
        self._ready_s = ready_s
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._error: BaseException | None = None
        self._closed = False
        self.started_at = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="kgg-opener-start", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from kernelgym_gap.judge.opener_client import wait_ready
        try:
            proc = self._start()
        except BaseException as e:      # noqa: BLE001 - kept and raised by ready(), in the caller's thread
            self._error = e
            return
        with self._lock:
            self._proc = proc
            if self._closed:            # closed while it started: it must not outlive the evaluation
                _kill(proc)
                return
        try:
            wait_ready(proc, self._ready_s)
        except BaseException as e:      # noqa: BLE001 - OpenerFailed (it killed the process), or our bug
            self._error = e

    def ready(self, timeout_s: float) -> subprocess.Popen:
        """The opener, its ready line read; OpenerFailed otherwise (the fallback's trigger)."""
        from kernelgym_gap.judge.opener_client import OpenerFailed
        self._thread.join(max(timeout_s, 0.0))
        if self._thread.is_alive():
            raise OpenerFailed(f"the opener was not ready within {timeout_s:.1f} s of the hand-over")
        if self._closed:
            raise OpenerFailed("the opener was closed before the hand-over")
        if self._error is not None:
            if isinstance(self._error, OpenerFailed):
                raise self._error
            raise OpenerFailed(f"the opener did not start: {type(self._error).__name__}: {self._error}")
        return self._proc

    def close(self) -> None:
        with self._lock:
            self._closed = True
            proc = self._proc
        if proc is not None:
            _kill(proc)


def _start_opener(gpu_index: int) -> subprocess.Popen:
    """The opener on the evaluation's GPU: the checker's and the child's device 0 is that GPU too."""
    from kernelgym_gap.judge.opener_client import start_opener
    return start_opener(0, env=os.environ | {"CUDA_VISIBLE_DEVICES": str(gpu_index)})


def _kill(proc: subprocess.Popen) -> None:
    from kernelgym_gap.judge.opener_client import kill_opener
    kill_opener(proc)


@dataclasses.dataclass
class Exchange:
    """The exchange inside WarmChecker.hand_over_check: called with the checker's handover line, returns the go
    line. Afterwards `fallback` says why it aborted (None when the copies went ahead) and `latency` holds
    check_handover_copies (the opener's own seconds) and outputs_handed (the outputs copied)."""
    job: Any
    report: Any
    opener: OpenerStart | None
    held: Any                           # sandbox's HeldChild: kill() after the copies unless keep_child
    timeout_s: float
    keep_child: bool = False            # the caller kills it after the verdict (or asks it for files)
    fallback: str | None = None
    latency: dict[str, float] = dataclasses.field(default_factory=dict)

    def __call__(self, handover: dict) -> dict:
        from kernelgym_gap.judge.ipc_records import NeedsFile, plan_from_wire
        from kernelgym_gap.judge.opener_client import OpenerFailed, hand_over
        arena = handover.get("arena") if isinstance(handover, dict) else None
        try:
            plan = plan_from_wire(handover.get("planned") or [], self.job, self.report)
        except (ValueError, TypeError, AttributeError) as e:     # the checker's line we cannot read: our bug
            return self._abort(f"the checker's plan could not be rebuilt ({type(e).__name__}: {str(e)[:200]})")
        if any(isinstance(e, NeedsFile) for e in plan.entries):
            return self._abort("an output has no room in the checker's arena")
        if not plan.planned:            # only Refused entries: nothing to copy
            self._done_with_child()
            self.latency["outputs_handed"] = 0
            return {"copies": {}}
        if not isinstance(arena, dict) or not isinstance(arena.get("handle"), str):
            return self._abort("the checker allocated no arena for the planned outputs")
        if self.opener is None:
            return self._abort("no opener was started")
        deadline = time.monotonic() + self.timeout_s
        try:
            proc = self.opener.ready(self.timeout_s)
            done = hand_over(proc, plan, arena["handle"], max(deadline - time.monotonic(), 1.0),
                             arena.get("offset", 0))
        except OpenerFailed as e:
            return self._abort(f"{'CUDA IPC unsupported: ' if e.unsupported else ''}{str(e)[:300]}")
        except ValueError as e:         # opener.SchemaError: the plan breaks the request's schema, our bug
            return self._abort(f"the opener's request was refused before sending ({str(e)[:200]})")
        finally:
            self.opener.close()         # one opener per evaluation: never reused
        if done.arena_error is not None:
            return self._abort(f"the arena's copy cannot be trusted ({done.arena_error[:200]})")
        self.latency["check_handover_copies"] = done.seconds.get("total", sum(done.seconds.values()))
        self.latency["outputs_handed"] = sum(r.result == "copied" for r in done.results)
        # every handle is closed (the opener exited): the checker compares its own copies from here
        self._done_with_child()
        return {"copies": {r.key.file_name: r.result for r in done.results}}

    def _done_with_child(self) -> None:
        if not self.keep_child:
            self.held.kill()

    def _abort(self, reason: str) -> dict:
        self.fallback = reason
        log.warning("the outputs' hand-over falls back to files: %s", reason)
        return {"abort": True}


def write_spec(private: Path, job: Any, report: Any, backend: str, prefetch: bool = True) -> tuple[Path, Path]:
    """The hand-over's check spec (judge/checker.py, `"handover": true`) beside the job and report it names, in
    the evaluation's private directory; returns (spec path, result path). `prefetch`: the outputs that are files
    are read before the lane (WarmChecker.hand_over_check's `prefetch`, which must say the same)."""
    report_path, job_path, result = private / "report.json", private / "job.json", private / "check.json"
    report_path.write_text(report.to_json())
    job_path.write_text(job.to_json())
    spec = {"job": str(job_path), "report": str(report_path), "result": str(result), "device": backend,
            "prefetch": bool(prefetch), "early": False, "handover": True}
    (private / "check_spec.json").write_text(json.dumps(spec))
    return private / "check_spec.json", result


def overdue_cover(held_child: Any, lane_dir: str | None, gpu_index: int, wait_s: float | None = None):
    """The lane for the check of a child held at a call's deadline (a zero-argument context manager factory, as
    WarmChecker.hand_over_check takes): the lane's data held shared through the child's own descriptions
    (HeldChild.lane_cover, the gate untouched), so the hung kernel that may still run never overlaps another
    evaluation's timing, and a timing that waits at the gate for the stopped child is never waited on in turn.
    When the child's descriptions were not taken and the GPU has lanes, the exclusive lane on fresh
    descriptors. Either wait is bounded by `wait_s` (COVER_WAIT_S), past which HeldOutputsLost: running the
    copies and the check with no lane could overlap another evaluation's exclusive timing (the child may hold
    nothing, having let the lane go to compile)."""
    from kernelgym_gap.core.lane import Lane, LaneTimeout, resolve
    wait = COVER_WAIT_S if wait_s is None else wait_s

    @contextlib.contextmanager
    def cover():
        with contextlib.ExitStack() as stack:
            try:
                got = stack.enter_context(held_child.lane_cover(wait))
            except LaneTimeout as e:
                raise HeldOutputsLost(f"the lane could not be held beside the stopped child ({e})") from None
            if got is not None or resolve(lane_dir) is None:
                yield
                return
        with Lane.open(resolve(lane_dir), gpu_index) as fresh:
            try:
                fresh.acquire("exclusive", wait)
            except LaneTimeout as e:
                raise HeldOutputsLost(f"the lane could not be taken beside the stopped child ({e})") from None
            try:
                yield
            finally:
                fresh.release()
    return cover


class HeldOutputsLost(Exception):
    """A child held at a call's deadline (a hung kernel) whose hand-over failed: it cannot be asked to write its
    outputs (it is not running its harness), so it is killed and the evaluation is a timeout, flagged."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason
