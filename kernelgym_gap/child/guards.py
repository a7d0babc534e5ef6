"""Guards: what submission code may not do while it runs (outside a DSL region), and the processes it may not
leave behind.

`install_guards` adds an audit hook and thread-start wrappers that refuse to start processes or threads, send
signals, open sockets, or create, change or remove files; each refusal is recorded in `WATCH.events` and fails
the evaluation as an integrity violation even when the submission catches the exception.
`leftover_processes` finds what a raw fork() (which no audit hook sees) left running."""
from __future__ import annotations

import os
import sys
import threading

import _thread

from kernelgym_gap.dsl.watch import WATCH, SandboxDenied

_PROCESS_EVENTS = frozenset({"os.fork", "os.forkpty", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
                   "subprocess.Popen", "pty.spawn", "os.startfile"})
_SIGNAL_EVENTS = frozenset({"os.kill", "os.killpg", "signal.pthread_kill"})
_SOCKET_EVENTS = frozenset({"socket.__new__", "socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg",
                  "socket.getaddrinfo", "socket.gethostbyname"})
_FS_EVENTS = frozenset({"os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.symlink", "os.link", "os.chmod",
              "os.chown", "os.truncate", "os.utime", "os.mkfifo", "os.mknod", "shutil.rmtree", "os.chflags",
              "os.setxattr", "os.removexattr"})
# frozen: the snapshots compare these bindings by identity, and a set could be emptied in place
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_installed = False


def _audit(event: str, args) -> None:
    if not WATCH.recording:
        return
    what = None
    if event in _PROCESS_EVENTS:
        what = f"started a process ({event})"
    elif event in _SIGNAL_EVENTS:
        what = f"sent a signal ({event} {args[:2]!r})"
    elif event in _SOCKET_EVENTS:
        what = f"used the network ({event})"
    elif event in _FS_EVENTS:
        what = f"changed the file system ({event} {str(args[0])[:120]!r})"
    elif event == "open":
        path, mode, flags = (tuple(args) + (None, None, None))[:3]
        writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or \
                 (isinstance(flags, int) and flags & _WRITE_FLAGS)
        if writes:
            what = f"opened a file for writing ({str(path)[:120]!r})"
    if what is not None:
        WATCH.note(what)
        raise SandboxDenied(f"kernelgym_gap: a submission may not do this: {what}")


def _thread_guard(original):
    def start_new_thread(function, args, kwargs=None, *rest):
        if WATCH.recording:
            WATCH.note("started a thread")
            raise SandboxDenied("kernelgym_gap: a submission may not start threads (work would escape the "
                                "checks and the timing)")
        return original(function, args, *(() if kwargs is None else (kwargs,)), *rest)
    start_new_thread.__wrapped__ = None   # no pointer back to the original
    return start_new_thread


def install_guards(backend: str) -> None:
    """Once per child, before the submission is imported (an audit hook cannot be removed)."""
    global _installed
    if _installed:
        return
    _installed = True
    WATCH.backend = backend
    sys.addaudithook(_audit)
    guard = _thread_guard(_thread.start_new_thread)
    _thread.start_new_thread = guard
    if hasattr(_thread, "start_new"):
        _thread.start_new = guard
    threading._start_new_thread = guard


# ---------------------------------------------------------------------------------- leftover processes

def _status_field(pid: str, field: str) -> str | None:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


def _cgroup_of(pid: str) -> str | None:
    try:
        with open(f"/proc/{pid}/cgroup") as fh:
            return fh.read()
    except OSError:
        return None


def _ancestors(me: int) -> set[int]:
    ancestors, p = set(), str(me)
    for _ in range(64):
        ppid = _status_field(p, "PPid")
        if not ppid or ppid == "0":
            break
        ancestors.add(int(ppid))
        p = ppid
    return ancestors


def leftover_processes() -> list[int]:
    """Processes of this sandbox other than this one and its ancestors: a daemon the submission forked (even
    with a raw fork() through ctypes, which no audit hook sees). Only where they can be told apart from the
    host's: in the sandbox's own pid namespace, or by this child's own cgroup (sandbox/ tells us which)."""
    mode = os.environ.get("KGG_SANDBOX", "")
    own_cgroup = os.environ.get("KGG_SANDBOX_CGROUP") == "1"
    if mode not in ("bwrap", "unshare") and not own_cgroup:
        return []
    me = os.getpid()
    ancestors = _ancestors(me)
    my_cgroup = _cgroup_of("self") if own_cgroup else None
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        if pid == me or pid in ancestors:
            continue
        if _status_field(name, "Tgid") not in (None, name):
            continue
        if my_cgroup is not None and _cgroup_of(name) != my_cgroup:
            continue
        state = _status_field(name, "State") or ""
        if state.startswith(("Z", "X")):
            continue
        found.append(pid)
    return found
