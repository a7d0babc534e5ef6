"""Starting a child cold and reading back what it wrote: the environment a child of each backend starts
with, a cold start under the sandbox, and the report (bounded, parsed as the versioned record)."""
from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

from kernelgym_gap.core.errors import ProtocolError
from kernelgym_gap.core.record import ChildReport
from kernelgym_gap.core.registry import PROJECT_ROOT
from kernelgym_gap.sandbox.held import HeldChild
from kernelgym_gap.sandbox.process import ChildOutcome, SandboxConfig, SandboxedChild, child_env, run_sandboxed

# Paths and driver settings a child needs to find Python packages and the CUDA driver; nothing else of the
# parent's environment passes (no secrets, no tokens).
_PASSTHROUGH = ("LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH", "TRITON_LIBCUDA_PATH", "TRITON_PTXAS_PATH",
                "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS")

MAX_REPORT_BYTES = 8 << 20


def backend_env(backend: str) -> dict[str, str]:
    """The variables a child of this backend gets on top of the sandbox's own (child_env)."""
    extra = {}
    parent_path = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    extra["PYTHONPATH"] = os.pathsep.join([str(PROJECT_ROOT)] + parent_path)
    if backend == "cpu":
        extra.update({"TRITON_INTERPRET": "1", "TILELANG_DEFAULT_TARGET": "c"})
    else:
        extra.update({k: os.environ[k] for k in _PASSTHROUGH if k in os.environ})
        extra["PATH"] = "/usr/local/cuda/bin:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
    return extra


def _cold_argv(job_path) -> list[str]:
    return [sys.executable, "-m", "kernelgym_gap.child.runner", str(job_path)]


def cold_child(job_path, directory: Path, env: dict[str, str], sandbox: SandboxConfig,
               calls=()) -> ChildOutcome:
    """A child started for its job (not pre-started), run to its end under the sandbox (and its calls'
    deadlines, `calls`: the parent's Job.call_bounds)."""
    return run_sandboxed(_cold_argv(job_path), directory, child_env(directory, env), sandbox, calls)


def cold_child_held(job_path, directory: Path, env: dict[str, str], sandbox: SandboxConfig,
                    calls=()) -> tuple[ChildOutcome, HeldChild | None]:
    """cold_child with SandboxedChild.wait(hold=True) (the outputs handed over by handle): its outcome and, when
    it was stopped rather than ended, its HeldChild (sandbox/held.py), which the caller must kill."""
    child = SandboxedChild(_cold_argv(job_path), directory, child_env(directory, env), sandbox)
    try:
        outcome = child.wait(calls, hold=True)
    except BaseException:
        child.kill()                    # held before the error: nobody else has its HeldChild to kill it
        raise
    return outcome, child.held


def last_lines(text: str, lines: int = 8) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def read_child_file(path: Path, max_bytes: int, what: str) -> bytes | None:
    """The bytes of a file the child wrote, read as hostile: a link is not followed, a FIFO cannot block, a
    directory or device is refused, and no more than `max_bytes` are read (the child may still be growing
    it). None when there is no such file; ProtocolError for anything else that is wrong with it."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise ProtocolError(f"{what} cannot be opened ({e.strerror}): a link or not a file") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ProtocolError(f"{what} is not a regular file")
        parts, got = [], 0
        while got <= max_bytes:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - got))
            if not chunk:
                break
            parts.append(chunk)
            got += len(chunk)
    except OSError as e:
        raise ProtocolError(f"{what} cannot be read ({e.strerror})") from None
    finally:
        os.close(fd)
    if got > max_bytes:
        raise ProtocolError(f"{what} is larger than {max_bytes} bytes")
    return b"".join(parts)


def read_report(path: Path, outcome: ChildOutcome) -> ChildReport:
    """The child's report: a regular file of at most MAX_REPORT_BYTES that parses as the record (bounded in
    depth too: core/bounded_json.py), or ProtocolError. Nothing else escapes: the file is hostile input."""
    raw = read_child_file(path, MAX_REPORT_BYTES, "the child's report")
    if raw is None:
        raise ProtocolError(f"the child exited with code {outcome.returncode} without a report\n"
                            f"{last_lines(outcome.stderr_tail)}")
    return ChildReport.from_json(raw, max_bytes=MAX_REPORT_BYTES)
