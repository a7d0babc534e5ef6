"""Runs one child process under every isolation layer this machine offers, with a wall-clock deadline.

The layers (each reported in `ChildOutcome.layers` when it was active):
  session      own session and process group (start_new_session); the deadline kills the whole group
  clean_env    the environment is replaced by an allow-list built here (no secrets pass)
  scratch      a fresh directory as cwd, HOME and TMPDIR; under bwrap the only writable bind
  rlimit_*     CPU seconds, file size, open files, core dumps (0), address space (cpu backend only:
               RLIMIT_AS breaks cuInit, see docs/security.md)
  bwrap        bubblewrap: new user/pid/net/ipc/uts/cgroup namespaces, read-only binds of what Python
               needs, a private /tmp, /proc of its own pid namespace, GPU nodes only when asked for
  unshare      fallback when bwrap is absent and we are root: net+pid namespaces through util-linux
Output is drained by threads into bounded buffers: a child printing 100 MB costs the parent a tail.
"""
from __future__ import annotations

import dataclasses
import glob
import os
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from .registry import PROJECT_ROOT


@dataclasses.dataclass(frozen=True)
class SandboxConfig:
    wall_s: float = 300.0
    cpu_s: int = 600
    fsize_bytes: int = 1 << 30          # largest file the child may write
    nofile: int = 1024
    address_space_bytes: int | None = None   # RLIMIT_AS; never on the GPU path
    isolation: str = "auto"             # "auto" (strongest available), "bwrap", "unshare", "none"
    gpu_devices: tuple[int, ...] | None = None   # None: no GPU device nodes in the sandbox
    max_output_bytes: int = 64 * 1024   # tail of stdout/stderr kept each
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


class _TailReader(threading.Thread):
    def __init__(self, stream, limit: int):
        super().__init__(daemon=True)
        self.stream, self.limit = stream, limit
        self.buf = bytearray()
        self.total = 0

    def run(self):
        while True:
            chunk = self.stream.read1(65536) if hasattr(self.stream, "read1") else self.stream.read(65536)
            if not chunk:
                break
            self.total += len(chunk)
            self.buf += chunk
            if len(self.buf) > 2 * self.limit:
                del self.buf[: len(self.buf) - self.limit]

    def text(self) -> str:
        return bytes(self.buf[-self.limit:]).decode("utf-8", "replace")


def _python_ro_paths() -> list[str]:
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, str(PROJECT_ROOT)}
    for p in sys.path:
        if p and os.path.isdir(p):
            paths.add(os.path.realpath(p))
    exe = os.path.realpath(sys.executable)
    paths.add(os.path.dirname(os.path.dirname(exe)))
    return sorted(paths)


def bwrap_available() -> bool:
    return shutil.which("bwrap") is not None


def _bwrap_prefix(scratch: Path, config: SandboxConfig) -> list[str]:
    argv = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session",
            "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    for p in ("/usr", "/lib", "/lib64", "/bin", "/sbin", "/etc"):
        if os.path.exists(p):
            argv += ["--ro-bind", p, p]
    for p in _python_ro_paths() + list(config.extra_ro_paths):
        if os.path.exists(p):
            argv += ["--ro-bind", p, p]
    if config.gpu_devices is not None:
        for node in sorted(glob.glob("/dev/nvidia*")):
            argv += ["--dev-bind", node, node]
        for p in ("/usr/local/nvidia", "/usr/local/cuda", "/run/nvidia-persistenced"):
            if os.path.exists(p):
                argv += ["--ro-bind", p, p]
    argv += ["--bind", str(scratch), str(scratch), "--chdir", str(scratch)]
    return argv + ["--"]


def _choose_isolation(config: SandboxConfig) -> str:
    if config.isolation != "auto":
        return config.isolation
    if bwrap_available():
        return "bwrap"
    if os.geteuid() == 0 and shutil.which("unshare"):
        return "unshare"
    return "none"


def _limits(config: SandboxConfig):
    def apply():
        resource.setrlimit(resource.RLIMIT_CPU, (config.cpu_s, config.cpu_s))
        resource.setrlimit(resource.RLIMIT_FSIZE, (config.fsize_bytes, config.fsize_bytes))
        resource.setrlimit(resource.RLIMIT_NOFILE, (config.nofile, config.nofile))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if config.address_space_bytes is not None:
            resource.setrlimit(resource.RLIMIT_AS, (config.address_space_bytes, config.address_space_bytes))
    layers = ["rlimit_cpu", "rlimit_fsize", "rlimit_nofile", "rlimit_core"]
    if config.address_space_bytes is not None:
        layers.append("rlimit_as")
    return apply, layers


def child_env(scratch: Path, extra: dict[str, str]) -> dict[str, str]:
    """The whole environment of a child: nothing of the parent's passes but PATH and the locale."""
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(scratch),
        "TMPDIR": str(scratch / "tmp"),
        "LANG": "C.UTF-8",
        "PYTHONPATH": str(PROJECT_ROOT),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONNOUSERSITE": "1",
        "PYTHONHASHSEED": "0",
        "TRITON_CACHE_DIR": str(scratch / "cache" / "triton"),
        "TILELANG_CACHE_DIR": str(scratch / "cache" / "tilelang"),
        "TILELANG_TMP_DIR": str(scratch / "tmp"),
        "TVM_FFI_CACHE_DIR": str(scratch / "cache" / "tvm_ffi"),
        "XDG_CACHE_HOME": str(scratch / "cache"),
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }
    env.update(extra)
    return env


def run_sandboxed(argv: Sequence[str], scratch: Path, env: dict[str, str], config: SandboxConfig) -> ChildOutcome:
    scratch = Path(scratch)
    (scratch / "tmp").mkdir(parents=True, exist_ok=True)
    isolation = _choose_isolation(config)
    preexec, layers = _limits(config)
    layers = ["session", "clean_env", "scratch"] + layers
    if isolation == "bwrap":
        argv = _bwrap_prefix(scratch, config) + list(argv)
        layers += ["bwrap", "net_ns", "pid_ns", "ro_binds"]
    elif isolation == "unshare":
        argv = ["unshare", "--net", "--pid", "--fork", "--kill-child", "--mount-proc"] + list(argv)
        layers += ["unshare", "net_ns", "pid_ns"]
    elif isolation != "none":
        raise ValueError(f"unknown isolation {isolation!r}")
    if config.gpu_devices is not None:
        env = dict(env, CUDA_VISIBLE_DEVICES=",".join(str(d) for d in config.gpu_devices))
        layers.append("gpu_devices")
    start = time.monotonic()
    proc = subprocess.Popen(list(argv), cwd=scratch, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                            preexec_fn=preexec, close_fds=True)
    readers = [_TailReader(proc.stdout, config.max_output_bytes), _TailReader(proc.stderr, config.max_output_bytes)]
    for r in readers:
        r.start()
    timed_out = False
    try:
        proc.wait(timeout=config.wall_s)
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        # Whatever happened, nothing of this child's process group survives it.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()
    for r in readers:
        r.join(timeout=5)
    rc = proc.returncode
    sig = None
    if rc is not None and rc < 0:
        sig = signal.Signals(-rc).name
    elif isolation in ("bwrap", "unshare") and rc is not None and rc > 128 and rc - 128 < 65:
        # bwrap and unshare report a signalled child as 128 + signal
        sig = signal.Signals(rc - 128).name
    return ChildOutcome(returncode=rc, signal=None if timed_out else sig, timed_out=timed_out,
                        wall_s=time.monotonic() - start, stdout_tail=readers[0].text(),
                        stderr_tail=readers[1].text(), output_bytes=readers[0].total + readers[1].total,
                        layers=tuple(layers))
