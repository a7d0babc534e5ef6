"""A child held stopped after its outputs were handed over by handle (issue 35, docs/measurement.md "The outputs
handed over on the device", protocol point 6): the sandbox's side.

With `SandboxedChild.wait(hold=True)` a child whose harness writes the hold marker (core.slowness.HOLD_MARKER,
after its final OK report) is stopped (SIGSTOP) instead of waited to its end: its device memory, which the
trusted opener is about to copy from, stays allocated and unchanged. A child overdue at a call's deadline is
stopped the same way (its checkpoint's outputs live in its memory). The parent then holds a `HeldChild`:

  kill()               SIGKILL everything of it, reaped, its cgroups closed, the lane descriptions let go (idempotent)
  resume_for_files(t)  the fallback: SIGUSR1 to the harness, SIGCONT, and the ordinary wait (every limit of it)
  lane_cover()         the lane's data file held SHARED through the child's own lane descriptions (flock locks
                       belong to the open file description), the gate untouched: whatever the stopped child held
                       is kept (exclusive downgraded), never waited on, and no timing can start until the child's
                       death (kill), not just the block's end

What is stopped is every process of the child: its process group, its cgroups' members and every descendant of
the process the parent started. bwrap's `--new-session` puts the harness outside the started process's group,
so the group alone would leave it running; the tree covers a machine without cgroups (in a pid namespace an
orphan is re-parented to the namespace's init, still in the tree).

The lane's descriptions are taken from the STOPPED child with pidfd_getfd(2) (Linux 5.6) rather than kept as
dups from its start: a dup would keep the child's lock alive after the child died, and a pre-started cuda child
holds its lane shared while it makes its CUDA context (child/runner.py), so a dup kept through a pre-started
child's idle life would hold a dead child's lock for as long as it idled in the pool.
"""
from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Protocol

from kernelgym_gap.core.lane import Hold, Lane
from kernelgym_gap.sandbox.cgroup import ChildCgroups
from kernelgym_gap.sandbox.outcome import ChildOutcome


class HoldableChild(Protocol):
    """What this module uses of process.SandboxedChild (which imports this module, hence a protocol)."""
    proc: subprocess.Popen
    isolation: str
    lane_fds: tuple[int, int] | None
    lane_ids: tuple[tuple[int, int], ...]
    _cgroups: ChildCgroups

    def kill(self) -> None: ...

    def _finish(self, deadline: float) -> ChildOutcome: ...


_SYS_PIDFD_GETFD = 438          # the same number on x86_64 and aarch64 (the unified table of Linux >= 5.1)
_STOP_ROUNDS = 50               # rounds of "stop whatever is not stopped yet" (a forking child adds processes)
_STOPPED_WAIT_S = 1.0           # how long the parent waits for every process to show as stopped


# ----------------------------------------------------------------------------------- the child's processes

def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                found += [int(x) for x in f.read().split()]
        except (OSError, ValueError):
            pass
    return found


def descendants(root: int) -> list[int]:
    """`root` and every process below it (from /proc's children lists)."""
    seen, todo = [], [root]
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.append(pid)
        todo += _children(pid)
    return seen


def state(pid: int) -> str | None:
    """The process's state letter (R, S, T, Z, ...), or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    # "pid (comm) S ...": comm may hold spaces and parentheses; the state follows the last ')'
    rest = text[text.rfind(")") + 1:].split()
    return rest[0] if rest else None


def _send(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def members(child: HoldableChild) -> list[int]:
    """Every process of the child: the started process's tree and its cgroups' members."""
    return sorted(set(descendants(child.proc.pid)) | set(child._cgroups.pids()))


def wrappers(child: HoldableChild) -> set[int]:
    """The sandbox's own processes, which never get the harness's signals (SIGUSR1 would end bwrap and with it
    the child): the started process under bwrap or unshare, and bwrap's namespace init, its only child."""
    if child.isolation == "bwrap":
        return {child.proc.pid, *_children(child.proc.pid)}
    if child.isolation == "unshare":
        return {child.proc.pid}         # unshare --fork; its child execs the shell, then the harness
    return set()


def stop_all(child: HoldableChild) -> list[int]:
    """SIGSTOP to the child's process group and to each of its processes, round after round until a round finds
    none not yet stopped; then waits (at most _STOPPED_WAIT_S) until each shows as stopped or dead. One in 'D' is
    waited for too, and may stay there: a parent in vfork whose child was stopped before its exec waits in 'D'
    until the child goes on or dies; it runs no code of its own meanwhile, and kill() ends both."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.proc.pid, signal.SIGSTOP)
    stopped: set[int] = set()
    for _ in range(_STOP_ROUNDS):
        new = [p for p in members(child) if p not in stopped]
        if not new:
            break
        for p in new:
            _send(p, signal.SIGSTOP)
        stopped.update(new)
    until = time.monotonic() + _STOPPED_WAIT_S
    while time.monotonic() < until and any(state(p) not in (None, "T", "t", "Z", "X") for p in stopped):
        time.sleep(0.002)
    return sorted(stopped)


def continue_all(child: HoldableChild) -> None:
    for p in members(child):
        _send(p, signal.SIGCONT)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.proc.pid, signal.SIGCONT)


def harness_alive(child: HoldableChild) -> bool:
    """Whether any process of the child other than the sandbox's own still lives (a zombie does not): after the
    stop, a child that exited between the marker's check and the SIGSTOP is an ordinary ending."""
    if child.proc.poll() is not None:
        return False
    skip = wrappers(child)
    return any(state(p) not in (None, "Z", "X") for p in members(child) if p not in skip)


# ------------------------------------------------------------------------------- the child's lane descriptions

def _pidfd_getfd(pid: int, fd: int) -> int:
    """A descriptor of this process that refers to the same open file description as `pid`'s `fd`; OSError when
    the kernel refuses (too old, no permission, the descriptor not open)."""
    pidfd = os.pidfd_open(pid)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        got = libc.syscall(_SYS_PIDFD_GETFD, pidfd, fd, 0)
        if got < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        return got                       # pidfd_getfd sets close-on-exec on the new descriptor
    finally:
        os.close(pidfd)


def take_lane(child: HoldableChild, candidates: list[int]) -> tuple[int, int] | None:
    """The (gate, data) open file descriptions the child's harness holds its lane on, as descriptors of the
    parent, from the first stopped process whose descriptors at the numbers handed to it are still the lane's
    two files (device and inode as at the start); None without a lane or when none is found. The child may have
    closed or replaced those numbers: then nothing is taken and lane_cover waits like any other holder."""
    if child.lane_fds is None:
        return None
    (gate_no, data_no), ids = child.lane_fds, child.lane_ids
    for pid in candidates:
        try:
            now = [os.stat(f"/proc/{pid}/fd/{n}") for n in (gate_no, data_no)]
        except OSError:
            continue
        if [(s.st_dev, s.st_ino) for s in now] != list(ids):
            continue
        taken: list[int] = []
        try:
            for n in (gate_no, data_no):
                taken.append(_pidfd_getfd(pid, n))
            got = [os.fstat(fd) for fd in taken]
            if [(s.st_dev, s.st_ino) for s in got] == list(ids):
                return taken[0], taken[1]
        except OSError:
            pass
        for fd in taken:
            os.close(fd)
    return None


# ------------------------------------------------------------------------------------------ the held child

class HeldChild:
    """A stopped child (see the module's docstring). Its wall deadline keeps running: resume_for_files ends at
    it; a held child nobody kills is killed by Launcher.close (or SandboxedChild.kill). Thread-safe."""

    def __init__(self, child: HoldableChild, deadline: float, lane: tuple[int, int] | None):
        self._child, self.deadline, self._lane = child, deadline, lane
        self.pid = child.proc.pid
        self.stopped_at = time.monotonic()
        # reentrant: kill() and resume_for_files hold it while the child's end calls back into _released
        self._lock = threading.RLock()
        self._done = False

    @property
    def ended(self) -> bool:
        return self._done

    def _released(self) -> None:
        """Called by the child's end (SandboxedChild._end, whoever ended it: kill(), resume_for_files, or the
        child's own kill() from Launcher.close), only after every process of it is dead: the lane is let go after
        the child's death, so no kernel it left running overlaps another evaluation's exclusive timing."""
        with self._lock:                # never while lane_cover dups them (a closed number may name another file)
            self._done = True
            lane, self._lane = self._lane, None
            for fd in lane or ():
                with contextlib.suppress(OSError):
                    os.close(fd)

    def kill(self) -> None:
        """SIGKILL everything of the child, reaped, its cgroups closed; then its lane descriptions closed."""
        with self._lock:
            self._child.kill()          # a no-op once it ended

    def resume_for_files(self, timeout_s: float) -> ChildOutcome:
        """The fallback: SIGUSR1 to the harness (it writes its held outputs as files and exits), SIGCONT to every
        process, then the ordinary wait until it ends, at most `timeout_s` and never past the child's own wall
        deadline, with the output and scratch limits of the ordinary wait. The caller re-reads the report."""
        with self._lock:
            if self._done:
                raise RuntimeError("this held child was already killed or resumed")
            self._done = True
            child = self._child
            try:
                skip = wrappers(child)
                for p in members(child):
                    if p not in skip:
                        _send(p, signal.SIGUSR1)    # pending while stopped; delivered at the SIGCONT
                continue_all(child)
            except BaseException:
                child.kill()
                raise
            return child._finish(min(self.deadline, time.monotonic() + timeout_s))   # it ends the child

    @contextlib.contextmanager
    def lane_cover(self, timeout_s: float | None = None) -> Iterator[Hold | None]:
        """The lane's data file SHARED through the child's own descriptions for the block, the gate untouched
        (core/lane.Lane.acquire_data_shared): a stopped child's shared hold is kept and an exclusive one
        downgraded, at once; a child that held nothing (it let the lane go to compile) waits only for a timing
        in progress, up to `timeout_s` (core/lane.LaneTimeout). None without a lane (lanes are optional).

        Shared is enough: what the cover keeps out is another evaluation's TIMING (exclusive), beside which a
        kernel the stopped child launched may still run. Exclusive was asked before 2026-12-07 and deadlocked:
        a timing waiting at the gate for the stopped child's shared hold held the gate the cover waited for,
        until the timing's own lane wait ran out (136 s on the H100 full mix, with the hand-over on).

        Never let go before the child's death: the lock belongs to the child's descriptions, which kill() closes
        only after every process of the child is dead (a kernel it launched may still run while it is stopped).
        The block works on dups of its own, closed at its end whoever killed the child meanwhile: a kill() from
        another thread cannot leave it flocking a descriptor number that names another file by then."""
        with self._lock:
            own = None
            if self._lane is not None:
                own = tuple(fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 0) for fd in self._lane)
        if own is None:
            yield None
            return
        try:
            yield Lane(*own, owned=False).acquire_data_shared(timeout_s)
        finally:
            for fd in own:              # no LOCK_UN: the description still held by the child's (or kill's) end
                with contextlib.suppress(OSError):
                    os.close(fd)
