"""One evaluation as an explicit list of stages, each returning one typed verdict.

    gate -> launch (the child: import/compile, correctness trials, timing; the compile probe beside it)
         -> compile_probe -> sandbox -> child_report -> probe_cover -> trusted_check -> too_slow -> score

Each stage either lets the evaluation go on (returns None) or stops it with a `Verdict` whose status it
declares in `produces`; the record's status and `stage` come from the stage that stopped it, and the
table of which stage decides which status (`STAGE_OF`) is read off these classes, so it cannot drift from
the code. The last stage, `score`, always returns a verdict (ok, or a measurement failure). Every stage
works on one `Evaluation` (evaluation.py), which carries what earlier stages learned.
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Any, ClassVar

from kernelgym_gap.core.errors import ProtocolError
from kernelgym_gap.core.record import FailureDetail
from kernelgym_gap.core.status import Status
from kernelgym_gap.core.terms import ChildCounts
from kernelgym_gap.engine import too_slow
from kernelgym_gap.engine.gate import check_source
from kernelgym_gap.sandbox.child_io import last_lines

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Verdict:
    """How an evaluation ended: the stage that decided, the status, and what goes into the record."""
    stage: str
    status: Status
    message: str
    correct: bool | None = False
    reward: float = 0.0
    terms: dict[str, Any] | None = None
    failure: FailureDetail | None = None
    diagnosis: dict[str, Any] | None = None
    trials_checked: int = 0


class Stage:
    name: ClassVar[str]
    produces: ClassVar[frozenset[Status]]

    def run(self, ev) -> Verdict | None:
        raise NotImplementedError

    def stop(self, status: Status, message: str, **fields) -> Verdict:
        if status not in self.produces:         # a bug here, never a submission's doing
            raise AssertionError(f"stage {self.name} does not decide {status.value}")
        return Verdict(self.name, status, message, **fields)


class Gate(Stage):
    """Static checks in the parent, before any process starts: size, encoding, syntax, entry point, DSL."""
    name = "gate"
    produces = frozenset({Status.SOURCE_TOO_LARGE, Status.SOURCE_NOT_UTF8, Status.SYNTAX_ERROR,
                          Status.ENTRY_POINT_MISSING, Status.WRONG_DSL})

    def run(self, ev) -> Verdict | None:
        gate = check_source(ev.raw_source, ev.task.entry_point, ev.dsl, ev.config.max_source_bytes,
                            ev.task.module_entry_point)
        if not gate.passed:
            return self.stop(gate.status, gate.message)
        ev.source = gate.source
        return None


class Launch(Stage):
    """The submission's child (pre-started or cold, sandboxed) runs the job; never decides by itself."""
    name = "launch"
    produces = frozenset()

    def run(self, ev) -> None:
        ev.launch()
        return None


class CompileProbe(Stage):
    """cpu backend, Triton: the probe compiled each launched kernel for sm_90 without the interpreter."""
    name = "compile_probe"
    produces = frozenset({Status.COMPILE_ERROR})

    def run(self, ev) -> Verdict | None:
        if ev.child.probe_error is not None:
            return self.stop(Status.COMPILE_ERROR, ev.child.probe_error)
        return None


_SIGNAL_MEANING = {
    "SIGSEGV": "segmentation fault (often an out-of-bounds memory access in the kernel)",
    "SIGBUS": "bus error (misaligned or out-of-bounds access)",
    "SIGABRT": "aborted (an assertion or a fatal error inside a library)",
    "SIGFPE": "arithmetic exception",
    "SIGILL": "illegal instruction",
    "SIGKILL": "killed (out of memory, or a limit)",
}


class Sandbox(Stage):
    """What the sandbox saw of the child's process: limits hit, the deadline, a fatal signal."""
    name = "sandbox"
    produces = frozenset({Status.OUT_OF_MEMORY, Status.TIMEOUT, Status.OUTPUT_TOO_LARGE, Status.CRASH})

    def run(self, ev) -> Verdict | None:
        out, cfg = ev.child.outcome, ev.config
        hit = set(out.limits_hit)
        if "memory" in hit:
            peak = f" (peak {out.memory_peak_bytes / 2**20:.0f} MiB)" if out.memory_peak_bytes else ""
            return self.stop(Status.OUT_OF_MEMORY, f"the child went over its memory limit and was killed{peak}")
        if out.timed_out and out.stage_timeout == "import":
            import_s = cfg.sandbox.import_deadline_s(ev.task.module_entry_point is not None)
            return self.stop(Status.TIMEOUT, f"the submission's import (its module's top level and the entry "
                                             f"point's construction) did not finish within its "
                                             f"{import_s:.0f} s stage deadline and the child was killed")
        if out.timed_out and out.stage_timeout == "call":
            checkpoint = too_slow.read_checkpoint(ev)
            if checkpoint is not None:      # its finished trials are checked first (issue 38): its report
                ev.child = dataclasses.replace(ev.child, report=checkpoint)
                ev.killed = out.stage_overrun
                return None
            return self.stop(Status.TIMEOUT, f"{out.stage_detail}, its stage deadline, and the child was killed")
        if out.timed_out:
            forks = (f"; the pids limit refused {out.forks_refused} process/thread creations"
                     if out.forks_refused else "")
            return self.stop(Status.TIMEOUT, f"the evaluation ran past its {cfg.sandbox.wall_s:.0f} s deadline "
                                             f"and was killed{forks}")
        limits = getattr(ev, "sandbox", None) or cfg.sandbox      # the job's own disk limits (sandbox/disk.py)
        if "scratch_quota" in hit:
            return self.stop(Status.OUTPUT_TOO_LARGE, f"the child's scratch directory grew past its quota "
                                                      f"({limits.scratch_quota_bytes} B or "
                                                      f"{limits.scratch_max_entries} entries) and it was killed")
        if "output" in hit or out.output_bytes > cfg.max_child_output_bytes:
            return self.stop(Status.OUTPUT_TOO_LARGE, f"the child wrote {out.output_bytes} bytes to stdout/stderr "
                                                      f"(limit {cfg.max_child_output_bytes})")
        if out.signal == "SIGXCPU":
            return self.stop(Status.TIMEOUT, f"the child used up its CPU time limit ({cfg.sandbox.cpu_s} s)")
        if out.signal == "SIGXFSZ":
            return self.stop(Status.OUTPUT_TOO_LARGE,
                             f"the child wrote a file over the size limit ({limits.fsize_bytes} B)")
        if out.signal is not None:
            meaning = _SIGNAL_MEANING.get(out.signal, "killed by a signal")
            return self.stop(Status.CRASH, f"the child died of {out.signal}: {meaning}\n"
                                           f"{last_lines(out.stderr_tail)}")
        return None


class ChildReportStage(Stage):
    """What the child reported about the submission (import, compile, run, integrity). The report is hostile
    input: a status the child cannot produce is a protocol error."""
    name = "child_report"
    produces = frozenset({Status.CRASH, Status.PROTOCOL_ERROR, Status.SYNTAX_ERROR, Status.ENTRY_POINT_MISSING,
                          Status.COMPILE_ERROR, Status.RUNTIME_ERROR, Status.OUTPUT_TOO_LARGE,
                          Status.NO_KERNEL_LAUNCHED, Status.LIBRARY_COMPUTE, Status.INTEGRITY_VIOLATION,
                          Status.OUT_OF_MEMORY, Status.UNVERIFIED})

    def run(self, ev) -> Verdict | None:
        child = ev.child
        if child.report is None:
            status = Status.CRASH if child.outcome.returncode not in (0, None) else Status.PROTOCOL_ERROR
            return self.stop(status, child.report_error or "the child wrote no report")
        report = child.report
        ev.device, ev.versions = report.device, report.versions
        ev.latency.update({f"child_{k}": v for k, v in report.phases.items()})
        if report.status is Status.OK:
            return None
        if report.status not in self.produces:
            return self.stop(Status.PROTOCOL_ERROR, f"the child reported {report.status.value}, a status only "
                                                    "the parent decides")
        trial = next((t for t in ev.trials if t.index == report.failed_trial), None)
        tb = report.traceback
        message = report.message + (f"\n{tb}" if tb else "")
        return self.stop(report.status, message,
                         correct=None if report.status is Status.UNVERIFIED else False,
                         failure=FailureDetail(trial=trial, traceback_tail=tb) if trial or tb else None)


class ProbeCover(Stage):
    """The specializations the interpreter launched that the first probe did not compile, compiled by a
    follow-up probe; what it could still not compile is flagged (never silently passed)."""
    name = "probe_cover"
    produces = frozenset({Status.COMPILE_ERROR})

    def run(self, ev) -> Verdict | None:
        if ev.child.cover_error is not None:
            return self.stop(Status.COMPILE_ERROR, ev.child.cover_error)
        if ev.child.probe_inconclusive:
            log.warning("%s: compile probe inconclusive: %s", ev.task.id, ev.child.probe_inconclusive)
            ev.flags.append(f"compile_probe_inconclusive: {ev.child.probe_inconclusive}")
        return None


class TrustedCheck(Stage):
    """The trusted checker regenerates every trial's inputs and judges the outputs the child saved."""
    name = "trusted_check"
    produces = frozenset({Status.PROTOCOL_ERROR, Status.WRONG_TYPE, Status.WRONG_DTYPE, Status.WRONG_SHAPE,
                          Status.OUTPUT_ALIASES_INPUT, Status.NON_FINITE, Status.ALL_ZERO, Status.MISMATCH,
                          Status.INPUT_MUTATED, Status.TIMEOUT})

    def run(self, ev) -> Verdict | None:
        from kernelgym_gap.engine.handover import HeldOutputsLost
        try:
            result = ev.check()
        except HeldOutputsLost as e:        # held at a call's deadline, its outputs not handed over (the flag)
            return self.stop(Status.TIMEOUT, f"a call ran past its deadline and the outputs the child held could "
                                             f"not be handed over ({e.reason}); the child was killed")
        if result.status is not Status.OK:
            return self.stop(result.status, result.message, failure=result.failure,
                             trials_checked=result.trials_checked)
        return None


class TooSlow(Stage):
    """A kernel killed past a call's deadline whose finished trials (the smallest shapes) checked correct:
    too_slow, or timeout when they do not cover the smallest shape of every dtype (engine/too_slow.py)."""
    name = "too_slow"
    produces = frozenset({Status.TOO_SLOW, Status.TIMEOUT})

    def run(self, ev) -> Verdict | None:
        decided = too_slow.decide(ev)
        if decided is None:
            return None
        status, message, fields = decided
        return self.stop(status, message, **fields)


class Score(Stage):
    """A correct kernel's reward: the correctness gate on cpu; on cuda the performance terms (floor, E, U,
    per shape and aggregated), integrity checks on the timings, and the diagnosis."""
    name = "score"
    produces = frozenset({Status.OK, Status.INTEGRITY_VIOLATION, Status.FASTER_THAN_FLOOR,
                          Status.PROTOCOL_ERROR})

    def run(self, ev) -> Verdict:
        from kernelgym_gap.judge.reward import reward_for
        report, result = ev.child.report, ev.check_result
        notes = report.message
        counts = ChildCounts(launches_per_call=max((o.launches for o in report.trials), default=0),
                             programs=max((o.programs for o in report.trials), default=0))
        terms = {"kernelbench_allclose": result.kernelbench_allclose, **counts.to_dict()}
        if not ev.backend.measures_time:
            # No CPU time is ever passed off as a GPU figure: the performance terms stay absent.
            return self.stop(Status.OK, notes or "correct on every trial (cpu backend: correctness only)",
                             correct=True, reward=reward_for(True, None, ev.config.reward), terms=terms,
                             trials_checked=result.trials_checked)
        from kernelgym_gap.judge import library_cache
        from kernelgym_gap.judge.measure import SummaryDisagrees, performance_terms, trusted_timings
        try:        # the summaries from the raw readings (issue 31); the library's time from the hint (issue 15)
            timings = trusted_timings(ev.job, report.timings)
            report = dataclasses.replace(report, timings=library_cache.reconcile(ev.job, timings))
        except SummaryDisagrees as e:
            return self.stop(Status.INTEGRITY_VIOLATION, str(e), terms=terms, trials_checked=result.trials_checked)
        except ProtocolError as e:
            return self.stop(Status.PROTOCOL_ERROR, str(e), terms=terms, trials_checked=result.trials_checked)
        status, message, perf, diagnosis = performance_terms(ev.task, report, ev.config, ev.source, ev.dsl,
                                                               ev.placement)
        terms.update(perf)
        if status is not Status.OK:
            return self.stop(status, message, terms=terms, trials_checked=result.trials_checked)
        _store_library_times(ev, report)
        return self.stop(Status.OK, message or notes, correct=True, terms=terms, diagnosis=diagnosis,
                         reward=reward_for(True, perf.get("performance"), ev.config.reward),
                         trials_checked=result.trials_checked)


def _store_library_times(ev, report) -> None:
    """A correct evaluation's fully measured library times into the cache (judge/library_cache.py); a cache
    that cannot be written costs the next evaluations their hint, never this one its record."""
    from kernelgym_gap.judge import library_cache
    try:
        library_cache.store(ev.task, report, ev.placement)
    except OSError as e:
        log.warning("%s: library time cache not written: %s", ev.task.id, e)


STAGES: tuple[Stage, ...] = (Gate(), Launch(), CompileProbe(), Sandbox(), ChildReportStage(), ProbeCover(),
                             TrustedCheck(), TooSlow(), Score())


def _stage_of() -> dict[Status, tuple[str, ...]]:
    table: dict[Status, list[str]] = {s: [] for s in Status}
    for stage in STAGES:
        for status in stage.produces:
            table[status].append(stage.name)
    return {s: tuple(names) for s, names in table.items()}


STAGE_OF: dict[Status, tuple[str, ...]] = _stage_of()   # status -> the stages that can decide it, in order
