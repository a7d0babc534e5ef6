"""KernelBench's own check inside the trusted checker (judge/checker.py): torch.allclose(atol=rtol=1e-2) of the
raw output against the task's reference computed in the trial's own dtype. It is the record's
`kernelbench_allclose` (reported: core/terms.py, the web page, scripts/gap_study.py), and part of the verdict of
an imported KernelBench problem in the dtypes it names (`TaskSpec.kernelbench_check`).

Where it runs (issue 35, 2026-12-06): on the trials of the task's timed distribution only, the inputs
KernelBench's own check runs on (its torch.randn / torch.rand; an imported problem's "as_given"). The stress
distributions are the verdict's alone. Until then it ran on every correctness trial and every recheck, and its
second reference was the largest part of the check on the H100's attention evaluations (`check_allclose`
2.3-6.7 s of 4-16 s). Where the checker's first reference is already that same-dtype reference (the task's
reference runs in the input dtype, or a float64 trial of a task with no separate float64 reference), it is
reused, not computed again."""
from __future__ import annotations

import torch

from kernelgym_gap.core.record import Trial
from kernelgym_gap.core.task import TaskSpec

KERNELBENCH_TOL = 1e-2


def gated(task: TaskSpec, trial: Trial) -> bool:
    """Whether the trial's verdict applies KernelBench's check: an imported problem's dtype, on its own inputs."""
    return trial.distribution == task.timed_distribution and trial.dtype in task.kernelbench_check


def wanted(task: TaskSpec, trial: Trial, flag: bool) -> bool:
    """Whether the check runs on this trial: a trial of the timed distribution whose caller reports the flag
    (`flag`: a correctness trial; not a recheck or an audited output) or whose verdict applies it."""
    return trial.distribution == task.timed_distribution and (flag or gated(task, trial))


def first_is_same_dtype(task: TaskSpec, ins: tuple) -> bool:
    """Whether the checker's first reference (checker._reference) is `task.reference(*ins)` itself: the task's
    reference runs in the input dtype, or every floating input is float64 already (its float64 conversion
    changes nothing) and no `float64_reference` replaces the reference."""
    if not task.reference_in_float64:
        return True
    return task.float64_reference is None and all(
        x.dtype == torch.float64 for x in ins if isinstance(x, torch.Tensor) and x.is_floating_point())


def passes(task: TaskSpec, ins: tuple, out: torch.Tensor, first_ref: torch.Tensor) -> bool:
    """KernelBench's check of `out` (as the child wrote it: no output_view, KernelBench compares raw tensors)
    against the same-dtype reference; `first_ref` (the checker's reference, before any view) where it is that."""
    if first_is_same_dtype(task, ins):
        same_dtype_ref = first_ref
    else:
        with torch.no_grad():
            same_dtype_ref = task.reference(*ins)
    return bool(torch.allclose(out.float(), same_dtype_ref.float(), atol=KERNELBENCH_TOL, rtol=KERNELBENCH_TOL))
