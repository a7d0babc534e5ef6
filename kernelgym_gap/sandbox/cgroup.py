"""Per-child control groups: a pids limit and a memory limit, and a way to kill everything a child left.

Created under this process's own cgroup (read from /proc/self/cgroup), so the harness never touches
cgroups it does not own: cgroup v1 (separate `pids` and `memory` hierarchies) or v2 (the unified hierarchy,
when this process's cgroup delegates the controllers). Anything unavailable is simply absent from `layers`.
A harness killed mid-evaluation cannot remove its children's cgroups: the next one to make a child's cgroups
removes those whose creator is gone and that hold no process (reclaim_stale).
"""
from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from pathlib import Path

GROUP = "kernelgym_gap"


def _mounts() -> tuple[dict[str, Path], Path | None]:
    """v1 mount point per controller, and the v2 mount point (if any)."""
    v1: dict[str, Path] = {}
    v2 = None
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return v1, v2
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, rest = left.split(), right.split()
        if len(fields) < 5 or len(rest) < 3:
            continue
        mount_point, fstype, options = fields[4], rest[0], rest[2].split(",")
        if fstype == "cgroup":
            for c in ("pids", "memory"):
                if c in options:
                    v1.setdefault(c, Path(mount_point))
        elif fstype == "cgroup2" and v2 is None:
            v2 = Path(mount_point)
    return v1, v2


def _own_paths() -> dict[str, str]:
    out = {}
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for c in (controllers.split(",") if controllers else ["unified"]):
                out[c] = path
    except (OSError, ValueError):
        pass
    return out


def _write(path: Path, value: str) -> bool:
    try:
        path.write_text(value)
        return True
    except OSError:
        return False


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _read_keyed(path: Path, key: str) -> int | None:
    try:
        for line in path.read_text().splitlines():
            k, _, v = line.partition(" ")
            if k == key:
                return int(v)
    except (OSError, ValueError):
        pass
    return None


_NAME = re.compile(r"^c(\d+)-[0-9a-f]+$")       # ChildCgroups' names: c<creating pid>-<random hex>


def _started_at(pid: int) -> float | None:
    """When process `pid` started (seconds since the epoch), None when there is no such process."""
    try:
        ticks = int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[19])
        boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime "))
    except (OSError, ValueError, IndexError, StopIteration):
        return None
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def _creator_gone(d: Path, pid: int) -> bool:
    """Whether the harness process that made cgroup `d` is gone: no process `pid`, or one started after `d`
    was made (the pid was reused)."""
    started = _started_at(pid)
    if started is None:
        return True
    try:
        made = d.stat().st_ctime
    except OSError:
        return False
    return started > made + 1.0           # btime and the tick count are whole seconds / ticks: a margin


def group_dirs() -> list[Path]:
    """Our GROUP directories under this process's own cgroups (v1 per controller, v2 unified)."""
    v1, v2 = _mounts()
    own = _own_paths()
    out = [v1[c] / own.get(c, "/").lstrip("/") / GROUP for c in ("pids", "memory") if c in v1]
    if v2 is not None and "unified" in own:
        out.append(v2 / own["unified"].lstrip("/") / GROUP)
    return [d for d in out if d.is_dir()]


def reclaim_stale(bases: list[Path] | None = None) -> list[Path]:
    """Removes the child cgroups a killed harness left (issue 32, L5): ours by name (c<pid>-<hex>, under
    GROUP), whose creating process is gone and that hold no process any more. A cgroup whose processes still
    run is left (and its creator, alive, still owns it). Returns the directories removed."""
    removed = []
    for base in (bases if bases is not None else group_dirs()):
        try:
            entries = list(base.iterdir())
        except OSError:
            continue
        for d in entries:
            m = _NAME.match(d.name)
            if m is None or not d.is_dir() or not _creator_gone(d, int(m.group(1))):
                continue
            try:
                if (d / "cgroup.procs").read_text().split():
                    continue
                d.rmdir()                       # a cgroup directory is removed with rmdir, its files and all
                removed.append(d)
            except OSError:
                continue
    return removed


_reclaimed = False


def reclaim_stale_once() -> int:
    """reclaim_stale the first time a process makes a child's cgroups (every harness start: eval, the
    leaderboard's worker, the reward server's slots). Returns how many were removed."""
    global _reclaimed
    if _reclaimed:
        return 0
    _reclaimed = True
    return len(reclaim_stale())


class ChildCgroups:
    """The cgroups of one child. `procs_fds` are opened here, written by the child itself (its own pid)
    between fork and exec, so that it is inside its limits before any of its code runs."""

    def __init__(self, name: str, pids_max: int | None, memory_bytes: int | None):
        reclaim_stale_once()            # what a killed harness left behind (its children are gone)
        self.dirs: dict[str, Path] = {}
        self.layers: list[str] = []
        self.version = None
        v1, v2 = _mounts()
        own = _own_paths()
        if v1:
            self.version = 1
            for controller, limit in (("pids", pids_max), ("memory", memory_bytes)):
                if limit is None or controller not in v1:
                    continue
                d = self._make(v1[controller] / own.get(controller, "/").lstrip("/") / GROUP, name)
                if d is None:
                    continue
                if controller == "pids":
                    ok = _write(d / "pids.max", str(int(limit)))
                else:
                    ok = _write(d / "memory.limit_in_bytes", str(int(limit)))
                    if (d / "memory.memsw.limit_in_bytes").exists():
                        _write(d / "memory.memsw.limit_in_bytes", str(int(limit)))
                    _write(d / "memory.swappiness", "0")
                if ok:
                    self.dirs[controller] = d
                    self.layers.append(f"cgroup_{controller}")
                else:
                    self._rmdir(d)
        elif v2 is not None and "unified" in own:
            self.version = 2
            base = v2 / own["unified"].lstrip("/")
            wanted = [c for c, limit in (("pids", pids_max), ("memory", memory_bytes)) if limit is not None]
            if wanted and self._delegate(base, wanted):
                d = self._make(base / GROUP, name)
                if d is not None:
                    if pids_max is not None and _write(d / "pids.max", str(int(pids_max))):
                        self.layers.append("cgroup_pids")
                    if memory_bytes is not None and _write(d / "memory.max", str(int(memory_bytes))):
                        _write(d / "memory.swap.max", "0")
                        self.layers.append("cgroup_memory")
                    if self.layers:
                        self.dirs["unified"] = d
                    else:
                        self._rmdir(d)
        self.procs_fds: list[int] = []
        for d in self.dirs.values():
            try:
                self.procs_fds.append(os.open(d / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC))
            except OSError:
                pass

    @staticmethod
    def _make(parent: Path, name: str) -> Path | None:
        try:
            parent.mkdir(exist_ok=True)
            d = parent / name
            d.mkdir()
            return d
        except OSError:
            return None

    @staticmethod
    def _delegate(base: Path, controllers: list[str]) -> bool:
        """v2: the controllers must be enabled for base's children and for base/GROUP's children."""
        try:
            available = (base / "cgroup.controllers").read_text().split()
        except OSError:
            return False
        if not all(c in available for c in controllers):
            return False
        group = base / GROUP
        try:
            group.mkdir(exist_ok=True)
        except OSError:
            return False
        for d in (base, group):
            try:
                enabled = (d / "cgroup.subtree_control").read_text().split()
            except OSError:
                return False
            missing = [c for c in controllers if c not in enabled]
            if missing and not _write(d / "cgroup.subtree_control", " ".join("+" + c for c in missing)):
                return False
        return True

    def enter(self) -> None:
        """Called in the child between fork and exec: no allocation-heavy work, no locks."""
        pid = str(os.getpid()).encode()
        for fd in self.procs_fds:
            os.write(fd, pid)

    def pids(self) -> list[int]:
        found: set[int] = set()
        for d in self.dirs.values():
            try:
                found.update(int(p) for p in (d / "cgroup.procs").read_text().split())
            except (OSError, ValueError):
                pass
        return sorted(found)

    def kill_all(self, rounds: int = 200) -> None:
        """SIGKILL every process in the child's cgroups, until none is left (a fork bomb keeps forking
        while it is killed; the pids limit bounds how many there are)."""
        if "unified" in self.dirs and (self.dirs["unified"] / "cgroup.kill").exists():
            _write(self.dirs["unified"] / "cgroup.kill", "1")
        for _ in range(rounds):
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.005)

    def stats(self) -> dict:
        out: dict = {}
        if self.version == 1:
            mem, pids = self.dirs.get("memory"), self.dirs.get("pids")
            if mem is not None:
                out["memory_peak_bytes"] = _read_int(mem / "memory.max_usage_in_bytes")
                oom = _read_keyed(mem / "memory.oom_control", "oom_kill")
                fails = _read_int(mem / "memory.failcnt") or 0
                out["oom_killed"] = bool(oom) if oom is not None else False
                out["memory_limit_hits"] = fails
            if pids is not None:
                out["pids_peak"] = _read_int(pids / "pids.peak")
                out["forks_refused"] = _read_keyed(pids / "pids.events", "max") or 0
        elif self.version == 2 and "unified" in self.dirs:
            d = self.dirs["unified"]
            out["memory_peak_bytes"] = _read_int(d / "memory.peak")
            out["oom_killed"] = bool(_read_keyed(d / "memory.events", "oom_kill"))
            out["pids_peak"] = _read_int(d / "pids.peak")
            out["forks_refused"] = _read_keyed(d / "pids.events", "max") or 0
        return out

    @staticmethod
    def _rmdir(d: Path) -> None:
        for _ in range(100):
            try:
                d.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.01)

    def close(self) -> None:
        for fd in self.procs_fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.procs_fds = []
        self.kill_all()
        for d in self.dirs.values():
            self._rmdir(d)
        self.dirs = {}
