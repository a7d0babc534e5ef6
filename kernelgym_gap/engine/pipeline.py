"""One evaluation, end to end: gate, child, checker, measurement, reward. The parent never imports the
submission: it writes the source to a fresh scratch directory and runs it in a sandboxed child."""
from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import json
import logging
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kernelgym_gap.sandbox.launch import backend_env, cold_child, read_report, tail
from kernelgym_gap.core.config import EvalConfig
from kernelgym_gap.core.errors import BackendUnavailableError, ProtocolError, UnknownChoiceError
from kernelgym_gap.engine.gate import check_source
from kernelgym_gap.sandbox.probe import CompileProbe, probe_env, probe_trials
from kernelgym_gap.core.record import CheckResult, ChildReport, EvalRecord, FailureDetail, Job, Trial
from kernelgym_gap.sandbox.process import ChildOutcome, SandboxConfig, child_env
from kernelgym_gap.core.status import Status
from kernelgym_gap.core.task import BACKENDS, DSLS, TaskSpec

log = logging.getLogger(__name__)

_SIGNAL_MEANING = {
    "SIGSEGV": "segmentation fault (often an out-of-bounds memory access in the kernel)",
    "SIGBUS": "bus error (misaligned or out-of-bounds access)",
    "SIGABRT": "aborted (an assertion or a fatal error inside a library)",
    "SIGFPE": "arithmetic exception",
    "SIGILL": "illegal instruction",
    "SIGKILL": "killed (out of memory, or a limit)",
}


def resolve_backend(backend: str) -> str:
    if backend == "auto":
        import torch
        return "cuda" if torch.cuda.is_available() else "cpu"
    if backend not in BACKENDS:
        raise UnknownChoiceError("backend", backend, BACKENDS + ("auto",))
    if backend == "cuda":
        import torch
        if not torch.cuda.is_available():
            raise BackendUnavailableError("the cuda backend needs an NVIDIA GPU and a CUDA build of torch; "
                                          "this machine has none (use --backend cpu)")
    return backend


def _cases(task: TaskSpec, backend: str):
    """Every (split, shape, dtype) a backend evaluates, public shapes first."""
    w = task.workload(backend)
    for split, shapes in (("public", w.public), ("heldout", w.heldout)):
        for shape in shapes:
            for dtype in w.dtypes:
                yield split, tuple(shape), dtype


def make_trials(task: TaskSpec, backend: str, config: EvalConfig, rng: random.Random) -> tuple[Trial, ...]:
    trials = []
    for split, shape, dtype in _cases(task, backend):
        for _ in range(config.seeds_per_shape):
            dist = task.distributions[len(trials) % len(task.distributions)]
            trials.append(Trial(index=len(trials), shape=shape, dtype=dtype, seed=rng.randrange(1, 2**31 - 1),
                                distribution=dist, split=split))
    return tuple(trials)


def make_timing_trials(task: TaskSpec, config: EvalConfig, rng: random.Random) -> tuple[Trial, ...]:
    return tuple(Trial(index=10_000 + i, shape=shape, dtype=dtype, seed=rng.randrange(1, 2**31 - 1),
                       distribution=task.timed_distribution, split=split)
                 for i, (split, shape, dtype) in enumerate(_cases(task, "cuda")))


class Evaluation:
    """The pieces of one evaluation, assembled into an EvalRecord by `evaluate`."""

    def __init__(self, task: TaskSpec, dsl: str, backend: str, config: EvalConfig, source_sha: str):
        self.task, self.dsl, self.backend, self.config = task, dsl, backend, config
        self.source_sha = source_sha
        self.source = ""
        self.latency: dict[str, float] = {}
        self.layers: tuple[str, ...] = ()
        self.device: dict = {}
        self.versions: dict = {}
        self.flags: list[str] = []          # notes on checks that could not run, for terms["flags"]

    def record(self, status: Status, message: str, *, correct: bool | None = False, reward: float = 0.0,
               terms: dict | None = None, failure: FailureDetail | None = None, diagnosis: dict | None = None,
               trials_checked: int = 0, reward_mode: str | None = None) -> EvalRecord:
        base_terms = {"correctness": 1.0 if correct else 0.0, "performance": None, "E": None, "U": None,
                      "per_shape": None, "kernelbench_allclose": None, "flags": []}
        base_terms.update(terms or {})
        if self.flags:
            base_terms["flags"] = list(base_terms["flags"] or []) + self.flags
        mode = reward_mode or (self.config.reward.mode if self.backend == "cuda" else "correctness")
        return EvalRecord(
            task=self.task.id, task_version=self.task.version, dsl=self.dsl, backend=self.backend,
            status=status, correct=correct, reward=reward, reward_mode=mode, terms=base_terms,
            message=message, failure=failure, diagnosis=diagnosis, trials_checked=trials_checked,
            device=self.device, versions=self.versions, sandbox_layers=self.layers, latency=self.latency,
            source_sha256=self.source_sha,
            created_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))


def _child_failure(outcome: ChildOutcome, config: EvalConfig) -> tuple[Status, str] | None:
    hit = set(outcome.limits_hit)
    if "memory" in hit:
        peak = f" (peak {outcome.memory_peak_bytes / 2**20:.0f} MiB)" if outcome.memory_peak_bytes else ""
        return Status.OUT_OF_MEMORY, f"the child went over its memory limit and was killed{peak}"
    if outcome.timed_out:
        forks = (f"; the pids limit refused {outcome.forks_refused} process/thread creations"
                 if outcome.forks_refused else "")
        return Status.TIMEOUT, (f"the evaluation ran past its {config.sandbox.wall_s:.0f} s deadline and was "
                                f"killed{forks}")
    if "scratch_quota" in hit:
        return Status.OUTPUT_TOO_LARGE, (f"the child's scratch directory grew past its quota "
                                         f"({config.sandbox.scratch_quota_bytes} B or "
                                         f"{config.sandbox.scratch_max_entries} entries) and it was killed")
    if "output" in hit or outcome.output_bytes > config.max_child_output_bytes:
        return Status.OUTPUT_TOO_LARGE, (f"the child wrote {outcome.output_bytes} bytes to stdout/stderr "
                                         f"(limit {config.max_child_output_bytes})")
    if outcome.signal == "SIGXCPU":
        return Status.TIMEOUT, f"the child used up its CPU time limit ({config.sandbox.cpu_s} s)"
    if outcome.signal == "SIGXFSZ":
        return Status.OUTPUT_TOO_LARGE, f"the child wrote a file over the size limit ({config.sandbox.fsize_bytes} B)"
    if outcome.signal is not None:
        meaning = _SIGNAL_MEANING.get(outcome.signal, "killed by a signal")
        return Status.CRASH, f"the child died of {outcome.signal}: {meaning}\n{tail(outcome.stderr_tail)}"
    return None


def _run_checker(task: TaskSpec, job: Job, report: ChildReport, backend: str, private: Path,
                 config: EvalConfig, checker=None) -> CheckResult:
    """The trusted checker's verdict: with `checker` (a warm.WarmChecker) its persistent process answers;
    without, in the parent on cpu and in a fresh process on cuda."""
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
    env = child_env(private, backend_env(backend) | {"CUDA_VISIBLE_DEVICES": str(config.gpu_index)})
    proc = subprocess.run([sys.executable, "-m", "kernelgym_gap.judge.checker", str(private / "check_spec.json")],
                          env=env, cwd=private, capture_output=True, timeout=config.sandbox.wall_s)
    if not (private / "check.json").is_file():
        return CheckResult(status=Status.PROTOCOL_ERROR, trials_checked=0,
                           message="the trusted checker failed: " + proc.stderr.decode(errors="replace")[-2000:])
    return CheckResult.from_json((private / "check.json").read_text())


def _check_warm(checker, backend: str, config: EvalConfig) -> None:
    if checker is None:
        return
    if getattr(checker, "device", None) != backend:
        raise ValueError(f"the warm checker serves the {getattr(checker, 'device', None)} device; this "
                         f"evaluation runs on {backend}")
    if backend == "cuda" and checker.gpu_index != config.gpu_index:
        raise ValueError(f"the warm checker is pinned to GPU {checker.gpu_index}; this evaluation runs on "
                         f"GPU {config.gpu_index} (config.gpu_index)")


def _with_tasks_dir(sandbox: SandboxConfig, tasks_dir: str | None) -> SandboxConfig:
    """The child reads its task from the registry's directory: one outside the project is bound too."""
    if tasks_dir is None or tasks_dir in sandbox.extra_ro_paths:
        return sandbox
    return dataclasses.replace(sandbox, extra_ro_paths=(*sandbox.extra_ro_paths, tasks_dir))


def _tasks_dir(task: TaskSpec) -> str | None:
    return str(task.directory.parent.parent) if task.directory is not None else None


def child_spec(task: TaskSpec, dsl: str, backend: str, config: EvalConfig):
    """What the submission's child is started with (prestart.ChildSpec): its sandbox and environment."""
    from kernelgym_gap.sandbox.prestart import ChildSpec
    sandbox_cfg = _with_tasks_dir(config.sandbox, _tasks_dir(task))
    if backend == "cuda":
        sandbox_cfg = dataclasses.replace(sandbox_cfg, gpu_devices=(config.gpu_index,), address_space_bytes=None)
    probe = tuple(sorted(probe_env().items())) if backend == "cpu" and dsl == "triton" else None
    return ChildSpec(dsl=dsl, backend=backend, sandbox=sandbox_cfg, env=tuple(sorted(backend_env(backend).items())),
                     scratch_root=config.scratch_root, probe_env=probe)


def evaluate(task: TaskSpec | str, source: str | bytes, dsl: str = "triton", backend: str = "auto",
             config: EvalConfig = EvalConfig(), checker=None, children=None) -> EvalRecord:
    """Evaluate one submission. Never raises for anything the submission does; raises only for misuse
    (unknown dsl or backend, a checker for another device) or a machine that cannot run the backend.

    checker: None (a fresh trusted checker process per evaluation on cuda, the parent itself on cpu) or a
    kernelgym_gap.api.warm.WarmChecker for this backend (and, on cuda, for config.gpu_index): its persistent
    process checks instead.
    children: None, or a kernelgym_gap.sandbox.prestart.ChildPool: the submission's child is then one the pool
    pre-started (its imports done) when one fits, and the pool starts the next one once this child ended.
    The submission's child is a fresh, single-use process either way."""
    if isinstance(task, str):
        from kernelgym_gap.core.registry import get_task
        task = get_task(task)
    if dsl not in DSLS:
        raise UnknownChoiceError("dsl", dsl, DSLS)
    backend = resolve_backend(backend)
    _check_warm(checker, backend, config)
    t_start = time.perf_counter()
    raw = source.encode("utf-8", "surrogatepass") if isinstance(source, str) else source
    ev = Evaluation(task, dsl, backend, config, hashlib.sha256(raw).hexdigest())

    gate = check_source(raw, task.entry_point, dsl, config.max_source_bytes)
    ev.latency["gate"] = time.perf_counter() - t_start
    if not gate.passed:
        return ev.record(gate.status, gate.message)
    ev.source = gate.source

    rng = random.Random(config.trial_seed) if config.trial_seed is not None else random.SystemRandom()
    trials = make_trials(task, backend, config, rng)
    timing_trials = make_timing_trials(task, config, rng) if backend == "cuda" else ()
    spec = child_spec(task, dsl, backend, config)
    pre = children.take(spec) if children is not None else None
    scratch = pre.scratch if pre is not None else Path(tempfile.mkdtemp(prefix="kgg-eval-", dir=config.scratch_root))
    probe_dir = None
    private = Path(tempfile.mkdtemp(prefix="kgg-check-", dir=config.scratch_root))
    try:
        (scratch / "outputs").mkdir(exist_ok=True)
        source_file = scratch / "submission.py"
        source_file.write_text(gate.source)
        tasks_dir = _tasks_dir(task)
        job = Job(task_id=task.id, dsl=dsl, backend=backend, source_file=str(source_file), tasks_dir=tasks_dir,
                  outputs_dir=str(scratch / "outputs"), report_file=str(scratch / "report.json"),
                  trials=trials, timing=dataclasses.replace(config.timing, baselines=task.baselines)
                  if backend == "cuda" else None, timing_trials=timing_trials)
        probe = None
        if backend == "cpu" and dsl == "triton":
            # The interpreter accepts kernels that cannot compile for a GPU: a second child, without the
            # interpreter, compiles every launched specialization for sm_90 while the first one runs.
            # its own directory and uid (spec.sandbox draws a fresh one): the main child, which runs at the
            # same time, can neither swap the probe's copy of the source nor write its report
            probe_dir = pre.probe_dir if pre is not None else Path(tempfile.mkdtemp(prefix="kgg-probe-",
                                                                                    dir=config.scratch_root))
            probe = CompileProbe(dataclasses.replace(job, mode="compile_probe", trials=probe_trials(trials)),
                                 probe_dir, gate.source, spec.sandbox, dict(spec.probe_env),
                                 pre=pre.probe if pre is not None else None)
            probe.start()
        job_path = scratch / "job.json"
        job_path.write_text(job.to_json())
        outcome = pre.run(job_path) if pre is not None else None
        if outcome is None:
            sandbox = spec.sandbox
            if pre is not None:             # it died while it waited: a cold child in the same scratch, as its uid
                pre.reset_scratch()
                sandbox = dataclasses.replace(sandbox, uid=pre.child.uid)
            outcome = cold_child(job_path, scratch, dict(spec.env), sandbox)
        if children is not None:
            children.refill(spec)           # the next child's imports overlap this evaluation's check
        ev.layers = outcome.layers
        ev.latency["child"] = outcome.wall_s
        probe_failure = probe.compile_error() if probe is not None else None
        if probe is not None:
            ev.latency["compile_probe"] = probe.wall_s
        if probe_failure is not None:
            return ev.record(Status.COMPILE_ERROR, probe_failure)
        failed = _child_failure(outcome, config)
        if failed:
            return ev.record(*failed)
        try:
            report = read_report(Path(job.report_file), outcome)
        except ProtocolError as e:
            status = Status.CRASH if outcome.returncode not in (0, None) else Status.PROTOCOL_ERROR
            return ev.record(status, str(e))
        ev.device, ev.versions = report.device, report.versions
        ev.latency.update({f"child_{k}": v for k, v in report.phases.items()})
        if report.status is not Status.OK:
            trial = next((t for t in trials if t.index == report.failed_trial), None)
            tb = report.message.split("\n", 1)[1] if "\n" in report.message else None
            return ev.record(report.status, report.message, correct=None if report.status is Status.UNVERIFIED
                             else False, failure=FailureDetail(trial=trial, traceback_tail=tb) if trial or tb else None)
        if probe is not None:
            probe_failure = probe.cover(report.launched, config.scratch_root)
            if probe.specs_wall_s is not None:
                ev.latency["compile_probe_specs"] = probe.specs_wall_s
            if probe_failure is not None:
                return ev.record(Status.COMPILE_ERROR, probe_failure)
            if probe.inconclusive:
                log.warning("%s: compile probe inconclusive: %s", task.id, probe.inconclusive)
                ev.flags.append(f"compile_probe_inconclusive: {probe.inconclusive}")
        t = time.perf_counter()
        result = _run_checker(task, job, report, backend, private, config, checker)
        ev.latency["check"] = time.perf_counter() - t
        if result.status is not Status.OK:
            return ev.record(result.status, result.message, failure=result.failure,
                             trials_checked=result.trials_checked)
        return _score(ev, report, result)
    finally:
        if pre is not None:
            pre.kill()                      # a no-op once they ran; ends them if something above raised first
        ev.latency["total"] = time.perf_counter() - t_start
        if not config.keep_scratch:
            for d in (scratch, private, probe_dir):
                if d is not None:
                    shutil.rmtree(d, ignore_errors=True)


def _score(ev: Evaluation, report: ChildReport, result: CheckResult) -> EvalRecord:
    from kernelgym_gap.judge.reward import reward_for
    notes = report.message
    terms = {"kernelbench_allclose": result.kernelbench_allclose,
             "launches_per_call": max((o.launches for o in report.trials), default=0),
             "programs": max((o.programs for o in report.trials), default=0)}
    if ev.backend == "cpu":
        # No CPU time is ever passed off as a GPU figure: the performance terms stay absent.
        return ev.record(Status.OK, notes or "correct on every trial (cpu backend: correctness only)",
                         correct=True, reward=reward_for(True, None, ev.config.reward), terms=terms,
                         trials_checked=result.trials_checked)
    from kernelgym_gap.judge.measure import performance_terms
    status, message, perf_terms, diagnosis = performance_terms(ev.task, report, ev.config, ev.source, ev.dsl)
    terms.update(perf_terms)
    if status is not Status.OK:
        return ev.record(status, message, terms=terms, trials_checked=result.trials_checked)
    reward = reward_for(True, perf_terms.get("performance"), ev.config.reward)
    return ev.record(Status.OK, message or notes, correct=True, reward=reward, terms=terms, diagnosis=diagnosis,
                     trials_checked=result.trials_checked)
