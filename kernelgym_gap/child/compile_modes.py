"""The two compile-probe modes of the child (cpu backend, Triton; sandbox/probe.py starts them): launches are
compiled for sm_90 instead of run, the interpreter off. A probe that cannot tell says why in
`ChildReport.inconclusive`, with status ok."""
from __future__ import annotations

import torch

from kernelgym_gap.child import integrity as integ
from kernelgym_gap.child.failure import first_line
from kernelgym_gap.core import inputs as inputs_mod
from kernelgym_gap.core.status import Status

INCONCLUSIVE = "compile probe inconclusive"     # the message beside ChildReport.inconclusive (why)
MAX_SPECS = 256     # KernelSpecs a report carries; more only come from a submission that floods the probe


def launched_specs(adapter) -> tuple:
    """The specializations launched (or, in a probe, compiled) so far, for ChildReport.launched."""
    specs = list(adapter.log.specs.values())
    return tuple(specs[:MAX_SPECS])


def compile_probe(run, entry) -> int:
    """Calls the entry point once per trial with launches turned into sm_90 compilations. Outputs are
    garbage (no kernel ran), so only compile errors count; anything else leaves the probe inconclusive.
    A compile error counts even when the submission caught it (a try/except fallback to torch).
    `run` is the child's run.ChildRun."""
    adapter = run.adapter
    for i, trial in enumerate(run.job.trials):
        where = f"shape {list(trial.shape)}, {trial.dtype}"
        ins = inputs_mod.make_trial_inputs(run.task, trial, run.device)
        run.marks.begin(i)          # the parent's call deadline (Job.call_bounds)
        try:
            with torch.no_grad(), integ.submission_code():
                entry(*ins)
        except BaseException as e:  # noqa: BLE001
            run.marks.end()
            if adapter.is_compile_error(e):
                failure = run.classify(e, where)
                return run.finish(failure.status, failure.message, failed_trial=trial.index)
            if not adapter.log.compile_errors:
                return run.finish(Status.OK, INCONCLUSIVE,
                                  inconclusive=f"the entry point raised before any launch: {first_line(e)}",
                                  launched=launched_specs(adapter))
        run.marks.end()
        if adapter.log.compile_errors:
            return run.finish(Status.COMPILE_ERROR, f"{where}: {adapter.log.compile_errors[0]}",
                              failed_trial=trial.index)
    return run.finish(Status.OK, "every launched Triton kernel compiled for sm_90", launched=launched_specs(adapter))


def locate_kernel(spec, kernels, source_sha256):
    """The JITFunction a KernelSpec names, among the process's live `kernels`: that module, qualified name and
    source (kernels made at import time inside functions, or shadowed by a later one of the same name,
    included). None with the reason when none exists without calling the submission's functions."""
    for obj in kernels:
        if getattr(obj.fn, "__module__", None) == spec.module and getattr(obj.fn, "__qualname__", None) == \
                spec.qualname and source_sha256(obj.fn) == spec.source_sha256:
            return obj, None
    return None, (f"{spec.qualname} exists only once the entry point runs" if "<locals>" in spec.qualname
                  else f"{spec.module}.{spec.qualname} is not among the module's Triton kernels")


def compile_specs(run) -> int:
    """Compiles, for sm_90, the specializations the main child's interpreter launched and the entry-point
    probe did not reach (an entry point that behaves differently without the interpreter). Runs nothing of
    the submission's but its module's top level (already run)."""
    adapter = run.adapter
    kernels = adapter.live_kernels()
    unreached = []
    for i, spec in enumerate(run.job.specs):
        kernel, why = locate_kernel(spec, kernels, adapter.source_sha256)
        if kernel is None or not spec.exact:
            unreached.append(why or f"{spec.qualname} has constexpr values that cannot be rebuilt")
            continue
        run.marks.begin(i)
        try:
            adapter.compile_spec(kernel, spec)
        except BaseException as e:  # noqa: BLE001
            run.marks.end()
            if adapter.is_compile_error(e):
                failure = run.classify(e, f"{spec.qualname} as the interpreter launched it")
                return run.finish(failure.status, failure.message)
            raise
    run.marks.end()
    if unreached:
        return run.finish(Status.OK, INCONCLUSIVE,
                          inconclusive="; ".join(sorted(set(unreached))[:3]))
    return run.finish(Status.OK, f"the {len(run.job.specs)} launched specialization(s) compiled for sm_90")
