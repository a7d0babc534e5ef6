"""The watch state inside the child: whether submission code is running now, and whether the DSL's own
machinery (a launch, a compilation) is running inside it. Guards and recorders act only while
`WATCH.recording`; `submission_code()` is entered around the import, each entry call and the release of what
it returned, `dsl_region()` by the DSL adapters (kernelgym_gap/dsl/) around their launch and compile paths.

Every harness module that binds `WATCH` is checked by the snapshots (snapshots.py) for a replacement: the
object is shared, never copied."""
from __future__ import annotations

import contextlib


class WatchState:
    def __init__(self):
        self.active = False          # submission code may be running
        self.dsl_depth = 0           # inside the DSL's launch/compile machinery
        self.events: list[str] = []  # refused or forbidden actions, in order
        self.backend = "cpu"

    @property
    def recording(self) -> bool:
        return self.active and self.dsl_depth == 0

    def note(self, what: str) -> None:
        if len(self.events) < 100:
            self.events.append(what)


WATCH = WatchState()


class SandboxDenied(PermissionError):
    """Raised into the submission when it tries something the harness forbids (recorded as well)."""


@contextlib.contextmanager
def submission_code():
    """Submission code runs inside: guards on, DSL regions reset (a launch inside re-enters its own)."""
    saved = WATCH.active, WATCH.dsl_depth
    WATCH.active, WATCH.dsl_depth = True, 0
    try:
        yield
    finally:
        WATCH.active, WATCH.dsl_depth = saved


@contextlib.contextmanager
def dsl_region():
    """The DSL's own machinery runs inside (interpreter copies, compilers, caches): not the submission's."""
    WATCH.dsl_depth += 1
    try:
        yield
    finally:
        WATCH.dsl_depth -= 1


def user_callback(fn):
    """Wraps a callable the submission hands to the DSL (a grid function): it runs as submission code."""
    def wrapped(*args, **kwargs):
        if not WATCH.active:
            return fn(*args, **kwargs)
        saved = WATCH.dsl_depth
        WATCH.dsl_depth = 0
        try:
            return fn(*args, **kwargs)
        finally:
            WATCH.dsl_depth = saved
    return wrapped
