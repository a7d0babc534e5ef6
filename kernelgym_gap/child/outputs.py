"""The outputs a child hands to the trusted checker (core/tensor_file.py), held in host memory until the
GPU's lane is released.

Each output is copied to the host right after its call (a private copy: the submission may overwrite the
tensor it returned in a later call) and written to the outputs directory only after the timing, outside
both lanes (child/run.py). On the H200 (2026-12-04) writing the correctness outputs took 1-8 s per
evaluation (16 outputs of up to 256 MiB to an ext2 /tmp) inside the shared lane, where every other
evaluation's timing waits for it, and each timed shape's recheck output was written inside the exclusive
lane itself. Past `budget_bytes` held, an output is written at once, as before.

Except at a checkpoint (child/run.py, ChildRun.checkpoint; issue 38): before the first call of each larger
shape (the trials run smallest first) and before the timing, what is held is written, with a report listing
those trials, so that a child killed past a call's stage deadline leaves its finished trials checkable (when:
`checkpoint_due`). Those writes, too, are outside the lanes: the child lets the shared lane go for each
checkpoint between correctness calls and takes it back before the next call (child/lanes.py, `unlaned`); the
one before the timing comes between the two stages, holding neither.

With Job.outputs_by_handle (issue 35, the hand-over; docs/measurement.md, "The outputs handed over on the
device"), an output kept as a device copy is never written: `write` exports it instead (child/export.py), once,
and keeps the copy held, so that the parent's opener can copy it out of this process's memory after the final
report; the reports name it by its record (`handed_over`). Only when the parent asks (the fallback,
child/hold.py) does `write_instead_of_handles` write those as files too. The device copies then stay held to
the end, so the device budget bounds all of them together, not each stretch between checkpoints.

The names used after the submission loads are bound at import; the snapshots cover
this module as they cover every module of the harness (child/snapshots.harness_modules).
"""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import torch

from kernelgym_gap.child.export import ExportError, export_handle
from kernelgym_gap.core.output_handle import OutputHandle
from kernelgym_gap.core.record import ChildReport
from kernelgym_gap.core.tensor_file import device_copy, host_copy, write_tensor

_clock = time.perf_counter
_export = export_handle         # one name, so that the cpu tests can stand in for the GPU's export
_empty_cache, _reserved = torch.cuda.empty_cache, torch.cuda.memory_reserved
_empty = torch.empty


def _on_gpu(t: torch.Tensor) -> bool:
    return t.is_cuda


class HeldOutputs:
    """`budget_bytes` of host copies; with `device_budget_bytes` (Placement.held_device_bytes), outputs on the
    GPU are first kept as device copies up to that many bytes, and reach the host only in `write`, which runs
    with the lanes let go (a checkpoint, or after the timing): a copy on the device takes about a millisecond
    where the host copy took 1.10 s of an evaluation's shared lane on the H100 light batch (2026-12-06)."""

    def __init__(self, directory: Path, budget_bytes: int, device_budget_bytes: int = 0, by_handle: bool = False,
                 staging_bytes: int = 0, copy_guard=None):
        self.directory = Path(directory)
        # Placement.outputs_copy_laned: entered around each copy of a device-held output off the GPU in `write`
        # (child/lanes.ChildLane.copying: the shared lane for the copy alone); None: the copies run as they come
        self.copy_guard = copy_guard
        # Placement.output_staging_bytes: a device copy reaches the host through one pinned buffer of this size,
        # made at the first such write (`staging_for`), a chunk at a time (core/tensor_file._write_staged),
        # instead of a pageable copy of the whole output (0.79 s/GiB on the H100 host, 2026-12-06). 0: off.
        self.staging_bytes = max(int(staging_bytes), 0)
        self.staging: torch.Tensor | None = None
        self.staging_refused = ""           # why the pinned buffer could not be made (then: pageable, as off)
        self.staging_s = 0.0                # the seconds making it took
        self.by_handle = bool(by_handle)    # Job.outputs_by_handle: device copies exported, not written
        self.handles: dict[str, OutputHandle] = {}      # name -> its record, for the device copies exported
        self.not_exported: dict[str, str] = {}         # name -> why its export failed (it is written instead)
        self.export_s = 0.0                 # the seconds the exports took
        self.budget_bytes = max(int(budget_bytes), 0)
        self.device_budget_bytes = max(int(device_budget_bytes), 0)
        self.held: list[tuple[str, torch.Tensor]] = []
        self.held_bytes = 0             # host copies held (the device copies are not host memory)
        self.device_bytes = 0           # device copies held
        self.on_device: set[str] = set()    # the names of those
        self.written_at_once = 0        # outputs written when they came (the budget was full)
        self.at_once_s = 0.0            # and the seconds that took, inside the lane

    def add(self, name: str, t: torch.Tensor) -> None:
        """Keeps a private copy of `t` under `name`: on the device while its budget has room, else on the host;
        or writes it now when the host budget has no room for it either."""
        size = t.numel() * t.element_size()
        if _on_gpu(t) and self.device_bytes + size <= self.device_budget_bytes:
            # a new contiguous storage on the device: what is written later is what `t` held now
            self.held.append((name, device_copy(t)))
            self.on_device.add(name)
            self.device_bytes += size
            return
        copy = host_copy(t)
        size = copy.numel() * copy.element_size()
        if self.held_bytes + size > self.budget_bytes:
            t = _clock()
            write_tensor(self.directory / name, copy)
            self.at_once_s += _clock() - t
            self.written_at_once += 1
            return
        self.held.append((name, copy))
        self.held_bytes += size

    def export(self) -> None:
        """In handle mode, exports each device copy not exported yet (once: a later checkpoint reuses its
        record). One whose export fails (ExportError, or torch's RuntimeError where CUDA IPC is refused) is not
        the submission's doing: it is left to `write`, which writes it as a file as without the hand-over."""
        if not self.by_handle:
            return
        t = _clock()
        on_cuda = False
        for name, copy in self.held:
            if name in self.on_device and name not in self.handles and name not in self.not_exported:
                try:
                    self.handles[name] = _export(copy)
                    on_cuda = on_cuda or copy.is_cuda
                except (ExportError, RuntimeError) as e:
                    self.not_exported[name] = f"{type(e).__name__}: {e}"[:300]
        if on_cuda:
            # the device copies were queued on the stream after the calls' synchronize: done before any
            # report names them, since the opener's copy is not ordered after this process's stream
            torch.cuda.synchronize()
        self.export_s += _clock() - t

    def before_hold(self) -> float:
        """Just before the hold: the caching allocator's free segments given back to the driver, so that the
        stopped child keeps only the segments its handed-over copies sit in (and its context) while the
        checker works, not its peak; the device memory it still reserves, in MiB (the record's
        child_hold_reserved_mib). On the H100 full mix (2026-12-07) four held children beside the checker
        left 320 MiB of 79 GiB free, and CrossEntropyBackward's child ran out of memory. 0.0 off cuda."""
        if not any(_on_gpu(copy) for name, copy in self.held if name in self.handles):
            return 0.0
        _empty_cache()
        return round(_reserved() / 2**20, 1)

    def handed_over(self, report: ChildReport) -> ChildReport:
        """`report` with each output exported (`handles`) named by its record instead of its file: the
        trials' `output_handle` and the rechecks' `recheck_output_handle`, their file fields None (a record
        naming both is a protocol error: judge/ipc_records.py). `report` itself, unchanged, without any."""
        if not self.handles:
            return report
        handles = self.handles
        trials = tuple(dataclasses.replace(o, output_file=None, output_handle=handles[o.output_file])
                       if o.output_file in handles else o for o in report.trials)
        timings = tuple(dataclasses.replace(s, recheck_output_file=None,
                                            recheck_output_handle=handles[s.recheck_output_file])
                        if s.recheck_output_file in handles else s for s in report.timings)
        return dataclasses.replace(report, trials=trials, timings=timings)

    def write_instead_of_handles(self) -> float:
        """The fallback (child/hold.py): the exported outputs written as files after all, with every other
        still held; from here on nothing is handed over (`handed_over` gives reports back unchanged)."""
        self.by_handle = False
        self.handles.clear()
        return self.write()

    def staging_for(self, copy: torch.Tensor) -> torch.Tensor | None:
        """The pinned host buffer `copy` is written through: None for a host tensor, with staging off, or once
        making the buffer failed (pinned memory refused or exhausted: the output is then copied as without it,
        and `staging_refused` says why). Made once per child, at its first device write, outside the lanes."""
        if not self.staging_bytes or not _on_gpu(copy) or self.staging_refused:
            return None
        if self.staging is None:
            t = _clock()
            try:
                self.staging = _empty(self.staging_bytes, dtype=torch.uint8, pin_memory=True)
            except (RuntimeError, MemoryError) as e:
                self.staging_refused = f"{type(e).__name__}: {e}"[:300]
            self.staging_s += _clock() - t
        return self.staging

    def write_phases(self) -> dict[str, float]:
        """The report's phases of how the outputs went: `outputs_write_in_lane` (over the host budget: written as
        they came, inside the lane), `outputs_export` (handle mode: exported, not written), and with a staging
        size `outputs_staging_alloc` (the pinned buffer's making) or `outputs_staging_refused` (1.0: written by
        pageable copies, as with it off)."""
        phases = {}
        if self.written_at_once:
            phases["outputs_write_in_lane"] = self.at_once_s
        if self.by_handle:
            phases["outputs_export"] = self.export_s
        if self.staging is not None:
            phases["outputs_staging_alloc"] = self.staging_s
        elif self.staging_refused:
            phases["outputs_staging_refused"] = 1.0
        return phases

    def write(self) -> float:
        """Writes every held output, but in handle mode exports the device copies first and keeps those
        exported held instead of writing them (`export`); the seconds it took, the exports' included."""
        t = _clock()
        self.export()
        kept = []
        while self.held:
            name, copy = self.held.pop(0)
            if name in self.handles:
                kept.append((name, copy))       # still on the device, for the parent's opener
                continue
            size = copy.numel() * copy.element_size()
            if name in self.on_device:
                self.on_device.discard(name)
                self.device_bytes -= size
            else:
                self.held_bytes -= size
            # a device copy reaches the host here (through the pinned buffer where there is one)
            write_tensor(self.directory / name, copy, staging=HeldOutputs.staging_for(self, copy),
                         guard=self.copy_guard)
            del copy
        self.held = kept
        return _clock() - t


def checkpoint_due(trials, finished: int, covered: int, compiling) -> bool:
    """Whether the child checkpoints before trials[finished] (`covered` of them in the last checkpoint;
    `compiling`: the indices of the calls that compile, each shape's first seeds). Before the second call,
    and before each call that starts a new group of the order (a larger shape, or the repeats of a shape
    after its first seeds: engine/correctness_order.py): a child killed in any call has then left the
    outputs of every group before its own, the smallest shape's first seed in every dtype among them once
    it is past them."""
    if finished == covered:
        return False
    if covered == 0:
        return True

    def group(trial) -> tuple:
        return tuple(trial.shape), trial.index not in compiling

    return group(trials[finished - 1]) != group(trials[finished])
