"""Starting a child cold and reading back what it wrote: the environment a child of each backend starts
with, a cold start under the sandbox, and the report (bounded, parsed as the versioned record)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from kernelgym_gap.core.errors import ProtocolError
from kernelgym_gap.core.record import ChildReport
from kernelgym_gap.core.registry import PROJECT_ROOT
from kernelgym_gap.sandbox.process import ChildOutcome, SandboxConfig, child_env, run_sandboxed

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


def cold_child(job_path, directory: Path, env: dict[str, str], sandbox: SandboxConfig,
               calls=()) -> ChildOutcome:
    """A child started for its job (not pre-started), run to its end under the sandbox (and its calls'
    deadlines, `calls`: the parent's Job.call_bounds)."""
    return run_sandboxed([sys.executable, "-m", "kernelgym_gap.child.runner", str(job_path)], directory,
                         child_env(directory, env), sandbox, calls)


def last_lines(text: str, lines: int = 8) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def read_report(path: Path, outcome: ChildOutcome) -> ChildReport:
    """The child's report: a regular file under MAX_REPORT_BYTES that parses as the record, or ProtocolError."""
    if not path.is_file():
        raise ProtocolError(f"the child exited with code {outcome.returncode} without a report\n"
                            f"{last_lines(outcome.stderr_tail)}")
    if path.stat().st_size > MAX_REPORT_BYTES:
        raise ProtocolError(f"the child's report is larger than {MAX_REPORT_BYTES >> 20} MiB")
    return ChildReport.from_json(path.read_bytes())
