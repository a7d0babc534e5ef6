"""Runs one child process under every isolation layer this machine offers, with a wall-clock deadline.

The layers (each named in `ChildOutcome.layers` only when it was active; docs/security.md says what each
stops and what it does not):
  session          own session and process group; the deadline kills the group (and the cgroups, below)
  clean_env        the environment is an allow-list built here (`child_env`): no secret of the parent passes
  scratch          a fresh directory as cwd, HOME, TMPDIR and every cache (Triton, TileLang, TVM)
  rlimit_*         CPU seconds, file size, open files, core dumps (0), processes (nproc, with an
                   unprivileged uid), address space (`rlimit_as`, cpu path only: RLIMIT_AS breaks cuInit)
  cgroup_pids      a pids limit per child (fork bombs), cgroup v1 or v2, under this process's own cgroup
  cgroup_memory    a memory limit per child (the GPU path's memory limit; both paths' OOM detection)
  unprivileged_uid a fresh uid per evaluation (when the harness is root): no signals to the harness, no
                   /proc/<pid>/mem or environ of it, no write to anything it owns
  bwrap            bubblewrap: pid/net/ipc/uts(/cgroup) namespaces, a new root of read-only binds (system
                   dirs, a few /etc files, the Python in use, the project and its venv; no /root, /home,
                   or other /work content), a private /tmp, its own /proc, GPU nodes only when asked for
  unshare          fallback when bwrap is absent and we are root: the same namespaces through util-linux,
                   tmpfs over /tmp, /var/tmp, /dev/shm, /root, /home and the project's parent with only
                   what the child needs bound back (read-only but the scratch), GPU nodes masked on cpu
  output_bounded   stdout/stderr drained into bounded tails; a child writing more than the limit is killed
  scratch_quota    the scratch directory's size and entry count watched; over quota, the child is killed
  scratch_sanitized symlinks and special files the child left in its scratch are removed before the
                   parent reads anything from it
"""
from __future__ import annotations

import dataclasses
import functools
import glob
import os
import random
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from .cgroup import ChildCgroups
from .registry import PROJECT_ROOT

UID_BASE, UID_SPAN = 1_800_000_000, 100_000_000   # fresh uids come from here (no /etc/passwd entry needed)


@dataclasses.dataclass(frozen=True)
class SandboxConfig:
    wall_s: float = 300.0
    cpu_s: int = 600
    fsize_bytes: int = 1 << 30          # largest file the child may write
    nofile: int = 1024
    address_space_bytes: int | None = 8 << 30    # RLIMIT_AS; cpu path only (ignored with gpu_devices)
    memory_bytes: int | None = 4 << 30           # cgroup memory limit, cpu path (a child needs ~0.4 GiB)
    gpu_memory_bytes: int | None = 64 << 30      # cgroup memory limit (host RAM) when gpu_devices is set
    pids_max: int = 512                 # processes + threads of one child (cgroup pids, RLIMIT_NPROC)
    uid: int | str | None = "auto"      # "auto": a fresh unprivileged uid per evaluation when root; None: keep
    isolation: str = "auto"             # "auto" (strongest available), "bwrap", "unshare", "none"
    gpu_devices: tuple[int, ...] | None = None   # None: no GPU device nodes in the sandbox
    max_output_bytes: int = 64 * 1024   # tail of stdout/stderr kept each
    kill_output_bytes: int | None = 16 << 20     # a child writing more than this to stdout+stderr is killed
    scratch_quota_bytes: int | None = 16 << 30   # the scratch directory may not grow past this
    scratch_max_entries: int = 20_000
    private_tmp_bytes: int = 256 << 20  # size of the sandbox's own /tmp
    extra_ro_paths: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class ChildOutcome:
    returncode: int | None
    signal: str | None
    timed_out: bool
    wall_s: float
    stdout_tail: str
    stderr_tail: str
    output_bytes: int                   # total bytes the child wrote to stdout+stderr
    layers: tuple[str, ...]
    limits_hit: tuple[str, ...] = ()    # "memory", "output", "scratch_quota", "pids"
    memory_peak_bytes: int | None = None
    pids_peak: int | None = None
    forks_refused: int = 0
    removed_from_scratch: int = 0       # symlinks / special files the sanitizer removed


class _TailReader(threading.Thread):
    def __init__(self, stream, limit: int, total: list, lock: threading.Lock, stop_at: int | None,
                 over: threading.Event):
        super().__init__(daemon=True)
        self.stream, self.limit = stream, limit
        self.buf = bytearray()
        self.total = 0
        self._shared, self._lock, self._stop_at, self._over = total, lock, stop_at, over

    def run(self):
        while True:
            try:
                chunk = self.stream.read1(65536) if hasattr(self.stream, "read1") else self.stream.read(65536)
            except (OSError, ValueError):
                break
            if not chunk:
                break
            self.total += len(chunk)
            self.buf += chunk
            if len(self.buf) > 2 * self.limit:
                del self.buf[: len(self.buf) - self.limit]
            with self._lock:
                self._shared[0] += len(chunk)
                if self._stop_at is not None and self._shared[0] > self._stop_at:
                    self._over.set()

    def text(self) -> str:
        return bytes(self.buf[-self.limit:]).decode("utf-8", "replace")


# ------------------------------------------------------------------------------ what the child may see

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


def _ancestors(path: str) -> list[str]:
    parts = Path(path).parts[1:-1]
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def _bwrap_argv(scratch: Path, config: SandboxConfig, uid: int | None, privileged: bool) -> list[str]:
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


def _hidden_roots() -> list[str]:
    roots = ["/tmp", "/var/tmp", "/dev/shm", "/root", "/home", "/mnt", "/media", "/srv"]
    parent = os.path.dirname(str(PROJECT_ROOT))
    if parent.count("/") == 1 and parent not in ("/",) + _SYSTEM_DIRS + ("/etc", "/var", "/opt", "/run", "/proc",
                                                                        "/sys", "/dev", "/boot"):
        roots.append(parent)
    return [r for r in roots if os.path.isdir(r) and not os.path.islink(r)]


def _unshare_argv(scratch: Path, config: SandboxConfig, uid: int | None) -> list[str]:
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
        lines.append('for n in /dev/nvidia*; do [ -e "$n" ] && mount --bind /dev/null "$n"; done; true')
    lines.append("exec " + (" ".join(_setpriv(uid)) + " " if uid is not None else "") + '"$@"')
    return ["unshare", "--mount", "--net", "--pid", "--ipc", "--uts", "--fork", "--kill-child", "--mount-proc",
            "--propagation", "private", "--", "/bin/sh", "-c", "\n".join(lines), "kgg-sandbox"]


def bwrap_available() -> bool:
    return shutil.which("bwrap") is not None


@functools.lru_cache(maxsize=None)
def _works(kind: str) -> bool:
    """Whether an isolation mode starts at all on this machine (tried once per process)."""
    root = os.geteuid() == 0
    if kind.startswith("bwrap") and not bwrap_available():
        return False
    if kind == "unshare" and not (root and shutil.which("unshare")):
        return False
    if kind.endswith("+uid") and not shutil.which("setpriv"):
        return False
    with tempfile.TemporaryDirectory(prefix="kgg-probe-") as d:
        uid = _fresh_uid() if kind.endswith("+uid") else None
        if uid is not None:
            os.chown(d, uid, uid)
        cfg = SandboxConfig()
        if kind.startswith("bwrap"):
            argv = _bwrap_argv(Path(d), cfg, uid, privileged=root)
        else:
            argv = _unshare_argv(Path(d), cfg, uid)
        try:
            r = subprocess.run(argv + [sys.executable, "-S", "-c", "import os; print(os.getuid())"],
                               capture_output=True, timeout=30, cwd=d, env={"PATH": "/usr/bin:/bin"})
        except (OSError, subprocess.TimeoutExpired):
            return False
        return r.returncode == 0 and (uid is None or r.stdout.strip() == str(uid).encode())


def _fresh_uid() -> int:
    return UID_BASE + random.SystemRandom().randrange(UID_SPAN)


def _choose(config: SandboxConfig, scratch: Path) -> tuple[str, int | None]:
    """(isolation, uid to run as) for this child."""
    root = os.geteuid() == 0
    want_uid = root and config.uid is not None
    uid = None
    if want_uid:
        if isinstance(config.uid, int):
            uid = config.uid
        else:
            # The compile probe's scratch lives inside the main child's: the same evaluation, the same uid.
            try:
                owner = scratch.parent.stat().st_uid
            except OSError:
                owner = 0
            uid = owner if UID_BASE <= owner < UID_BASE + UID_SPAN else _fresh_uid()
    order = {"auto": ["bwrap", "unshare", "none"], "bwrap": ["bwrap"], "unshare": ["unshare"], "none": ["none"]}
    if config.isolation not in order:
        raise ValueError(f"unknown isolation {config.isolation!r}")
    for kind in order[config.isolation]:
        if kind == "none":
            return "none", uid if (uid is not None and _reachable_by_others()) else None
        if uid is not None and _works(kind + "+uid"):
            return kind, uid
        if _works(kind):
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


# ------------------------------------------------------------------------------------------ the child

def child_env(scratch: Path, extra: dict[str, str]) -> dict[str, str]:
    """The whole environment of a child: nothing of the parent's passes but PATH and the locale."""
    cache = scratch / "cache"
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(scratch),
        "USER": "kgg", "LOGNAME": "kgg",
        "TMPDIR": str(scratch / "tmp"),
        "LANG": "C.UTF-8",
        "PYTHONPATH": str(PROJECT_ROOT),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONNOUSERSITE": "1",
        "PYTHONHASHSEED": "0",
        "TRITON_CACHE_DIR": str(cache / "triton"),
        "TRITON_HOME": str(cache),
        "TILELANG_CACHE_DIR": str(cache / "tilelang"),
        "TILELANG_TMP_DIR": str(scratch / "tmp"),
        "TVM_FFI_CACHE_DIR": str(cache / "tvm_ffi"),
        "XDG_CACHE_HOME": str(cache),
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "MALLOC_ARENA_MAX": "4",        # glibc's per-thread arenas reserve address space (RLIMIT_AS)
        "CUDA_VISIBLE_DEVICES": "",     # set to the child's GPU by run_sandboxed on the GPU path
    }
    env.update(extra)
    return env


def _preexec(config: SandboxConfig, cgroups: ChildCgroups | None, uid: int | None, drop_here: bool, gpu: bool):
    limits = [(resource.RLIMIT_CPU, config.cpu_s), (resource.RLIMIT_FSIZE, config.fsize_bytes),
              (resource.RLIMIT_NOFILE, config.nofile), (resource.RLIMIT_CORE, 0)]
    if config.address_space_bytes is not None and not gpu:
        limits.append((resource.RLIMIT_AS, config.address_space_bytes))
    if uid is not None:
        # counted per uid: the main child and its compile probe share one (the cgroup is per child)
        limits.append((resource.RLIMIT_NPROC, 2 * config.pids_max))

    def apply():
        if cgroups is not None:
            cgroups.enter()
        for which, value in limits:
            resource.setrlimit(which, (value, value))
        if drop_here:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)

    names = {resource.RLIMIT_CPU: "rlimit_cpu", resource.RLIMIT_FSIZE: "rlimit_fsize",
             resource.RLIMIT_NOFILE: "rlimit_nofile", resource.RLIMIT_CORE: "rlimit_core",
             resource.RLIMIT_AS: "rlimit_as", resource.RLIMIT_NPROC: "rlimit_nproc"}
    return apply, [names[w] for w, _ in limits]


def _walk(root: Path, max_entries: int, remove_special: bool = False) -> tuple[int, int, int]:
    """(bytes allocated, entries, special entries removed) under root, not following links; stops
    counting at max_entries."""
    total = entries = removed = 0
    stack = [str(root)]
    while stack:
        try:
            it = os.scandir(stack.pop())
        except OSError:
            continue
        with it:
            for e in it:
                entries += 1
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                if e.is_dir(follow_symlinks=False):
                    stack.append(e.path)
                elif remove_special and not e.is_file(follow_symlinks=False):
                    try:
                        os.unlink(e.path)
                        removed += 1
                    except OSError:
                        pass
                total += st.st_blocks * 512
                if entries > max_entries and not remove_special:
                    return total, entries, removed
    return total, entries, removed


def _prepare_scratch(scratch: Path, uid: int | None) -> None:
    for sub in ("tmp", "cache"):
        (scratch / sub).mkdir(parents=True, exist_ok=True)
    if uid is not None:
        # The scratch and the folders the child writes in; the job and the source stay the parent's.
        for p in [scratch] + [scratch / s for s in ("tmp", "cache", "outputs")]:
            if p.is_dir() and not p.is_symlink():
                os.chown(p, uid, uid)


def run_sandboxed(argv: Sequence[str], scratch: Path, env: dict[str, str], config: SandboxConfig) -> ChildOutcome:
    scratch = Path(scratch)
    gpu = config.gpu_devices is not None
    isolation, uid = _choose(config, scratch)
    _prepare_scratch(scratch, uid)
    if isolation == "none" and uid is not None:
        os.chmod(scratch, 0o711)    # a compile probe with another uid must reach its folder inside
    layers = ["session", "clean_env", "scratch"]
    cgroups = ChildCgroups(f"c{os.getpid()}-{random.SystemRandom().randrange(1 << 40):x}", config.pids_max,
                           config.gpu_memory_bytes if gpu else config.memory_bytes)
    preexec, limit_layers = _preexec(config, cgroups, uid, drop_here=(isolation == "none" and uid is not None),
                                     gpu=gpu)
    layers += limit_layers + cgroups.layers
    if uid is not None:
        layers.append("unprivileged_uid")
    if isolation == "bwrap":
        argv = _bwrap_argv(scratch, config, uid, privileged=os.geteuid() == 0) + list(argv)
        layers += ["bwrap", "pid_ns", "net_ns", "ipc_ns", "uts_ns", "mount_ns", "ro_binds", "private_tmp"]
        if os.geteuid() != 0:
            layers.append("user_ns")
    elif isolation == "unshare":
        argv = _unshare_argv(scratch, config, uid) + list(argv)
        layers += ["unshare", "pid_ns", "net_ns", "ipc_ns", "uts_ns", "mount_ns", "hidden_dirs", "private_tmp"]
    env = dict(env, KGG_SANDBOX=isolation, KGG_SANDBOX_CGROUP="1" if cgroups.layers else "0")
    if gpu:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(d) for d in config.gpu_devices)
        layers.append("gpu_devices")
    elif isolation != "none":
        layers.append("no_gpu_nodes")
    layers += ["output_bounded"] + (["scratch_quota"] if config.scratch_quota_bytes is not None else [])
    layers.append("scratch_sanitized")

    total, lock, over = [0], threading.Lock(), threading.Event()
    limits_hit: list[str] = []
    start = time.monotonic()
    try:
        proc = subprocess.Popen(list(argv), cwd=scratch, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                                preexec_fn=preexec, close_fds=True)
    except BaseException:
        cgroups.close()
        raise
    readers = [_TailReader(s, config.max_output_bytes, total, lock, config.kill_output_bytes, over)
               for s in (proc.stdout, proc.stderr)]
    for r in readers:
        r.start()
    timed_out = False
    deadline = start + config.wall_s
    next_quota = start + 1.0
    try:
        while True:
            now = time.monotonic()
            if now >= deadline:
                timed_out = True
                break
            try:
                proc.wait(timeout=min(0.1, deadline - now))
                break
            except subprocess.TimeoutExpired:
                pass
            if over.is_set():
                limits_hit.append("output")
                break
            if config.scratch_quota_bytes is not None and time.monotonic() >= next_quota:
                used, entries, _ = _walk(scratch, config.scratch_max_entries)
                if used > config.scratch_quota_bytes or entries > config.scratch_max_entries:
                    limits_hit.append("scratch_quota")
                    break
                next_quota = time.monotonic() + 1.0
    finally:
        # Whatever happened, nothing of this child survives it: its process group, then its cgroups
        # (a child that left its group with setsid is still in them), then the namespace dies with bwrap.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()
        cgroups.kill_all()
        for r in readers:
            r.join(timeout=5)
        stats = cgroups.stats()
        cgroups.close()
    if over.is_set() and "output" not in limits_hit:
        limits_hit.append("output")
    if stats.get("oom_killed"):
        limits_hit.append("memory")
    if stats.get("forks_refused"):
        limits_hit.append("pids")
    _, _, removed = _walk(scratch, config.scratch_max_entries, remove_special=True)
    rc = proc.returncode
    sig = None
    if rc is not None and rc < 0:
        sig = signal.Signals(-rc).name
    elif isolation in ("bwrap", "unshare") and rc is not None and rc > 128 and rc - 128 < 65:
        # bwrap and unshare report a signalled child as 128 + signal
        try:
            sig = signal.Signals(rc - 128).name
        except ValueError:
            sig = None
    return ChildOutcome(returncode=rc, signal=None if timed_out else sig, timed_out=timed_out,
                        wall_s=time.monotonic() - start, stdout_tail=readers[0].text(),
                        stderr_tail=readers[1].text(), output_bytes=total[0], layers=tuple(layers),
                        limits_hit=tuple(limits_hit), memory_peak_bytes=stats.get("memory_peak_bytes"),
                        pids_peak=stats.get("pids_peak"), forks_refused=int(stats.get("forks_refused") or 0),
                        removed_from_scratch=removed)
