"""A trial's tolerance where it follows the reference's own output (issue 36), applied by the checker.

Two rules, each off unless the task asks for it:
- `Tolerance.atol_per_rms`: atol grows with the root-mean-square of this trial's float64 reference output, so a
  tolerance is sized at each shape's own output scale. One absolute number sized at the largest cuda shape
  and applied at the cpu shape let a constant pass (KernelBench level2 56_Matmul_Sigmoid_Sum: atol 92 against
  outputs of ~64); sized at the cpu shape it would fail correct kernels at the cuda shapes, whose outputs are
  larger.
- `TaskSpec.input_guard` = g > 0: no constant output may pass. Where the best of the constants a cheat would
  write (0, the reference's mean, its mid-range) misses the reference by less than g times the allowance,
  the allowance is narrowed until it misses by g. That is the case only where the reference varies less
  than its tolerance on this trial (an output that barely depends on the input, e.g. a sum of many
  saturated sigmoids at a large hidden size), which the importer's audit cannot see at the cuda shapes it
  does not run. A correct kernel then has to be within 1/g of the output's own spread.

Nothing here runs submitted code: inputs are the reference output and the allowance the checker computed."""
from __future__ import annotations

import torch

from kernelgym_gap.core.task import TaskSpec, Tolerance


def rms(r: torch.Tensor, finite: torch.Tensor) -> float:
    """The root-mean-square of the finite elements of a (float64) reference output; 0 when there are none."""
    vals = r[finite]
    return float(vals.pow(2).mean().sqrt()) if vals.numel() else 0.0


def constant_miss(r: torch.Tensor, finite: torch.Tensor, allowed: torch.Tensor) -> tuple[float, float]:
    """(how many allowances the best constant output misses the reference by at worst, that constant), over
    the constants 0, mean and mid-range (0 alone for a one-element output); (inf, nan) when the reference has
    no finite element."""
    vals = r[finite]
    if not vals.numel():
        return float("inf"), float("nan")
    a = allowed[finite] if isinstance(allowed, torch.Tensor) and allowed.dim() else allowed
    best = (float("inf"), float("nan"))
    # A one-element output (a scalar loss) is its own mean and mid-range: those are this trial's answer, not
    # a constant an input-ignoring kernel could write, and taking them narrowed every scalar output's
    # allowance to 0 (KernelBench level1's losses were refused as "errs by inf of the allowance"). Whether a
    # scalar varies with the input is the importer's audit's question (another seed's output), not this one's.
    candidates = (0.0,) if vals.numel() == 1 else (0.0, float(vals.mean()), (float(vals.max()) + float(vals.min())) / 2)
    for c in candidates:
        ratio = (vals - c).abs() / a if isinstance(a, torch.Tensor) else (vals - c).abs() / max(float(a), 1e-300)
        worst = float(ratio.max())
        if worst < best[0]:
            best = (worst, c)
    return best


def allowance(task: TaskSpec, tol: Tolerance, r: torch.Tensor, finite: torch.Tensor, allowed,
              limit: str) -> tuple[torch.Tensor, str]:
    """The checker's per-element allowance (atol + rtol |expected|) with the task's rules above applied, and
    the text a mismatch message names it by. Unchanged for a task that sets neither."""
    if not tol.atol_per_rms and not task.input_guard:
        return allowed, limit
    scale = rms(r, finite)
    if tol.atol_per_rms:
        extra = tol.atol_per_rms * scale
        allowed = allowed + extra
        limit = (f"atol={tol.atol} + {tol.atol_per_rms} x rms(expected) [= {extra:.3g} here] + rtol={tol.rtol} "
                 f"x |expected|")
    if task.input_guard:
        if not isinstance(allowed, torch.Tensor):
            allowed = torch.full_like(r, float(allowed))
        miss, _ = constant_miss(r, finite, allowed)
        if miss < task.input_guard:
            factor = miss / task.input_guard
            allowed = allowed * factor
            limit += (f", narrowed x{factor:.3g} on this trial (the reference varies less than its tolerance: "
                      f"every constant output must miss it by {task.input_guard:g}x)")
    return allowed, limit
