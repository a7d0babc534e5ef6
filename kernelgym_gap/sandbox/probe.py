"""The cpu backend's Triton compile probe. The interpreter runs kernels that cannot compile for a GPU, so
a second child, without the interpreter, compiles for sm_90 every specialization the submission's entry
point launches, while the main child runs; a follow-up child compiles any specialization the main child's
interpreter launched that the first probe did not (`CompileProbe.cover`). Each runs in its own directory
beside the scratch, as its own uid, from the gate's text of the source."""
from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import threading
from pathlib import Path

from kernelgym_gap.sandbox.child_io import backend_env, cold_child, read_report
from kernelgym_gap.sandbox.deadlines import call_bounds
from kernelgym_gap.core.errors import ProtocolError
from kernelgym_gap.sandbox.prestart import clear_imports
from kernelgym_gap.core.record import ChildReport, Job, Trial
from kernelgym_gap.sandbox.process import ChildOutcome, SandboxConfig
from kernelgym_gap.core.status import Status


def probe_env() -> dict[str, str]:
    """The compile probe's variables: the cuda backend's (no interpreter), with the parent's PATH (ptxas)."""
    return backend_env("cuda") | {"PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin")}


class CompileProbe(threading.Thread):
    """The cpu backend's Triton compile probe, run beside the main child (`pre`: a pre-started one)."""

    MAX_SPECS = 64      # specializations one follow-up compiles (`cover`)

    def __init__(self, job: Job, directory: Path, source: str, sandbox: SandboxConfig, env: dict[str, str],
                 pre=None):
        super().__init__(daemon=True)
        self.job = _job_in(job, directory, source, sandbox)
        self.directory, self.source, self.sandbox, self.env, self.pre = directory, source, sandbox, env, pre
        self.outcome: ChildOutcome | None = None
        self.report: ChildReport | None = None
        self.wall_s = 0.0
        self.specs_wall_s: float | None = None
        self.specs_outcome: ChildOutcome | None = None
        self.inconclusive: str | None = None

    def run(self):
        path = _job_file(self.job, self.directory)
        if self.pre is not None and self.pre.send_line(path):
            self.outcome = self.pre.wait(self.job.call_bounds)
        else:
            if self.pre is not None:        # it died while it waited: what its imports wrote goes too
                self.pre.kill()
                clear_imports(self.directory)
            self.outcome = cold_child(path, self.directory, self.env, self.sandbox, self.job.call_bounds)
        self.wall_s = self.outcome.wall_s

    def over_disk_quota(self) -> bool:
        """Whether this probe or its follow-up passed its share of the evaluation's disk (sandbox/disk.py):
        the submission's output_too_large, not an inconclusive probe."""
        return any(o is not None and "scratch_quota" in o.limits_hit for o in (self.outcome, self.specs_outcome))

    def compile_error(self) -> str | None:
        """The probe's compile error, if it found one; None when it passed or could not tell (then
        `inconclusive` says why)."""
        self.join()
        self.report, failure, self.inconclusive = _verdict(self.job, self.outcome)
        return failure

    def cover(self, launched, scratch_root: str | None) -> str | None:
        """The specializations the main child's interpreter launched that this probe did not compile (its
        entry point behaved differently without the interpreter, or raised first) compiled by a second,
        cold probe child that calls no entry point (runner._compile_specs). It runs in a fresh directory
        outside the main child's scratch, as a fresh uid, from the gate's text of the source: nothing the
        main child did reaches it. Returns its compile error, if any; otherwise `inconclusive` says
        what, if anything, it could still not compile."""
        compiled = {spec.key() for spec in self.report.launched} if self.report is not None else set()
        missing = [spec for spec in launched if spec.key() not in compiled]
        if not missing:
            return None
        directory = Path(tempfile.mkdtemp(prefix="kgg-probe-", dir=scratch_root))
        try:
            job = _job_in(dataclasses.replace(self.job, mode="compile_specs", trials=(),
                                              specs=tuple(missing[:self.MAX_SPECS])), directory, self.source,
                          self.sandbox)
            outcome = cold_child(_job_file(job, directory), directory, self.env, self.sandbox, job.call_bounds)
            self.specs_wall_s, self.specs_outcome = outcome.wall_s, outcome
            _, failure, self.inconclusive = _verdict(job, outcome)
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        if failure is None and self.inconclusive is None and len(missing) > self.MAX_SPECS:
            self.inconclusive = f"{len(missing) - self.MAX_SPECS} more launched specializations not compiled"
        return failure


def _job_in(job: Job, directory: Path, source: str, sandbox: SandboxConfig) -> Job:
    """A probe's job in its own directory, with its own copy of the submission and its calls' deadlines."""
    (directory / "submission.py").write_text(source)
    job = dataclasses.replace(job, source_file=str(directory / "submission.py"),
                              report_file=str(directory / "report.json"), outputs_dir=str(directory))
    return dataclasses.replace(job, call_bounds=call_bounds(job, sandbox))


def _job_file(job: Job, directory: Path) -> str:
    path = directory / "job.json"
    path.write_text(job.to_json())
    return str(path)


def _verdict(job: Job, outcome: ChildOutcome):
    """(the probe's report or None, its compile error or None, why it could not tell or None)."""
    if outcome.stage_timeout is not None:
        what = outcome.stage_detail or f"its {outcome.stage_timeout} stage"
        return None, None, f"it was killed at a stage deadline: {what}"
    try:
        report = read_report(Path(job.report_file), outcome)
    except (OSError, ProtocolError) as e:
        why = str(e).strip().splitlines() or [type(e).__name__]
        return None, None, f"it gave no report ({'; '.join([why[0]] + why[1:][-2:])})"
    if report.status is Status.COMPILE_ERROR:
        # Only what the probe knows: the kernel does not compile for sm_90 (whether the interpreter runs it
        # is the main child's business, which may not have got that far).
        return report, f"compile probe (Triton for the GPU, sm_90): {report.message}", None
    if report.status is not Status.OK:
        return report, None, f"it ended in {report.status.value}: {report.message[:300]}"
    if report.inconclusive is not None:
        return report, None, report.inconclusive[:300]
    return report, None, None


def probe_trials(trials: tuple[Trial, ...]) -> tuple[Trial, ...]:
    """The first trial of each (shape, dtype): a specialization needs compiling once."""
    seen, out = set(), []
    for tr in trials:
        if (tr.shape, tr.dtype) not in seen:
            seen.add((tr.shape, tr.dtype))
            out.append(tr)
    return tuple(out)
