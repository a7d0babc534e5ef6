"""Where the trusted checker runs for one evaluation, seen from the parent: a warm checker's persistent
process when one is given, else the parent itself on cpu and a fresh trusted process on cuda (inputs are
regenerated with the device's own generator there). The checker never runs submitted code."""
from __future__ import annotations

import contextlib
import json
import os
import selectors
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import ContextManager

from kernelgym_gap.core.config import EvalConfig
from kernelgym_gap.core.placement import Placement
from kernelgym_gap.core.record import CheckResult, ChildReport, Job
from kernelgym_gap.core.status import Status
from kernelgym_gap.core.task import TaskSpec
from kernelgym_gap.judge.prefetch import prefetch_outputs


def check_in_process(task: TaskSpec, job: Job, report: ChildReport, backend: str, private: Path,
                     config: EvalConfig, checker=None, early=None, placement: Placement | None = None,
                     lane: Callable[[], ContextManager] | None = None, early_read=None) -> CheckResult:
    """The trusted checker's verdict on the outputs the child saved. `checker`: None or a warm checker for
    this backend (api.warm.WarmChecker). `private` is a directory the child never saw. `early`: the check
    started while the child ran (judge/early_check.start), which has its references made already. `placement`: its GPU (default 0).
    `lane`: None when the caller holds the GPU's shared lane around this call; else
    (EvalConfig.read_outputs_outside_lane) a function whose context manager takes it, entered once the
    output files are read into host memory (judge/prefetch.py), so that only the copy to the device and the
    comparison run under it. The early check keeps its own protocol and runs wholly under the lane.
    `early_read`: with `lane`, the files read while the child timed (judge/early_prefetch.EarlyRead, stopped):
    the prefetch starts from them."""
    if early is not None:
        with lane() if lane is not None else contextlib.nullcontext():
            return early.check(task, job, report, backend, private, config)
    if backend == "cpu" and checker is None:
        from kernelgym_gap.judge.checker import check
        if lane is None:
            return check(task, job, report, "cpu")
        prefetched = prefetch_outputs(job, report, early=early_read.prefetch if early_read is not None else None)
        with lane():
            return check(task, job, report, "cpu", prefetched=prefetched)
    report_path = private / "report.json"
    report_path.write_text(report.to_json())
    job_path = private / "job.json"
    job_path.write_text(job.to_json())
    spec = {"job": str(job_path), "report": str(report_path), "result": str(private / "check.json"),
            "device": backend, "prefetch": lane is not None,
            "early": lane is not None and early_read is not None and early_read.in_checker}
    (private / "check_spec.json").write_text(json.dumps(spec))
    if checker is not None:
        return checker.check_spec(private / "check_spec.json", private / "check.json", config.sandbox.wall_s,
                                  lane)
    from kernelgym_gap.sandbox.child_io import backend_env
    from kernelgym_gap.sandbox.process import child_env
    env = child_env(private, backend_env(backend) | {"CUDA_VISIBLE_DEVICES": str((placement or Placement()).gpu_index)})
    argv = [sys.executable, "-m", "kernelgym_gap.judge.checker", str(private / "check_spec.json")]
    if lane is None:
        proc = subprocess.run(argv, env=env, cwd=private, capture_output=True, timeout=config.sandbox.wall_s)
        stderr = proc.stderr
    else:
        stderr = one_shot_prefetched(argv, env, private, config.sandbox.wall_s, lane)
    if not (private / "check.json").is_file():
        return CheckResult(status=Status.PROTOCOL_ERROR, trials_checked=0,
                           message="the trusted checker failed: " + stderr.decode(errors="replace")[-2000:])
    return CheckResult.from_json((private / "check.json").read_text())


def one_shot_prefetched(argv: list[str], env: dict, cwd: Path, timeout: float,
                        lane: Callable[[], ContextManager]) -> bytes:
    """The one-shot checker's two steps (judge/checker.py, a spec with `"prefetch": true`): it reads the
    outputs and says so on stdout; then, under `lane`, it is told to go and runs to its end. Returns its
    stderr. Past `timeout` in all it is killed and subprocess.TimeoutExpired raised, as subprocess.run does;
    a checker that dies before it says it read leaves no result (the caller's protocol_error, as today)."""
    deadline = time.monotonic() + timeout
    with tempfile.TemporaryFile(dir=cwd) as err:
        proc = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=err)
        try:
            if _read_line(proc, deadline) is not None:
                with lane():
                    try:
                        proc.stdin.write(b"go\n")
                        proc.stdin.flush()
                    except (BrokenPipeError, OSError):
                        pass                  # it died: no result file, the caller says so
                    proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            else:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise subprocess.TimeoutExpired(argv, timeout) from None
        finally:
            for f in (proc.stdin, proc.stdout):
                try:
                    f.close()
                except OSError:
                    pass
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        err.seek(0)
        return err.read()


def _read_line(proc: subprocess.Popen, deadline: float) -> bytes | None:
    """One line of `proc`'s stdout before `deadline` (TimeoutExpired past it); None when stdout closed."""
    buf = b""
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while b"\n" not in buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(proc.args, 0)
            if not sel.select(timeout=left):
                continue
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                return None
            buf += chunk
    return buf.split(b"\n", 1)[0]


def ensure_matches(checker, backend: str, placement: Placement) -> None:
    """A warm checker serves one device (and, on cuda, one GPU): misuse is an error, not a wrong verdict."""
    if checker is None:
        return
    if getattr(checker, "device", None) != backend:
        raise ValueError(f"the warm checker serves the {getattr(checker, 'device', None)} device; this "
                         f"evaluation runs on {backend}")
    if backend == "cuda" and checker.gpu_index != placement.gpu_index:
        raise ValueError(f"the warm checker is pinned to GPU {checker.gpu_index}; this evaluation runs on "
                         f"GPU {placement.gpu_index} (placement.gpu_index)")
