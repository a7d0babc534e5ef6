"""The child's hold after its final report when it hands its outputs over on the device (Job.outputs_by_handle,
issue 35; docs/measurement.md, "The outputs handed over on the device", protocol point 6 and the fallback).

The handed-over outputs live in this process's GPU memory, so it must not exit once its final report, status
OK, is written: it creates `core.slowness.HOLD_MARKER` beside the report (after the report's atomic rename:
the marker means the report is complete) and waits. The parent stops it (SIGSTOP) as soon as it sees the
marker, has the opener copy the outputs out, and kills it (sandbox/process.py). If the hand-over fails for a
reason that is not the child's doing, the parent continues it and sends SIGUSR1 instead: the fallback. The
child then writes the held outputs as files, rewrites its reports to name those files, and exits with the OK
report's exit code.

The wait blocks in a read of a pipe that CPython's signal handler writes to (signal.set_wakeup_fd): no busy
spin, and no signal lost between the marker and the wait (the handler is installed before the marker
exists). Not `signal.sigwait`: a process-directed SIGUSR1 goes to any thread that does not block it, and
torch's threads do not, so its default action (terminate) could end the child instead. With a Python handler
installed, the C handler runs in whichever thread receives it and writes the pipe all the same.

The names used after the submission loads are bound at import; the snapshots cover this module as they cover
every module of the harness (child/snapshots.harness_modules): child/run.py imports it before the snapshot.
"""
from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

from kernelgym_gap.core.slowness import HOLD_MARKER

FALLBACK_SIGNAL = signal.SIGUSR1


def _noted(signum, frame) -> None:
    """The Python-level handler: it only has to exist (the C handler writes the wakeup pipe)."""


def _create_marker(path: Path) -> None:
    """A new empty file at `path`; whatever was there (the submission may have left a file or a link by that
    name) is removed first, so the marker is ours and made now."""
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o600))


def hold_outputs(directory: Path, fallback: Callable[[], int]) -> int:
    """Creates `directory / HOLD_MARKER` and waits for FALLBACK_SIGNAL (normally it never comes: the parent
    kills this process). On the signal: removes the marker (nothing is held any more), then runs `fallback`
    (write the outputs as files, rewrite the reports) and returns what it returns, the exit code. Runs on the
    main thread (signal handlers and the wakeup descriptor are set there); where it cannot hold, `fallback`
    runs at once."""
    marker = Path(directory) / HOLD_MARKER
    try:
        r, w = os.pipe()
        os.set_blocking(w, False)   # set_wakeup_fd requires it: a full pipe must not block a signal handler
        previous_fd = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        previous = signal.signal(FALLBACK_SIGNAL, _noted)
        _create_marker(marker)      # last: if anything before it failed, there is no marker
    except (OSError, ValueError):
        # no hold is possible (not the main thread, no descriptor left, the marker not creatable): the outputs
        # go by file at once, as the fallback writes them; the parent sees an ordinary exit and reads that report
        return fallback()
    while True:
        got = os.read(r, 512)       # blocks; each byte a caught signal's number, others are not ours
        if FALLBACK_SIGNAL in got:
            break
        if not got:                 # cannot happen while `w` is open here; never spin on it
            raise RuntimeError("the hold's wakeup pipe closed")
    # as they were: the integrity snapshots compare the signal handlers, and the fallback's failure report
    # (a write that failed) must not read our own handler as the submission's
    signal.signal(FALLBACK_SIGNAL, previous)
    signal.set_wakeup_fd(previous_fd)
    try:
        marker.unlink()
    except FileNotFoundError:
        pass
    return fallback()
