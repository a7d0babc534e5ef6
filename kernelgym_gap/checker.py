"""The trusted checker: regenerates each trial's inputs, computes the reference, and judges the outputs a
child saved. It never runs submitted code. On the cpu backend it runs inside the parent; on cuda in a
separate trusted process on the same device (`python -m kernelgym_gap.checker CHECK.json`), since inputs
are regenerated with the device's own generator."""
from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

import torch

from . import inputs as inputs_mod
from .record import CheckResult, ChildReport, FailureDetail, Job, Trial
from .status import Status
from .task import TaskSpec, itemsize, numel

KERNELBENCH_TOL = 1e-2


class _Fail(Exception):
    def __init__(self, status: Status, message: str, **detail):
        super().__init__(message)
        self.status, self.message, self.detail = status, message, detail


def _load_output(path: Path, max_bytes: int) -> torch.Tensor:
    if not path.is_file():
        raise _Fail(Status.PROTOCOL_ERROR, f"the child reported an output file it did not write ({path.name})")
    size = path.stat().st_size
    if size > max_bytes:
        raise _Fail(Status.WRONG_SHAPE, f"the output file is {size} bytes, far larger than the expected output")
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - a file the child wrote is hostile input
        raise _Fail(Status.PROTOCOL_ERROR, f"output file unreadable: {type(e).__name__}: {e}") from None
    if type(obj) is not torch.Tensor:
        raise _Fail(Status.WRONG_TYPE, f"output is {type(obj).__name__}, not exactly torch.Tensor")
    return obj


def _reference(task: TaskSpec, ins: tuple) -> torch.Tensor:
    with torch.no_grad():
        if task.reference_in_float64:
            ins = tuple(x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in ins)
        return task.reference(*ins)


def _judge(task: TaskSpec, trial: Trial, path: Path, ins: tuple, what: str) -> bool:
    """Raises _Fail on the first problem; returns whether a KernelBench-style allclose would pass."""
    where = dict(trial=trial)
    expected_dtype = getattr(torch, task.output_dtype(trial.dtype))
    ref = _reference(task, ins)       # on the trials' device: the comparison runs there too
    out = _load_output(path, max_bytes=2 * numel(ref.shape) * itemsize("float64") + (1 << 16))
    out = out.to(ref.device)
    if out.dtype != expected_dtype:
        raise _Fail(Status.WRONG_DTYPE, f"{what}: output dtype {out.dtype}, expected {expected_dtype}", **where)
    if tuple(out.shape) != tuple(ref.shape):
        raise _Fail(Status.WRONG_SHAPE, f"{what}: output shape {list(out.shape)}, expected {list(ref.shape)}",
                    **where)
    o, r = out.double(), ref.double()
    ref_finite = torch.isfinite(r)
    if bool((~torch.isfinite(o) & ref_finite).any()):
        n = int((~torch.isfinite(o) & ref_finite).sum())
        raise _Fail(Status.NON_FINITE, f"{what}: {n} non-finite output values where the reference is finite",
                    **where)
    if o.numel() and bool((o == 0).all()) and not bool((r == 0).all()):
        raise _Fail(Status.ALL_ZERO, f"{what}: the output is all zeros and the reference is not", **where)
    tol = task.tolerances[trial.dtype]
    diff = (o - r).abs().where(ref_finite, torch.zeros_like(o))
    bad = diff > tol.atol + tol.rtol * r.abs().where(ref_finite, torch.zeros_like(r))
    if bool(bad.any()):
        denom = r.abs().clamp_min(tol.atol)
        max_abs = float(diff.max())
        max_rel = float((diff / denom).max())
        frac = float(bad.double().mean())
        raise _Fail(Status.MISMATCH,
                    f"{what}: {frac:.2%} of the elements differ from the reference beyond atol={tol.atol}, "
                    f"rtol={tol.rtol} (max abs err {max_abs:.3g}, max rel err {max_rel:.3g}) "
                    f"at shape {list(trial.shape)}, {trial.dtype}, seed {trial.seed}, {trial.distribution} inputs",
                    trial=trial, max_abs_err=max_abs, max_rel_err=max_rel, mismatched_fraction=frac)
    with torch.no_grad():
        same_dtype_ref = task.reference(*ins)
    return bool(torch.allclose(out.float(), same_dtype_ref.float(), atol=KERNELBENCH_TOL, rtol=KERNELBENCH_TOL))


def check(task: TaskSpec, job: Job, report: ChildReport, device: str) -> CheckResult:
    outputs = Path(job.outputs_dir)
    by_index = {o.index: o for o in report.trials}
    kb = True
    checked = 0
    try:
        for trial in job.trials:
            outcome = by_index.get(trial.index)
            if outcome is None:
                raise _Fail(Status.PROTOCOL_ERROR, f"the child's report has no outcome for trial {trial.index}")
            ins = inputs_mod.make_trial_inputs(task, trial, device)
            what = f"trial {trial.index} ({trial.split} shape {list(trial.shape)}, {trial.dtype})"
            if outcome.input_digest_before != inputs_mod.digest(ins):
                raise _Fail(Status.PROTOCOL_ERROR, f"{what}: the child's inputs were not the ones generated")
            if outcome.input_digest_after != outcome.input_digest_before:
                raise _Fail(Status.INPUT_MUTATED, f"{what}: the submission modified its inputs", trial=trial)
            if outcome.output_type != "torch.Tensor" or outcome.output_file is None:
                raise _Fail(Status.WRONG_TYPE, f"{what}: returned {outcome.output_type}, not exactly torch.Tensor",
                            trial=trial)
            if outcome.output_aliases_input:
                raise _Fail(Status.OUTPUT_ALIASES_INPUT, f"{what}: the output shares memory with an input",
                            trial=trial)
            kb &= _judge(task, trial, outputs / outcome.output_file, ins, what)
            checked += 1
        for timing in report.timings:
            if timing.recheck_output_file is None or timing.recheck_trial is None:
                continue
            trial = timing.recheck_trial
            ins = inputs_mod.make_trial_inputs(task, trial, device)
            _judge(task, trial, outputs / timing.recheck_output_file, ins,
                   f"after timing, shape {list(trial.shape)} {trial.dtype}")
            checked += 1
    except _Fail as f:
        return CheckResult(status=f.status, message=f.message, trials_checked=checked,
                           failure=FailureDetail(**f.detail) if f.detail else None)
    return CheckResult(status=Status.OK, message="", trials_checked=checked, kernelbench_allclose=kb)


def main(argv=None) -> int:
    """Trusted child entry: CHECK.json names the job, the child's report, and where to write the result."""
    import json
    from .registry import TaskRegistry, DEFAULT_TASKS_DIR
    argv = sys.argv[1:] if argv is None else argv
    spec = json.loads(Path(argv[0]).read_text())
    job = Job.from_json(Path(spec["job"]).read_text())
    report = ChildReport.from_json(Path(spec["report"]).read_text())
    task = TaskRegistry(Path(job.tasks_dir) if job.tasks_dir else DEFAULT_TASKS_DIR).get(job.task_id)
    result = check(task, job, report, spec["device"])
    Path(spec["result"]).write_text(result.to_json())
    return 0


if __name__ == "__main__":
    os._exit(main())
