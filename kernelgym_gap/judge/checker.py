"""The trusted checker: regenerates each trial's inputs, computes the reference, and judges the outputs a
child saved. It never runs submitted code. On the cpu backend it runs inside the parent; on cuda in a
separate trusted process on the same device (`python -m kernelgym_gap.judge.checker CHECK.json`), since inputs
are regenerated with the device's own generator.

`python -m kernelgym_gap.judge.checker --serve [--device cuda|cpu]` is the same checker kept alive (the warm pool,
kernelgym_gap.api.warm.WarmChecker): it imports torch and initialises the device once, prints one JSON line
`{"ready": true, ...}`, then answers each CHECK.json path read from stdin with one JSON line
(`{"spec": PATH, "ok": true}` once the result file is written, or `{"spec": PATH, "ok": false, "error": TB}`,
after which it exits, so that no state of a failed check is reused). A CHECK.json with `"prefetch": true`
(EvalConfig.read_outputs_outside_lane) takes two steps: the checker reads the output files into host memory
(judge/prefetch.py), answers `{"spec": PATH, "read": N}`, and waits for one more stdin line, which the parent
sends once it holds the GPU's shared lane; then it checks and answers as above. A line `early EARLY.json`
(judge/early_prefetch.py) reads the pre-timing checkpoint's files and answers `{"early": PATH, "read": N}`; the
next CHECK.json with `"early": true` starts from them, any other drops them, and so does `drop`. The one-shot
`checker CHECK.json` does the same two steps when its spec asks for them. A CHECK.json with `"handover": true`
(the outputs handed over on the device, issue 35) is `run_handover`'s exchange, answered by this loop only.
Only the protocol goes to the real stdout: anything else the process prints goes to stderr."""
from __future__ import annotations

import dataclasses
import functools
import os
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import torch

from kernelgym_gap.core import inputs as inputs_mod
from kernelgym_gap.core import tensor_file
from kernelgym_gap.core.record import CheckResult, ChildReport, FailureDetail, Job, Trial
from kernelgym_gap.core.registry import users_tasks_dir
from kernelgym_gap.core.status import Status
from kernelgym_gap.core.task import TaskSpec
from kernelgym_gap.judge import kernelbench_check, lowbit, scaled_tolerance
from kernelgym_gap.judge.output_rules import (dtype_problem, max_output_bytes, recheck_what, shape_problem,
                                              trial_what)
from kernelgym_gap.judge.arena import device_arena
from kernelgym_gap.judge.check_parts import Parts
from kernelgym_gap.judge.early_prefetch import early_line
from kernelgym_gap.judge.failure_text import counted, first_bad, not_handed_over, samples_text
from kernelgym_gap.judge.handover_check import ArenaFactory, Handed, handed_over
from kernelgym_gap.judge.ipc_records import OutputKey, OutputKind, ReportRefused, plan_outputs
from kernelgym_gap.judge.kernelbench_check import KERNELBENCH_TOL
from kernelgym_gap.judge.output_source import CheckFailure, output_for, prefetched_or_load
from kernelgym_gap.judge.prefetch import Fetched, Prefetch, prefetch_outputs, told_go, wants_prefetch
from kernelgym_gap.judge.read_arena import ReadArena


def _float64(ins: tuple) -> tuple:
    return tuple(x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in ins)


def _reference(task: TaskSpec, ins: tuple) -> torch.Tensor:
    with torch.no_grad():
        if not task.reference_in_float64:
            return task.reference(*ins)
        return (task.float64_reference or task.reference)(*_float64(ins))


def _error_bound(task: TaskSpec, ins: tuple, dtype: str) -> torch.Tensor:
    with torch.no_grad():
        return task.error_bound(_float64(ins), dtype).double().abs()


def _judge(task: TaskSpec, trial: Trial, path: Path, ins: tuple, what: str, device: str,
           parts: Parts | None = None, ref: torch.Tensor | None = None, fetched: Fetched | None = None,
           flag: bool = True) -> bool | None:
    """Raises CheckFailure on the first problem. Returns KernelBench's own check of the output where it runs (the
    timed distribution's trials; judge/kernelbench_check.py), else None. `flag` False (a recheck, an audited
    output): the caller does not report it, so it runs only where the verdict applies it. `ref`: the
    reference precomputed from the same inputs (`precompute`), else computed here. `fetched`: the output
    file as read before the lane (judge/prefetch.py), else read here."""
    parts = parts or Parts("cpu")
    public = trial.split == "public"
    reproduce = inputs_mod.reproduce_call(task.id, trial, device, users_tasks_dir(task))
    where = dict(trial=trial, reproduce=reproduce)
    expected_dtype = getattr(torch, task.output_dtype(trial.dtype))
    parts.enter("reference")
    if ref is None:
        ref = _reference(task, ins)   # on the trials' device: the comparison runs there too
    parts.enter("read")
    out = prefetched_or_load(path, max_output_bytes(ref.shape), fetched)
    out = out.to(ref.device)
    parts.enter("compare")
    # the dtype and shape rules and their words are output_rules', shared with the hand-over on the device
    if (problem := dtype_problem(what, out.dtype, expected_dtype, trial.dtype)) is not None:
        raise CheckFailure(Status.WRONG_DTYPE, problem, **where)
    # a public trial's message ends with the call that regenerates its inputs; a held-out one's leaves it to
    # the record (failure.reproduce), which people read and agents do not (engine/feedback.py)
    inputs_line = f"\ninputs: {reproduce}" if public else ""
    if (problem := shape_problem(what, out.shape, ref.shape, public)) is not None:
        raise CheckFailure(Status.WRONG_SHAPE, problem, **where)
    raw_out, raw_ref = out, ref          # KernelBench's check compares these, never the view below
    if task.output_view is not None:     # several correct outputs (tied indices): compared through the view
        try:
            out, ref = task.output_view(ins, out), task.output_view(ins, ref)
        except ValueError as e:
            raise CheckFailure(Status.MISMATCH, f"{what}: {e}{inputs_line}", **where) from None
    o, r = out.double(), ref.double()
    ref_finite = torch.isfinite(r)
    tol = task.tolerances[trial.dtype]
    nonfinite = ~torch.isfinite(o) & ref_finite
    if bool(nonfinite.any()):
        n = int(nonfinite.sum())
        first = first_bad(nonfinite, o, r)
        raise CheckFailure(Status.NON_FINITE,
                           f"{what}: {counted(n, o.numel(), 'output values', public)} are inf or nan where the "
                           f"reference is finite\nfirst bad elements: {samples_text(first, public)}{inputs_line}",
                           first_bad=first, bad_elements=n, **where)
    if o.numel() and bool((o == 0).all()) and not bool((r == 0).all()):
        raise CheckFailure(Status.ALL_ZERO, f"{what}: the output is all zeros and the reference is not (was the output "
                                            f"written?){inputs_line}", **where)
    if lowbit.is_lowbit(out.dtype):     # int8/float8: the distance in the format's own steps (judge/lowbit.py)
        diff = lowbit.steps_apart(out, ref).where(ref_finite, torch.zeros_like(o))
        allowed = float(tol.steps or 0)
        limit = f"{tol.steps or 0} representable {str(out.dtype).removeprefix('torch.')} step(s)"
    else:
        diff = (o - r).abs().where(ref_finite, torch.zeros_like(o))
        allowed = tol.atol + tol.rtol * r.abs().where(ref_finite, torch.zeros_like(r))
        limit = f"atol={tol.atol} + rtol={tol.rtol} x |expected|"
        # per-shape scale and the input guard (issue 36; judge/scaled_tolerance.py): off unless the task sets them
        allowed, limit = scaled_tolerance.allowance(task, tol, r, ref_finite, allowed, limit)
    bad = diff > allowed
    bound_text = ""
    if bool(bad.any()) and task.error_bound is not None:
        # only computed when the tolerance alone rejects something: it costs about as much as the reference
        bound = _error_bound(task, ins, trial.dtype).to(diff.device)
        bad = diff > allowed + bound
        bound_text = " + the task's float32 error bound"
    if bool(bad.any()):
        denom = r.abs().clamp_min(tol.atol)
        max_abs = float(diff.max())
        max_rel = float((diff / denom).max())
        n = int(bad.sum())
        frac = n / bad.numel()
        first = first_bad(bad, o, r)
        raise CheckFailure(Status.MISMATCH,
                           f"{what}: {counted(n, bad.numel(), 'elements', public)} differ from the reference beyond "
                           f"{limit}{bound_text} (max abs err {max_abs:.3g}, max rel err "
                           f"{max_rel:.3g})\nfirst bad elements: {samples_text(first, public)}{inputs_line}",
                           max_abs_err=max_abs, max_rel_err=max_rel, mismatched_fraction=frac,
                           first_bad=first, atol=tol.atol, rtol=tol.rtol, bad_elements=n, **where)
    parts.enter("allclose")              # entered on every passing trial, so the record's key is always there
    kb = kernelbench_check.passes(task, ins, raw_out, raw_ref) if kernelbench_check.wanted(task, trial, flag) \
        else None
    if kb is False and kernelbench_check.gated(task, trial):
        # an imported problem's own check is part of its verdict (issue 36: the record said false, reward 1.0)
        raise CheckFailure(Status.MISMATCH, f"{what}: KernelBench's own check rejects the output (torch.allclose "
                           f"atol=rtol={KERNELBENCH_TOL} against the reference in {trial.dtype}){inputs_line}", **where)
    parts.enter("other")
    return kb


def judge_output(task: TaskSpec, trial: Trial, path: Path, ins: tuple, device: str = "cpu") -> tuple[Status, str]:
    """(status, message) of one saved output judged exactly as check() judges a trial's: the input audit
    (judge/input_audit.py) runs input-independent outputs through it."""
    try:
        _judge(task, trial, path, ins, "audited output", device, flag=False)
    except CheckFailure as f:
        return f.status, f.message
    return Status.OK, ""


PRECOMPUTE_BYTES = 2 << 30   # inputs and references held at once by `precompute`; the rest are made by `check`


def precompute(task: TaskSpec, job: Job, device: str, max_bytes: int = PRECOMPUTE_BYTES,
               stop=None, extra: tuple[Trial, ...] = ()) -> dict[int, tuple[tuple, torch.Tensor]]:
    """Each trial's inputs and reference, from the job alone (the seeds say what the inputs are), so that
    they can be made while the child still compiles and runs (judge/early_check.py, issue 35). Trials in
    the job's order until `max_bytes` of them are held; `stop()` true ends it early. The same functions as
    `check` uses on the same inputs: a verdict with them is the verdict without. `extra`: trials after the
    job's (the rechecks of the outputs handed over, whose shapes the plan needs: `run_handover`)."""
    ready: dict[int, tuple[tuple, torch.Tensor]] = {}
    held = 0
    for trial in (*job.trials, *extra):
        if stop is not None and stop():
            break
        ins = inputs_mod.make_trial_inputs(task, trial, device)
        ref = _reference(task, ins)
        held += sum(x.numel() * x.element_size() for x in (*ins, ref) if isinstance(x, torch.Tensor))
        if held > max_bytes:
            break
        ready[trial.index] = (ins, ref)
    if device == "cuda":
        torch.cuda.synchronize()
    return ready


def check(task: TaskSpec, job: Job, report: ChildReport, device: str,
          ready: dict[int, tuple[tuple, torch.Tensor]] | None = None, prefetched: Prefetch | None = None,
          handed: Mapping[OutputKey, Handed] | None = None) -> CheckResult:
    """The verdict on the outputs the child saved. `ready`: inputs and references `precompute` made
    beforehand, by trial index (the rest are made here). `prefetched`: output files read before the GPU's
    lane was taken (judge/prefetch.py; the rest are read here); its seconds are the result's `prefetch`.
    `handed`: the outputs handed over on the device, by output (`run_handover`): a view or a verdict."""
    ready = ready or {}
    handed = dict(handed or {})
    fetched = dict(prefetched.files) if prefetched is not None else {}
    outputs = Path(job.outputs_dir)
    by_index = {o.index: o for o in report.trials}
    kb: bool | None = None               # None until a trial of the timed distribution is checked
    checked = 0
    parts = Parts(device)
    if prefetched is not None:           # outside `check`'s lane hold: the record's check_prefetch
        parts.seconds["prefetch"] = round(prefetched.seconds, 6)
    try:
        for trial in job.trials:
            outcome = by_index.get(trial.index)
            if outcome is None:
                raise CheckFailure(Status.PROTOCOL_ERROR, f"the child's report has no outcome for trial {trial.index}")
            parts.enter("inputs")
            ins, ref = ready.pop(trial.index, None) or (inputs_mod.make_trial_inputs(task, trial, device), None)
            what = trial_what(trial)
            digest = inputs_mod.digest(ins)
            parts.enter("other")
            if outcome.input_digest_before != digest:
                raise CheckFailure(Status.PROTOCOL_ERROR, f"{what}: the child's inputs were not the ones generated")
            if outcome.input_digest_after != outcome.input_digest_before:
                raise CheckFailure(Status.INPUT_MUTATED, f"{what}: the submission modified its inputs", trial=trial)
            got = handed.pop(OutputKey(OutputKind.TRIAL, trial.index), None)
            if got is None and outcome.output_handle is not None:
                raise CheckFailure(Status.PROTOCOL_ERROR, not_handed_over(what))
            if outcome.output_type != "torch.Tensor" or (outcome.output_file is None and got is None):
                raise CheckFailure(Status.WRONG_TYPE,
                                   f"{what}: returned {outcome.output_type}, not exactly torch.Tensor", trial=trial)
            if outcome.output_aliases_input:
                raise CheckFailure(Status.OUTPUT_ALIASES_INPUT, f"{what}: the output shares memory with an input",
                                   trial=trial)
            name = outcome.output_file or OutputKey(OutputKind.TRIAL, trial.index).file_name
            trial_kb = _judge(task, trial, outputs / name, ins, what, device, parts, ref,
                              output_for(task, trial, device, got, fetched.pop(name, None)))
            if trial_kb is not None:
                kb = trial_kb if kb is None else kb and trial_kb
            del ins, ref
            checked += 1
        for timing in report.timings:
            trial = timing.recheck_trial
            key = OutputKey(OutputKind.RECHECK, trial.index) if trial is not None else None
            got = handed.pop(key, None)
            if trial is not None and got is None and timing.recheck_output_handle is not None:
                raise CheckFailure(Status.PROTOCOL_ERROR, not_handed_over(recheck_what(trial)))
            if trial is None or (timing.recheck_output_file is None and got is None):
                continue
            parts.enter("inputs")
            ins, ref = ready.pop(trial.index, None) or (inputs_mod.make_trial_inputs(task, trial, device), None)
            parts.enter("other")
            name = timing.recheck_output_file or key.file_name
            _judge(task, trial, outputs / name, ins, recheck_what(trial), device, parts, ref,
                   output_for(task, trial, device, got, fetched.pop(name, None)), flag=False)
            checked += 1
    except CheckFailure as f:
        parts.enter("other")    # closes the part that failed
        return CheckResult(status=f.status, message=f.message, trials_checked=checked,
                           failure=FailureDetail(**f.detail) if f.detail else None, seconds=parts.seconds)
    parts.enter("other")
    return CheckResult(status=Status.OK, message="", trials_checked=checked, kernelbench_allclose=kb,
                       seconds=parts.seconds)


def run_handover(spec_path: str, task: TaskSpec, job: Job, report: ChildReport, device: str,
                 send: Callable[[dict], None], receive: Callable[[], str], arena_factory: ArenaFactory,
                 before_lane: Callable[[int], bool] | None = None,
                 read: Callable[[Path, int], torch.Tensor] = tensor_file.read_tensor) -> CheckResult | None:
    """A check spec with `"handover": true` (the warm checker on cuda; judge/handover_check.py): the references
    the plan needs (the trials', and the handed-over rechecks', kept for the check), the plan, the exchange,
    and the check of its views and verdicts. None when the parent aborted (it checks again by files) or went
    away. A report refused as a whole is the result at once, with no arena. `arena_factory` is the caller's
    (the loop's: judge/arena.device_arena; a test's: a host tensor), never a spec's or the environment's. The
    references' and the plan's seconds, outside the check's parts, are the result's `handover_references`.
    `before_lane` (a spec with `"prefetch": true`): the outputs that are files are read first, before any GPU
    work, and `before_lane(files read)` waits for the parent's lane, as `_check_spec` does for the file path;
    False (the parent went away) is None. `read`: the prefetch's (`_check_spec`'s)."""
    prefetched = None
    if before_lane is not None:
        prefetched = prefetch_outputs(job, report, read=read)
        if not before_lane(len(prefetched.files)):
            return None
    # here, not in judge/handover_check.py: it calls `check` and `precompute`, and this module's loop calls it
    # (`_check_spec`), so there it would close an import cycle (tests/test_architecture.py forbids them)
    made = time.perf_counter()
    rechecks = tuple(s.recheck_trial for s in report.timings
                     if s.recheck_output_handle is not None and s.recheck_trial is not None)
    ready = precompute(task, job, device, extra=rechecks)

    def shape(trial: Trial) -> tuple[int, ...]:     # past precompute's bound: made, measured, dropped
        ins = None if trial.index in ready else inputs_mod.make_trial_inputs(task, trial, device)
        return tuple((ready[trial.index][1] if ins is None else _reference(task, ins)).shape)
    plan = plan_outputs(job, report, task, shape)
    seconds = {"handover_references": round(time.perf_counter() - made, 6)}
    if isinstance(plan, ReportRefused):
        return CheckResult(status=plan.status, message=plan.message, trials_checked=0, seconds=seconds)
    with handed_over(spec_path, plan, device, send, receive, arena_factory) as handed:
        result = None if handed is None else check(task, job, report, device, ready, prefetched=prefetched,
                                                     handed=handed)
    return result and dataclasses.replace(result, seconds={**result.seconds, **seconds})


def _check_spec(spec_path: str, before_lane=None, early: Prefetch | None = None, handover=None,
                read: Callable[[Path, int], torch.Tensor] = tensor_file.read_tensor) -> bool:
    """One check: CHECK.json names the job, the child's report, the device and where to write the result.
    With `"prefetch": true` in it (EvalConfig.read_outputs_outside_lane) and a `before_lane(n)` given, the
    output files are read first (judge/prefetch.py), then `before_lane(files read)` tells the parent, which
    takes the GPU's shared lane and answers; it returns False when the parent went away (no check then).
    `early`: the files read while the child timed (`_early_read`), used when the spec says `"early": true`.
    `handover`: the loop's (send, receive) for a spec with `"handover": true` (`run_handover`, with the device's
    own arena). `read`: how the prefetch reads a file (the warm loop's: into its read arena with one,
    judge/read_arena.py). False when nothing is to be answered (an abort), else True."""
    import json
    from kernelgym_gap.core.registry import find_task
    spec = json.loads(Path(spec_path).read_text())
    job = Job.from_json(Path(spec["job"]).read_text())
    report = ChildReport.from_json(Path(spec["report"]).read_text())
    task = find_task(job.task_id, job.tasks_dir)
    if spec.get("handover"):        # only the warm loop's parent asks for it; anyone else gets an error
        if handover is None:
            raise ValueError("a check spec with handover is answered only by the warm checker's loop")
        result = run_handover(spec_path, task, job, report, spec["device"], *handover, device_arena,
                              before_lane=before_lane if spec.get("prefetch") else None, read=read)
        if result is not None:
            Path(spec["result"]).write_text(result.to_json())
        return result is not None
    prefetched = None
    if spec.get("prefetch") and before_lane is not None:
        prefetched = prefetch_outputs(job, report, early=early if spec.get("early") else None, read=read)
        early = None
        if not before_lane(len(prefetched.files)):
            return True
    result = check(task, job, report, spec["device"], prefetched=prefetched)
    Path(spec["result"]).write_text(result.to_json())
    return True


def _early(spec_path: str, stdin=None) -> None:
    """`--early CHECK.json`: once a line arrives on stdin (the parent holds the GPU's shared lane for it), the
    references, from the job alone, then one line `{"references": N}` on stdout; then, once a line arrives on stdin (the child's report is written), the check, as `_check_spec`.
    Started by judge/early_check.py while the submission's child still runs."""
    import json
    from kernelgym_gap.core.registry import find_task
    proto = os.fdopen(os.dup(1), "w", buffering=1)   # the protocol channel, as `serve`'s
    os.dup2(2, 1)
    stdin = stdin or sys.stdin
    spec = json.loads(Path(spec_path).read_text())
    job = Job.from_json(Path(spec["job"]).read_text())
    task = find_task(job.task_id, job.tasks_dir)
    if not stdin.readline().strip():                   # the lane is held for this process from here
        return
    ready = precompute(task, job, spec["device"])
    proto.write(json.dumps({"references": len(ready)}) + "\n")
    if not stdin.readline().strip():
        return                                         # the evaluation ended without a check
    report = ChildReport.from_json(Path(spec["report"]).read_text())
    result = check(task, job, report, spec["device"], ready)
    Path(spec["result"]).write_text(result.to_json())


def serve(device: str = "cuda", stdin=None, read_arena_bytes: int = 0) -> int:
    """The warm checker's loop (see the module docstring). Returns when stdin closes, or after a failed check.
    `read_arena_bytes` (Placement.read_arena_bytes; 0: none): the output files are read into memory kept from one
    evaluation to the next (judge/read_arena.py), taken back whole where a new evaluation's reads begin: an early
    read, or a check spec without one."""
    import json
    import traceback
    from kernelgym_gap.core import registry  # noqa: F401 - imported before `ready`, like everything a check needs
    proto = os.fdopen(os.dup(1), "w", buffering=1)   # the protocol channel: the real stdout
    os.dup2(2, 1)                                     # fd 1 (prints, C libraries) now goes to stderr
    stdin = stdin or sys.stdin
    if device == "cuda":
        torch.zeros(1, device="cuda").sum().item()   # the CUDA context, created once
    proto.write(json.dumps({"ready": True, "pid": os.getpid(), "device": device}) + "\n")
    early: Prefetch | None = None        # the files `early` read, until the next request
    arena = ReadArena(read_arena_bytes) if read_arena_bytes else None
    read = (functools.partial(tensor_file.read_tensor, into=arena.take) if arena is not None
            else tensor_file.read_tensor)
    for line in stdin:
        path = line.strip()
        if not path:
            continue
        if path == "drop" or path.startswith("early "):    # read_outputs_while_timing
            if arena is not None and path != "drop":
                early = None                 # dropped by the new read (early_line), its memory taken back
                arena.reset()
            early = early_line(path, early, proto, read)
            continue
        held, early = early, None
        if arena is not None and held is None:
            arena.reset()                    # a new evaluation's reads: nothing read before is used again
        try:
            answered = _check_spec(path, told_go(proto, stdin, path), held,
                                   (lambda obj: proto.write(json.dumps(obj) + "\n"), stdin.readline), read)
        except BaseException:  # noqa: BLE001 - reported to the parent, then this process ends
            tb = traceback.format_exc()
            sys.stderr.write(tb)
            sys.stderr.flush()
            proto.write(json.dumps({"spec": path, "ok": False, "error": tb[-4000:]}) + "\n")
            return 1
        held = None                                  # an early read is used by one check at most
        if device == "cuda":
            torch.cuda.empty_cache()                 # hold no cached blocks between evaluations
        if answered:                                 # after an abort: nothing more for this spec
            proto.write(json.dumps({"spec": path, "ok": True, **({"arena": arena.state()} if arena else {})})
                        + "\n")
    return 0


def main(argv=None) -> int:
    """Trusted child entry: `CHECK.json` (one check, then exit) or `--serve [--device cuda|cpu]`."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--early":
        _early(argv[1])
        return 0
    if argv and argv[0] == "--serve":
        device = argv[argv.index("--device") + 1] if "--device" in argv else "cuda"
        if device not in ("cuda", "cpu"):
            sys.stderr.write(f"--device must be cuda or cpu, not {device!r}\n")
            return 2
        try:
            arena = int(argv[argv.index("--read-arena") + 1]) if "--read-arena" in argv else 0
            if arena:
                ReadArena(arena)             # its bounds checked here, before the loop answers ready
        except (ValueError, IndexError) as e:
            sys.stderr.write(f"--read-arena takes a number of bytes: {e}\n")
            return 2
        return serve(device, read_arena_bytes=arena)
    if wants_prefetch(argv[0]):
        # the one-shot checker's two steps (judge/trusted.py): the protocol on the real stdout, as `serve`'s
        proto = os.fdopen(os.dup(1), "w", buffering=1)
        os.dup2(2, 1)
        _check_spec(argv[0], told_go(proto, sys.stdin, argv[0]))
        return 0
    _check_spec(argv[0])
    return 0


if __name__ == "__main__":
    os._exit(main())
