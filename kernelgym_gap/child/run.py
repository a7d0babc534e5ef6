"""One job inside the child (runner.py is the process's entry point): `ChildRun(job).run()` imports the
submission, runs it on fresh inputs per trial, saves each output for the trusted checker, times it on the cuda
backend, and watches for tampering (integrity.py: guards, op recorders, snapshots). Nothing here decides
correctness: the parent's checker does, from the saved outputs and inputs it regenerates itself. This process
is assumed compromised once the submission is imported; what it reports is cross-checked by the parent
wherever it can be.

This module, not runner.py, holds the work: a real child runs runner.py as __main__, which the integrity
snapshots cover as `__main__`; this module, like every harness module, they cover by name."""
from __future__ import annotations

import contextlib
import gc
import importlib.util
import os
import sys
import time
from pathlib import Path

import torch

from kernelgym_gap.child import compile_modes
from kernelgym_gap.child import integrity as integ
from kernelgym_gap.child.failure import Failure, classify
from kernelgym_gap.child.hold import hold_outputs
from kernelgym_gap.child.instances import register_child_run
from kernelgym_gap.child.lanes import ChildLane
from kernelgym_gap.child.marks import CallMarks
from kernelgym_gap.child.outputs import HeldOutputs, checkpoint_due
from kernelgym_gap.child.report_parts import (aliases_an_input, device_info, is_tensor, type_name_of, versions,
                                              write_report)
from kernelgym_gap.child.module_entry import resolve_entry
from kernelgym_gap.child.timing import recheck_timed, time_submission, warm_library
from kernelgym_gap.child.timing_watch import timing_entry
from kernelgym_gap.core import inputs as inputs_mod
from kernelgym_gap.core.lane import inherited
from kernelgym_gap.core.record import (IMPORT_MARKER, IMPORT_START_FD_ENV, ChildReport, Job, TrialOutcome,
                                       first_of_their_shape)
from kernelgym_gap.core.slowness import CHECKPOINT_FILE
from kernelgym_gap.core.status import Status
from kernelgym_gap.core.tensor_file import output_name

# Everything used once the submission is loaded is bound here, before it: a name looked up in sys.modules
# later could be the submission's replacement.

# The methods of the harness's own instances that run after submission code, bound from their classes at import:
# an instance attribute that shadows one (`held.add = f`, found with gc) is never what runs, and is reported by
# the next check (child/instances.py). ChildRun's own are called as `ChildRun.verdict(self, ...)` for the same
# reason.
_VIOLATIONS = integ.Integrity.violations
_HELD_ADD = HeldOutputs.add
_HELD_WRITE = HeldOutputs.write
_HELD_WRITE_PHASES = HeldOutputs.write_phases
_HELD_HANDED_OVER = HeldOutputs.handed_over
_HELD_BEFORE_HOLD = HeldOutputs.before_hold
_MARKS_BEGIN = CallMarks.begin
_MARKS_END = CallMarks.end


def _signal_import_start() -> None:
    """One byte on the pipe the parent handed over (core/record.py, IMPORT_START_FD_ENV), then closed, so the
    submission finds neither the descriptor nor the variable."""
    fd = os.environ.pop(IMPORT_START_FD_ENV, None)
    if fd is None:
        return
    try:
        os.write(int(fd), b"s")
        os.close(int(fd))
    except (ValueError, OSError):
        pass


class ChildRun:
    """One job: its task, DSL adapter, integrity snapshots, phase times and the report fields every report
    carries (versions, device). Each step returns the process's exit code once it wrote the final report, or
    None to go on."""

    def __init__(self, job, preimport: dict[str, float] | None = None):
        self.job = job
        self.report_path = Path(job.report_file)
        self.outputs = Path(job.outputs_dir)
        self.phases: dict[str, float] = dict(preimport or {})     # a pre-started child's (runner.wait_for_job)
        self.t0 = time.perf_counter()
        self.device = "cuda" if job.backend == "cuda" else "cpu"
        self.outcomes: list = []         # TrialOutcome per correctness trial run so far
        self.buffers: dict = {}          # (shape, dtype) -> the input buffers its trials refill
        self.timings: tuple = ()
        self.common: dict = {}           # fields every report carries: versions, device
        self.marks = CallMarks(self.report_path.parent, job.call_bounds)   # the parent's call deadlines
        self.held = HeldOutputs(self.outputs, job.held_output_bytes,       # written once the lanes are let go
                                device_budget_bytes=job.held_device_bytes, by_handle=job.outputs_by_handle,
                                staging_bytes=job.output_staging_bytes,   # the lane comes in `setup`: looked up late
                                copy_guard=(lambda: self.lane.copying()) if job.outputs_copy_laned else None)
        self.compiling_trials = first_of_their_shape(job.trials)   # the calls that compile (lanes.py)
        self.checkpointed = 0            # outcomes covered by the last checkpoint (`checkpoint`)
        self.checkpoint_report = None    # that checkpoint, naming every output by its file (the hold's fallback)

    @classmethod
    def from_file(cls, job_path: Path, preimport: dict[str, float] | None = None) -> ChildRun:
        job = Job.from_json(job_path.read_text())
        try:
            job_path.unlink()       # the seeds are not left lying about for the submission to read
        except OSError:
            pass
        return cls(job, preimport)

    def run(self) -> int:
        self.setup()
        done = self.import_submission()
        if done is not None:
            return done
        if self.job.mode == "compile_probe":
            return compile_modes.compile_probe(self, self.entry)
        if self.job.mode == "compile_specs":
            return compile_modes.compile_specs(self)
        with self.lane.stage("shared"):
            done = self.run_trials()
            if done is None:            # TimingConfig.library_warm_before_lane (off, or no GPU: returns at once)
                warm_library(self.task, self.job, self.phases)
        if done is None and self.job.timing is not None:
            done = ChildRun.checkpoint(self)    # outside both lanes: a kernel killed while timed was checked everywhere
        if done is None and self.job.timing is not None:
            done = self.timing_stages()
        return self.wrap_up() if done is None else done

    def timing_stages(self) -> int | None:
        """The timing under the exclusive lane; with TimingConfig.recheck_outside_exclusive, then the timed
        shapes' rechecks under the shared lane, taken again once the exclusive one is let go: a recheck is a
        correctness check, not a measurement, and needs no GPU to itself."""
        with self.lane.stage("exclusive"):
            done = self.time_calls()
        if done is None and self.job.timing.recheck_outside_exclusive:
            with self.lane.stage("shared", "recheck"):
                done = self.recheck_calls()
        return done

    @contextlib.contextmanager
    def _compiling(self):
        """Around each compilation of the DSL's: marked for the parent's call deadline (outside), and the lane
        let go for it where the job allows (inside: taking the lane back counts as compiling)."""
        with self.marks.compiling(), self.lane.let_go():
            yield

    def setup(self) -> None:
        """The adapter installed, the guards on, the snapshots taken: all before the submission loads."""
        from kernelgym_gap.core.registry import find_task
        from kernelgym_gap.dsl import make_adapter
        job = self.job
        self.task = find_task(job.task_id, job.tasks_dir)
        # both probe modes run without the interpreter (probe.probe_env) and compile instead of launching
        self.adapter = make_adapter(job.dsl, job.backend, compile_only=job.mode in ("compile_probe", "compile_specs"))
        self.adapter.install()
        self.common = dict(versions=versions(self.adapter), device=device_info(job.backend))
        self.lane = ChildLane(*inherited(), self.phases)   # the GPU's lane the parent handed over (core/lane.py)
        self.adapter.compile_hook = self._compiling
        if job.backend == "cuda":
            torch.cuda.init()
            self.adapter.streams.expected = torch.cuda.current_stream().cuda_stream
        # Automatic collection would run the submission's finalizers in the harness's code: collect only
        # inside watched stretches (see `wrap_up`).
        gc.disable()
        integ.install_guards(job.backend)
        integ.watching()            # builds the recorder classes, so that they are in the snapshot
        self.integrity = integ.Integrity(self.adapter, task=self.task)
        register_child_run(self)         # its own instances, checked with the snapshots (instances.py)
        self.phases["setup"] = time.perf_counter() - self.t0

    # -- reports ---------------------------------------------------------------------------------------------
    def finish(self, status: Status, message: str, **kw) -> int:
        """Writes the one report of this child (with the common fields); the process's exit code. An OK report
        that hands outputs over by handle (child/outputs.py) names them by their records and is followed by
        the hold (child/hold.py): this process keeps their memory until the parent kills it, or writes them
        as files when asked. Any other report is written as it is, and the child exits (no hold)."""
        self.phases["total"] = time.perf_counter() - self.t0
        holding = status is Status.OK and bool(self.held.handles)
        if holding:
            self.phases["hold_reserved_mib"] = _HELD_BEFORE_HOLD(self.held)
        report = ChildReport(status=status, message=message, phases=self.phases, **kw, **self.common)
        if not holding:
            write_report(self.report_path, report)
            return 0
        write_report(self.report_path, _HELD_HANDED_OVER(self.held, report))
        return hold_outputs(self.report_path.parent, lambda: self.files_instead_of_handles(report))

    def files_instead_of_handles(self, report: ChildReport) -> int:
        """The hold's fallback: the handed-over outputs written as files, then the last checkpoint and the
        final report (`report`, which names every output by its file) rewritten to name those files, in that
        order (the parent re-reads the report once the child has exited). A failed write is its own report,
        as when the outputs are written without the hand-over (`write_outputs`)."""
        try:
            self.phases["outputs_write_fallback"] = self.held.write_instead_of_handles()
            if self.checkpoint_report is not None:
                write_report(self.report_path.parent / CHECKPOINT_FILE, self.checkpoint_report)
        except BaseException as e:  # noqa: BLE001 - a file over the size limit, a full scratch
            return self.fail(self.classify(e, "while writing the outputs for the checker"),
                             trials=report.trials, timings=report.timings)
        self.phases["total"] = time.perf_counter() - self.t0
        write_report(self.report_path, report)
        return 0

    def fail(self, failure: Failure, **kw) -> int:
        return ChildRun.finish(self, failure.status, failure.message, traceback=failure.traceback, **kw)

    def classify(self, exc: BaseException, where: str) -> Failure:
        return classify(exc, where, self.adapter, self.integrity, integ.WATCH)

    def verdict(self, where: str, watch=None, **kw) -> int | None:
        """The first integrity or library-compute problem after a stretch of submission code, as a report."""
        adapter = self.adapter
        violations = _VIOLATIONS(self.integrity)
        if adapter.log.side_stream:
            violations.append(f"{adapter.log.side_stream} kernel launch(es) went to a side stream, not the "
                              "harness's current stream")
        if violations:
            return ChildRun.finish(self, Status.INTEGRITY_VIOLATION, f"{where}: " + "; ".join(violations),
                               integrity=tuple(violations), **kw)
        if watch is not None and watch.ops:
            failed = f" after {adapter.log.failed} failed kernel launch(es)" if adapter.log.failed else ""
            return ChildRun.finish(self, Status.LIBRARY_COMPUTE,
                               f"{where}: the submission computed with torch outside its {self.job.dsl} kernel"
                               f"{failed}: {integ.describe_ops(watch.ops)}; the kernel must do the work "
                               "(allocation, views and copies are allowed)", **kw)
        return None

    def failed_stretch(self, exc: BaseException, where: str, watch, **kw) -> int:
        """The report after submission code raised: a violation it left first, else what it raised."""
        done = ChildRun.verdict(self, where, watch, **kw)
        if done is not None:
            return done
        return self.fail(self.classify(exc, where), integrity=tuple(_VIOLATIONS(self.integrity)), **kw)

    # -- the submission's code -------------------------------------------------------------------------------
    def import_submission(self) -> int | None:
        """Imports the submission (a real file: @triton.jit and @T.prim_func read their source) under watch;
        sets `module` and `entry`."""
        where = "while importing the submission"
        _signal_import_start()                   # the parent's import deadline starts here
        t = time.perf_counter()
        watch = integ.watching()
        try:
            spec = importlib.util.spec_from_file_location("submission", self.job.source_file)
            module = importlib.util.module_from_spec(spec)
            sys.modules["submission"] = module
            with watch:
                spec.loader.exec_module(module)
        except SyntaxError as e:
            return ChildRun.finish(self, Status.SYNTAX_ERROR, f"line {e.lineno}: {e.msg}")
        except BaseException as e:  # noqa: BLE001 - SystemExit from the submission is a runtime error too
            return self.fail(self.classify(e, where))
        self.phases["import"] = time.perf_counter() - t
        done = ChildRun.verdict(self, where, watch)
        if done is not None:
            return done
        self.module = module
        try:                        # a function, or a task's module class (ModelNew) built into one
            self.entry = resolve_entry(module, self.task, self.job, self.device, integ)
        except BaseException as e:  # noqa: BLE001
            return self.fail(self.classify(e, f"while building {self.task.module_entry_point}"))
        done = ChildRun.verdict(self, "while building the submission's entry point")
        if done is not None:
            return done
        if not callable(self.entry):
            return ChildRun.finish(self, Status.ENTRY_POINT_MISSING, f"{self.task.entry_point!r} is not a callable of the module")
        (self.report_path.parent / IMPORT_MARKER).touch()      # the parent's import deadline ends here
        return None

    def run_trials(self) -> int | None:
        """The correctness trials: fresh inputs each, outputs saved for the checker.

        Trials of one (shape, dtype) reuse the same input buffers, refilled in place: a cache keyed by
        data_ptr (or by shape) then returns the previous seed's output, and the checker sees a mismatch."""
        t = time.perf_counter()
        for k in ("correctness_inputs", "correctness_calls", "correctness_save"):   # where the stage's time goes
            self.phases[k] = 0.0
        for trial in self.job.trials:
            t_in = time.perf_counter()
            fresh = inputs_mod.make_trial_inputs(self.task, trial, self.device)
            key = (tuple(trial.shape), trial.dtype)
            if key in self.buffers:
                ins = tuple(b.copy_(f) if is_tensor(b) else f for b, f in zip(self.buffers[key], fresh))
            else:
                self.buffers[key] = ins = fresh
            del fresh
            self.phases["correctness_inputs"] += time.perf_counter() - t_in
            done = self._trial(trial, ins)
            if done is not None:
                return done
        self.phases["correctness"] = time.perf_counter() - t
        return None

    def _trial(self, trial, ins) -> int | None:
        adapter = self.adapter
        before = inputs_mod.digest(ins)
        adapter.log.reset()
        watch = integ.watching()
        where = (f"trial {trial.index} ({trial.split} shape {list(trial.shape)}, {trial.dtype}, "
                 f"{trial.distribution} inputs, seed {trial.seed})")
        kw = dict(trials=tuple(self.outcomes), failed_trial=trial.index)
        if checkpoint_due(self.job.trials, len(self.outcomes), self.checkpointed, self.compiling_trials):
            done = ChildRun.checkpoint(self)
            if done is not None:
                return done
        _MARKS_BEGIN(self.marks, len(self.outcomes))       # this trial's position in job.trials
        first = self.job.compile_outside_lane and trial.index in self.compiling_trials
        start = time.perf_counter()
        try:
            with torch.no_grad(), self.lane.first_call(first), watch:
                out = self.entry(*ins)
            if self.job.backend == "cuda":
                torch.cuda.synchronize()
        except BaseException as e:  # noqa: BLE001
            _MARKS_END(self.marks)                    # writing the report is not the call's time
            return self.failed_stretch(e, where, watch, **kw)
        seconds = time.perf_counter() - start
        self.phases["correctness_calls"] += seconds
        _MARKS_END(self.marks)
        done = ChildRun.verdict(self, where, watch, **kw)
        if done is not None:
            return done
        launches, programs = adapter.log.launches, adapter.log.max_programs
        out_file, aliases = None, False
        if type(out) is torch.Tensor:
            aliases = aliases_an_input(out, ins)
            out_file = output_name("trial", trial.index)
            t_save = time.perf_counter()
            try:        # a host copy, written after the lanes (child/outputs.py)
                _HELD_ADD(self.held, out_file, out)
            except BaseException as e:  # noqa: BLE001 - a file over the size limit, memory
                return self.fail(self.classify(e, f"{where}: while keeping its output for the checker"), **kw)
            self.phases["correctness_save"] += time.perf_counter() - t_save
        # The submission's finalizers, if any, run here: under the op recorders too (a finalizer that computed with
        # torch and overwrote the host copy just kept scored ok: tests/fixtures/hostile/finalizer_overwrites_held.py),
        # its verdict only when it recorded ops (the next call's verdict compares the snapshots anyway).
        release = integ.watching()
        with release:
            output_type = type_name_of(out)
            out = None
        if release.ops:
            done = ChildRun.verdict(self, f"{where}, as its output was released", release, **kw)
            if done is not None:
                return done
        self.outcomes.append(TrialOutcome(
            index=trial.index, output_file=out_file, launches=launches, programs=programs, seconds=seconds,
            input_digest_before=before, input_digest_after=inputs_mod.digest(ins), output_aliases_input=aliases,
            output_type=output_type))
        if launches == 0:
            return ChildRun.finish(self, Status.NO_KERNEL_LAUNCHED,
                               f"the entry point returned without launching a {self.job.dsl} kernel (trial "
                               f"{trial.index}); the kernel must do the work", trials=tuple(self.outcomes),
                               failed_trial=trial.index)
        return None

    def checkpoint(self) -> int | None:
        """The finished trials' outputs written (child/outputs.py) and a report listing them (status ok, no
        timings) in its own file beside the report (core/slowness.CHECKPOINT_FILE). A child the parent kills
        for a call past its stage deadline leaves these: the parent checks them and tells a correct but too
        slow kernel from a wrong one (issue 38). Harness code between calls: nothing here is timed. Pure disk
        work, so the shared lane is let go for it and taken back before the next call (child/lanes.py,
        `unlaned`); the one before the timing runs between the two stages, holding neither."""
        if len(self.outcomes) == self.checkpointed:
            return None
        try:
            with self.lane.unlaned("checkpoint"):
                t = time.perf_counter()
                _HELD_WRITE(self.held)           # in handle mode the device copies are exported, not written
                report = ChildReport(status=Status.OK, message=f"checkpoint after {len(self.outcomes)} trial(s)",
                                     phases=dict(self.phases), trials=tuple(self.outcomes), **self.common)
                write_report(self.report_path.parent / CHECKPOINT_FILE, _HELD_HANDED_OVER(self.held, report))
                self.checkpoint_report = report
                # the writing alone, wherever it ran (the wait to take the lane back has its own key)
                self.phases["checkpoint_write"] = self.phases.get("checkpoint_write", 0.0) + time.perf_counter() - t
        except BaseException as e:  # noqa: BLE001 - a file over the size limit, a full scratch
            return self.fail(self.classify(e, "while writing the outputs for the checker"),
                             trials=tuple(self.outcomes))
        self.checkpointed = len(self.outcomes)
        return None

    def time_calls(self) -> int | None:
        """Times the entry point (child/timing.py), a share of the calls watched (`timing_entry`); each timed
        shape's recheck inside its timing, or after it (`recheck_calls`) with recheck_outside_exclusive."""
        self.timing_watch = watched_entry, timing_ops = timing_entry(self.entry, integ)
        # the timing's op counter is read after the timing's calls: checked with the rest (child/instances.py)
        self.integrity.instances.register("timing op counter", timing_ops, pinned=("ops",))
        t = time.perf_counter()
        try:
            # one call mark per timed shape, after the correctness trials' (Job.call_bounds' order)
            self.timings = time_submission(self.task, self.job, watched_entry, self.adapter, self.held,
                                           on_shape=lambda k: _MARKS_BEGIN(self.marks, len(self.job.trials) + k),
                                           phases=self.phases)
        except BaseException as e:  # noqa: BLE001
            _MARKS_END(self.marks)
            return self.failed_stretch(e, "while timing", timing_ops, trials=tuple(self.outcomes))
        _MARKS_END(self.marks)
        self.phases["timing"] = time.perf_counter() - t
        return ChildRun.verdict(self, "while timing", timing_ops, trials=tuple(self.outcomes), timings=self.timings)

    def recheck_calls(self) -> int | None:
        """Each timed shape's recheck after the exclusive stage (TimingConfig.recheck_outside_exclusive): the
        same calls, on the same entry as watched in the timing, with the same outputs for the checker
        (child/timing.recheck_timed). Each call has its own call mark, after the timed shapes' (Job.call_bounds
        has one per recheck there: a later call's bound, sandbox/deadlines.py), so a recheck that hangs is killed
        at its own deadline, and judged from the checkpoint before the timing as a kill in the timing is."""
        watched_entry, timing_ops = self.timing_watch
        first = len(self.job.trials) + len(self.job.timing_trials)

        @contextlib.contextmanager
        def call_mark(k):
            _MARKS_BEGIN(self.marks, first + k)
            yield
            _MARKS_END(self.marks)

        t = time.perf_counter()
        try:
            self.timings = recheck_timed(self.task, self.job, watched_entry, self.held, self.timings,
                                         call_mark=call_mark, phases=self.phases)
        except BaseException as e:  # noqa: BLE001
            _MARKS_END(self.marks)
            # "while timing" as when the recheck runs inside it: the record reads the same either way
            return self.failed_stretch(e, "while timing", timing_ops, trials=tuple(self.outcomes))
        self.phases["recheck"] = time.perf_counter() - t
        return ChildRun.verdict(self, "while timing", timing_ops, trials=tuple(self.outcomes), timings=self.timings)

    def write_outputs(self) -> int | None:
        """Writes the outputs held for the checker (child/outputs.py), outside both of the GPU's lanes."""
        try:
            self.phases["outputs_write"] = _HELD_WRITE(self.held)
        except BaseException as e:  # noqa: BLE001 - a file over the size limit, a full scratch
            return self.fail(self.classify(e, "while writing the outputs for the checker"),
                             trials=tuple(self.outcomes), timings=self.timings)
        self.phases.update(_HELD_WRITE_PHASES(self.held))
        return None

    def wrap_up(self) -> int:
        """The submission's leftovers collected under watch, a last check, the outputs written, and the ok
        report."""
        timings = self.timings
        leftovers = integ.watching()        # their finalizers run watched, the op recorders included
        with leftovers:
            self.buffers.clear()            # the inputs the submission saw (it may have hooked their release)
            gc.collect()
        done = ChildRun.verdict(self, "after the last call", leftovers, trials=tuple(self.outcomes), timings=timings)
        if done is not None:
            return done
        # last: after the lanes, and after the submission's last code (its finalizers, just collected)
        done = ChildRun.write_outputs(self)
        if done is not None:
            return done
        notes = "; ".join(sorted(self.adapter.log.notes))
        return ChildRun.finish(self, Status.OK, notes, trials=tuple(self.outcomes), timings=timings,
                           launched=compile_modes.launched_specs(self.adapter))
