"""The parent's side of a submission's child, behind one call.

`Launcher(spec, pool).run(job, source)` starts the child that runs `job` (a pre-started one from `pool` when
one waits for exactly this spec, else a cold one), runs the cpu backend's compile probe beside it where the
spec asks for one, and reads back what the child reported: one `ChildResult`. The engine never branches on
cold / pre-started / probe; a scheduler that runs stages on lanes only needs this object.

"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import stat
import tempfile
import time
from pathlib import Path

from kernelgym_gap.core.config import EvalConfig
from kernelgym_gap.core.dsls import needs_compile_probe
from kernelgym_gap.core.errors import ProtocolError
from kernelgym_gap.core.placement import Placement
from kernelgym_gap.core.record import ChildReport, Job
from kernelgym_gap.core.status import Status
from kernelgym_gap.sandbox.child_io import backend_env, cold_child, cold_child_held, read_report
from kernelgym_gap.sandbox import disk
from kernelgym_gap.sandbox.deadlines import call_bounds
from kernelgym_gap.sandbox.held import HeldChild
from kernelgym_gap.sandbox.exposure import check_task_readable
from kernelgym_gap.sandbox.prestart import ChildSpec
from kernelgym_gap.sandbox.probe import CompileProbe, probe_env, probe_trials
from kernelgym_gap.sandbox.process import ChildOutcome, ChildSandbox


def child_spec(task, dsl: str, backend: str, config: EvalConfig, placement: Placement | None = None,
               outputs=(), warm_cases=()) -> ChildSpec:
    """What the submission's child is started with (prestart.ChildSpec): its sandbox and environment, where
    `placement` (default Placement()) puts it: its GPU, its lanes, its scratch root. The child reads its task
    from the registry's directory: one outside the project is bound too. `outputs`: the (shape, dtype) of
    each output file the job's child writes (engine/trials.output_cases), from which its disk limits are
    derived (disk.job_limits); empty: the configured limits. `warm_cases`: the timed (shape, dtype) cases a
    pre-started cuda child warms the task's library on while it waits (engine/trials.warm_cases; empty: none)."""
    placement = placement or Placement()
    sandbox = ChildSandbox(**{f.name: getattr(config.sandbox, f.name) for f in dataclasses.fields(config.sandbox)},
                           lane_dir=placement.lane_dir)
    # the import's deadline of this task's kind of entry point (a module class is built within it)
    import_s = config.sandbox.import_deadline_s(task.module_entry_point is not None)
    sandbox = dataclasses.replace(sandbox, import_s=import_s)
    tasks_dir = task.tasks_dir
    # a user's task directory the sandbox's uid cannot read: refused here, before a child fails on it
    check_task_readable(task, sandbox)
    if tasks_dir is not None and tasks_dir not in sandbox.extra_ro_paths:
        sandbox = dataclasses.replace(sandbox, extra_ro_paths=(*sandbox.extra_ro_paths, tasks_dir))
    if backend == "cuda":
        sandbox = dataclasses.replace(sandbox, gpu_devices=(placement.gpu_index,), address_space_bytes=None)
    # the interpreter accepts Triton kernels that cannot compile for a GPU: on the cpu backend a probe
    # compiles them for sm_90 (probe.py); the DSL's adapter says whether it needs one
    probe = tuple(sorted(probe_env().items())) if needs_compile_probe(dsl, backend) else None
    # the evaluation's disk quota, shared with the probes when there are any, and raised with the largest
    # file to what this job's honest outputs need (sandbox/disk.py)
    limits = disk.job_limits(sandbox, task, outputs, with_probe=probe is not None)
    warm = json.dumps({"task": task.id, "tasks_dir": task.tasks_dir, "distribution": task.timed_distribution,
                       "cases": [[list(shape), dtype] for shape, dtype in warm_cases]}) \
        if warm_cases and backend == "cuda" else None
    return ChildSpec(dsl=dsl, backend=backend, sandbox=disk.apply(sandbox, limits),
                     env=tuple(sorted(backend_env(backend).items())), scratch_root=placement.scratch_root,
                     probe_env=probe, disk=limits, warm=warm)


@dataclasses.dataclass(frozen=True)
class ChildResult:
    """Everything the parent learned from one submission's child (and its compile probe, if any)."""
    outcome: ChildOutcome
    report: ChildReport | None          # None: no readable report (report_error says why)
    report_error: str | None = None
    probe_error: str | None = None      # a compile error the probe found (the kernel does not build for sm_90)
    cover_error: str | None = None      # one the follow-up probe found (launched specializations it missed)
    probe_inconclusive: str | None = None
    latency: dict[str, float] = dataclasses.field(default_factory=dict)
    # Job.outputs_by_handle: the child stopped, not ended (outcome.held): the caller kills it (HeldChild.kill)
    # or has it write its files (resume_for_files); Launcher.close kills it whatever happened
    held: HeldChild | None = None


def after_report_s(report: Path, ended: float, outcome: ChildOutcome) -> float | None:
    """How long the child took from its report to its end as the parent saw it (its exit: the process's
    teardown, on cuda its CUDA context's; the sandbox's end): `ended` (time.time() once the wait returned) less
    the report's mtime, within [0, the child's wall]. A diagnostic only (the child sets the mtime it likes);
    None for a held child (stopped, not ended) or without a regular report file."""
    if outcome.held:
        return None
    try:
        st = os.lstat(report)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    return round(min(outcome.wall_s, max(0.0, ended - st.st_mtime)), 3)


class Launcher:
    """One evaluation's child: pre-started (from `pool`, when one waits for exactly `spec`) or cold, with the
    compile probe beside it where `spec` has one. `scratch` is the child's directory: the job's files go
    there before `run`. Single use; `close` removes the directories unless asked to keep them."""

    def __init__(self, spec, pool=None):
        self.spec, self.pool = spec, pool
        self.pre = pool.take(spec) if pool is not None else None
        self.scratch = (self.pre.scratch if self.pre is not None
                        else Path(tempfile.mkdtemp(prefix="kgg-eval-", dir=spec.scratch_root)))
        (self.scratch / "outputs").mkdir(exist_ok=True)
        self.probe_dir: Path | None = None
        self.held: HeldChild | None = None

    def run(self, job: Job, source: str) -> ChildResult:
        # each call's stage deadline, computed here (the child only says which call runs)
        job = dataclasses.replace(job, call_bounds=call_bounds(job, self.spec.sandbox))
        probe = self._start_probe(job, source)
        job_path = self.scratch / "job.json"
        job_path.write_text(job.to_json())
        hold = job.outputs_by_handle
        if self.pool is not None:
            # the next child's process started beside this one, given its task as this one ends (the pool's
            # start_early: Placement.prestart_early; else nothing)
            self.pool.early(self.spec)
        outcome = self.pre.run(job_path, job.call_bounds, hold=hold) if self.pre is not None else None
        if outcome is not None:
            self.held = self.pre.child.held
        else:
            sandbox = self.spec.sandbox
            if self.pre is not None:        # it died while it waited: a cold child in the same scratch, as its uid
                self.pre.reset_scratch()
                sandbox = dataclasses.replace(sandbox, uid=self.pre.child.uid)
            if hold:
                outcome, self.held = cold_child_held(job_path, self.scratch, dict(self.spec.env), sandbox,
                                                     job.call_bounds)
            else:
                outcome = cold_child(job_path, self.scratch, dict(self.spec.env), sandbox, job.call_bounds)
        ended = time.time()
        if self.pool is not None:
            # the next child's imports overlap this evaluation's check (for the owner's next evaluation where
            # it names one: Placement.prestart_for_next)
            self.pool.refill_after(self.spec)
        latency = {"child": outcome.wall_s}
        after = after_report_s(Path(job.report_file), ended, outcome)
        if after is not None:
            latency["child_after_report"] = after
        probe_error = probe.compile_error() if probe is not None else None
        if probe is not None:
            latency["compile_probe"] = probe.wall_s
        try:
            report, report_error = read_report(Path(job.report_file), outcome), None
        except ProtocolError as e:
            report, report_error = None, str(e)
        cover_error = None
        if probe is not None and probe_error is None and report is not None and report.status is Status.OK:
            cover_error = probe.cover(report.launched, self.spec.scratch_root)
            if probe.specs_wall_s is not None:
                latency["compile_probe_specs"] = probe.specs_wall_s
        if probe is not None and probe.over_disk_quota() and "scratch_quota" not in outcome.limits_hit:
            # a probe is the same submission: its disk counts against the evaluation's quota (disk.py)
            outcome = dataclasses.replace(outcome, limits_hit=(*outcome.limits_hit, "scratch_quota"))
        return ChildResult(outcome=outcome, report=report, report_error=report_error, probe_error=probe_error,
                           cover_error=cover_error, probe_inconclusive=probe.inconclusive if probe is not None else None,
                           latency=latency, held=self.held)

    def _start_probe(self, job: Job, source: str):
        """The cpu backend's compile probe, started beside the main child: its own directory and uid (the
        spec's sandbox draws a fresh one), so the main child, running at the same time, can neither swap the
        probe's copy of the source nor write its report."""
        if self.spec.probe_env is None:
            return None
        self.probe_dir = (self.pre.probe_dir if self.pre is not None
                          else Path(tempfile.mkdtemp(prefix="kgg-probe-", dir=self.spec.scratch_root)))
        probe = CompileProbe(dataclasses.replace(job, mode="compile_probe", trials=probe_trials(job.trials)),
                             self.probe_dir, source, disk.probe_sandbox(self.spec.sandbox), dict(self.spec.probe_env),
                             pre=self.pre.probe if self.pre is not None else None)
        probe.start()
        return probe

    def close(self, keep: bool = False) -> None:
        if self.held is not None:
            self.held.kill()                # a held child the engine forgot (a no-op once it ended)
        if self.pre is not None:
            self.pre.kill()                 # a no-op once they ran; ends them if something raised first
        if not keep:
            for d in (self.scratch, self.probe_dir):
                if d is not None:
                    shutil.rmtree(d, ignore_errors=True)
