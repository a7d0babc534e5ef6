"""The disk one evaluation may use, derived per job from what its honest outputs need, and how it is shared
between its children (issue 32, L3; per job since the H100 run of 2026-12-06).

What a kernel evaluation needs: the child writes each correctness trial's output, and on cuda each timed
shape's recheck output, as a tensor file into its scratch directory's outputs/ (child/outputs.py), plus the
job, the source and the DSL's compile caches (Triton's cache, TileLang's tmp: megabytes). The configured
SandboxConfig.scratch_quota_bytes (6 GiB) and fsize_bytes (1 GiB) were measured over the tasks of
2026-12-05 (the largest cuda evaluation then: BiasGELU-v0, 4.25 GiB of outputs over 16 trials, the largest
512 MiB). Issue 34's tasks exceed both with honest outputs: CrossEntropyBackward's [T, V] gradients over
its trials and rechecks (quota), MoeTokenPermute's [T x K, H] rows (1.5 GiB in one file: EFBIG).

So the limits are derived per job, here on the trusted side before the child starts (`job_limits`, from
launch.child_spec), from each output file's expected bytes (output_sizes.py says how they are computed and
why that is sound for every task, imported ones included):
  quota (the child's) = max(its configured share, OUTPUT_MARGIN x the outputs' bytes + the largest output
                        once more + HEADER_BYTES per file + CACHE_ALLOWANCE)
  fsize               = max(configured fsize_bytes, the largest output + HEADER_BYTES)
OUTPUT_MARGIN (10%) is file-system rounding and metadata (under 1% for files this large on ext4, xfs and
tmpfs); the largest output once more is room for a file system that allocates ahead of the file being
written (xfs's speculative preallocation, seen in st_blocks by the watcher while the child writes); the
child writes one file at a time. CACHE_ALLOWANCE (1 GiB, or half the configured share where that is smaller:
a configuration that scales the disk down, as tests do, scales the caches' room with it) is the compile
caches'. A submission can still write no more than that: the honest outputs, the margin and the caches'
allowance. Where the cheap bound
(min_bytes) already fits the configured limits, they stand and no task code runs (output_sizes.need with
exact=False: most jobs); where an output's size cannot be computed at all, the configured limits stand and
a warning says so (output_sizes.py). Over every built-in task's cuda job (scripts/disk_need.py: the default
EvalConfig, 2 seeds per shape, every shape timed; 2026-12-06), counting the rechecks the old figure left out:
the largest total is MoeTokenPermute-v0's 23.0 GiB in 24 files (its quota 28.1 GiB), then
CrossEntropyBackward-v0's 14.6 GiB (largest 0.98 GiB; quota 18.1 GiB) and RowArgsort-v0's 12.3 GiB; the
largest single output is MoeTokenPermute-v0's 1.75 GiB ([16384 x 8, 7168] bf16; its file limit 1.75 GiB +
64 KiB). Five cuda jobs' outputs exceed the configured 6 GiB (those three, IndexAdd-v0 6.4 GiB, BiasGELU-v2
6.3 GiB); with the margin and the allowance eleven get a derived quota. The largest cpu job writes 2 MiB:
the configured limits stand.

The host must have the room: a job whose derived quota exceeds the configured one is checked against the
scratch file system's free space before its child starts (`ensure_free`): less than its honest outputs need
is ScratchSpaceError (a HarnessError: the caller's machine, not the submission; in a batch that request's
protocol_error record, never cached), never an obscure ENOSPC inside the child blamed on the kernel. Free
space between the honest need and the quota is allowed: a hostile writer there meets ENOSPC before its
quota (a failed evaluation all the same). Concurrent jobs on one scratch root reserve their disk from each
other before their children start (sandbox/disk_ledger.py, engine/evaluation.py): a job that does not fit
beside the others' reservations waits for them, up to Placement.disk_wait_s, instead of two big jobs both
passing this check and one of them dying of ENOSPC mid-write.

The quota is the evaluation's, not each child's: on the cpu backend a Triton submission's compile probe
(probe.py) imports and runs the submission too, as a second child in its own directory, and a follow-up
probe may run a third. `split(total)` gives each probe a share (PROBE_DISK_BYTES, at most a quarter of the
total: it compiles, it writes no outputs) and the submission's child the rest, so the three together stay
within the total. A derived quota raises the child's share only (the probes write no outputs): from it
`probe_quota` gives each probe PROBE_DISK_BYTES, its share of any configured total of 2 GiB or more (the
default's 512 MiB; below that a probe's share is half the child's derived quota, at most 512 MiB). A
probe over its share is the submission's output_too_large like the child's own (launch.Launcher folds it
into the outcome), never an inconclusive probe and an ok score.

The scratch directory is watched once a second while the child runs and once more after it exited
(process.SandboxedChild.wait): a child that fills its quota and exits at once is caught too. Between two
looks a child may write past the quota (each file under RLIMIT_FSIZE); the host's free disk must allow for
that burst (a tmpfs scratch with size= would bound it hard, at the cost of RAM: not done).
"""
from __future__ import annotations

import dataclasses
import logging
import math
import os
import shutil
import tempfile

from kernelgym_gap.core.errors import HarnessError
from kernelgym_gap.sandbox import output_sizes

log = logging.getLogger(__name__)

PROBE_DISK_BYTES = 512 << 20
OUTPUT_MARGIN = 1.10              # file-system rounding and metadata on the outputs' bytes
HEADER_BYTES = 64 << 10           # per output file: its header (at most MAX_HEADER + 9 bytes) and a block
CACHE_ALLOWANCE = 1 << 30         # the DSLs' compile caches and the job's own files


class ScratchSpaceError(HarnessError):
    """The scratch file system has less free space than the job's honest outputs need."""


@dataclasses.dataclass(frozen=True)
class JobDisk:
    """One job's disk limits: the child's quota (None: no quota), its largest file, and what they were
    derived from (None: the configured limits, unchanged)."""
    quota: int | None
    fsize: int
    need: output_sizes.OutputNeed | None = None

    @property
    def derived(self) -> bool:
        return self.need is not None

    def honest_bytes(self) -> int:
        """What the job's honest outputs take on disk (0 when not derived)."""
        return 0 if self.need is None else self.need.total + self.need.count * HEADER_BYTES


def allowance(share: int | None) -> int:
    """The caches' room in a derived quota: CACHE_ALLOWANCE, or half the configured share where that is
    smaller (a configuration that scales the disk down scales the caches' room with it)."""
    return CACHE_ALLOWANCE if share is None else min(CACHE_ALLOWANCE, share // 2)


def wanted(need: output_sizes.OutputNeed, share: int | None) -> tuple[int, int]:
    """(quota, largest file) that outputs of `need` ask for (the formulas in the docstring), the child's
    configured share being `share`."""
    quota = (math.ceil(need.total * OUTPUT_MARGIN) + need.largest + need.count * HEADER_BYTES
             + allowance(share))
    return quota, need.largest + HEADER_BYTES


def job_limits(sandbox, task, cases, with_probe: bool) -> JobDisk:
    """The child's quota and largest file for a job of `task` whose child writes one output per (shape,
    dtype) of `cases` (engine/trials.output_cases); `sandbox` holds the configured ones. with_probe: the
    compile probes take their shares of the configured total first (split)."""
    quota = split(sandbox.scratch_quota_bytes)[0] if with_probe else sandbox.scratch_quota_bytes
    configured = JobDisk(quota=quota, fsize=sandbox.fsize_bytes)
    if not cases:
        return configured

    def fits(need) -> bool:
        q, f = wanted(need, quota)
        return (quota is None or q <= quota) and f <= sandbox.fsize_bytes

    cheap = output_sizes.need(task, cases, exact=False)
    if cheap is not None and fits(cheap):
        return configured           # the exact need is at most the bound's: the configured limits hold it
    need = output_sizes.need(task, cases)
    if need is None:
        log.warning("%s: the outputs' sizes cannot be computed (output_sizes.py): the configured disk limits "
                    "stand (quota %s B, largest file %d B)", task.id, quota, sandbox.fsize_bytes)
        return configured
    if fits(need):
        return configured
    q, f = wanted(need, quota)
    return JobDisk(quota=None if quota is None else max(quota, q), fsize=max(sandbox.fsize_bytes, f), need=need)


def apply(sandbox, limits: JobDisk):
    """`sandbox` with the job's limits (the submission's child's)."""
    return dataclasses.replace(sandbox, scratch_quota_bytes=limits.quota, fsize_bytes=limits.fsize)


def ensure_free(scratch_root: str | None, limits: JobDisk, free: int | None = None) -> None:
    """Raises ScratchSpaceError where the scratch file system (scratch_root, else the system temp) has less
    free space (`free`, else statvfs's) than a derived job's honest outputs need; configured limits are not
    checked here (disk_ledger.reserve reserves their quota)."""
    if not limits.derived:
        return
    root = scratch_root or tempfile.gettempdir()
    free = shutil.disk_usage(root).free if free is None else free
    need = limits.honest_bytes()
    if free < need:
        quota = "none" if limits.quota is None else f"{limits.quota / 2**30:.2f} GiB"
        raise ScratchSpaceError(
            f"the scratch file system at {os.path.abspath(root)} has {free / 2**30:.2f} GiB free; this job's "
            f"honest outputs need {need / 2**30:.2f} GiB ({limits.need.count} files, the largest "
            f"{limits.need.largest / 2**30:.2f} GiB) and its quota is {quota}: free space "
            "there or point the scratch root (Placement.scratch_root) at a larger file system")


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


def probe_sandbox(child_sandbox_):
    """A compile probe's sandbox, from the child's (launch.child_spec's, with the probes' shares taken)."""
    return dataclasses.replace(child_sandbox_, scratch_quota_bytes=probe_quota(child_sandbox_.scratch_quota_bytes))
