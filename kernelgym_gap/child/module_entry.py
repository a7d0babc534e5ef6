"""The callable the child runs for a submission: the task's entry-point function, or, for a task that
accepts one (an imported KernelBench task: `TaskSpec.module_entry_point`), a module class such as
`ModelNew` turned into a callable by the task's `adapt_module`.

The instances are built here, before any trial, as submission code under the guards (no files, processes,
threads) but outside the op recorders: constructing a module (its parameter initialisation) is not the
kernel's work. Each call of the callable, its forward, runs watched like a function entry point, so a
forward that computes with torch is `library_compute` and one that launches no kernel `no_kernel_launched`.
"""
from __future__ import annotations


def resolve_entry(module, task, job, device: str, integ):
    """The entry point to call, or None when the module defines neither form (ENTRY_POINT_MISSING)."""
    entry = getattr(module, task.entry_point, None)
    if callable(entry) or task.module_entry_point is None:
        return entry
    cls = getattr(module, task.module_entry_point, None)
    if not isinstance(cls, type):
        return None
    cases = [(tuple(t.shape), t.dtype) for t in (*job.trials, *job.timing_trials)]
    with integ.submission_code():
        return task.adapt_module(cls, cases, device)
