"""The record of one output a child hands over on the device instead of writing a file (issue 35, the design in
docs/measurement.md, "The outputs handed over on the device"): the CUDA IPC handle of the allocation holding
the child's private device copy, where the copy starts in it, its bytes, and the dtype and shape the child
says it has.

It crosses the process boundary inside the child's report (core/record.py: TrialOutcome.output_handle,
ShapeTiming.recheck_output_handle), so it is hostile input. Everything that can be checked without the task
is checked here, on construction, which is also where `ChildReport.from_json` builds it: a record that breaks
a rule raises ProtocolError and the whole report fails to parse, as any other malformed field does (the
parent's verdict for an unparsable report: protocol_error, or crash when the child also exited non-zero;
engine/stages.ChildReportStage). What needs the task (the dtype's name and size, the expected dtype and
shape, the size bound) is judge/ipc_records.py's, before any handle is opened.

A leaf: no torch, no other kernelgym_gap module but core/errors, so the child and the trusted side share it.
"""
from __future__ import annotations

import dataclasses
import re

from kernelgym_gap.core.errors import ProtocolError

HANDLE_HEX_DIGITS = 128          # cudaIpcMemHandle_t is 64 opaque bytes
# Lower case only: what bytes.hex() writes, so one handle has one spelling (a record is compared and logged
# as text). re.fullmatch, not `$`: `$` also matches before a trailing newline.
_HEX = re.compile(r"[0-9a-f]{%d}" % HANDLE_HEX_DIGITS)
MAX_OFFSET = 1 << 48             # above any device's address space (49 bits of virtual address on Hopper)
MAX_NBYTES = 1 << 48
MAX_DIMS = 16                    # as core/tensor_file.MAX_DIMS (a test holds them equal)
MAX_DTYPE_CHARS = 32             # the longest dtype name a tensor file allows is 15


def _is_int(value: object) -> bool:
    return type(value) is int    # bool is an int subclass: True is not an offset


@dataclasses.dataclass(frozen=True)
class OutputHandle:
    """One output handed over on the device: `handle` (128 lower-case hex digits of the cudaIpcMemHandle_t
    of the allocation), `offset` (bytes from the allocation's base to the output's first byte), `nbytes`,
    and the `dtype` (a torch dtype's name, "float16") and `shape` the child claims. The trusted side never
    uses the claimed dtype and shape to read the bytes: it compares them with the task's and then views its
    own copy with the task's (docs/measurement.md, protocol point 5)."""
    handle: str
    offset: int
    nbytes: int
    dtype: str
    shape: tuple[int, ...]

    def __post_init__(self) -> None:
        problem = self.problem()
        if problem is not None:
            raise ProtocolError(f"output handle record: {problem}")

    def problem(self) -> str | None:
        """What breaks the record's own rules, or None."""
        if not isinstance(self.handle, str) or _HEX.fullmatch(self.handle) is None:
            shown = self.handle[:20] + "..." if isinstance(self.handle, str) and len(self.handle) > 20 else self.handle
            length = len(self.handle) if isinstance(self.handle, str) else None
            return (f"the handle must be exactly {HANDLE_HEX_DIGITS} lower-case hex digits, got {shown!r}"
                    + (f" ({length} characters)" if length is not None else ""))
        if not _is_int(self.offset) or not 0 <= self.offset < MAX_OFFSET:
            return f"offset {self.offset!r} is not an integer in [0, 2**48)"
        if not _is_int(self.nbytes) or not 0 < self.nbytes < MAX_NBYTES:
            return f"nbytes {self.nbytes!r} is not an integer in (0, 2**48)"
        if not isinstance(self.dtype, str) or not 0 < len(self.dtype) <= MAX_DTYPE_CHARS:
            return f"dtype {str(self.dtype)[:40]!r} is not a dtype's name"
        if not isinstance(self.shape, tuple) or len(self.shape) > MAX_DIMS:
            return f"the shape is not a tuple of at most {MAX_DIMS} sizes"
        if not all(_is_int(d) and 0 <= d < MAX_NBYTES for d in self.shape):
            return f"the shape {list(self.shape)[:MAX_DIMS]} holds a size that is not an integer in [0, 2**48)"
        return None
