"""Where the trusted checker runs for one evaluation, seen from the parent: a warm checker's persistent
process when one is given, else the parent itself on cpu and a fresh trusted process on cuda (inputs are
regenerated with the device's own generator there). The checker never runs submitted code."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from kernelgym_gap.core.config import EvalConfig
from kernelgym_gap.core.placement import Placement
from kernelgym_gap.core.record import CheckResult, ChildReport, Job
from kernelgym_gap.core.status import Status
from kernelgym_gap.core.task import TaskSpec


def check_in_process(task: TaskSpec, job: Job, report: ChildReport, backend: str, private: Path,
                     config: EvalConfig, checker=None, early=None, placement: Placement | None = None
                     ) -> CheckResult:
    """The trusted checker's verdict on the outputs the child saved. `checker`: None or a warm checker for
    this backend (api.warm.WarmChecker). `private` is a directory the child never saw. `early`: the check
    started while the child ran (judge/early_check.start), which has its references made already. `placement`: its GPU (default 0)."""
    if early is not None:
        return early.check(task, job, report, backend, private, config)
    if backend == "cpu" and checker is None:
        from kernelgym_gap.judge.checker import check
        return check(task, job, report, "cpu")
    report_path = private / "report.json"
    report_path.write_text(report.to_json())
    job_path = private / "job.json"
    job_path.write_text(job.to_json())
    spec = {"job": str(job_path), "report": str(report_path), "result": str(private / "check.json"),
            "device": backend}
    (private / "check_spec.json").write_text(json.dumps(spec))
    if checker is not None:
        return checker.check_spec(private / "check_spec.json", private / "check.json", config.sandbox.wall_s)
    from kernelgym_gap.sandbox.child_io import backend_env
    from kernelgym_gap.sandbox.process import child_env
    env = child_env(private, backend_env(backend) | {"CUDA_VISIBLE_DEVICES": str((placement or Placement()).gpu_index)})
    proc = subprocess.run([sys.executable, "-m", "kernelgym_gap.judge.checker", str(private / "check_spec.json")],
                          env=env, cwd=private, capture_output=True, timeout=config.sandbox.wall_s)
    if not (private / "check.json").is_file():
        return CheckResult(status=Status.PROTOCOL_ERROR, trials_checked=0,
                           message="the trusted checker failed: " + proc.stderr.decode(errors="replace")[-2000:])
    return CheckResult.from_json((private / "check.json").read_text())


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
