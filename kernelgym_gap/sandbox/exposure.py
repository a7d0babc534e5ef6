"""Whether a sandboxed submission could read a file the trusted side keeps: the results database (every
stored submission's source and messages), its -wal/-shm, a token file. Issue 32, L2: a database created 0644
inside the checkout (which the sandbox binds read-only) was read by a later submission and printed out
through its own error message.

A sandboxed child runs either as a fresh uid of its own (root: SandboxConfig.uid "auto"; in no group) or as
the caller's own uid (not root). So a file is within its reach when
  - fresh uid: the file is readable by "other" and every directory above it is searchable by "other";
  - caller's uid: the file lies inside a directory the sandbox binds in (the project, the interpreter and
    its site-packages: isolation.bound_paths), where the mount namespace leaves it visible, or the sandbox
    has no mount namespace at all (isolation "none").
The other way round, `check_task_readable(task, config)`: a user's task directory the sandbox's uid cannot
read (`mktemp -d` makes 0700) failed every evaluation as "crash: the child exited with code 1 without a
report"; it is refused before the child starts (TaskDefinitionError naming the path and the chmod to run).

`check_private(path, what)` raises ExposedFileError with the reason and the fix; the leaderboard's serve,
worker and submit call it at start (exit 2). The store makes its directory 0700 and its database 0600 where it
creates them (store/private_files.py; SQLite gives -wal/-shm the database's mode).
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

from kernelgym_gap.core.errors import KernelGymError, TaskDefinitionError


class ExposedFileError(KernelGymError):
    """A file holding other submissions' data (or a secret) that a sandboxed submission could read."""


def _ancestors(path: Path) -> list[Path]:
    return list(reversed(path.parents))


def _other_can_read(path: Path) -> str | None:
    """Why a uid in no group of the file's could read `path` (None: it cannot)."""
    try:
        st = path.stat()
    except OSError:
        return None
    if not st.st_mode & stat.S_IROTH:
        return None
    for d in _ancestors(path):
        try:
            if not os.stat(d).st_mode & stat.S_IXOTH:
                return None             # a directory on the way that others cannot enter: out of reach
        except OSError:
            return None
    return f"mode {stat.S_IMODE(st.st_mode):04o} (readable by every user) and every directory above it open to all"


def sandbox_runs_as_caller(config=None) -> bool:
    """Whether submissions run as this process's own uid (not root, or SandboxConfig.uid None)."""
    from kernelgym_gap.core.config import SandboxConfig
    config = config or SandboxConfig()
    return os.geteuid() != 0 or config.uid is None


def reachable_reason(path: Path | str, config=None) -> str | None:
    """Why a sandboxed submission could read `path` (None: it cannot, as far as the layers tell)."""
    from kernelgym_gap.core.config import SandboxConfig
    from kernelgym_gap.sandbox.isolation import bound_paths
    config = config or SandboxConfig()
    path = Path(os.path.realpath(path))
    if not path.exists():
        return None
    if sandbox_runs_as_caller(config):
        if config.isolation == "none":
            return "submissions run as this user without a mount namespace (isolation none)"
        for root in bound_paths(config.extra_ro_paths):
            if path == Path(root) or Path(root) in path.parents:
                return (f"it is inside {root}, which the sandbox binds in, and submissions run as this "
                        f"user (uid {os.geteuid()})")
        return None
    return _other_can_read(path)


def check_private(path: Path | str, what: str = "the results database", config=None) -> None:
    """Refuse (ExposedFileError) a file, and its SQLite -wal/-shm beside it, that a submission could read."""
    path = Path(path).expanduser()
    if str(path) == ":memory:":
        return
    for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        why = reachable_reason(p, config)
        if why is not None:
            raise ExposedFileError(
                f"{what} {p} can be read by sandboxed submissions: {why}. A submission could read other "
                f"submissions' sources out of it. Fix: keep it outside the project and the Python installation, "
                f"in a directory of mode 0700 (e.g. the default ~/.local/share/kernelgym_gap/), and "
                f"`chmod 600 {p}`; or point --db / $KERNELGYM_GAP_DB elsewhere")


_readable_ok: set[tuple[str, str]] = set()       # (task directory, tasks_dir) found readable: not walked again


def _blocks_others(path: Path, need: int) -> str | None:
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except OSError as e:
        return f"{path} cannot be examined ({e.strerror})"
    if mode & need != need:
        return f"{path} is mode {mode:04o}"
    return None


def unreadable_for_sandbox(task_dir: Path, tasks_dir: Path) -> str | None:
    """Why a fresh uid in no group could not load the task in `task_dir` from `tasks_dir` (the child globs
    tasks_dir/*/*/task.py, imports task.py and reads what lies beside it); None when it can."""
    tasks_dir, task_dir = Path(os.path.realpath(tasks_dir)), Path(os.path.realpath(task_dir))
    for d in _ancestors(tasks_dir):
        why = _blocks_others(d, stat.S_IXOTH)
        if why:
            return why
    dirs = [tasks_dir] + [p for p in _ancestors(task_dir) if tasks_dir in p.parents] + [task_dir]
    for d in dirs:
        why = _blocks_others(d, stat.S_IROTH | stat.S_IXOTH)
        if why:
            return why
    for dirpath, dirnames, filenames in os.walk(task_dir):
        dirnames[:] = [n for n in dirnames if n != "__pycache__"]
        for n in dirnames:
            why = _blocks_others(Path(dirpath) / n, stat.S_IROTH | stat.S_IXOTH)
            if why:
                return why
        for n in filenames:
            why = _blocks_others(Path(dirpath) / n, stat.S_IROTH)
            if why:
                return why
    return None


def check_task_readable(task, config=None) -> None:
    """Refuse (TaskDefinitionError) a user's task the sandbox's uid cannot read, before its child starts:
    the child would fail to load it and the evaluation come out as the submission's crash. Submissions that
    run as this user read what this user reads (the task directory is bound in): nothing to check then."""
    if task.tasks_dir is None or task.directory is None or sandbox_runs_as_caller(config):
        return
    key = (str(task.directory), str(task.tasks_dir))
    if key in _readable_ok:
        return
    why = unreadable_for_sandbox(Path(task.directory), Path(task.tasks_dir))
    if why is None:
        _readable_ok.add(key)
        return
    raise TaskDefinitionError(
        f"task directory {task.tasks_dir} cannot be read by the sandbox's user (submissions run as a fresh "
        f"unprivileged uid, in no group): {why}. Every evaluation of {task.id} would fail. Fix: "
        f"`chmod -R o+rX {task.tasks_dir}` and `chmod o+x` on each directory above it (mktemp -d makes 0700)")
