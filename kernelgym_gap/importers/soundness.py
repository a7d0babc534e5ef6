"""The import audit of an imported task (issue 36): its check must not be passable by ignoring the input.

At import (`finish`, inside the sandboxed analysis), on every cpu shape, dtype and distribution:
- degenerate references are refused with the reason, as KernelBench-Verified and robust-kbench filter them:
  outputs all zero, all equal, or at the level of float32 rounding error (a GroupNorm of one channel per
  group: 1e-14 where the float64 result is 0);
- torch's own result in the dtype must pass the check with room (half the allowance): a dtype or
  distribution on which it does not is dropped (the problem's own dtype on its own inputs: refused);
- the input-independence audit (judge/input_audit.py: constants, zeros, the input passed through, the
  reference at another seed) must find nothing: a stress distribution on which a candidate passes is
  dropped, and the problem is refused when one passes on get_inputs()'s own values (what is timed) and no
  other distribution catches it; when that happens only in a dtype other than the problem's own, that dtype
  is dropped instead (its tolerance is too wide to see the input there).
META["input_audit"] states what was tried, on what, and what was dropped and why."""
from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path

import torch

from kernelgym_gap.importers.analysis import ImportRefused, InputIndependent
from kernelgym_gap.importers.runtime import build_task
from kernelgym_gap.importers.tolerance import INPUT_GUARD, rule

OWN_VALUES = "<get_inputs() own values>"   # key of a candidate passing on the timed distribution
MARGIN = 0.5            # torch's own result in a dtype must sit within this share of the allowance
NOISE = 0.1             # float32's error over 10% of the output's rms: the outputs are rounding noise
TIMED = "as_given"
SEED = 20261205


def own_key(dtype: str) -> str:
    """`dropped`'s key of a candidate passing on the timed distribution in `dtype`."""
    return f"{OWN_VALUES}@{dtype}"


@contextlib.contextmanager
def _one_thread():
    """torch on one thread while auditing: on a loaded 2-core host its thread pool made a 1 s audit 30 s."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def degenerate(r: torch.Tensor, r32: torch.Tensor | None) -> str | None:
    """Why a float64 reference output cannot tell a kernel that read its input from one that did not, or
    None. `r32`: the same output computed in float32."""
    if not r.is_floating_point():
        return "every output element is equal" if r.numel() > 1 and bool((r == r.flatten()[0]).all()) else None
    r = r.double()
    finite = r[torch.isfinite(r)]
    if not finite.numel() or bool((finite == 0).all()):
        return "the reference output is all zeros"
    if finite.numel() > 1 and float(finite.max()) == float(finite.min()):
        return f"every output element is equal ({float(finite[0]):.6g})"
    if r32 is not None:
        scale = float(finite.pow(2).mean().sqrt())
        err = float((r32.double() - r).nan_to_num(0.0).pow(2).mean().sqrt())
        if err > NOISE * scale:
            return (f"the outputs are float32 rounding noise (rms {scale:.3g}, float32's own error {err:.3g}): "
                    f"near zero")
    return None


def _allowance(task, dtype: str, r: torch.Tensor) -> torch.Tensor:
    from kernelgym_gap.judge import scaled_tolerance
    tol = task.tolerances[dtype]
    finite = torch.isfinite(r)
    allowed = tol.atol + tol.rtol * r.abs().where(finite, torch.zeros_like(r))
    return scaled_tolerance.allowance(task, tol, r, finite, allowed, "")[0]


def _dtype_error(task, dtype: str, ins: tuple, r: torch.Tensor) -> float:
    """torch's own result in `dtype` against the float64 reference, in shares of the allowance (inf when
    it is not finite where the reference is)."""
    with torch.no_grad():
        out = task.reference(*ins)
    if not out.is_floating_point():
        return 0.0 if torch.equal(out.to(r.dtype), r) else float("inf")
    finite = torch.isfinite(r)
    diff = (out.double() - r.double()).abs().where(finite, torch.zeros_like(r, dtype=torch.float64))
    allowed = _allowance(task, dtype, r.double())
    ratio = torch.where(allowed > 0, diff / allowed.clamp_min(1e-300), diff * float("inf"))
    ratio = ratio.nan_to_num(0.0, posinf=float("inf"))
    return float(ratio.max()) if ratio.numel() else 0.0


def _cell(task, cell, path, given: str, dropped: dict, bad_dtypes: dict) -> None:
    """One (shape, dtype, distribution) of the import audit: degenerate, then torch's own dtype error, then the
    candidates; what fails lands in `dropped` (distribution -> why) or `bad_dtypes`, or is refused."""
    from kernelgym_gap.judge.input_audit import inputs_of, judge_cell, reference64
    where = f"at the cpu shape {list(cell.shape)} ({cell.dtype})"
    ins = inputs_of(task, cell, cell.seed, "cpu")
    r = reference64(task, ins)
    r32 = None
    if r.is_floating_point():
        with torch.no_grad():
            r32 = task.reference(*(x.float() if isinstance(x, torch.Tensor) and x.is_floating_point() else x
                                   for x in ins))
    why = degenerate(r, r32)
    if why and cell.distribution == TIMED:
        raise InputIndependent(f"a degenerate reference on get_inputs()'s own values {where}: {why}; a check against "
                            f"it cannot tell a kernel that reads its input from one that does not")
    if why:
        dropped.setdefault(cell.distribution, f"degenerate reference {where}: {why}")
        return
    err = _dtype_error(task, cell.dtype, ins, r)
    if err > MARGIN:
        what = f"torch in {cell.dtype} errs by {err:.2g} of the allowance {where}"
        if cell.distribution != TIMED:
            dropped.setdefault(cell.distribution, what)
        elif cell.dtype == given:
            raise ImportRefused(f"the problem's own dtype does not pass its check on its own values: {what}")
        else:
            bad_dtypes.setdefault(cell.dtype, what)
        return
    passed, _, _ = judge_cell(task, cell, ins, r, path)
    if passed and cell.distribution == TIMED:
        # On the problem's own values (ReLU of torch.rand is its input) the output may not depend on the input
        # enough; the problem is still checkable if the other distributions catch what passed here (finish)
        dropped.setdefault(own_key(cell.dtype), f"passed by {', '.join(passed)} {where}")
        return
    if passed:
        dropped.setdefault(cell.distribution, f"passed by {', '.join(passed)} {where}")


def finish(path, meta: dict) -> dict:
    """META with the per-shape tolerance rule, the guard, the KernelBench check, and the distributions and
    dtypes the import audit keeps; ImportRefused for a degenerate problem or one a candidate passes on its own
    inputs. `path`: the problem file (this runs where build_meta runs: in the sandboxed analysis)."""
    from kernelgym_gap.judge.input_audit import CANDIDATES, Cell, memoized
    meta = dict(meta)
    given = meta["workloads"]["cuda"]["dtypes"][0]
    dot = bool(meta.get("rules", {}).get("counted_dot_flops"))
    cond = meta.get("rules", {}).get("conditioning")      # a deep network's measured float32 error
    meta["tolerances"] = rule(("float32", "float16", "bfloat16"), dot,
                              {cond["dtype"]: cond["atol_per_rms"]} if cond else None)
    meta["kernelbench_check"] = [given] if meta.get("reference_in_float64") else []
    meta["input_guard"] = INPUT_GUARD
    # build_task runs the problem's code: this already runs inside the sandboxed analysis
    task = memoized(build_task(path, dict(meta, problem_file=Path(path).name, trusted=True)))
    cpu = meta["workloads"]["cpu"]
    shapes = [tuple(s) for s in cpu["public"] + cpu["heldout"]]
    dtypes = list(dict.fromkeys(meta["workloads"]["cuda"]["dtypes"] + cpu["dtypes"]))
    dropped: dict[str, str] = {}
    bad_dtypes: dict[str, str] = {}
    with _one_thread(), tempfile.TemporaryDirectory(prefix="kgg-import-audit-") as tmp:
        # the timed distribution first: a refusal there ends the audit early
        for dist in sorted(task.distributions, key=lambda d: d != TIMED):
            for dtype in dtypes:
                for shape in shapes:
                    if dist in dropped or dtype in bad_dtypes or (dist == TIMED and own_key(dtype) in dropped):
                        break
                    _cell(task, Cell(shape, dtype, dist, SEED), Path(tmp) / "out.bin", given, dropped, bad_dtypes)
    owns = {d: dropped.pop(own_key(d)) for d in dtypes if own_key(d) in dropped}
    catching = [d for d in meta["distributions"] if d != TIMED and d not in dropped]
    if owns and not catching and given not in owns:
        # A lower precision's tolerance is too wide to see the input on the problem's own values (100_HingeLoss:
        # a mean over 4096 terms, where another seed's loss differs by less than bfloat16's allowance), while
        # the problem's own dtype sees it: that dtype is dropped, not the problem (issue 36: repair, not refuse)
        for d, why in owns.items():
            bad_dtypes.setdefault(d, f"the check in {d} does not see the input on get_inputs()'s own values "
                                     f"({why}) and no other input distribution catches it")
        owns = {}
    own = "; ".join(owns.values()) or None
    if own and not catching:
        raise InputIndependent(f"the check passes an output that ignores the input on get_inputs()'s own values "
                            f"({own}), and no other input distribution catches it; the output does not depend on "
                            "the input enough to be checked")
    for backend in ("cuda", "cpu"):
        meta["workloads"][backend]["dtypes"] = [d for d in meta["workloads"][backend]["dtypes"] if d not in bad_dtypes]
    meta["distributions"] = [d for d in meta["distributions"] if d not in dropped]
    used = set(meta["workloads"]["cuda"]["dtypes"]) | set(cpu["dtypes"])
    meta["tolerances"] = {d: v for d, v in meta["tolerances"].items() if d in used}
    meta["input_audit"] = {
        "backend": "cpu", "shapes": [list(s) for s in shapes], "dtypes": [d for d in dtypes if d not in bad_dtypes],
        "seed": SEED, "candidates": list(CANDIDATES),
        "note": "input: only where an input has the output's shape; each cell is also checked for a degenerate "
                f"reference (all zero, all equal, float32 rounding noise) and for torch's own result in the dtype "
                f"within {MARGIN} of the allowance",
        "distributions_dropped": dropped, "dtypes_dropped": bad_dtypes,
        # kept, because every evaluation also runs trials of the distributions that catch it (engine/trials.py
        # rotates every distribution through every dtype)
        "passes_on_own_values": ({"what": own, "caught_by": catching} if own else None),
        "cuda_shapes": "not audited at import (too large to run here): the per-shape tolerance and the input "
                       "guard apply there; tests/test_input_audit.py has the GPU audit",
    }
    return meta
