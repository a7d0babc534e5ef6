"""The state of one evaluation as its stages fill it in, and the record it becomes."""
from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import logging
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from kernelgym_gap.core.backend import Backend
from kernelgym_gap.core.config import EvalConfig, check_hand_over
from kernelgym_gap.core.lane import held
from kernelgym_gap.core.placement import Placement
from kernelgym_gap.core.record import CheckResult, EvalRecord, Job, Trial
from kernelgym_gap.core.status import Status
from kernelgym_gap.core.task import TaskSpec
from kernelgym_gap.core.terms import TERMS_VERSION, Terms
from kernelgym_gap.engine import handover
from kernelgym_gap.engine.correctness_order import order_for_correctness
from kernelgym_gap.engine.trials import make_timing_trials, make_trials, trial_rng, warm_cases
from kernelgym_gap.sandbox import disk_ledger
from kernelgym_gap.sandbox.launch import ChildResult, Launcher, child_spec

log = logging.getLogger(__name__)


class Evaluation:
    """One submission on one task, DSL and backend. Stages read and fill it in; `record` turns the verdict
    that stopped it into the EvalRecord callers get. `checker` and `children` are the warm pool's (or None);
    `placement` says where it runs (its GPU, lanes, scratch and cache paths), `config` what it measures."""

    def __init__(self, task: TaskSpec, raw_source: bytes, dsl: str, backend: Backend, config: EvalConfig,
                 checker=None, children=None, placement: Placement | None = None):
        self.task, self.dsl, self.backend, self.config = task, dsl, backend, config
        self.placement = placement or Placement()
        check_hand_over(config, self.placement)
        self.raw_source = raw_source
        self.source_sha = hashlib.sha256(raw_source).hexdigest()
        self.checker, self.children = checker, children
        self.source = ""
        self.trials: tuple[Trial, ...] = ()
        self.job: Job | None = None
        self.child: ChildResult | None = None
        self.check_result: CheckResult | None = None
        self.latency: dict[str, float] = {}
        self.device: dict = {}
        self.versions: dict = {}
        self.flags: list[str] = []          # notes on checks that could not run, for terms["flags"]
        # the child was killed past a call's deadline after a checkpoint (engine/too_slow.py): (call, bound,
        # seconds reached); the trusted check then judges the finished trials alone
        self.killed: tuple[int, float, float] | None = None
        self._launcher: Launcher | None = None
        self.sandbox = None                  # the child's sandbox, its disk limits this job's (launch)
        self._private: Path | None = None
        self._early = None                   # the check started while the child runs (judge/early_check.py)
        self._early_read = None              # the outputs read while the child times (judge/early_prefetch.py)
        self._disk = None                    # the disk reservation (sandbox/disk_ledger.py), from launch to close
        self._opener = None                  # the hand-over's opener, pre-started with the child (engine/handover.py)

    # ---- what the stages call ------------------------------------------------------------------------

    def launch(self) -> None:
        """Builds the trials and the job, and runs the submission's child (launch.Launcher: pre-started or
        cold, with the compile probe where the DSL needs one)."""
        rng = trial_rng(self.config)
        # smallest shapes first: a hopelessly slow kernel is checked before it is killed (issue 38)
        self.trials = order_for_correctness(self.task, make_trials(self.task, self.backend.name, self.config, rng))
        timing_trials = make_timing_trials(self.task, self.config, rng) if self.backend.measures_time else ()
        # the disk limits are derived from the outputs the child will write (sandbox/disk.py); a host that
        # cannot hold them is refused here, before a child dies of ENOSPC
        outputs = tuple((tuple(t.shape), t.dtype) for t in (*self.trials, *timing_trials))
        spec = child_spec(self.task, self.dsl, self.backend.name, self.config, self.placement, outputs,
                          warm_cases(self.task, self.backend.name, self.config))   # the next pre-started child's
        self.sandbox = spec.sandbox
        # and reserved from the other evaluations on this scratch root (sandbox/disk_ledger.py), waiting for
        # them when it does not fit; released in close, once the scratch directory is gone
        self._disk = disk_ledger.reserve(self.placement.scratch_root, spec.disk,
                                         with_probe=spec.probe_env is not None, wait_s=self.placement.disk_wait_s)
        self.latency["disk_wait"] = self._disk.waited_s
        self._launcher = launcher = Launcher(spec, self.children)
        self._disk.attach(launcher.scratch)
        scratch = launcher.scratch
        source_file = scratch / "submission.py"
        source_file.write_text(self.source)
        timing = self.config.timing if self.backend.measures_time else None
        library_hint, library_trusted = self._library_plan(timing_trials)
        self.job = Job(task_id=self.task.id, dsl=self.dsl, backend=self.backend.name, source_file=str(source_file),
                       tasks_dir=self.task.tasks_dir, outputs_dir=str(scratch / "outputs"),
                       report_file=str(scratch / "report.json"), trials=self.trials, timing=timing,
                       timing_trials=timing_trials, library_hint=library_hint, library_trusted=library_trusted,
                       held_output_bytes=self.placement.held_output_bytes_for(self.backend.name),
                       held_device_bytes=self.placement.held_device_bytes_for(self.backend.name),
                       output_staging_bytes=self.placement.output_staging_bytes_for(self.backend.name),
                       outputs_copy_laned=self.placement.outputs_copy_laned_for(self.backend.name),
                       compile_outside_lane=self.config.compile_outside_lane,
                       outputs_by_handle=handover.applies(self.config, self.backend.name, self.checker,
                                                          self.placement))
        from kernelgym_gap.judge import early_check
        self._early = early_check.start(self.task, self.job, self.backend.name, self.config, self.checker,
                                         self.placement)
        self._start_early_read(scratch)
        if self.job.outputs_by_handle:      # its CUDA context is made while the child runs, not in the check
            self._opener = handover.OpenerStart(self.placement.gpu_index)
        try:
            self.child = launcher.run(self.job, self.source)
        finally:
            if self._early_read is not None:
                self._early_read.stop()
                if self._early_read.seconds is not None:   # overlapped the child: not a stage of the step
                    self.latency["check_prefetch_early"] = self._early_read.seconds
        self.latency.update(self.child.latency)

    def _start_early_read(self, scratch: Path) -> None:
        """EvalConfig.read_outputs_while_timing: the pre-timing checkpoint's files read while the child times,
        by the warm checker or, for the cpu check in the parent, by a thread here. Not beside the early check
        (it has its own protocol) nor for the one-shot checker process (it starts after the child)."""
        if not self.config.read_outputs_while_timing or self._early is not None:
            return
        if self.checker is None and self.backend.name != "cpu":
            return
        from kernelgym_gap.core.slowness import CHECKPOINT_FILE
        from kernelgym_gap.judge import early_prefetch
        self._private = Path(tempfile.mkdtemp(prefix="kgg-check-", dir=self.placement.scratch_root))
        self._early_read = early_prefetch.start(self.job, Path(self.job.report_file).parent / CHECKPOINT_FILE,
                                                self._private, self.checker, self.config.sandbox.wall_s)

    def _library_plan(self, timing_trials: tuple[Trial, ...]):
        """The library's cached time per timing trial (judge/library_cache.py), for the child to check, and the
        shapes whose time stands unchecked (TimingConfig.library_check_shapes): (library_hint, library_trusted)."""
        from kernelgym_gap.judge.library_cache import plan
        return plan(self.task, timing_trials, self.config, self.placement) if timing_trials else ((), ())

    def check(self) -> CheckResult:
        from kernelgym_gap.judge.trusted import check_in_process
        if self._private is None:
            self._private = Path(tempfile.mkdtemp(prefix="kgg-check-", dir=self.placement.scratch_root))
        t = time.perf_counter()
        # on cuda the checker runs on the GPU beside other evaluations' trials, never beside a timing
        lane_dir = self.placement.lanes_for(self.backend.name)
        job = self.job
        early_read = self.early_read_for_check()
        if self.killed is not None:         # only the trials the killed child finished (its checkpoint)
            from kernelgym_gap.engine.too_slow import finished_trials
            done = finished_trials(self)
            job = dataclasses.replace(job, trials=tuple(t for t in job.trials if t.index in done))
        held_child = getattr(self.child, "held", None)
        # a held child's outputs by handle; None: by files (nothing handed over, or the fallback's files)
        handed = self._hand_over(held_child, job, lane_dir) if held_child is not None else None
        if handed is not None:
            # no retry alone: the child, and with it the outputs, is gone once the copies are made
            self.check_result, retried = handed, None
        else:
            self.check_result, retried = checked_alone_if_failed(
                lambda lane=None: check_in_process(self.task, job, self.child.report, self.backend.name,
                                                   self._private, self.config, self.checker, self._early,
                                                   self.placement, lane, early_read if lane is not None else None),
                lane_dir, self.placement.gpu_index, self.latency,
                outside_lane=self.config.read_outputs_outside_lane)
        if early_read is not None:
            early_read.used()               # nothing left to drop at close
        if retried:
            self.flags.append(retried)
        self.latency["check"] = time.perf_counter() - t
        for part, seconds in self.check_result.seconds.items():   # the checker's own account of its time
            self.latency[f"check_{part}"] = seconds
        return self.check_result

    def _hand_over(self, held_child, job: Job, lane_dir: str | None) -> CheckResult | None:
        """The check of a child held after its report (or at a call's deadline, `killed`): by the warm checker's
        hand-over (engine/handover.Exchange) when the report names outputs kept on the device. None: check by
        files, the child killed (no handle records) or, after the fallback, asked to write them (the report
        re-read). A held child at a call's deadline cannot write: then HeldOutputsLost (a flagged timeout)."""
        from kernelgym_gap.judge.ipc_records import record_count
        if not self.job.outputs_by_handle or self.checker is None or record_count(self.child.report) == 0:
            held_child.kill()               # its outputs are files: its memory is not needed
            return None
        overdue = self.killed is not None
        wall_s = self.config.sandbox.wall_s
        # after a final report the child stays stopped until the verdict, so that a failure is checked again by
        # files; at a call's deadline it cannot write files, and goes after the copies as before
        exchange = handover.Exchange(job, self.child.report, self._opener, held_child, wall_s,
                                     keep_child=not overdue)
        # the outputs past the device budget are files: read before the lane (as the file path reads them),
        # except at a call's deadline, where the cover comes before anything else; the spec and the call agree
        prefetch = not overdue
        spec, result_path = handover.write_spec(self._private, job, self.child.report, self.backend.name,
                                                prefetch=prefetch)
        # at a call's deadline the hung kernel may still run: the child's own lane hold covers the check
        # (nothing else times beside it); after its report, the check's usual shared lane
        lane = handover.overdue_cover(held_child, lane_dir, self.placement.gpu_index) if overdue else (
            lambda: held(lane_dir, self.placement.gpu_index, "shared", self.latency, "check_lane_wait"))
        t = time.perf_counter()
        try:
            result = self.checker.hand_over_check(spec, result_path, wall_s, lane, exchange, prefetch=prefetch)
        except handover.HeldOutputsLost as e:     # the overdue cover could not be taken: nothing was opened
            self.flags.append(f"{handover.FLAG}: {e.reason}")
            held_child.kill()
            raise
        finally:
            self.latency["check_handover"] = time.perf_counter() - t
            self.latency.update(exchange.latency)
        if exchange.fallback is None:
            result = result if result is not None else CheckResult(
                status=Status.PROTOCOL_ERROR, trials_checked=0,
                message="the trusted checker gave no result after the outputs' hand-over")
            if result.status not in handover.RECHECKED or overdue:
                held_child.kill()           # done already after the copies when overdue; idempotent
                return result
            # a verdict that bytes not the output's give (engine/handover.RECHECKED): the child writes its outputs
            # and the file check decides; the hand-over's verdict stays in the record's flags
            self.flags.append(f"{handover.RECHECK_FLAG}: {result.status.value}: {result.message[:200]}")
            return self._files_from_held(held_child)
        self.flags.append(f"{handover.FLAG}: {exchange.fallback}")
        if overdue:
            held_child.kill()
            raise handover.HeldOutputsLost(exchange.fallback)
        return self._files_from_held(held_child)

    def _files_from_held(self, held_child) -> CheckResult | None:
        """The fallback after the report: the child is asked to write every output it still holds and rewrite
        its report with files in place of handles; the report is read again (hostile input, as the first time).
        None: check by files. A child that does not comply is a protocol_error."""
        from kernelgym_gap.core.errors import ProtocolError
        from kernelgym_gap.judge.ipc_records import record_count
        from kernelgym_gap.sandbox.child_io import read_report
        try:
            outcome = held_child.resume_for_files(self.config.sandbox.wall_s)
            report = read_report(Path(self.job.report_file), outcome)
        except (ProtocolError, OSError) as e:
            report, problem = None, f"its report could not be read again ({str(e)[:300]})"
        finally:
            held_child.kill()
        if report is not None:
            problem = ("it reported " + report.status.value if report.status is not Status.OK
                       else "its report still names outputs by handle" if record_count(report) else None)
        if problem is not None:
            return CheckResult(status=Status.PROTOCOL_ERROR, trials_checked=0,
                               message=f"the child was asked to write the outputs it held and did not: {problem}")
        self.child = dataclasses.replace(self.child, report=report)
        return None

    def early_read_for_check(self):
        """The outputs read while the child timed (read_outputs_while_timing), for a child that ended ok; a
        killed or failed child's is dropped (its memory freed) and its check runs exactly as without it."""
        early_read = self._early_read
        if early_read is not None and (self.killed is not None or self.child is None or self.child.report is None
                                       or self.child.report.status is not Status.OK):
            early_read.discard()
            return None
        return early_read

    @property
    def layers(self) -> tuple[str, ...]:
        return self.child.outcome.layers if self.child is not None else ()

    # ---- the end ------------------------------------------------------------------------------------

    def record(self, verdict) -> EvalRecord:
        terms = assemble_terms(verdict.correct, verdict.terms, self.flags)
        message, failure, terms = self._agent_safe(verdict, terms)
        return EvalRecord(
            task=self.task.id, task_version=self.task.version, dsl=self.dsl, backend=self.backend.name,
            status=verdict.status, stage=verdict.stage, correct=verdict.correct, reward=verdict.reward,
            reward_mode=self.backend.reward_mode(self.config.reward.mode), terms=terms.to_dict(), message=message,
            failure=failure, diagnosis=verdict.diagnosis, trials_checked=verdict.trials_checked,
            device=self.device, versions=self.versions, sandbox_layers=self.layers, latency=self.latency,
            source_sha256=self.source_sha,
            created_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))

    def _agent_safe(self, verdict, terms: Terms):
        """The verdict's message with the held-out trials' shapes, seeds and sizes scrubbed (the agent's
        feedback: engine/feedback.py), the flags likewise; and its failure with `reproduce` filled in for
        people (the call that regenerates the failing trial's inputs). Text that can hold what the child
        wrote (every stage but the gate, the trusted check and the score, whose words are the parent's own)
        also loses every number equal to a secret dimension."""
        from kernelgym_gap.core import inputs as inputs_mod
        from kernelgym_gap.core.registry import users_tasks_dir
        from kernelgym_gap.engine import feedback
        timing_trials = self.job.timing_trials if self.job is not None else ()
        workload = self.task.workloads.get(self.backend.name)
        secrets = feedback.secrets_of((*self.trials, *timing_trials), workload.public if workload else ())
        child_text = verdict.stage not in ("gate", "trusted_check", "score")
        message = feedback.scrub_paths(feedback.scrub(verdict.message, secrets, dims=child_text),
                                       feedback.task_paths(self.task))
        terms = dataclasses.replace(terms, flags=tuple(feedback.scrub(f, secrets, dims=child_text)
                                                       for f in terms.flags))
        failure = verdict.failure
        if failure is not None and failure.trial is not None and failure.reproduce is None:
            failure = dataclasses.replace(failure, reproduce=inputs_mod.reproduce_call(
                self.task.id, failure.trial, self.backend.name, users_tasks_dir(self.task)))
        return message, failure, terms

    def close(self) -> None:
        """Ends whatever still runs and removes the directories (unless placement.keep_scratch), then gives
        the disk reservation back, whatever raised before."""
        try:
            if self._launcher is not None:
                self._launcher.close(keep=self.placement.keep_scratch)
            if self._early is not None:
                self._early.close()
            if self._early_read is not None:
                self._early_read.discard()
            if self._opener is not None:
                self._opener.close()
            if self._private is not None and not self.placement.keep_scratch:
                shutil.rmtree(self._private, ignore_errors=True)
        finally:
            if self._disk is not None:
                self._disk.release()


def assemble_terms(correct: bool | None, parts: dict | None, flags: list[str]) -> Terms:
    """The record's terms (core/terms.Terms, as its JSON object): the base keys every record carries, what
    the deciding stage wrote (`parts`: the score stage's or the too-slow verdict's groups, themselves built
    from core/terms' classes) and the evaluation's own flags after the stage's. Checked against the typed
    terms here, so that a producer cannot write a key or a type the readers do not know."""
    typed = Terms.from_dict({"correctness": 1.0 if correct else 0.0, "performance": None, "E": None, "U": None,
                             "per_shape": None, "kernelbench_allclose": None, "flags": [], **(parts or {})},
                            "the evaluation's terms")
    return dataclasses.replace(typed, flags=typed.flags + tuple(flags), terms_version=TERMS_VERSION)


def checked_alone_if_failed(run: Callable[..., CheckResult], lane_dir: str | None, gpu_index: int,
                            latency: dict, outside_lane: bool = False) -> tuple[CheckResult, str | None]:
    """The trusted check under the GPU's shared lane (beside other evaluations' trials and checks); if it
    comes back a protocol_error, once more under the exclusive lane, alone on the GPU. A float64 reference
    can need tens of GiB (attention at S = 16384: B H S^2 scores); beside three others on one GPU the
    checker ran out of memory on the H200 (2026-12-04) where alone it passes, and the submission was
    blamed. A verdict the checker reaches on its own (an unreadable output) comes back the same the second
    time. Returns the result and, when it was retried, a flag saying so (in the record's terms).

    `outside_lane` (EvalConfig.read_outputs_outside_lane): the first check is `run(lane=...)`, which takes
    the shared lane itself once it read the outputs into host memory (judge/prefetch.py); the retry, alone,
    is `run()` under the exclusive lane and simply reads them again."""
    if outside_lane:
        result = run(lane=lambda: held(lane_dir, gpu_index, "shared", latency, "check_lane_wait"))
        # the reading outside the lane, kept when a retry's result (which re-reads under its lane) replaces
        # this one: `check` includes it either way, and the lane-held part is check less it (sim/workload.py)
        if "prefetch" in result.seconds:
            latency["check_prefetch"] = result.seconds["prefetch"]
    else:
        with held(lane_dir, gpu_index, "shared", latency, "check_lane_wait"):
            result = run()
    if lane_dir is None or result.status is not Status.PROTOCOL_ERROR:
        return result, None
    log.warning("the trusted check failed beside other evaluations (%s); checking again alone on GPU %d",
                result.message[:200], gpu_index)
    t = time.perf_counter()
    with held(lane_dir, gpu_index, "exclusive", latency, "check_retry_lane_wait"):
        again = run()
    latency["check_retry"] = time.perf_counter() - t
    first = result.message.strip().splitlines()[-1][:160] if result.message.strip() else ""
    return again, f"check_retried_alone: the first check, beside other evaluations, failed ({first})"


# Errors that mean the caller misused the harness or the machine cannot run the backend at all: a batch
# raises them as before (every request would fail the same way). Anything else raised while evaluating one
# request is that request's failure record (harness_failure_record): one submission never fails another's.
def is_misuse(exc: BaseException) -> bool:
    from kernelgym_gap.core.errors import (BackendUnavailableError, ConfigConflictError, TaskDefinitionError,
                                           UnknownChoiceError, UnknownTaskError)
    return isinstance(exc, (UnknownTaskError, UnknownChoiceError, TaskDefinitionError, BackendUnavailableError,
                            ConfigConflictError))


def harness_failure_record(task: TaskSpec, source: str | bytes, dsl: str, backend: str, config: EvalConfig,
                           exc: BaseException) -> EvalRecord:
    """The record of one request whose evaluation raised in the harness (a bug, or something a submission
    did that the harness did not survive): status protocol_error, stage "harness", reward 0, the exception's
    type and first line in the message and in terms["flags"] (`harness_error: <Type>`). protocol_error is
    never cached (store/results.py), so a fixed harness evaluates the submission again."""
    from kernelgym_gap.core.backend import backend as backend_info
    raw = source.encode("utf-8", "surrogatepass") if isinstance(source, str) else bytes(source)
    first = (str(exc).strip().splitlines() or [""])[0][:300]
    reason = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    try:
        mode = backend_info(backend).reward_mode(config.reward.mode)
    except Exception:   # noqa: BLE001 - the record must come back even for a backend this host lacks
        mode = config.reward.mode
    return EvalRecord(
        task=task.id, task_version=task.version, dsl=dsl, backend=backend, status=Status.PROTOCOL_ERROR,
        stage="harness", correct=False, reward=0.0, reward_mode=mode,
        terms=Terms(correctness=0.0, performance=None, E=None, U=None, per_shape=None, kernelbench_allclose=None,
                    flags=(f"harness_error: {type(exc).__name__}",)).to_dict(),
        message=f"the harness raised while evaluating this submission ({reason}); no verdict on the kernel",
        source_sha256=hashlib.sha256(raw).hexdigest(),
        created_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
