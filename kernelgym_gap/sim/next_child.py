"""The slot's next child as a run plays it (pipeline._Run.slot): its pre-start, which task it is pre-started for
(Setup.prestart_warm) and when it is started (Setup.prestart_at). sandbox/launch.py refills the pool as the slot's
child ends (as built, the default: "child_end"); with Placement.prestart_early (built: sandbox/prestart.ChildPool's
start_early, `early` and `refill_after`; child/runner.wait_for_job with bind) it starts the process as the slot's
child starts, makes its CUDA context then, and gives it its task (and that task's warm-up) as the child ends
("child_start_bind_at_end"). The candidate not built (sim/prestart_start.py) starts the child for its task as the
slot's child starts ("child_start").

A module of its own so that pipeline.py keeps one concern, the stages of one evaluation and the run of many. Its
functions take the run (pipeline._Run) and use its resources as the evaluation's stages do (`host`, `laned`,
`stage`, its queue and the jobs its slots took ahead); it imports only the engine, since pipeline.py imports it."""
from __future__ import annotations

from kernelgym_gap.sim.engine import Acquire, Event


class Bound(Event):
    """The task a child started without one is given (prestart_at "child_start_bind_at_end", as
    Placement.prestart_early builds it: PrestartedChild.bind's line): set as the slot's child ends, with the
    warm-up it makes then."""

    def __init__(self):
        super().__init__()
        self.warm_s = 0.0


def prestart(run, job, gpu, slot, ready: Event, warm_s: float = 0.0, bound: Bound | None = None):
    """The slot's next child, started as `job`'s child ended (or as it started: Setup.prestart_at): its
    process's start (`pre_startup`) and its imports on a core, then its CUDA context under the shared lane,
    and in the same hold its library warm-up for the task it was started for (`warm_s`: Setup.prestart_warm;
    `job.pre_warm`, the recorded one, with "recorded"). `bound`: the child is given its task later (prestart_at
    "child_start_bind_at_end", what Placement.prestart_early builds: sandbox/prestart.ChildPool.start_early,
    child/runner.wait_for_job with bind): after its imports it makes its CUDA context under the shared lane,
    then waits for its task, then warms `bound.warm_s` (if any) under the shared lane in a hold of its own."""
    if job.pre_startup > 0:
        yield from run.host(-1, job, gpu, slot, "child startup", job.pre_startup, row="pre-start")
    yield from run.host(-1, job, gpu, slot, "preimport", job.pre_host, row="pre-start")
    if bound is not None:
        yield from run.laned(-1, job, gpu, slot, "cuda context", job.pre_context, "shared", row="pre-start")
        t = run.sim.now
        yield Acquire(bound)
        run.stage(-1, job, gpu, slot, "wait for its task", t, wait=True, row="pre-start")
        if bound.warm_s > 0:
            yield from run.laned(-1, job, gpu, slot, "library warm-up", bound.warm_s, "shared", row="pre-start")
        ready.set(run.sim)
        return
    yield from run.laned(-1, job, gpu, slot, "cuda context" + (" + library warm-up" if warm_s > 0 else ""),
                         job.pre_context + warm_s, "shared", row="pre-start")
    ready.set(run.sim)


def next_task(run, job, gpu, slot) -> tuple[object, float]:
    """The job whose task the slot's next child is for, and the warm-up it makes: `job`'s (the recorded
    warm-up `job.pre_warm` with Setup.prestart_warm "recorded"), or with "next" the queue's first job, which
    the slot takes ahead now (when the queue is empty, `job`'s: the child then waits for whatever comes)."""
    target = job
    if run.setup.prestart_warm == "next" and run.queue:
        run.reserved[(gpu, slot)] = nxt = run.queue.popleft()
        target = nxt[1]
    return target, (target.library_warm_cold if run.setup.prestart_warm in ("previous", "next") else job.pre_warm)


class NextChild:
    """One slot's next child across its evaluations. The slot calls `at_child_start` as its job is handed its
    pre-started child or launches its cold one, and `at_child_end` as that child ends, which gives the next
    child's ready event and the task it was started for; each starts or binds it as Setup.prestart_at says."""

    def __init__(self, run, gpu: int, slot: int):
        self.run, self.gpu, self.slot = run, gpu, slot
        self.at_start = run.setup.prestart_at != "child_end"
        self.bind_late = run.setup.prestart_at == "child_start_bind_at_end"
        # the next child while it runs beside the slot's child: (ready, task), or (ready, Bound) to bind at its end
        self.upcoming: tuple[Event, object] | None = None

    def at_child_start(self, job) -> None:
        """With prestart_at other than "child_end", starts the slot's next child now, beside the job's child."""
        if self.at_start:
            self.upcoming = self.start_unbound(job) if self.bind_late else self.start_for_task(job)

    def at_child_end(self, job) -> tuple[Event, object]:
        """The slot's next child: started now (sandbox/launch.py refills the pool as the child ends; "next": for
        the job the slot takes from the queue now), unless it was started as this one started (then given its
        task now with "child_start_bind_at_end")."""
        upcoming, self.upcoming = self.upcoming, None
        if upcoming is None:
            return self.start_for_task(job)
        if self.bind_late:
            ready, bound = upcoming
            target, bound.warm_s = next_task(self.run, job, self.gpu, self.slot)
            bound.set(self.run.sim)
            return ready, target.task
        return upcoming

    def start_for_task(self, job) -> tuple[Event, object]:
        """Starts the slot's next child (`prestart`, with `job`'s pre_ figures) for the task `next_task` gives
        now; returns its ready event and that task."""
        target, warm_s = next_task(self.run, job, self.gpu, self.slot)
        ready = Event()
        self.run.sim.start(prestart(self.run, job, self.gpu, self.slot, ready, warm_s))
        return ready, target.task

    def start_unbound(self, job) -> tuple[Event, Bound]:
        """Starts the slot's next child without its task (prestart_at "child_start_bind_at_end", as
        Placement.prestart_early builds it): its process's start, imports and CUDA context now, its warm-up once
        `at_child_end` gives it a task."""
        ready, bound = Event(), Bound()
        self.run.sim.start(prestart(self.run, job, self.gpu, self.slot, ready, bound=bound))
        return ready, bound
