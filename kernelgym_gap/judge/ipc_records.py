"""The trusted validation of the outputs a child handed over on the device (issue 35; the design in
docs/measurement.md, "The outputs handed over on the device", protocol points 2, 3 and 5). Not wired into the
engine yet: the design's GPU probe comes first.

The child's report carries one OutputHandle record per output it kept on the device (core/output_handle.py,
whose own rules the report's parsing already applied). Before any handle is opened, `plan_outputs` decides for
each output the check would read, in the check's order (judge/prefetch.named_outputs):

- `Refused`: the verdict the file path gives for the same output, decided from the record alone. A record
  whose dtype is no tensor file's, or whose bytes are not its shape's (nbytes = prod(shape) x itemsize), is a
  protocol_error, as a tensor file whose header disagrees with its size. One far past the bound the checker
  reads (output_rules.max_output_bytes) is wrong_shape, the file path's verdict for a file far larger than the
  expected output: not protocol_error, which would mark an honest kernel's oversized output as the machine's
  doing (Status.depends_on_the_machine, never cached). Then the dtype (wrong_dtype) and the shape
  (wrong_shape) against the task's, with the checker's own words (judge/output_rules.py). Its handle is never
  opened.
- `Planned`: to be copied by the opener into the checker's receive arena at `arena_offset` (a multiple of
  ARENA_ALIGN), viewed there with the task's dtype and the reference's shape (`views_from_arena`).
- `NeedsFile`: a valid record past the room left in the arena (the design's per-output fallback). The child
  handed that output over and wrote no file, so the wiring asks it to write this one (SIGCONT, then "write" on
  its stdin); the check then reads the file as today.

A report with more records than the job's trials plus its timed shapes, or naming one output twice, is refused
as a whole (`ReportRefused`, protocol_error) before anything else: a child cannot make the parent plan, or an
opener open, more handles than an honest one has outputs.

What the check decides at a trial's turn from the report itself (the input digests, wrong_type, an output that
aliases an input) stays the check's: the plan only decides what the output's record says. The check applies a
Refused entry at its trial's turn, as the prefetch leaves a bad file to it, so earlier trials' verdicts come
first.
"""
from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Callable, Mapping

import torch

from kernelgym_gap.core import tensor_file
from kernelgym_gap.core.record import ChildReport, Job, OutputHandle, Trial
from kernelgym_gap.core.status import Status
from kernelgym_gap.core.task import TaskSpec
from kernelgym_gap.judge.output_rules import (dtype_problem, max_output_bytes, oversize_message, recheck_what,
                                              shape_problem, trial_what)
from kernelgym_gap.judge.prefetch import PREFETCH_BYTES

# Offsets in the arena are multiples of this: every dtype's alignment, and the caching allocator's own
# granularity (512 B blocks), so each view starts where a device kernel's vector loads expect it.
ARENA_ALIGN = 256
# The arena's default cap: the host memory the file path may hold per check before the lane
# (judge/prefetch.PREFETCH_BYTES), as device memory here. Outputs past it go by file, one by one.
ARENA_BYTES = PREFETCH_BYTES


class OutputKind(str, enum.Enum):
    TRIAL = "trial"          # a correctness trial's output
    RECHECK = "recheck"      # a timed shape's call after its timing


@dataclasses.dataclass(frozen=True)
class OutputKey:
    """Which output: a correctness trial's by its index in the job, or a recheck's by its trial's index (the
    timing trials are numbered apart: engine/trials.TIMING_INDEX_BASE). The child's file name for it is
    `file_name`: what the wiring asks it to write for a NeedsFile."""
    kind: OutputKind
    index: int

    @property
    def file_name(self) -> str:
        return tensor_file.output_name(self.kind.value, self.index)


@dataclasses.dataclass(frozen=True)
class Planned:
    """An output the opener copies: `record`'s nbytes from the child's allocation into the arena at
    `arena_offset`. `dtype` and `shape` are the task's and the reference's (equal to the record's claims,
    which were checked): the checker views its copy with these."""
    key: OutputKey
    trial: Trial
    record: OutputHandle
    arena_offset: int
    dtype: str
    shape: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class Refused:
    """An output whose record gets a verdict unopened: the status and message the file path gives."""
    key: OutputKey
    trial: Trial
    status: Status
    message: str


@dataclasses.dataclass(frozen=True)
class NeedsFile:
    """A valid record with no room left in the arena: the child is asked to write this output as a file."""
    key: OutputKey
    trial: Trial


Entry = Planned | Refused | NeedsFile


@dataclasses.dataclass(frozen=True)
class Plan:
    """The entries in the check's order and the arena's size in bytes (the end of the last planned copy,
    rounded up to ARENA_ALIGN within the cap; 0 when nothing is copied)."""
    entries: tuple[Entry, ...]
    arena_bytes: int

    @property
    def planned(self) -> tuple[Planned, ...]:
        return tuple(e for e in self.entries if isinstance(e, Planned))


@dataclasses.dataclass(frozen=True)
class ReportRefused:
    """The report's records as a whole break the protocol: nothing is opened, the evaluation gets this."""
    status: Status
    message: str


def _align(n: int) -> int:
    return -(-n // ARENA_ALIGN) * ARENA_ALIGN


def _handed(job: Job, report: ChildReport) -> list[tuple[OutputKey, Trial, OutputHandle, bool]]:
    """(key, trial, record, also names a file) of each handed-over output the check would read, in its
    order: the job's trials that have an outcome, then each timing's recheck with its trial (as
    judge/prefetch.named_outputs walks the files)."""
    by_index = {o.index: o for o in report.trials}
    found = [(OutputKey(OutputKind.TRIAL, t.index), t, by_index[t.index].output_handle,
              by_index[t.index].output_file is not None)
             for t in job.trials if t.index in by_index and by_index[t.index].output_handle is not None]
    found += [(OutputKey(OutputKind.RECHECK, s.recheck_trial.index), s.recheck_trial, s.recheck_output_handle,
               s.recheck_output_file is not None)
              for s in report.timings if s.recheck_output_handle is not None and s.recheck_trial is not None]
    return found


def record_count(report: ChildReport) -> int:
    """Every handle record in the report, those the check would not read included."""
    return (sum(o.output_handle is not None for o in report.trials)
            + sum(s.recheck_output_handle is not None for s in report.timings))


def _verdict(key: OutputKey, trial: Trial, record: OutputHandle, both: bool, task: TaskSpec,
             ref_shape: tuple[int, ...]) -> Refused | None:
    """The file path's verdict on this record, decided unopened; None when it may be copied."""
    what = trial_what(trial) if key.kind is OutputKind.TRIAL else recheck_what(trial)

    def refuse(status: Status, message: str) -> Refused:
        return Refused(key=key, trial=trial, status=status, message=message)
    if both:        # which of the two would the check judge? Neither: the child said two things
        return refuse(Status.PROTOCOL_ERROR, f"{what}: the child reported both an output file and a handed-over "
                                             f"output")
    got = tensor_file.DTYPES.get(record.dtype)
    if got is None:
        return refuse(Status.PROTOCOL_ERROR, f"{what}: the handed-over output's dtype {record.dtype!r} is not one "
                                             f"of {sorted(tensor_file.DTYPES)}")
    declared = math.prod(record.shape) * got.itemsize
    if record.nbytes != declared:
        return refuse(Status.PROTOCOL_ERROR, f"{what}: the handed-over output's record gives {record.nbytes} bytes, "
                                             f"its dtype and shape {declared}")
    if record.nbytes > max_output_bytes(ref_shape):
        return refuse(Status.WRONG_SHAPE, oversize_message(record.nbytes, "handed-over output"))
    expected = getattr(torch, task.output_dtype(trial.dtype))      # as the checker names it (checker._judge)
    if (problem := dtype_problem(what, got, expected, trial.dtype)) is not None:
        return refuse(Status.WRONG_DTYPE, problem)
    if (problem := shape_problem(what, record.shape, ref_shape, trial.split == "public")) is not None:
        return refuse(Status.WRONG_SHAPE, problem)
    return None


def plan_outputs(job: Job, report: ChildReport, task: TaskSpec, reference_shape: Callable[[Trial], tuple[int, ...]],
                 max_arena_bytes: int = ARENA_BYTES) -> Plan | ReportRefused:
    """What the opener will copy, and every verdict the records decide unopened (the module docstring).
    `reference_shape(trial)`: the shape of the reference's output for the trial (the checker has computed
    the reference, or computes it: `shapes_from_references`). Planned offsets fill the arena in the check's
    order; an output with no room left is NeedsFile, and a later smaller one may still fit."""
    if max_arena_bytes < 0:
        raise ValueError(f"max_arena_bytes must be >= 0, got {max_arena_bytes}")
    allowed = len(job.trials) + len(job.timing_trials)
    count = record_count(report)
    if count > allowed:
        return ReportRefused(Status.PROTOCOL_ERROR, f"the child's report holds {count} handed-over outputs, more "
                                                    f"than the job's {len(job.trials)} trials and "
                                                    f"{len(job.timing_trials)} timed shapes")
    handed = _handed(job, report)
    keys = [key for key, *_ in handed]
    if len(set(keys)) != len(keys):
        twice = next(k for k in keys if keys.count(k) > 1)
        return ReportRefused(Status.PROTOCOL_ERROR, f"the child's report hands over the output {twice.file_name} "
                                                    f"twice")
    entries: list[Entry] = []
    end = 0
    for key, trial, record, both in handed:
        ref_shape = tuple(int(d) for d in reference_shape(trial))
        refused = _verdict(key, trial, record, both, task, ref_shape)
        if refused is not None:
            entries.append(refused)
            continue
        offset = _align(end)
        if offset + record.nbytes > max_arena_bytes:
            entries.append(NeedsFile(key=key, trial=trial))
            continue
        entries.append(Planned(key=key, trial=trial, record=record, arena_offset=offset,
                               dtype=task.output_dtype(trial.dtype), shape=ref_shape))
        end = offset + record.nbytes
    # rounded up for the allocator, never past the cap (every copy ends at or before `end` <= the cap)
    return Plan(entries=tuple(entries), arena_bytes=min(_align(end), max_arena_bytes))


def shapes_from_references(references: Mapping[int, torch.Tensor]) -> Callable[[Trial], tuple[int, ...]]:
    """`reference_shape` for `plan_outputs` from the references the checker holds by trial index (its
    `precompute`, and the rechecks' it computes); a trial without one is the caller's error (KeyError)."""
    def shape(trial: Trial) -> tuple[int, ...]:
        if trial.index not in references:
            raise KeyError(f"no reference computed for trial {trial.index}: plan_outputs needs every output's "
                           f"reference shape before any handle is opened")
        return tuple(references[trial.index].shape)
    return shape


def views_from_arena(arena: torch.Tensor, plan: Plan) -> dict[OutputKey, torch.Tensor]:
    """The checker's views of its own arena, one per Planned entry, with the dtype the task expects and the
    reference's shape (protocol point 5: never the child's claims, which `plan_outputs` checked equal to
    them). `arena` is the checker's one-dimensional contiguous uint8 allocation of at least
    `plan.arena_bytes`, into which the opener copied each entry at its offset. The views share its memory."""
    if arena.dtype != torch.uint8 or arena.dim() != 1 or not arena.is_contiguous():
        raise ValueError(f"the arena must be a contiguous 1-D uint8 tensor, got {arena.dtype} of shape "
                         f"{list(arena.shape)}")
    if arena.numel() < plan.arena_bytes:
        raise ValueError(f"the arena holds {arena.numel()} bytes, the plan needs {plan.arena_bytes}")
    views: dict[OutputKey, torch.Tensor] = {}
    for entry in plan.planned:
        dtype = getattr(torch, entry.dtype)
        nbytes = math.prod(entry.shape) * dtype.itemsize
        if nbytes != entry.record.nbytes or entry.arena_offset % ARENA_ALIGN \
                or entry.arena_offset + nbytes > plan.arena_bytes:
            raise ValueError(f"{entry.key.file_name}: the plan's entry is not one plan_outputs makes "
                             f"(offset {entry.arena_offset}, {nbytes} bytes of {entry.record.nbytes})")
        views[entry.key] = arena[entry.arena_offset:entry.arena_offset + nbytes].view(dtype).view(entry.shape)
    return views


def plan_to_wire(plan: Plan) -> list[list]:
    """The plan's rows on the handover line (judge/checker.run_handover): `[kind, index, arena_offset, dtype,
    shape]` per Planned entry and `[kind, index, None, None, None]` per NeedsFile entry (the parent then falls
    back to files), in the check's order. Refused entries stay with the checker, which judges them."""
    rows: list[list] = []
    for e in plan.entries:
        if isinstance(e, Planned):
            rows.append([e.key.kind.value, e.key.index, e.arena_offset, e.dtype, list(e.shape)])
        elif isinstance(e, NeedsFile):
            rows.append([e.key.kind.value, e.key.index, None, None, None])
    return rows


def plan_from_wire(rows: object, job: Job, report: ChildReport) -> Plan:
    """The parent's Plan from the checker's rows (plan_to_wire), each Planned entry rebuilt with the report's
    own record and trial, so that the opener copies exactly what the report named. The rows come from the
    trusted checker: a malformed row, one naming an output the report has no record for, or a copy that does
    not fit its record is a ValueError (our bug, never the child's)."""
    if not isinstance(rows, list):
        raise ValueError(f"the plan's rows must be a list, got {type(rows).__name__}")
    records = {key: (trial, record) for key, trial, record, _ in _handed(job, report)}
    entries: list[Entry] = []
    end = 0
    for row in rows:
        if not isinstance(row, list) or len(row) != 5:
            raise ValueError(f"a plan row is [kind, index, arena_offset, dtype, shape], got {row!r}")
        kind, index, offset, dtype, shape = row
        try:
            key = OutputKey(OutputKind(kind), index)
        except ValueError:
            raise ValueError(f"a plan row's kind {kind!r} is not one of {[k.value for k in OutputKind]}") from None
        if type(index) is not int or key not in records:
            raise ValueError(f"the plan names {key.file_name if type(index) is int else index!r}, for which the "
                             f"child's report has no handed-over output")
        trial, record = records.pop(key)
        if offset is None and dtype is None and shape is None:
            entries.append(NeedsFile(key=key, trial=trial))
            continue
        if type(offset) is not int or offset < 0 or offset % ARENA_ALIGN or not isinstance(dtype, str) \
                or not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
            raise ValueError(f"{key.file_name}: the plan row {row!r} is not one plan_to_wire writes")
        torch_dtype = getattr(torch, dtype, None)
        if not isinstance(torch_dtype, torch.dtype) or math.prod(shape) * torch_dtype.itemsize != record.nbytes:
            raise ValueError(f"{key.file_name}: the plan views {dtype} {shape}, the record holds {record.nbytes} "
                             f"bytes")
        entries.append(Planned(key=key, trial=trial, record=record, arena_offset=offset, dtype=dtype,
                               shape=tuple(shape)))
        end = max(end, offset + record.nbytes)
    return Plan(entries=tuple(entries), arena_bytes=_align(end))
