"""The disk one evaluation may use, and how it is shared between its children (issue 32, L3).

What a kernel evaluation needs: the child writes each correctness trial's output as a tensor file into its
scratch directory's outputs/ (child/outputs.py), plus the job, the source and the DSL's compile caches
(Triton's cache, TileLang's tmp: megabytes). Measured over the project's tasks (2026-12-05, the trials
engine/trials.make_trials draws, each output's numel x dtype size computed with torch's FakeTensorMode):
the largest cuda evaluation writes 4.25 GiB of outputs (BiasGELU-v0: 16 trials, the largest 512 MiB), the
next 3.3 GiB (GELU-v0); the largest cpu one 1.7 MiB. SandboxConfig.scratch_quota_bytes, 6 GiB by default, is
that with room for the caches; no single file may pass RLIMIT_FSIZE (SandboxConfig.fsize_bytes, 1 GiB).

The quota is the evaluation's, not each child's: on the cpu backend a Triton submission's compile probe
(probe.py) imports and runs the submission too, as a second child in its own directory, and a follow-up
probe may run a third. `split(total)` gives each probe a share (PROBE_DISK_BYTES, at most a quarter of the
total: it compiles, it writes no outputs) and the submission's child the rest, so the three together stay
within the total. A probe over its share is the submission's output_too_large like the child's own
(launch.Launcher folds it into the outcome), never an inconclusive probe and an ok score.

The scratch directory is watched once a second while the child runs and once more after it exited
(process.SandboxedChild.wait): a child that fills its quota and exits at once is caught too. Between two
looks a child may write past the quota (each file under RLIMIT_FSIZE); the host's free disk must allow for
that burst (a tmpfs scratch with size= would bound it hard, at the cost of RAM: not done).
"""
from __future__ import annotations

import dataclasses

PROBE_DISK_BYTES = 512 << 20


def split(total: int | None) -> tuple[int | None, int | None]:
    """(the submission's child's quota, each compile probe's) out of `total` (None: no quota)."""
    if total is None:
        return None, None
    probe = min(PROBE_DISK_BYTES, total // 4)
    child = total - 2 * probe if probe == PROBE_DISK_BYTES else 2 * probe   # probe_quota(child) == probe
    return child, probe


def probe_quota(child_quota: int | None) -> int | None:
    """A probe's share, from the child's (what split gave it): split(total)[1] for the same total."""
    if child_quota is None:
        return None
    return min(PROBE_DISK_BYTES, child_quota // 2)


def child_sandbox(sandbox, with_probe: bool):
    """The submission child's sandbox: the whole quota, or what the probes leave of it."""
    if not with_probe:
        return sandbox
    return dataclasses.replace(sandbox, scratch_quota_bytes=split(sandbox.scratch_quota_bytes)[0])


def probe_sandbox(child_sandbox_):
    """A compile probe's sandbox, from the child's (child_sandbox(..., with_probe=True))."""
    return dataclasses.replace(child_sandbox_, scratch_quota_bytes=probe_quota(child_sandbox_.scratch_quota_bytes))
