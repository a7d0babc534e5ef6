"""What the parent learned of one sandboxed child's run: `ChildOutcome`, made by process.SandboxedChild.wait
(and by held.HeldChild.resume_for_files). Its own module so that held.py can name it without importing
process.py, which imports held.py."""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class ChildOutcome:
    returncode: int | None
    signal: str | None
    timed_out: bool
    wall_s: float
    stdout_tail: str
    stderr_tail: str
    output_bytes: int                   # total bytes the child wrote to stdout+stderr
    layers: tuple[str, ...]
    limits_hit: tuple[str, ...] = ()    # "memory", "output", "scratch_quota", "pids"
    memory_peak_bytes: int | None = None
    pids_peak: int | None = None
    forks_refused: int = 0
    removed_from_scratch: int = 0       # symlinks / special files the sanitizer removed
    stage_timeout: str | None = None    # "import": killed at the import's stage deadline (SandboxConfig.import_s)
    #                                     "call": at a call's (sandbox/deadlines.py); stage_detail names it
    stage_detail: str | None = None
    # at a call's deadline: (the call's position in Job.call_bounds, its bound, the seconds it had run when
    # the parent killed it: at least the bound), from the parent's clock (deadlines.CallWatch.overrun)
    stage_overrun: tuple[int, float, float] | None = None
    # wait(hold=True) only: the child was stopped, not ended (its hold marker, or overdue at a call's deadline);
    # returncode is None and the SandboxedChild's `held` is its HeldChild (sandbox/held.py)
    held: bool = False
