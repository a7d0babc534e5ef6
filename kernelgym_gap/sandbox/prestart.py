"""Pre-started children: the submission's sandboxed child started before its submission arrives.

A child spends its first 1-5 s importing torch and Triton (TileLang: one more second) and, on cuda, creating
its CUDA context, before it reads a line of the submission. A ChildPool starts the next child while the
current evaluation's checker runs and the agent writes its next kernel: `python -m kernelgym_gap.child.runner
--wait` under the same sandbox (SandboxedChild with a pipe on stdin), which does those imports and then
blocks on stdin. The evaluation writes its job into that child's scratch directory and hands it the job's
path; the deadline starts then.

What does not change: every submission still gets a fresh process in a fresh scratch directory, under the
same layers, limits and uid as a cold child; the child runs no submission code before its job, and exits
after it (single-use). A child that waited too long, or whose sandbox or environment would differ from the
one this evaluation needs (another DSL, task directory, GPU, sandbox setting), is never used: the
evaluation starts a cold child as before.

    with ChildPool() as pool:
        record = evaluate(task, source, "triton", "cpu", config, children=pool)   # cold; starts the next
        record = evaluate(task, source2, "triton", "cpu", config, children=pool)  # pre-started

Where it is held: KernelEnv(warm=True), evaluate_many(..., warm=True), run_suite(..., warm=True), beside the
warm checker (warm.py). Nothing is global.
"""
from __future__ import annotations

import dataclasses
import logging
import shutil
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path

from kernelgym_gap.sandbox.disk import probe_sandbox
from kernelgym_gap.sandbox.process import ChildOutcome, SandboxConfig, SandboxedChild, child_env

log = logging.getLogger(__name__)

MAX_IDLE_S = 600.0       # a child that waited longer is let go (its imports may be stale after an upgrade)


@dataclasses.dataclass(frozen=True)
class ChildSpec:
    """Everything a child's start depends on: a pre-started child serves only an evaluation whose spec is
    equal to the one it was started with."""
    dsl: str
    backend: str
    sandbox: SandboxConfig
    env: tuple[tuple[str, str], ...]       # the backend's variables (child.backend_env), sorted
    scratch_root: str | None = None
    probe_env: tuple[tuple[str, str], ...] | None = None   # cpu + triton: the compile probe's (probe.probe_env)
    # the job's disk limits (disk.JobDisk) that `sandbox` holds, kept for the disk reservation
    # (disk_ledger.reserve); not compared: `sandbox` already carries what they change
    disk: object | None = dataclasses.field(default=None, compare=False)
    # the library's first calls a cuda child makes while it waits (TimingConfig.library_warm_before_lane): JSON
    # of its task, tasks_dir, timed distribution and timed (shape, dtype) cases (launch.child_spec). Not compared:
    # a child warmed for another task serves as well (its job warms what it needs again, under the shared lane)
    warm: str | None = dataclasses.field(default=None, compare=False)

    def argv(self, warm_file: Path | None = None) -> list[str]:
        """The pre-started child's command line; `warm_file`: where its warm-up waits (read and removed by the
        child first thing: child/runner.read_warm)."""
        return [sys.executable, "-m", "kernelgym_gap.child.runner", "--wait", "--dsl", self.dsl, "--backend",
                self.backend, *(("--warm", str(warm_file)) if warm_file is not None else ())]


def clear_imports(directory: Path) -> None:
    """Removes what a pre-started child's imports wrote in its directory (its tmp and caches), before a cold
    child takes the directory over."""
    for sub in ("tmp", "cache"):
        shutil.rmtree(directory / sub, ignore_errors=True)


class PrestartedChild:
    """One child started for `spec`, waiting for its job in its own fresh scratch directory; on the cpu
    backend with Triton, its compile probe too (in a directory of its own, as a uid of its own: the main
    child can touch neither its files nor its report), waiting for the probe's job."""

    def __init__(self, spec: ChildSpec):
        self.spec = spec
        self.scratch = Path(tempfile.mkdtemp(prefix="kgg-eval-", dir=spec.scratch_root))
        (self.scratch / "outputs").mkdir()
        self.probe: SandboxedChild | None = None
        self.probe_dir: Path | None = None
        try:
            warm_file = None
            if spec.warm is not None:           # a cpu child reads and removes it too, and warms nothing
                warm_file = self.scratch / "warm.json"
                warm_file.write_text(spec.warm)
            self.child = SandboxedChild(spec.argv(warm_file), self.scratch, child_env(self.scratch, dict(spec.env)),
                                        spec.sandbox, stdin_pipe=True)
            if spec.probe_env is not None:
                self.probe_dir = Path(tempfile.mkdtemp(prefix="kgg-probe-", dir=spec.scratch_root))
                # probe_env is set on the cpu backend only: the same `--wait --backend cpu` argv serves the probe
                self.probe = SandboxedChild(spec.argv(), self.probe_dir,
                                            child_env(self.probe_dir, dict(spec.probe_env)),
                                            probe_sandbox(spec.sandbox),     # its share of the disk (disk.py)
                                            stdin_pipe=True)
        except BaseException:
            self.discard()
            raise
        self.started = time.monotonic()

    @property
    def idle_s(self) -> float:
        return time.monotonic() - self.started

    def usable(self) -> bool:
        return (self.child.alive() and (self.probe is None or self.probe.alive())
                and self.idle_s < MAX_IDLE_S)

    def run(self, job_path: Path, calls=(), hold: bool = False) -> ChildOutcome | None:
        """Hands the child its job and waits under the deadline (and the calls' deadlines, `calls`; `hold`:
        SandboxedChild.wait's, the held child then in `self.child.held`); None when it had died while it
        waited (the caller then runs a cold child; `reset_scratch` first)."""
        if not self.child.send_line(str(job_path)):
            self.child.kill()
            return None
        return self.child.wait(calls, hold=hold)

    def reset_scratch(self) -> None:
        """Empties what the dead child's imports may have written (its uid owned it), keeping the job."""
        clear_imports(self.scratch)

    def kill(self) -> None:
        for c in (getattr(self, "child", None), self.probe):
            if c is not None:
                c.kill()

    def discard(self) -> None:
        self.kill()
        for d in (self.scratch, self.probe_dir):
            if d is not None:
                shutil.rmtree(d, ignore_errors=True)


def _discard_all(idle: dict) -> None:
    for child in list(idle.values()):
        child.discard()
    idle.clear()


class ChildPool:
    """Keeps at most `max_idle` pre-started children, one per spec, the most recently wanted ones.

    take(spec) hands out a usable child for exactly that spec (or None: start a cold one); refill(spec)
    starts the next one. Thread-safe; each child is handed out once. `plan` (the owner's, e.g. a service slot's):
    called with the spec of a child that just ended, it names the spec of the slot's next evaluation, or None
    for the same (`refill_after`)."""

    def __init__(self, max_idle: int = 2, plan: Callable[[ChildSpec], ChildSpec | None] | None = None):
        if max_idle < 1:
            raise ValueError("max_idle must be at least 1")
        self.max_idle = max_idle
        self.plan = plan
        self.started = 0             # children started so far
        self.served = 0              # evaluations that ran in a pre-started child
        self._idle: dict[ChildSpec, PrestartedChild] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._finalizer = weakref.finalize(self, _discard_all, self._idle)

    def take(self, spec: ChildSpec) -> PrestartedChild | None:
        with self._lock:
            child = self._idle.pop(spec, None)
        if child is None:
            return None
        if not child.usable():
            log.info("a pre-started child was not usable (exit code %s, idle %.0f s): starting a cold one",
                     child.child.proc.poll(), child.idle_s)
            child.discard()
            return None
        with self._lock:
            self.served += 1
        return child

    def refill(self, spec: ChildSpec) -> None:
        """Starts a child for `spec` unless one waits already; the least recently wanted goes past max_idle."""
        with self._lock:
            if self._closed or (spec in self._idle and self._idle[spec].usable()):
                return
            old = self._idle.pop(spec, None)
        if old is not None:
            old.discard()
        try:
            child = PrestartedChild(spec)
        except Exception:        # noqa: BLE001 - the next evaluation starts a cold child, as without a pool
            log.exception("could not pre-start a child")
            return
        evicted = []
        with self._lock:
            if self._closed:
                evicted.append(child)
            else:
                self._idle[spec] = child
                self.started += 1
                while len(self._idle) > self.max_idle:
                    evicted.append(self._idle.pop(next(iter(self._idle))))
        for c in evicted:
            c.discard()

    def refill_after(self, spec: ChildSpec) -> None:
        """The next child, as the child of an evaluation of `spec` ends: for the spec `plan` names (the owner's
        next evaluation, taken ahead), else for `spec` again. A plan that raises is logged and `spec` used."""
        nxt = None
        if self.plan is not None:
            try:
                nxt = self.plan(spec)
            except Exception:        # noqa: BLE001 - the next child is then the same as before the plan
                log.exception("the pool's plan for the next child failed")
        self.refill(nxt if nxt is not None else spec)

    def waiting(self, spec: ChildSpec) -> PrestartedChild | None:
        """The child waiting for `spec`, left in the pool (for inspection; `take` hands it out)."""
        with self._lock:
            return self._idle.get(spec)

    def idle(self) -> int:
        with self._lock:
            return len(self._idle)

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self._finalizer()

    def __enter__(self) -> "ChildPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ChildPool(idle={self.idle()}, started={self.started}, served={self.served})"
