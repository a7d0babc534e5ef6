"""The child's call marker: which call of the submission runs now, for the parent's call deadlines
(sandbox/deadlines.py). `begin(i)` before the i-th call (the order of Job.call_bounds), `end()` after it.

The parent reads only which call runs, never the bound written here (it keeps its own copy), so nothing
here is trusted; a child without marks only has the wall deadline. What it writes with is bound at import,
before the submission loads (the snapshots cover it, as every harness module)."""
from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from kernelgym_gap.core.record import CALL_MARKER

_open, _write, _close, _replace = os.open, os.write, os.close, os.replace
_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)


class CallMarks:
    """One child's marker, beside its report. Writes nothing when the job has no call deadlines."""

    def __init__(self, directory: Path, bounds):
        self.path = str(Path(directory) / CALL_MARKER)
        self.tmp = self.path + ".tmp"
        self.bounds = tuple(bounds)
        self.open: int | None = None        # the call marked running
        self.compiles = 0                   # compilations marked so far (the parent restarts its launch clock per one)
        self._depth = 0

    def _put(self, text: str) -> None:
        # written whole, then renamed over the marker: the parent never reads half a line
        try:
            fd = _open(self.tmp, _FLAGS, 0o644)
            try:
                _write(fd, text.encode())
            finally:
                _close(fd)
            _replace(self.tmp, self.path)
        except OSError:
            pass        # no marker: the call runs under the wall deadline alone

    def begin(self, i: int) -> None:
        """Marks call i running (the previous one, if still open, done first)."""
        if self.open is not None:
            self.end()
        if 0 <= i < len(self.bounds):
            self._put(f"call {i} {self.bounds[i].bound_s:.3f}\n")
            self.open = i

    @contextlib.contextmanager
    def compiling(self) -> Iterator[None]:
        """Around one compilation inside the marked call (the dsl adapters' compile hook): `compiling i n` while
        it runs, `compiled i n` after, so that a call whose bound has a launch part (CallBound.launch_s) is
        held to it only once its compiles are done. Nested compiles are marked once."""
        i = self.open
        if i is None or self._depth or self.bounds[i].launch_s is None:
            yield
            return
        self._depth += 1
        self.compiles += 1
        n = self.compiles
        self._put(f"compiling {i} {n}\n")
        try:
            yield
        finally:
            self._depth -= 1
            if self.open == i:
                self._put(f"compiled {i} {n}\n")

    def end(self) -> None:
        if self.open is not None:
            self._put(f"done {self.open}\n")
            self.open = None
