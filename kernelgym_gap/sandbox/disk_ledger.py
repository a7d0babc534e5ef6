"""Disk reservations: evaluations that share one scratch file system (several slots per GPU, several GPUs,
several services or CLI runs on one host) reserve the disk they may write before their child starts, so that
two big jobs that each see enough free space do not both write and one of them die of ENOSPC mid-write (an
honest kernel's false zero). sandbox/disk.py derives what a job needs; this module keeps the book.

The book is one ledger per user and scratch root: `<root>/kgg-disk-<uid>.ledger` (JSON, replaced atomically)
guarded by flock(2) on `<root>/kgg-disk-<uid>.lock`, as the GPU lanes are (core/lane.py); both are removed
when the last reservation goes. Per user because a
file another user made in a sticky /tmp cannot be opened by this one (fs.protected_regular); both are 0600,
so the sandboxed children (fresh uids) can neither read nor forge it. Each entry: the reserving process's pid
and its start time (/proc/<pid>/stat field 22: a recycled pid is not trusted), a random token (one process
holds several: the service's slots), the host, the bytes reserved and the scratch directories written into.
Entries whose process is gone (a parent killed with SIGKILL never released) are dropped whenever the ledger
is read; entries of another host (a shared file system) cannot be checked and are counted as live.

What a job reserves (`reserve_bytes`): the most its sandbox lets it write, the child's quota plus the compile
probes' shares where it has them (disk.split), derived or configured alike. Reserving only the honest need
would leave a hostile neighbour free to write its whole quota into space an honest job counted on: the false
zero again, caused by another submission. A configured quota (6 GiB) therefore reserves its quota too; an
operator who runs many slots on a small disk lowers SandboxConfig.scratch_quota_bytes (a derived job raises
its own quota to what it needs whatever the floor). A job without a quota (None) reserves its honest need.

What is counted (`_fits`): free space (statvfs) minus what each other live reservation still has to write,
its bytes less what its directories already hold (st_blocks, floored at 0): what it already wrote is already
out of the free space, so it is not subtracted twice; a directory that cannot be read counts as empty (the
whole reservation still to come: the safe side). The capacity a job could have if nothing else ran is the
free space plus what the other reservations' directories hold. A job whose honest need exceeds that capacity
raises ScratchSpaceError at once (it can never run here); a job whose quota exceeds it but whose honest need
fits reserves the capacity (it runs once the others are done, as disk.ensure_free allowed before). Otherwise a
job that does not fit WAITS, polling, up to Placement.disk_wait_s, then raises ScratchSpaceError naming how
long it waited and the holders (pid, bytes, directory).

Not counted: writes outside the ledger (other programs, a different scratch root on the same file system:
give every service of a host one scratch root), and the compile probes' directories, which are made after the
reservation and not attached (their share is reserved and never subtracted: at most 1 GiB counted twice).
"""
from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import logging
import os
import secrets
import socket
import tempfile
import time
from collections.abc import Callable, Iterator

from kernelgym_gap.sandbox import disk

log = logging.getLogger(__name__)

VERSION = 1
_POLL_S = (0.05, 2.0)            # first and longest sleep between looks while a reservation waits


def _statvfs_free(root: str) -> int:
    return disk.shutil.disk_usage(root).free


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (None: no /proc, or no such process)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    # the command name (field 2) is in parentheses and may hold spaces or ')': split after the last ')'
    fields = raw[raw.rfind(b")") + 2:].split()
    return fields[19].decode() if len(fields) > 19 else None


def _alive(entry: dict) -> bool:
    """Whether the entry's process still runs (its pid with the same start time)."""
    if entry.get("host") != socket.gethostname():
        return True                 # another host's process cannot be checked: counted (see the docstring)
    pid = entry.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    start = _start_time(pid)
    if start is not None:
        return start == entry.get("start")
    if os.path.exists(f"/proc/{os.getpid()}/stat"):
        return False                # /proc works here and has no such pid: gone
    try:                            # no /proc at all: the pid alone
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def used_bytes(path: str) -> int:
    """What a directory tree holds on disk (st_blocks), symlinks not followed; 0 when it cannot be read."""
    total = 0
    stack = [path]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for e in it:
                    try:
                        st = e.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    total += st.st_blocks * 512
                    if e.is_dir(follow_symlinks=False):
                        stack.append(e.path)
        except OSError:
            continue
    return total


def reserve_bytes(limits: disk.JobDisk, with_probe: bool) -> int:
    """What a job with `limits` (the child's, disk.job_limits) reserves: see the module's docstring."""
    if limits.quota is None:
        return limits.honest_bytes()
    return limits.quota + (2 * disk.probe_quota(limits.quota) if with_probe else 0)


def ledger_paths(root: str) -> tuple[str, str]:
    base = os.path.join(root, f"kgg-disk-{os.getuid()}")
    return base + ".lock", base + ".ledger"


class Reservation:
    """One job's entry in the ledger, from `reserve` until `release` (idempotent; also on `with` exit)."""

    def __init__(self, root: str, entry: dict | None, waited_s: float = 0.0):
        self.root, self.entry, self.waited_s = root, entry, waited_s

    @property
    def bytes(self) -> int:
        return 0 if self.entry is None else self.entry["bytes"]

    def attach(self, *dirs) -> None:
        """Names the directories the job writes into, so that what they hold is not counted twice."""
        if self.entry is None:
            return
        new = [os.fspath(d) for d in dirs if d is not None]
        with _locked(self.root) as book:
            for e in book.entries:
                if e["token"] == self.entry["token"]:
                    e["dirs"] = sorted(set(e.get("dirs", [])) | set(new))
                    self.entry = e
            book.save()

    def release(self) -> None:
        if self.entry is None:
            return
        token, self.entry = self.entry["token"], None
        with _locked(self.root) as book:
            book.entries = [e for e in book.entries if e["token"] != token]
            book.save()

    def __enter__(self) -> Reservation:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


@dataclasses.dataclass
class _Book:
    path: str
    entries: list

    def save(self) -> None:
        fd, tmp = tempfile.mkstemp(prefix=".kgg-disk-", dir=os.path.dirname(self.path))
        try:
            with os.fdopen(fd, "w") as f:
                json.dump({"version": VERSION, "entries": self.entries}, f)
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise


def _open_locked(lock_path: str) -> int:
    """The lock file, open and flock'ed. The last release removes the files (a scratch root is left as it was
    found), so a lock taken on a file that was unlinked meanwhile is let go and taken again on the new one."""
    while True:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                if os.stat(lock_path).st_ino == os.fstat(fd).st_ino:
                    return fd
            except FileNotFoundError:
                pass
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)


@contextlib.contextmanager
def _locked(root: str) -> Iterator[_Book]:
    """The ledger under its lock, live entries only. A ledger that cannot be parsed (written by something
    else) is moved aside, named in a warning, and the book starts empty: blocking every evaluation on the
    host would be worse than over-committing the jobs in flight once. A book left empty removes both files."""
    lock_path, path = ledger_paths(root)
    fd = _open_locked(lock_path)
    book = None
    try:
        entries = []
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
            if not isinstance(data, dict) or data.get("version") != VERSION or not isinstance(data.get("entries"), list):
                raise ValueError("not a version-1 ledger")
            entries = [e for e in data["entries"] if isinstance(e, dict) and isinstance(e.get("token"), str)
                       and isinstance(e.get("bytes"), int)]
        except FileNotFoundError:
            pass
        except (ValueError, OSError) as e:
            aside = f"{path}.bad-{int(time.time())}"
            with contextlib.suppress(OSError):
                os.replace(path, aside)
            log.warning("the disk ledger %s could not be read (%s): moved to %s, starting empty", path, e, aside)
        live = [e for e in entries if _alive(e)]
        book = _Book(path, live)
        if len(live) != len(entries):
            book.save()             # dead processes' entries go for everyone
        yield book
    finally:
        if book is not None and not book.entries:
            for p in (path, lock_path):             # the ledger first: the lock still guards it
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(p)
        os.close(fd)                # releases the flock


def _holders(entries: list) -> str:
    if not entries:
        return "no reservation is held"
    return "held: " + "; ".join(f"pid {e['pid']} on {e.get('host')} {e['bytes'] / 2**30:.2f} GiB "
                                f"({', '.join(e.get('dirs') or ['no directory yet'])})" for e in entries)


def reserve(scratch_root: str | None, limits: disk.JobDisk, *, with_probe: bool, wait_s: float,
            free: Callable[[str], int] | None = None, poll_s: tuple[float, float] = _POLL_S) -> Reservation:
    """Reserves the job's disk (reserve_bytes) on the scratch file system at `scratch_root` (else the system
    temp), waiting up to `wait_s` seconds for it; ScratchSpaceError at once when the honest need cannot fit
    even with nothing else running, or after the wait. `free(root)` gives the free bytes (statvfs by default;
    tests inject one). A job that reserves nothing gets an empty Reservation and never touches the ledger."""
    if isinstance(wait_s, bool) or not isinstance(wait_s, (int, float)) or not wait_s >= 0:
        raise ValueError(f"the disk wait must be a non-negative number of seconds, not {wait_s!r}")
    root = os.path.abspath(scratch_root or tempfile.gettempdir())
    want = reserve_bytes(limits, with_probe)
    if want <= 0:
        return Reservation(root, None)
    free = free or _statvfs_free
    os.makedirs(root, exist_ok=True)
    t0 = time.monotonic()
    sleep = poll_s[0]
    while True:
        with _locked(root) as book:
            avail = free(root)
            written = {e["token"]: sum(used_bytes(d) for d in e.get("dirs", [])) for e in book.entries}
            capacity = avail + sum(written.values())
            disk.ensure_free(root, limits, free=capacity)   # the honest need never fits here, even alone: raises
            bytes_ = max(limits.honest_bytes(), min(want, capacity))
            pending = sum(max(0, e["bytes"] - written[e["token"]]) for e in book.entries)
            if bytes_ <= avail - pending:
                entry = {"pid": os.getpid(), "start": _start_time(os.getpid()), "host": socket.gethostname(),
                         "token": secrets.token_hex(8), "bytes": bytes_, "dirs": [], "since": time.time()}
                book.entries.append(entry)
                book.save()
                return Reservation(root, entry, time.monotonic() - t0)
            holders = _holders(book.entries)
        waited = time.monotonic() - t0
        if waited >= wait_s:
            raise disk.ScratchSpaceError(
                f"waited {waited:.1f} s for {bytes_ / 2**30:.2f} GiB of scratch at {root} (Placement.disk_wait_s "
                f"= {wait_s:g}): {avail / 2**30:.2f} GiB free, {pending / 2**30:.2f} GiB still to be written by "
                f"other evaluations' reservations; {holders}")
        time.sleep(min(sleep, wait_s - waited))
        sleep = min(2 * sleep, poll_s[1])
