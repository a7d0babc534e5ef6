"""The bytes one evaluation's honest outputs take, computed on the trusted side before its child starts
(sandbox/disk.py derives the job's disk quota and largest-file limit from them).

A child writes one tensor file per correctness trial and, on cuda, one per timed shape's recheck
(child/outputs.py, core/tensor_file.py): a header of at most MAX_HEADER + 9 bytes, then numel x itemsize of
the trial's output. The checker accepts only the reference's shape and dtype, so an honest output is exactly
the reference's output for the trial's (shape, dtype). Per (shape, dtype), the first of these that works:

1. `fake`: make_inputs + reference under torch's FakeTensorMode (tasks written as Python modules: the
   project's and a user's --tasks-dir): exact, any output dtype, nothing allocated. It cannot follow a
   make_inputs that reads a value back (the MoE tasks draw their routing seed with int(torch.randint(..)):
   DataDependentOutputException), and it is not run on an imported problem (TaskSpec.origin set): its
   Problem caches a real model and its state per shape the first time make_inputs runs, and under fake
   mode it would cache fake ones that the trusted checker, in this process, then calls.
2. `declared`: the task's written_bytes(shape, dtype), its own count of the outputs' bytes (the roofline's
   floor reads it too). Every built-in task that fake mode cannot follow declares it, and where both exist
   they agree (tests/test_disk_limits.py checks both over every built-in task's cuda trials).
3. `bound`: min_bytes(shape, dtype) x max(1, output itemsize / trial itemsize). The contract counts each
   output written once in min_bytes (besides each input read once): an upper bound. The factor covers a
   task that counts a wider output at the trial's dtype, as the importer's formula does (float elements x
   itemsize(dtype) + the fixed bytes of integer tensors) for a problem whose float32 output is fixed
   while the trial is float16. Imported tasks land here: their limit may exceed the outputs by the inputs.
4. None: each of the above raised. The caller keeps the configured limits and logs why (disk.py).

Cached per process by (task id, its directory, shape, dtype): fake mode's first use costs seconds, and the
pre-started children's spec (prestart.ChildSpec) is derived from the same numbers on every evaluation.
"""
from __future__ import annotations

import dataclasses
import functools
import logging

log = logging.getLogger(__name__)

_TASKS: dict = {}     # (task id, tasks_dir) -> the TaskSpec the cached sizes were computed for


@dataclasses.dataclass(frozen=True)
class OutputNeed:
    """What a job's honest outputs take: their bytes in all, the largest one's, how many files, and the
    weakest source any of them came from ("fake", "declared", "bound")."""
    total: int
    largest: int
    count: int
    source: str


_ORDER = ("fake", "declared", "bound")


def _itemsize(dtype: str) -> int:
    import torch
    return torch.empty((), dtype=getattr(torch, dtype)).element_size()


def bound_bytes(task, shape: tuple[int, ...], dtype: str) -> int:
    """The contract's upper bound on one trial's output bytes (3. above); raises what the task's formulas
    raise."""
    widen = max(1.0, _itemsize(task.output_dtype(dtype)) / _itemsize(dtype))
    return int(int(task.min_bytes(shape, dtype)) * widen)


def fake_bytes(task, shape: tuple[int, ...], dtype: str) -> int:
    """The reference's output bytes for (shape, dtype) under FakeTensorMode (1. above); raises where fake
    mode cannot follow the task, or for an output that is not one tensor (no honest output then exists:
    the child writes only a torch.Tensor)."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from kernelgym_gap.core.inputs import generator
    if task.origin:
        raise ValueError(f"{task.id} is an imported problem: not run under fake mode (its caches)")
    with FakeTensorMode(allow_non_fake_inputs=True), torch.no_grad():
        ins = task.make_inputs(tuple(shape), dtype, generator(1, "cpu"), task.distributions[0], "cpu")
        out = task.reference(*ins)
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"the reference returns {type(out).__name__}, not a tensor")
        return int(out.numel()) * int(out.element_size())


def expected_bytes(task, shape, dtype: str) -> tuple[int, str] | None:
    """(bytes, source) of one trial's honest output, or None where nothing could compute it."""
    key = (task.id, task.tasks_dir, tuple(int(s) for s in shape), dtype)
    _TASKS[key[:2]] = task
    return _expected(*key)


@functools.lru_cache(maxsize=4096)
def _expected(task_id: str, tasks_dir, shape: tuple[int, ...], dtype: str) -> tuple[int, str] | None:
    task = _TASKS[(task_id, tasks_dir)]
    failures = []
    for source, how in (("fake", fake_bytes), ("declared", _declared), ("bound", bound_bytes)):
        try:
            return how(task, shape, dtype), source
        except Exception as e:  # noqa: BLE001 - the task's own code: each failure tries the next source
            failures.append(f"{source}: {type(e).__name__}: {str(e)[:120]}")
    log.warning("%s %s %s: the output's size cannot be computed (%s)", task_id, list(shape), dtype,
                "; ".join(failures))
    return None


def _declared(task, shape, dtype: str) -> int:
    if task.written_bytes is None:
        raise ValueError("no written_bytes declared")
    return int(task.written_bytes(shape, dtype))


def need(task, cases, exact: bool = True) -> OutputNeed | None:
    """What the outputs of `cases` ((shape, dtype) per output file the child writes) take: exact (the
    sources above in order) or, with exact=False, from the cheap bound alone (no task code under fake
    mode: an upper bound of the exact need). None where any output's size cannot be computed."""
    sizes = []
    for shape, dtype in cases:
        if exact:
            got = expected_bytes(task, shape, dtype)
        else:
            try:
                got = (bound_bytes(task, tuple(shape), dtype), "bound")
            except Exception:  # noqa: BLE001 - the task's formula: then the exact sources decide
                got = None
        if got is None:
            return None
        sizes.append(got)
    if not sizes:
        return OutputNeed(total=0, largest=0, count=0, source="fake")
    return OutputNeed(total=sum(b for b, _ in sizes), largest=max(b for b, _ in sizes), count=len(sizes),
                      source=max((s for _, s in sizes), key=_ORDER.index))
