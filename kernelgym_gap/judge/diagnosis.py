"""Screening verdicts for correct kernels, from E (library time / kernel time) and U (floor / kernel time).

  efficient                 E >= e_threshold and U >= u_threshold, or E >= e_threshold where the library
                            itself is under u_threshold (matching a library that cannot do better is not a
                            defect of the kernel; it is recorded as the library's residual)
  repairable_defect         E < e_threshold while the op is known to run well: the best known DSL solution
                            reaches E >= e_threshold on this device, or (no DSL reference measured) the
                            library runs at U >= u_threshold. The kernel's authoring is the problem.
  structural_residual       otherwise: even the best known DSL solution stays far from the library, or the
                            library is far from the roofline too (code generation, autotuning coverage).

Defaults (E 0.5, U 0.3) sit in the gaps of the reference suite's H200 measurements (docs/gap_study.md):
the optimized memory-bound solutions measure E ~ 1 and U ~ 0.6-0.8, every slow variant E < 0.1.
Observable causes are reported as evidence wherever they can be seen.
"""
from __future__ import annotations

import re

from kernelgym_gap.core.config import DiagnosisConfig


DEFAULT = DiagnosisConfig()
_FP64 = re.compile(r"tl\.float64|\bfp64\b|\"float64\"|'float64'|torch\.float64|\.double\(\)")


def causes(source: str, task_dtypes, programs: int, launches: int, sm_count: int | None,
           touched_bytes: int | None, min_bytes: int | None, cfg: DiagnosisConfig = DEFAULT) -> list[str]:
    found = []
    if sm_count and 0 < programs < cfg.few_programs_fraction * sm_count:
        found.append(f"too little parallelism: the largest launch has {programs} program(s) on a device with "
                     f"{sm_count} SMs (sequential work)")
    if launches > 3:
        found.append(f"{launches} kernel launches per call (unfused work; each launch re-reads memory)")
    if touched_bytes and min_bytes and touched_bytes > 1.5 * min_bytes:
        found.append(f"the kernels are handed {touched_bytes / 1e6:.1f} MB per call against a minimum of "
                     f"{min_bytes / 1e6:.1f} MB (intermediate buffers)")
    if "float64" not in task_dtypes and _FP64.search(source or ""):
        found.append("float64 appears in the source while the task has no float64 data (needless dtype "
                     "conversion; fp64 runs at a fraction of the fp32 rate)")
    return found


def diagnose(E: float, U: float, library_U: float, best_known_E: float | None, evidence: list[str],
             cfg: DiagnosisConfig = DEFAULT) -> dict:
    if E >= cfg.e_threshold and (U >= cfg.u_threshold or library_U < cfg.u_threshold):
        verdict = "efficient"
        summary = f"E={E:.2f} (>= {cfg.e_threshold}), U={U:.2f}"
        if U < cfg.u_threshold:
            summary += f"; the library itself only reaches U={library_U:.2f} (a residual of the op, not the kernel)"
    elif E < cfg.e_threshold and ((best_known_E is not None and best_known_E >= cfg.e_threshold)
                                  or (best_known_E is None and library_U >= cfg.u_threshold)):
        verdict = "repairable_defect"
        basis = (f"the best known DSL solution reaches E={best_known_E:.2f}" if best_known_E is not None
                 else f"the library runs at U={library_U:.2f} of the roofline")
        summary = f"{1 / E:.1f}x slower than the library (E={E:.3g}, U={U:.3g}) while {basis}"
    else:
        verdict = "structural_residual"
        basis = (f"the best known DSL solution reaches only E={best_known_E:.2f}" if best_known_E is not None
                 else f"the library itself reaches only U={library_U:.2f}")
        summary = f"E={E:.3g}, U={U:.3g}; {basis}: a gap the DSL's code generation leaves, not the kernel's author"
    if evidence:
        summary += ". Seen: " + "; ".join(evidence)
    return {"verdict": verdict, "summary": summary, "E": E, "U": U, "library_U": library_U,
            "best_known_E": best_known_E, "evidence": evidence,
            "thresholds": {"E": cfg.e_threshold, "U": cfg.u_threshold}}


def diagnose_bound(E_upper: float | None, U_upper: float | None, library_U: float | None,
                   best_known_E: float | None, evidence: list[str], reached: str,
                   cfg: DiagnosisConfig = DEFAULT) -> dict:
    """The verdict on a kernel killed past a call's deadline (Status.TOO_SLOW): only upper bounds on E and U
    are known, both far under the thresholds, so the question is the same as for any slow kernel: does
    the op run well elsewhere? repairable_defect where the best known DSL solution reaches e_threshold, or
    (none measured) the library runs at U >= u_threshold; structural_residual where either is known and
    falls short; "undetermined" where neither is known (no library time cached for the shape and no best
    known solution): the bound alone cannot tell whose gap it is. `reached` says what was measured."""
    def fmt(x):
        return "unknown" if x is None else f"{x:.3g}"
    bounds = f"E <= {fmt(E_upper)}, U <= {fmt(U_upper)} ({reached})"
    if best_known_E is not None:
        good, basis = best_known_E >= cfg.e_threshold, f"the best known DSL solution reaches E={best_known_E:.2f}"
    elif library_U is not None:
        good, basis = library_U >= cfg.u_threshold, f"the library runs at U={library_U:.2f} of the roofline"
    else:
        good, basis = None, "no library time or best known solution for this shape"
    if good is None:
        verdict, summary = "undetermined", f"{bounds}; {basis}: whose gap it is cannot be told"
    elif good:
        verdict, summary = "repairable_defect", f"too slow to time in full: {bounds} while {basis}"
    else:
        verdict, summary = ("structural_residual", f"too slow to time in full: {bounds}; {basis}: a gap the "
                            "DSL's code generation leaves, not the kernel's author")
    if evidence:
        summary += ". Seen: " + "; ".join(evidence)
    return {"verdict": verdict, "summary": summary, "E": None, "U": None, "E_upper": E_upper, "U_upper": U_upper,
            "library_U": library_U, "best_known_E": best_known_E, "evidence": evidence,
            "thresholds": {"E": cfg.e_threshold, "U": cfg.u_threshold}}
