"""The state of one evaluation as its stages fill it in, and the record it becomes."""
from __future__ import annotations

import datetime as _dt
import hashlib
import shutil
import tempfile
import time
from pathlib import Path

from kernelgym_gap.core.backend import Backend
from kernelgym_gap.core.config import EvalConfig
from kernelgym_gap.core.lane import held
from kernelgym_gap.core.record import CheckResult, EvalRecord, Job, Trial
from kernelgym_gap.core.task import TaskSpec
from kernelgym_gap.engine.trials import make_timing_trials, make_trials, trial_rng
from kernelgym_gap.sandbox.launch import ChildResult, Launcher, child_spec

class Evaluation:
    """One submission on one task, DSL and backend. Stages read and fill it in; `record` turns the verdict
    that stopped it into the EvalRecord callers get. `checker` and `children` are the warm pool's (or None)."""

    def __init__(self, task: TaskSpec, raw_source: bytes, dsl: str, backend: Backend, config: EvalConfig,
                 checker=None, children=None):
        self.task, self.dsl, self.backend, self.config = task, dsl, backend, config
        self.raw_source = raw_source
        self.source_sha = hashlib.sha256(raw_source).hexdigest()
        self.checker, self.children = checker, children
        self.source = ""
        self.trials: tuple[Trial, ...] = ()
        self.job: Job | None = None
        self.child: ChildResult | None = None
        self.check_result: CheckResult | None = None
        self.latency: dict[str, float] = {}
        self.device: dict = {}
        self.versions: dict = {}
        self.flags: list[str] = []          # notes on checks that could not run, for terms["flags"]
        self._launcher: Launcher | None = None
        self._private: Path | None = None

    # ---- what the stages call ------------------------------------------------------------------------

    def launch(self) -> None:
        """Builds the trials and the job, and runs the submission's child (launch.Launcher: pre-started or
        cold, with the compile probe where the DSL needs one)."""
        rng = trial_rng(self.config)
        self.trials = make_trials(self.task, self.backend.name, self.config, rng)
        timing_trials = make_timing_trials(self.task, self.config, rng) if self.backend.measures_time else ()
        spec = child_spec(self.task, self.dsl, self.backend.name, self.config)
        self._launcher = launcher = Launcher(spec, self.children)
        scratch = launcher.scratch
        source_file = scratch / "submission.py"
        source_file.write_text(self.source)
        timing = self.config.timing if self.backend.measures_time else None
        self.job = Job(task_id=self.task.id, dsl=self.dsl, backend=self.backend.name, source_file=str(source_file),
                       tasks_dir=self.task.tasks_dir, outputs_dir=str(scratch / "outputs"),
                       report_file=str(scratch / "report.json"), trials=self.trials, timing=timing,
                       timing_trials=timing_trials, library_hint=self._library_hint(timing_trials))
        self.child = launcher.run(self.job, self.source)
        self.latency.update(self.child.latency)

    def _library_hint(self, timing_trials: tuple[Trial, ...]):
        """The library's cached time per timing trial (judge/library_cache.py), for the child to check."""
        from kernelgym_gap.judge.library_cache import hints
        return hints(self.task, timing_trials, self.config) if timing_trials else ()

    def check(self) -> CheckResult:
        from kernelgym_gap.judge.trusted import check_in_process
        self._private = Path(tempfile.mkdtemp(prefix="kgg-check-", dir=self.config.scratch_root))
        t = time.perf_counter()
        # on cuda the checker runs on the GPU beside other evaluations' trials, never beside a timing
        lane_dir = self.config.sandbox.lane_dir if self.backend.name == "cuda" else None
        with held(lane_dir, self.config.gpu_index, "shared", self.latency, "check_lane_wait"):
            self.check_result = check_in_process(self.task, self.job, self.child.report, self.backend.name,
                                                 self._private, self.config, self.checker)
        self.latency["check"] = time.perf_counter() - t
        return self.check_result

    @property
    def layers(self) -> tuple[str, ...]:
        return self.child.outcome.layers if self.child is not None else ()

    # ---- the end ------------------------------------------------------------------------------------

    def record(self, verdict) -> EvalRecord:
        terms = {"correctness": 1.0 if verdict.correct else 0.0, "performance": None, "E": None, "U": None,
                 "per_shape": None, "kernelbench_allclose": None, "flags": []}
        terms.update(verdict.terms or {})
        if self.flags:
            terms["flags"] = list(terms["flags"] or []) + self.flags
        return EvalRecord(
            task=self.task.id, task_version=self.task.version, dsl=self.dsl, backend=self.backend.name,
            status=verdict.status, stage=verdict.stage, correct=verdict.correct, reward=verdict.reward,
            reward_mode=self.backend.reward_mode(self.config.reward.mode), terms=terms, message=verdict.message,
            failure=verdict.failure, diagnosis=verdict.diagnosis, trials_checked=verdict.trials_checked,
            device=self.device, versions=self.versions, sandbox_layers=self.layers, latency=self.latency,
            source_sha256=self.source_sha,
            created_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))

    def close(self) -> None:
        """Ends whatever still runs and removes the directories (unless config.keep_scratch)."""
        if self._launcher is not None:
            self._launcher.close(keep=self.config.keep_scratch)
        if self._private is not None and not self.config.keep_scratch:
            shutil.rmtree(self._private, ignore_errors=True)
