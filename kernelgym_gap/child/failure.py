"""How the child words a submission's exception: `classify` maps it to a status, a message and the
submission's traceback (kept apart: the report carries the traceback in its own field)."""
from __future__ import annotations

import dataclasses
import errno
import traceback as traceback_mod

from kernelgym_gap.dsl.watch import SandboxDenied
from kernelgym_gap.core.status import Status
from kernelgym_gap.dsl.base import KernelUnverified

TRACEBACK_LINES = 12        # the tail of the submission's traceback a report carries
SUBMISSION_FILE = "submission.py"   # the name the submission's source has in every child's directory

# Only for exceptions that carry no type to look at: torch's CPU allocator (c10's "DefaultCPUAllocator: can't
# allocate memory"), the Triton driver ("out of memory") and TVM ("failed to allocate") raise plain
# RuntimeError subclasses whose only mark of an allocation failure is their text.
_OOM_MARKERS = ("can't allocate memory", "not enough memory", "out of memory", "failed to allocate")


@dataclasses.dataclass(frozen=True)
class Failure:
    status: Status
    message: str
    traceback: str | None = None     # the submission's traceback, trimmed to its last TRACEBACK_LINES lines


def traceback_tail(exc: BaseException, lines: int = TRACEBACK_LINES) -> str | None:
    """The submission's own traceback: its frames only (the harness's and the libraries' left out), the file
    named as `submission.py`, then the exception; its last `lines` lines. None when no frame of the
    submission is on the stack (the harness or a DSL raised it on its own: the message says what)."""
    frames = [f for f in traceback_mod.extract_tb(exc.__traceback__)
              if f.filename.rsplit("/", 1)[-1] == SUBMISSION_FILE]
    if not frames:
        return None
    for f in frames:
        f.filename = SUBMISSION_FILE
    text = "Traceback (the submission's frames):\n" + "".join(traceback_mod.format_list(frames))
    text += "".join(traceback_mod.format_exception_only(type(exc), exc))
    return "\n".join(text.rstrip().splitlines()[-lines:])


def first_line(e: BaseException) -> str:
    """The first line of an exception's text (its summary), or its type's name when it has none."""
    text = str(e).strip().splitlines()
    return text[0][:300] if text else type(e).__name__


def _oom_types() -> tuple[type, ...]:
    import torch
    oom = getattr(torch, "OutOfMemoryError", None) or getattr(torch.cuda, "OutOfMemoryError", None)
    return (MemoryError,) + ((oom,) if oom is not None else ())


def is_out_of_memory(exc: BaseException) -> bool:
    if isinstance(exc, _oom_types()):
        return True
    return isinstance(exc, RuntimeError) and any(m in str(exc).lower() for m in _OOM_MARKERS)


def classify(exc: BaseException, where: str, adapter, integrity, watch) -> Failure:
    """The status an exception raised by submission code `where` ends the evaluation in. Anything the
    submission did that the guards refused (`watch.events`) makes it an integrity violation whatever it
    raised; `integrity` (snapshots.Integrity) words the violations."""
    tb = traceback_tail(exc)
    if watch.events or isinstance(exc, SandboxDenied):
        return Failure(Status.INTEGRITY_VIOLATION, f"{where}: " + "; ".join(integrity.violations()), tb)
    if isinstance(exc, KernelUnverified):        # not the submission's fault: no traceback
        return Failure(Status.UNVERIFIED, str(exc))
    if adapter.is_compile_error(exc):
        return Failure(Status.COMPILE_ERROR, f"{where}: {exc}", tb)
    if isinstance(exc, OSError) and exc.errno == errno.EFBIG:
        return Failure(Status.OUTPUT_TOO_LARGE, f"{where}: a file over the size limit: {exc}", tb)
    if is_out_of_memory(exc):
        return Failure(Status.OUT_OF_MEMORY, f"{where}: out of memory: {first_line(exc)}", tb)
    return Failure(Status.RUNTIME_ERROR, f"{where}: {type(exc).__name__}: {exc}", tb)
