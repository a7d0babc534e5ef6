"""What a sandboxed child may see and who it runs as: the bwrap and unshare command lines (read-only binds of
what Python needs, hidden directories, namespaces), whether each works on this machine, and the choice of
isolation and uid for one child. sandbox.py applies them; docs/security.md says what each stops."""
from __future__ import annotations

import functools
import glob
import os
import random
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from kernelgym_gap.core.config import SandboxConfig
from kernelgym_gap.core.registry import PROJECT_ROOT

UID_BASE, UID_SPAN = 1_800_000_000, 100_000_000   # fresh uids come from here (no /etc/passwd entry needed)

_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_ETC = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives", "/etc/localtime",
        "/etc/nsswitch.conf", "/etc/passwd", "/etc/group", "/etc/os-release", "/etc/hosts")


def _under(path: str, roots) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _python_ro_paths(extra: Sequence[str] = ()) -> list[str]:
    """The directories the child's Python needs (interpreter, stdlib, venv, site-packages), the project,
    and `extra`, as real paths, minus those already inside another one or inside the system dirs."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, str(PROJECT_ROOT), *extra}
    for p in sys.path:
        if p and os.path.isdir(p):
            paths.add(p)
    exe = os.path.realpath(sys.executable)
    paths.add(os.path.dirname(os.path.dirname(exe)))
    paths.update(glob.glob("/etc/python3*"))
    real = sorted({os.path.realpath(p) for p in paths if os.path.exists(p)}, key=len)
    system = [d for d in _SYSTEM_DIRS if os.path.isdir(d) and not os.path.islink(d)]
    kept: list[str] = []
    for p in real:
        if p == "/" or _under(p, system) or _under(p, kept):
            continue
        kept.append(p)
    return kept


def bound_paths(extra: Sequence[str] = ()) -> list[str]:
    """The host directories every sandbox layer leaves visible to a child (read-only): the project, the
    interpreter and its packages, and `extra` (exposure.py refuses a database inside one of them)."""
    return _python_ro_paths(extra)


def _ancestors(path: str) -> list[str]:
    parts = Path(path).parts[1:-1]
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def bwrap_argv(scratch: Path, config: SandboxConfig, uid: int | None, privileged: bool) -> list[str]:
    argv = ["bwrap", "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-net", "--unshare-ipc",
            "--unshare-uts", "--unshare-cgroup-try", "--hostname", "kgg-sandbox"]
    if not privileged:
        argv.append("--unshare-user")
    argv += ["--proc", "/proc", "--dev", "/dev", "--size", str(config.private_tmp_bytes), "--tmpfs", "/tmp"]
    for d in _SYSTEM_DIRS:
        if os.path.islink(d):
            argv += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            argv += ["--ro-bind", d, d]
    for p in _ETC:
        if os.path.exists(p):
            argv += ["--ro-bind", p, p]
    made = {"/tmp"}

    def parents(p: str) -> list[str]:
        out = []
        for a in _ancestors(p):
            if a not in made and not _under(a, _SYSTEM_DIRS):
                made.add(a)
                out += ["--perms", "0755", "--dir", a]
        return out

    for p in _python_ro_paths(config.extra_ro_paths):
        argv += parents(p) + ["--ro-bind", p, p]
    if config.gpu_devices is not None:
        for node in sorted(glob.glob("/dev/nvidia*")):
            argv += ["--dev-bind", node, node]
        for p in ("/sys", "/run/nvidia-persistenced"):
            if os.path.exists(p):
                argv += parents(p) + ["--ro-bind", p, p]
    s = str(scratch)
    argv += parents(s) + ["--bind", s, s, "--chdir", s]
    if privileged and uid is not None:
        argv += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--"] + _setpriv(uid)
    return argv + ["--"] if argv[-1] != "--" else argv


def _setpriv(uid: int) -> list[str]:
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all",
            "--no-new-privs", "--"]


# Directories whose contents the child may need in ways no bind-back foresees (devices, kernel interfaces,
# configuration, system-wide installs): never replaced by an empty tmpfs, at any depth.
_NEVER_HIDDEN = _SYSTEM_DIRS + ("/etc", "/proc", "/sys", "/dev", "/run", "/boot")


def _hidden_roots() -> list[str]:
    """The directories the unshare layer covers with an empty tmpfs: the host's temporary and home
    directories, and the checkout's parent wherever it sits (its siblings are other people's files: on the
    team's machines /work/shared beside /work/main, on a CI runner whatever it clones beside the project)."""
    roots = [r for r in ("/tmp", "/var/tmp", "/dev/shm", "/root", "/home", "/mnt", "/media", "/srv")
             if os.path.isdir(r) and not os.path.islink(r)]
    parent = str(PROJECT_ROOT.parent)   # PROJECT_ROOT is resolved: no symlink on the way
    if parent not in ("/", "/var", "/opt") and not _under(parent, _NEVER_HIDDEN + tuple(roots)):
        roots.append(parent)
    return roots


def unshare_argv(scratch: Path, config: SandboxConfig, uid: int | None) -> list[str]:
    """util-linux unshare, then a root shell in the new mount namespace that hides the host's temporary
    and home directories (and the project's siblings) under tmpfs, binds back what the child needs, masks
    GPU nodes on the cpu path, and drops to the unprivileged uid."""
    q = shlex.quote
    needed = [(p, True) for p in _python_ro_paths(config.extra_ro_paths)] + [(str(scratch), False)]
    lines = ["set -e"]
    for root in _hidden_roots():
        keep = [(p, ro) for p, ro in needed if _under(p, [root])]
        if any(p == root for p, _ in keep) or len(keep) > 6:
            continue
        mode = "1777" if root in ("/tmp", "/var/tmp", "/dev/shm") else "0755"
        size = config.private_tmp_bytes if mode == "1777" else 1 << 20
        for i, (p, _) in enumerate(keep):
            lines.append(f"exec {i + 3}<{q(p)}")
        lines.append(f"mount -t tmpfs -o mode={mode},nosuid,nodev,size={size} kgg-hidden {q(root)}")
        for i, (p, ro) in enumerate(keep):
            lines.append(f"mkdir -p {q(p)}")
            lines.append(f"mount --no-canonicalize --bind /proc/self/fd/{i + 3} {q(p)}")
            if ro:
                lines.append(f"mount -o remount,bind,ro {q(p)}")
            lines.append(f"exec {i + 3}<&-")
    if config.gpu_devices is None:
        # device nodes masked with /dev/null, directories of them (/dev/nvidia-caps) with an empty tmpfs: a
        # bind of /dev/null onto a directory fails, which made the whole layer fail on the H200 until 2026-12-03
        lines.append('for n in /dev/nvidia*; do if [ -c "$n" ]; then mount --bind /dev/null "$n"; '
                     'elif [ -d "$n" ]; then mount -t tmpfs -o mode=0755,size=4096 kgg-hidden "$n"; fi; done')
    lines.append("exec " + (" ".join(_setpriv(uid)) + " " if uid is not None else "") + '"$@"')
    return ["unshare", "--mount", "--net", "--pid", "--ipc", "--uts", "--fork", "--kill-child", "--mount-proc",
            "--propagation", "private", "--", "/bin/sh", "-c", "\n".join(lines), "kgg-sandbox"]


def bwrap_available() -> bool:
    return shutil.which("bwrap") is not None


@functools.lru_cache(maxsize=None)
def mode_works(kind: str) -> bool:
    """Whether an isolation mode starts at all on this machine (tried once per process)."""
    return try_mode(kind)[0]


def try_mode(kind: str) -> tuple[bool, str]:
    """Start a trivial child under one isolation mode ("bwrap", "unshare", with "+uid" to drop to a fresh
    uid as well): (whether it ran as it should, why not). gpu_check's `isolation` section prints these."""
    root = os.geteuid() == 0
    if kind.startswith("bwrap") and not bwrap_available():
        return False, "bwrap is not installed"
    if kind.startswith("unshare") and not (root and shutil.which("unshare")):
        return False, "needs root and util-linux unshare"
    if kind.endswith("+uid") and not shutil.which("setpriv"):
        return False, "setpriv is not installed"
    with tempfile.TemporaryDirectory(prefix="kgg-probe-") as d:
        uid = _fresh_uid() if kind.endswith("+uid") else None
        if uid is not None:
            os.chown(d, uid, uid)
        cfg = SandboxConfig()
        if kind.startswith("bwrap"):
            argv = bwrap_argv(Path(d), cfg, uid, privileged=root)
        else:
            argv = unshare_argv(Path(d), cfg, uid)
        try:
            r = subprocess.run(argv + [sys.executable, "-S", "-c", "import os; print(os.getuid())"],
                               capture_output=True, timeout=30, cwd=d, env={"PATH": "/usr/bin:/bin"})
        except (OSError, subprocess.TimeoutExpired) as e:
            return False, f"{type(e).__name__}: {e}"
        if r.returncode != 0:
            return False, f"exit status {r.returncode}: " + r.stderr.decode(errors="replace").strip()[-500:]
        if uid is not None and r.stdout.strip() != str(uid).encode():
            return False, f"ran as uid {r.stdout.strip().decode(errors='replace')}, not {uid}"
        return True, ""


def _fresh_uid() -> int:
    return UID_BASE + random.SystemRandom().randrange(UID_SPAN)


def evaluation_uid(config: SandboxConfig) -> int | str | None:
    """The uid setting for one child, drawn before it starts (a fresh uid per child when "auto" and root):
    the scratch is handed to that uid, and a cold child that replaces a dead pre-started one reuses it."""
    if config.uid == "auto" and os.geteuid() == 0:
        return _fresh_uid()
    return config.uid


def choose_isolation(config: SandboxConfig, scratch: Path) -> tuple[str, int | None]:
    """(isolation, uid to run as) for this child."""
    setting = evaluation_uid(config)
    uid = setting if isinstance(setting, int) and os.geteuid() == 0 else None
    order = {"auto": ["bwrap", "unshare", "none"], "bwrap": ["bwrap"], "unshare": ["unshare"], "none": ["none"]}
    if config.isolation not in order:
        raise ValueError(f"unknown isolation {config.isolation!r}")
    for kind in order[config.isolation]:
        if kind == "none":
            return "none", uid if (uid is not None and _reachable_by_others()) else None
        if uid is not None and mode_works(kind + "+uid"):
            return kind, uid
        if mode_works(kind):
            return kind, None
    if config.isolation != "auto":
        raise RuntimeError(f"isolation {config.isolation!r} does not work on this machine")
    return "none", None


@functools.lru_cache(maxsize=None)
def _reachable_by_others() -> bool:
    """Whether an unprivileged uid can run this Python without namespaces (every directory on the way
    searchable by others)."""
    for p in _python_ro_paths():
        for a in _ancestors(p) + [p]:
            try:
                if not os.stat(a).st_mode & 0o001:
                    return False
            except OSError:
                return False
    return True
