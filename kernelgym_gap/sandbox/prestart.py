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
import queue
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
EARLY_JOIN_S = 30.0      # how long refill_after and close wait for an early start (milliseconds, usually)


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

    def argv(self, warm_file: Path | None = None, bind: bool = False) -> list[str]:
        """The pre-started child's command line; `warm_file`: where its warm-up waits (read and removed by the
        child first thing: child/runner.read_warm); `bind`: the warm-up comes later, as a line on stdin
        (PrestartedChild.bind)."""
        return [sys.executable, "-m", "kernelgym_gap.child.runner", "--wait", "--dsl", self.dsl, "--backend",
                self.backend, *(("--warm", str(warm_file)) if warm_file is not None else ()),
                *(("--bind",) if bind else ())]


def clear_imports(directory: Path) -> None:
    """Removes what a pre-started child's imports wrote in its directory (its tmp and caches), before a cold
    child takes the directory over."""
    for sub in ("tmp", "cache"):
        shutil.rmtree(directory / sub, ignore_errors=True)


class PrestartedChild:
    """One child started for `spec`, waiting for its job in its own fresh scratch directory; on the cpu
    backend with Triton, its compile probe too (in a directory of its own, as a uid of its own: the main
    child can touch neither its files nor its report), waiting for the probe's job."""

    def __init__(self, spec: ChildSpec, bind_later: bool = False):
        """`bind_later`: started before its task is known (ChildPool.start_early), the warm-up of `spec` left
        out: `bind` gives it the task's warm-up, and with it the spec it serves."""
        self.spec = spec
        self.unbound = bind_later
        self.scratch = Path(tempfile.mkdtemp(prefix="kgg-eval-", dir=spec.scratch_root))
        (self.scratch / "outputs").mkdir()
        self.probe: SandboxedChild | None = None
        self.probe_dir: Path | None = None
        try:
            warm_file = None
            if spec.warm is not None and not bind_later:   # a cpu child reads and removes it too, and warms nothing
                warm_file = self.scratch / "warm.json"
                warm_file.write_text(spec.warm)
            self.child = SandboxedChild(spec.argv(warm_file, bind=bind_later), self.scratch,
                                        child_env(self.scratch, dict(spec.env)), spec.sandbox, stdin_pipe=True)
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

    def bind(self, spec: ChildSpec) -> bool:
        """Gives a child started with `bind_later` its task: `spec`'s warm-up, as one line of JSON on its stdin
        (`{}`: none; the child reads it after its imports: child/runner.read_bind), and `spec` as the one it
        serves. False when it is not such a child, was bound already, serves other settings (ChildSpec's
        equality: the sandbox, the environment, the DSL) or has died: the caller lets it go."""
        if not self.unbound or spec != self.spec or not self.usable():
            return False
        self.unbound = False
        self.spec = spec
        return self.child.send_before(spec.warm if spec.warm is not None else "{}")

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


def _close_all(requests, *held: dict) -> None:
    """A pool's end: its spawner told to stop, its waiting children ended."""
    requests.put(None)
    for children in held:
        for child in list(children.values()):
            child.discard()
        children.clear()


def _spawn_early(pool_ref, requests) -> None:
    """The pool's spawner thread (ChildPool.early): starts the children asked of it until told to stop (None); it
    holds the pool weakly, so that a pool nobody closed is still collected (its finalizer stops this thread)."""
    while True:
        spec = requests.get()
        if spec is None:
            return
        try:
            child = PrestartedChild(spec, bind_later=True)
        except Exception:        # noqa: BLE001 - refill_after then starts the next child as without it
            log.exception("could not start a child early")
            child = None
        pool = pool_ref()
        if pool is None:
            if child is not None:
                child.discard()
            return
        pool._early_started(child)
        del pool


class ChildPool:
    """Keeps at most `max_idle` pre-started children, one per spec, the most recently wanted ones.

    take(spec) hands out a usable child for exactly that spec (or None: start a cold one); refill(spec)
    starts the next one. Thread-safe; each child is handed out once. `plan` (the owner's, e.g. a service slot's):
    called with the spec of a child that just ended, it names the spec of the slot's next evaluation, or None
    for the same (`refill_after`)."""

    def __init__(self, max_idle: int = 2, plan: Callable[[ChildSpec], ChildSpec | None] | None = None,
                 start_early: bool = False):
        """`start_early` (Placement.prestart_early): `early` starts the next child's process as a child starts,
        and `refill_after` gives it its task as that child ends (else it starts the next child then)."""
        if max_idle < 1:
            raise ValueError("max_idle must be at least 1")
        self.max_idle = max_idle
        self.plan = plan
        self.start_early = start_early
        self.started = 0             # children started so far
        self.served = 0              # evaluations that ran in a pre-started child
        self.bound = 0               # children started early and given their task as the previous child ended
        self.unbound_let_go = 0      # children started early and let go (their spec not the next one's, or dead)
        self._idle: dict[ChildSpec, PrestartedChild] = {}
        self._early: dict[str, PrestartedChild] = {}        # "child": the one started early, not yet bound
        self._early_pending = False                         # a start asked of the spawner, not yet returned
        self._requests: queue.SimpleQueue = queue.SimpleQueue()
        self._spawner: threading.Thread | None = None
        self._lock = threading.Lock()
        self._spawned = threading.Condition(self._lock)
        self._closed = False
        self._finalizer = weakref.finalize(self, _close_all, self._requests, self._idle, self._early)

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
        with self._lock:
            self.started += 1
        self._keep(spec, child)

    def _keep(self, spec: ChildSpec, child: PrestartedChild) -> None:
        """`child` waits for `spec` (one that waited for it already is let go); past max_idle, the least recently
        wanted goes."""
        evicted = []
        with self._lock:
            if self._closed:
                evicted.append(child)
            else:
                if spec in self._idle and self._idle[spec] is not child:
                    evicted.append(self._idle.pop(spec))
                self._idle[spec] = child
                while len(self._idle) > self.max_idle:
                    evicted.append(self._idle.pop(next(iter(self._idle))))
        for c in evicted:
            c.discard()

    def early(self, spec: ChildSpec) -> None:
        """With `start_early`, as a child of `spec` starts: the next child's process started now, by the pool's
        spawner thread so that the caller's child is not kept waiting (40-75 ms a start on cpu), without a task's
        warm-up (its imports and, on cuda, its CUDA context overlap the running child); `refill_after` gives it
        its task as that child ends. One at a time: a usable one not yet bound stays. Without `start_early`,
        nothing."""
        if not self.start_early:
            return
        with self._lock:
            if self._closed or self._early_pending:
                return
            old = self._early.get("child")
            if old is not None and old.usable():
                return
            self._early.pop("child", None)
            self._early_pending = True
            if self._spawner is None:
                # one thread for the pool's life, not one per start: a sandboxed child's parent-death signal
                # (bwrap --die-with-parent, prctl's PDEATHSIG) fires when the *thread* that spawned it ends
                self._spawner = threading.Thread(target=_spawn_early, name="kgg-prestart-early", daemon=True,
                                                 args=(weakref.ref(self), self._requests))
                self._spawner.start()
        if old is not None:
            old.discard()
        self._requests.put(spec)

    def _early_started(self, child: PrestartedChild | None) -> None:
        """The spawner's start returned (`child`, or None when it failed): kept unless the pool closed."""
        with self._spawned:
            self._early_pending = False
            if child is not None and not self._closed:
                self._early["child"] = child
                self.started += 1
                child = None
            self._spawned.notify_all()
        if child is not None:
            child.discard()

    def _take_early(self) -> PrestartedChild | None:
        """The child `early` started, once its start has returned (a start that takes longer than EARLY_JOIN_S
        is not waited for), taken out of the pool."""
        with self._spawned:
            self._spawned.wait_for(lambda: not self._early_pending, EARLY_JOIN_S)
            return self._early.pop("child", None)

    def refill_after(self, spec: ChildSpec) -> None:
        """The next child, as the child of an evaluation of `spec` ends: for the spec `plan` names (the owner's
        next evaluation, taken ahead), else for `spec` again. A plan that raises is logged and `spec` used. A
        child `early` started is given that spec's task (PrestartedChild.bind) when it can serve it, and let go
        when it cannot (another DSL or sandbox: then the next child starts now, as without it)."""
        nxt = None
        if self.plan is not None:
            try:
                nxt = self.plan(spec)
            except Exception:        # noqa: BLE001 - the next child is then the same as before the plan
                log.exception("the pool's plan for the next child failed")
        target = nxt if nxt is not None else spec
        with self._lock:
            waiting = target in self._idle and self._idle[target].usable()
        if self.start_early and not waiting:
            child = self._take_early()
            if child is not None:
                if child.bind(target):
                    with self._lock:
                        self.bound += 1
                    self._keep(target, child)
                    return
                with self._lock:
                    self.unbound_let_go += 1
                child.discard()
        self.refill(target)

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
            spawner = self._spawner
        self._finalizer()               # the spawner told to stop, the waiting children ended
        if spawner is not None:
            spawner.join(EARLY_JOIN_S)

    def __enter__(self) -> "ChildPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"ChildPool(idle={self.idle()}, started={self.started}, served={self.served}"
                + (f", bound={self.bound}, unbound_let_go={self.unbound_let_go})" if self.start_early else ")"))
