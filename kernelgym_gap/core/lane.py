"""Lanes: several evaluations share one GPU for the stages that need no exclusive device (correctness trials,
the trusted checker), while a measurement (the child's timing, the calibration, the torch.compile baseline)
never shares it.

One lane per GPU: a cross-process, writer-preferring reader/writer lock made of two files in a lane directory,
`<lane_dir>/gpu<N>.gate` and `<lane_dir>/gpu<N>.data`, locked with flock(2):

  shared     gate exclusive (briefly), then data shared, then the gate released
  exclusive  gate exclusive (held: no new reader passes it), then data exclusive

A writer waiting for the data file holds the gate, so readers that come after it wait behind it (writer
preference: timing is not starved by a stream of correctness trials). flock locks belong to the open file
description, so each holder opens the files itself (`Lane.open`), or inherits descriptors made for it alone:
the sandboxed child cannot open anything outside its view, so the parent opens a pair per child and hands them
over at fd numbers >= FD_BASE (`child_fds`), named in the child's environment (ENV_FDS); the child takes them
back with `inherited()`. A child that dies releases its locks with its descriptors.

Nothing here imports another subpackage: the parent, the child and the trusted processes all use it."""
from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
import stat
import time
from collections.abc import Iterator, Mapping

from kernelgym_gap.core.errors import HarnessError

FD_BASE = 200                     # the child's inherited lane descriptors sit at or above this number
ENV_FDS = "KGG_LANE_FDS"          # "GATE,DATA": the child's inherited descriptors
ENV_WAIT = "KGG_LANE_WAIT_S"      # how long the child waits for its lane in all before it goes on without it
_POLL_S = (0.001, 0.05)           # first and longest sleep between tries when a wait has a timeout
# bound at import: in the child, a submission that replaces fcntl.flock or time.monotonic afterwards does not
# get its code run by the harness's lane calls (the snapshots cover this module, as every harness module)
_FLOCK, _NOW, _SLEEP = fcntl.flock, time.monotonic, time.sleep


class LaneTimeout(HarnessError):
    """The lane was not free within the timeout."""

    def __init__(self, mode: str, waited_s: float):
        super().__init__(f"the lane was not free for {mode} use within {waited_s:.1f} s")
        self.mode, self.waited_s = mode, waited_s


@dataclasses.dataclass
class Hold:
    """One hold of a lane: how long it waited (seconds)."""
    mode: str
    wait_s: float


def lane_paths(lane_dir: str | os.PathLike, index: int) -> tuple[str, str]:
    base = os.path.join(os.fspath(lane_dir), f"gpu{int(index)}")
    return base + ".gate", base + ".data"


def _flock(fd: int, op: int, deadline: float | None) -> bool:
    """flock, blocking until `deadline` (None: for as long as it takes). False when the deadline passed."""
    if deadline is None:
        _FLOCK(fd, op)
        return True
    sleep = _POLL_S[0]
    while True:
        try:
            _FLOCK(fd, op | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            pass
        left = deadline - _NOW()
        if left <= 0:
            return False
        _SLEEP(min(sleep, left))
        sleep = min(2 * sleep, _POLL_S[1])


class Lane:
    """The reader/writer lock of one GPU over two open descriptors (see the module's docstring). Not
    reentrant: one hold at a time per Lane object (two holders in one process open two Lanes)."""

    def __init__(self, gate_fd: int, data_fd: int, owned: bool = True):
        self.gate_fd, self.data_fd, self.owned = gate_fd, data_fd, owned

    @classmethod
    def open(cls, lane_dir: str | os.PathLike, index: int) -> Lane:
        """A fresh pair of open file descriptions of GPU `index`'s lane (the files are made if missing)."""
        os.makedirs(lane_dir, exist_ok=True)
        fds: list[int] = []
        try:
            for path in lane_paths(lane_dir, index):
                fds.append(os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600))
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        return cls(*fds)

    def acquire(self, mode: str, timeout_s: float | None = None) -> Hold:
        """Waits for the lane in `mode` ("shared" or "exclusive"); LaneTimeout past `timeout_s`."""
        if mode not in ("shared", "exclusive"):
            raise ValueError(f"lane mode must be 'shared' or 'exclusive', not {mode!r}")
        t0 = _NOW()
        deadline = None if timeout_s is None else t0 + max(timeout_s, 0.0)
        if not _flock(self.gate_fd, fcntl.LOCK_EX, deadline):
            raise LaneTimeout(mode, _NOW() - t0)
        op = fcntl.LOCK_SH if mode == "shared" else fcntl.LOCK_EX
        try:
            got = _flock(self.data_fd, op, deadline)
        except BaseException:
            _FLOCK(self.gate_fd, fcntl.LOCK_UN)
            raise
        if not got or mode == "shared":
            _FLOCK(self.gate_fd, fcntl.LOCK_UN)     # a reader passes the gate; a writer keeps it
        if not got:
            raise LaneTimeout(mode, _NOW() - t0)
        return Hold(mode, _NOW() - t0)

    def acquire_data_shared(self, timeout_s: float | None = None) -> Hold:
        """The data file SHARED without passing the gate (LaneTimeout past `timeout_s`): for a cover of a hold
        that already exists (sandbox/held.lane_cover), which must not queue behind a writer waiting at the
        gate, since that writer waits for the very hold being covered (the deadlock of 2026-12-07: a stopped
        child's shared hold, a timing waiting for it at the gate, the cover waiting for the gate). On a
        description that holds the data already it never waits: shared is kept, exclusive is downgraded
        (nobody else holds it, and the gate, which that holder keeps, still stops everyone else). Either
        way no other evaluation's timing (exclusive) can start while it is held."""
        t0 = _NOW()
        deadline = None if timeout_s is None else t0 + max(timeout_s, 0.0)
        if not _flock(self.data_fd, fcntl.LOCK_SH, deadline):
            raise LaneTimeout("shared", _NOW() - t0)
        return Hold("shared", _NOW() - t0)

    def release(self) -> None:
        _FLOCK(self.data_fd, fcntl.LOCK_UN)
        _FLOCK(self.gate_fd, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def hold(self, mode: str, timeout_s: float | None = None) -> Iterator[Hold]:
        held = self.acquire(mode, timeout_s)
        try:
            yield held
        finally:
            self.release()

    def close(self) -> None:
        if self.owned:
            for fd in (self.gate_fd, self.data_fd):
                with contextlib.suppress(OSError):
                    os.close(fd)
            self.owned = False

    def __enter__(self) -> Lane:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@contextlib.contextmanager
def hold_if_possible(lane: Lane | None, mode: str, timeout_s: float | None) -> Iterator[Hold | LaneTimeout | None]:
    """Holds `lane` in `mode` for the block when it can and yields how it went: the Hold; the LaneTimeout
    when the wait ran past `timeout_s`; None without a lane or when its descriptors fail (OSError: a
    submission closed them). Lanes are optional: the block runs in every case."""
    got: Hold | LaneTimeout | None = None
    if lane is not None:
        try:
            got = lane.acquire(mode, timeout_s)
        except LaneTimeout as e:
            got = e
        except OSError:
            got = None
    try:
        yield got
    finally:
        if isinstance(got, Hold):
            with contextlib.suppress(OSError):
                lane.release()


AUTO = "auto"


def resolve(lane_dir: str | None) -> str | None:
    """Placement.lane_dir as a directory: "auto" is this user's lanes on this host."""
    if lane_dir != AUTO:
        return lane_dir
    import tempfile
    return os.path.join(tempfile.gettempdir(), f"kernelgym_gap-lanes-{os.getuid()}")


@contextlib.contextmanager
def held(lane_dir: str | None, index: int, mode: str, waits: dict | None = None,
         key: str | None = None) -> Iterator[None]:
    """Holds GPU `index`'s lane in `mode` for the block, on fresh descriptors; a no-op when lane_dir is None.
    The wait goes into `waits[key]` (seconds) when both are given."""
    lane_dir = resolve(lane_dir)
    if lane_dir is None:
        yield
        return
    with Lane.open(lane_dir, index) as lane, lane.hold(mode) as h:
        if waits is not None and key is not None:
            waits[key] = h.wait_s
        yield


# ---- the child's lane ---------------------------------------------------------------------------------

def child_fds(lane_dir: str, index: int, wait_s: float) -> tuple[tuple[int, int], dict[str, str]]:
    """A pair of descriptors at or above FD_BASE for one child (to pass with Popen's pass_fds and close in
    the parent once it started) and the variables that name them to the child."""
    lane = Lane.open(resolve(lane_dir), index)
    try:
        fds = (fcntl.fcntl(lane.gate_fd, fcntl.F_DUPFD_CLOEXEC, FD_BASE),)
        fds += (fcntl.fcntl(lane.data_fd, fcntl.F_DUPFD_CLOEXEC, FD_BASE),)
    finally:
        lane.close()
    return fds, {ENV_FDS: f"{fds[0]},{fds[1]}", ENV_WAIT: f"{wait_s:g}"}


def inherited(environ: Mapping[str, str] | None = None) -> tuple[Lane | None, float | None]:
    """The lane the parent handed this child and how long it may wait for it in all (None: no limit), or
    (None, None) when there is none or its descriptors are missing or not open: lanes are optional."""
    environ = os.environ if environ is None else environ
    raw = environ.get(ENV_FDS)
    if not raw:
        return None, None
    try:
        gate, data = (int(x) for x in raw.split(","))
        for fd in (gate, data):
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None, None
            os.set_inheritable(fd, False)       # nothing the child starts gets them
    except (ValueError, OSError):
        return None, None
    try:
        wait = float(environ.get(ENV_WAIT, ""))
    except ValueError:
        wait = None
    return Lane(gate, data, owned=False), wait
