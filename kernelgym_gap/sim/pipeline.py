"""One evaluation as the simulator runs it, and a run of many over GPUs, slots and hosts.

The stages, in the order engine/pipeline.py runs them (durations in a Job, seconds):
  gate                       the static gate (no lane)
  child start                a cold child's start (`cold_start`, host), or the hand-off to the slot's
                             pre-started child, waiting until it is ready (its process's start and the package's
                             imports, then its own imports, on a host core: `pre_startup`, `pre_host`; then its
                             CUDA context and library warm-up under the lane held shared: `pre_context`,
                             `pre_warm`). These pre_ fields are the child pre-started as the job's child ends (the
                             slot's next child), read from the record of the evaluation that met it (with
                             Setup.prestart_at "child_start" the same child, started as the job's child starts)
  setup                      the child's set-up and the submission's import (host)
  correctness                the correctness stretch under the lane held shared (`correctness`, the first
                             calls' compiles `compile` inside it; with compile_outside_lane these run first,
                             on a host core, with the lane let go), cut into `checkpoints` + 1 holds by the
                             checkpoints' writes (`unlaned`, host, lane let go; each hold after one waits
                             for the lane again)
  timing                     the exclusive lane (`timing`)
  recheck                    the timed shapes' rechecks after it, under the lane held shared (`recheck`; 0:
                             inside the timing, as by default)
  write, misc                the outputs' write after the lanes (host) and the child's unaccounted rest
  check                      the trusted check under the lane held shared (`check`); with a precomputed
                             reference its `check_ref` part runs from the child's start instead
  rest                       the record's assembly (no lane)
The slot's next child is pre-started when its child ends (sandbox/launch.py refills the pool then), so its
imports overlap this evaluation's check; with Setup.prestart_at "child_start" (a candidate, not built) it is
pre-started as this evaluation's child starts (handed its pre-started child, or a cold child launched), so its
start, imports and warm-up overlap the whole evaluation, on the host's cores and the lane beside it
("child_start_bind_at_end": started then, given its task as the child ends; BUILT as Placement.prestart_early,
off). A hung submission (`hang_s`) runs
its correctness stretch up to the hung call (`correctness`, `unlaned`: the record's parts before it; none where the
record has no stages), then holds `hang_lane` (or nothing) until its stage deadline kills it; it has no check unless
`checked` says so (a too_slow verdict checks the trials it finished). An evaluation stopped at the static gate
(`child` False) has no child and takes no lane: the slot's pre-started child waits for the next one. One stopped
inside its child before the timing (`timed` False: a runtime error in a call) takes no exclusive lane."""
from __future__ import annotations

import dataclasses
import random
import statistics
from collections import deque

from kernelgym_gap.sim.engine import Acquire, Cores, Delay, Event, Lane, Server, Sim
# the slot's next child (its pre-start, its task, when it starts): a module of its own
from kernelgym_gap.sim.next_child import NextChild


PRESTART_WARM = ("recorded", "previous", "next")
PRESTART_AT = ("child_end", "child_start", "child_start_bind_at_end")
WARMED_S = 0.02        # the library warm-up of a child that made the task's first calls already (H100: 0.01-0.014 s)
ANY_TASK = object()    # the env's pre-started child (warm_first): started for the task it is handed


@dataclasses.dataclass(frozen=True)
class Job:
    name: str
    task: str = ""
    status: str = "ok"
    gate: float = 0.0
    cold_start: float = 3.8
    handoff: float = 0.1
    # the child pre-started as this job's child ends (the slot's next child; workload.prestarts reads them from the
    # record of the evaluation that met it): its process's start before its runner (the interpreter and the
    # package's imports: child_preimport_startup), its own imports (host), its CUDA context and, in the same shared
    # hold, its library warm-up (child_preimport_library_warm; replayed with Setup.prestart_warm "recorded", the
    # other settings model their own)
    pre_startup: float = 0.0
    pre_host: float = 0.3
    pre_context: float = 0.1
    pre_warm: float = 0.0
    setup: float = 0.4
    compile: float = 0.0
    calls: float = 0.0         # the correctness calls (child_correctness_calls), first-call compiles included
    correctness: float = 2.5
    # the checkpoints between correctness calls (child/run.py, issue 38): disk work with the shared lane let go
    # (`unlaned`: child_checkpoint_unlaned, their sum) in `checkpoints` let-gos, each taken back shared after
    # it, behind any timing that waits at the gate (the records' child_lane_wait_after_checkpoint)
    unlaned: float = 0.0
    # the host copies of the correctness outputs (child_correctness_save), inside `correctness`; the lever
    # Placement.held_device_bytes moves them into the checkpoints' let-go writes (levers.device_held_outputs)
    save: float = 0.0
    checkpoints: int = 0
    # each let-go checkpoint's share of `unlaned` (empty: an even split, as the calibration replays them) and
    # whether its write keeps the shared lane instead of letting it go (empty: none keeps it; a design
    # candidate, sim/checkpoints.checkpoints_keep_lane)
    checkpoint_shares: tuple[float, ...] = ()
    kept_checkpoints: tuple[bool, ...] = ()
    copies_laned: bool = False    # its outputs' copies hold the shared lane already (sim/copy_laned.copies_laned)
    # the task's checkpoints as the child makes them (sim/checkpoints.CheckpointPlan), for the transforms that change
    # them; None where the task's plan is not known (the replay itself does not read it)
    checkpoint_plan: object = None
    timing: float = 2.7
    timing_measure: float = 0.0   # the timing's measured repetitions (child_timing_measure; 0: not recorded)
    # inside `timing`: the probes (child_timing_probe: the warm-ups, the library check and the kernel's first
    # repetitions) and the timed shapes' first calls (child_timing_first_call), one per shape; 0: not recorded.
    # The probe's hopeless rule (levers.probe_hopeless_stop) reads them
    timing_probe: float = 0.0
    timing_first_call: float = 0.0
    # the timed shapes' rechecks (child_timing_recheck): inside `timing` while `recheck` is 0; with
    # TimingConfig.recheck_outside_exclusive they are `recheck`, a shared hold after the timing (child_recheck)
    timing_recheck: float = 0.0
    recheck: float = 0.0
    # inside `timing` (and its probe): the library's first calls in the child's process, its warm-up less the
    # kernel's (sim/library_warm.py); 0 where the record has no such parts or made them before its lane
    library_first_call: float = 0.0
    # the library's first calls made at the end of the correctness stretch (child_library_warm, inside
    # `correctness`), and what they cost in a child that has not made them for this task (`library_warm_cold`:
    # the task's largest, workload.with_cold_warm). With Setup.prestart_warm other than "recorded" the simulator
    # decides which the job pays from the child it meets (sim/prestart_warm.py)
    library_warm: float = 0.0
    library_warm_cold: float = 0.0
    warms_library: bool = False      # the job made them (its record has child_library_warm, or a transform moved them)
    write: float = 0.5
    misc: float = 0.1
    check_ref: float = 0.0
    check: float = 2.0
    # the check's output files read into host memory before it takes its lane (EvalConfig.
    # read_outputs_outside_lane, judge/prefetch.py: the record's check_prefetch), a host stage; `check` is the
    # lane-held rest. check_read: the part of `check` that read (and copied) outputs under the lane
    check_prefetch: float = 0.0
    check_read: float = 0.0
    rest: float = 0.1
    hang_s: float = 0.0
    hang_lane: str = ""
    hang_lane_s: float = float("inf")   # how long a hung call keeps its lane before letting it go
    # how far the evaluation went (a record that stopped early took none of the later stages' lanes, and a
    # zero-second hold would still wait for its lane): `child` False, stopped at the static gate (no child, the
    # slot's pre-started child kept); `timed` False, stopped in the child before its timing (no exclusive lane);
    # `checked` whether the trusted check ran (None: the old rule, checked unless hung)
    child: bool = True
    timed: bool = True
    checked: bool | None = None

    @property
    def has_check(self) -> bool:
        return (not self.hang_s) if self.checked is None else self.checked

    def scaled(self, **factors: float) -> "Job":
        """A copy with the named durations multiplied by their factors."""
        return dataclasses.replace(self, **{k: getattr(self, k) * f for k, f in factors.items()})


@dataclasses.dataclass(frozen=True)
class Setup:
    """The machine and the harness's settings the run uses."""
    gpus_per_host: int = 1
    hosts: int = 1
    slots_per_gpu: int = 4
    cores_per_host: int = 16
    compile_outside_lane: bool = False
    precompute_reference: bool = False
    gate_seed: int | None = None   # None: the lane's gate in arrival order; a seed: in a random order (flock's)
    server_s: float = 0.0      # the reward server's service time per request (0: no server modelled)
    store_s: float = 0.0       # the store's service time per record write (0: no store modelled)
    # the laned stages (the child's calls and compiles, its timing loop, the check) hold a host core too.
    # Off in the calibration (16 cores never bound 4 slots there, so the measured runs cannot tell); on, a
    # host with fewer cores than its slots' work shows it (study.scaling's core-bound rows)
    laned_cores: bool = False
    # the pre-started child's library warm-up (TimingConfig.library_warm_before_lane, sim/prestart_warm.py):
    # "recorded", each job's correctness as its record has it and no warm-up in the pre-start (the replay);
    # "previous", the slot's next child warms the task of the evaluation that just ended (as built 2026-12-07);
    # "next", the slot takes its next job from the queue as its child ends and the child warms that job's task
    # (Placement.prestart_for_next); a slot that finds the queue empty takes a busy slot's taken job
    prestart_warm: str = "recorded"
    # when the slot's next child is pre-started (sim/prestart_start.py): "child_end", as the slot's child ends
    # (sandbox/launch.py's refill, as built); "child_start", as the slot's job is handed its pre-started child or
    # its cold child is launched (a candidate, not built), so the next child has the whole evaluation to get
    # ready, beside the running child: its start and imports on the host's cores, its context and warm-up under
    # the shared lane. With prestart_warm "next" the slot takes its next job from the queue at that moment.
    # "child_start_bind_at_end" (BUILT as Placement.prestart_early, off: sandbox/prestart.ChildPool.start_early):
    # the process starts, imports and makes its context as the child starts, and is given its task as the child
    # ends (the next job taken ahead then, as built), when its warm-up begins: the start hidden without holding a
    # job for a whole evaluation
    prestart_at: str = "child_end"
    # Placement.read_arena_bytes (judge/read_arena.py, built, off): the warm checker reads the output files into host
    # memory kept from one evaluation to the next; each job's check_prefetch (a host stage before the check's lane)
    # divided by this. The lane-held check (its check_read: the copy to the device) is unchanged. 1.0: off
    read_arena_speedup: float = 1.0


@dataclasses.dataclass
class Done:
    job: int
    name: str
    start: float
    end: float
    wall: float                # the record's latency["total"]: from its start at the slot, server wait excluded


@dataclasses.dataclass
class RunResult:
    makespan: float
    done: list[Done]
    trace: list
    gpus: int
    server_busy_s: float = 0.0
    store_busy_s: float = 0.0

    @property
    def evals_per_gpu_hour(self) -> float:
        return 3600.0 * len(self.done) / self.makespan / self.gpus if self.makespan > 0 else 0.0

    @property
    def wall_p50(self) -> float:
        return statistics.median(d.wall for d in self.done) if self.done else 0.0


class _Run:
    def __init__(self, jobs: list[Job], setup: Setup, warm_first: bool):
        self.sim = Sim()
        self.setup = setup
        n_gpus = setup.gpus_per_host * setup.hosts
        rng = None if setup.gate_seed is None else random.Random(setup.gate_seed)
        self.lanes = [Lane(g, rng) for g in range(n_gpus)]
        self.cores = [Cores(setup.cores_per_host) for _ in range(setup.hosts)]
        self.server = Server("reward server", setup.server_s) if setup.server_s > 0 else None
        self.store = Server("store", setup.store_s) if setup.store_s > 0 else None
        self.queue = deque(enumerate(jobs))      # one queue for the whole run, taken in order by free slots
        self.reserved: dict[tuple[int, int], tuple[int, Job]] = {}   # (gpu, slot) -> the job it took ahead
        if setup.prestart_warm not in PRESTART_WARM:
            raise ValueError(f"prestart_warm must be one of {PRESTART_WARM}, not {setup.prestart_warm!r}")
        if setup.prestart_at not in PRESTART_AT:
            raise ValueError(f"prestart_at must be one of {PRESTART_AT}, not {setup.prestart_at!r}")
        if not setup.read_arena_speedup > 0:
            raise ValueError(f"read_arena_speedup must be > 0, not {setup.read_arena_speedup!r}")
        self.done: list[Done] = []
        self.warm_first = warm_first

    def host_of(self, gpu: int) -> int:
        return gpu // self.setup.gpus_per_host

    def stage(self, i, job, gpu, slot, name, start, lane="", wait=False, row="slot"):
        if self.sim.now > start:
            self.sim.record(job=i, name=job.name, gpu=gpu, slot=slot, stage=name, start=start, end=self.sim.now,
                            lane=lane, wait=wait, row=row)

    def host(self, i, job, gpu, slot, name, seconds, row="slot"):
        """A host-bound stage: one core of the GPU's host for `seconds` (a wait first if none is free)."""
        cores = self.cores[self.host_of(gpu)]
        t = self.sim.now
        yield Acquire(cores)
        self.stage(i, job, gpu, slot, "wait core", t, wait=True, row=row)
        t = self.sim.now
        yield Delay(seconds)
        cores.release(self.sim)
        self.stage(i, job, gpu, slot, name, t, row=row)

    def laned(self, i, job, gpu, slot, name, seconds, mode, row="slot"):
        lane = self.lanes[gpu]
        t = self.sim.now
        yield Acquire(lane, mode)
        self.stage(i, job, gpu, slot, f"wait {mode}", t, wait=True, row=row)
        cores = self.cores[self.host_of(gpu)] if self.setup.laned_cores else None
        if cores is not None:        # runnable but without a core: it keeps the lane while it waits (as a
            t = self.sim.now         # descheduled process holding its flock does)
            yield Acquire(cores)
            self.stage(i, job, gpu, slot, "wait core", t, wait=True, row=row)
        t = self.sim.now
        yield Delay(seconds)
        if cores is not None:
            cores.release(self.sim)
        lane.release(self.sim, mode)
        self.stage(i, job, gpu, slot, name, t, lane=mode, row=row)

    def served(self, server, i, job, gpu, slot, name):
        t = self.sim.now
        yield Acquire(server)
        self.stage(i, job, gpu, slot, f"wait {name}", t, wait=True)
        t = self.sim.now
        yield Delay(server.service_s)
        server.release(self.sim)
        self.stage(i, job, gpu, slot, name, t)

    def take(self, gpu: int, slot: int):
        """The slot's next (index, job): the one it took as its child ended or started (Setup.prestart_warm "next",
        Setup.prestart_at), else the queue's head, else one a busy slot took (its pre-started child is then warm
        for nobody); None: done."""
        own = self.reserved.pop((gpu, slot), None)
        if own is not None:
            return own
        if self.queue:
            return self.queue.popleft()
        for key in list(self.reserved):
            return self.reserved.pop(key)
        return None

    def met_child(self, job: Job, warmed) -> Job:
        """The job with the library warm-up it pays in the child it met: WARMED_S where the child warmed its task
        already (`warmed` its task, or ANY_TASK: the env's pre-start for the task), else its task's cold one."""
        if self.setup.prestart_warm == "recorded" or not job.warms_library:
            return job
        own = WARMED_S if warmed is ANY_TASK or warmed == job.task else job.library_warm_cold
        return dataclasses.replace(job, correctness=max(0.0, job.correctness - job.library_warm + own),
                                   library_warm=own)

    def reference(self, i, job, gpu, slot, ready: Event):
        yield from self.laned(i, job, gpu, slot, "check reference (early)", job.check_ref, "shared", row="checker")
        ready.set(self.sim)

    def slot(self, gpu: int, slot: int):
        child: Event | None = None
        warmed = None                 # the task the slot's pre-started child warmed the library for
        next_child = NextChild(self, gpu, slot)
        if self.warm_first:
            child = Event()
            child.done = True
            warmed = ANY_TASK
        while (taken := self.take(gpu, slot)) is not None:
            i, job = taken
            if self.server is not None:
                yield from self.served(self.server, i, job, gpu, slot, "reward server")
            t0 = self.sim.now
            yield Delay(job.gate)
            self.stage(i, job, gpu, slot, "gate", t0)
            if not job.child:       # refused at the gate: no child was used, the pre-started one stays for the next
                t = self.sim.now
                yield Delay(job.rest)
                self.stage(i, job, gpu, slot, "rest", t)
                self.done.append(Done(i, job.name, t0, self.sim.now, self.sim.now - t0))
                continue
            if child is None:
                warmed = None
                next_child.at_child_start(job)      # launched beside the cold child (which asks for its core first)
                yield from self.host(i, job, gpu, slot, "cold child start", job.cold_start)
            else:
                t = self.sim.now
                yield Acquire(child)
                self.stage(i, job, gpu, slot, "wait child", t, wait=True)
                next_child.at_child_start(job)      # as the job is handed its pre-started child
                t = self.sim.now
                yield Delay(job.handoff)
                self.stage(i, job, gpu, slot, "hand-off", t)
            job = self.met_child(job, warmed)
            ref = None
            if self.setup.precompute_reference and job.check_ref > 0 and not job.hang_s:
                ref = Event()
                self.sim.start(self.reference(i, job, gpu, slot, ref))
            yield from self.host(i, job, gpu, slot, "setup", job.setup)
            if job.hang_s:
                yield from self.hung(i, job, gpu, slot)
            else:
                yield from self.child_body(i, job, gpu, slot)
            # the next child: started as this one ends (sandbox/launch.py refills the pool then), or, started as
            # this one started, given its task now with "child_start_bind_at_end" (NextChild.at_child_end)
            child, warmed = next_child.at_child_end(job)
            if job.has_check:
                yield from self.check(i, job, gpu, slot, ref)
            t = self.sim.now
            yield Delay(job.rest)
            self.stage(i, job, gpu, slot, "rest", t)
            end = self.sim.now
            if self.store is not None:
                yield from self.served(self.store, i, job, gpu, slot, "store")
            self.done.append(Done(i, job.name, t0, self.sim.now, end - t0))

    def hung(self, i, job, gpu, slot):
        """A submission killed at a call's stage deadline: its correctness stretch up to the hung call (the record's
        parts before it), then the call, which keeps the shared lane it ran under (one hold with the stretch's
        last piece: the child does not let the lane go between its calls) for up to `hang_lane_s`, and runs on
        without it until the kill. A hang outside the lanes (the import) holds nothing."""
        laned = min(job.hang_s, job.hang_lane_s) if job.hang_lane else 0.0
        if job.hang_lane == "shared" and (job.correctness > 0 or job.unlaned > 0):
            yield from self.correctness_stretch(i, job, gpu, slot, tail=laned)
        elif laned > 0:
            yield from self.laned(i, job, gpu, slot, "hung", laned, job.hang_lane)
        t = self.sim.now
        yield Delay(job.hang_s - laned)
        self.stage(i, job, gpu, slot, "hung (lane let go)" if laned else "hung", t)

    def child_body(self, i, job, gpu, slot):
        """The correctness stretch, then the timing under the exclusive lane (unless the child stopped before
        it: `timed` False), the rechecks, the outputs' write and the child's unaccounted rest."""
        yield from self.correctness_stretch(i, job, gpu, slot)
        if job.timed:
            yield from self.laned(i, job, gpu, slot, "timing", job.timing, "exclusive")
        if job.recheck > 0:         # the rechecks after the timing: the lane taken again, shared (child/run.py)
            yield from self.laned(i, job, gpu, slot, "recheck", job.recheck, "shared")
        yield from self.host(i, job, gpu, slot, "outputs write", job.write)
        t = self.sim.now
        yield Delay(job.misc)
        self.stage(i, job, gpu, slot, "child misc", t)

    def correctness_stretch(self, i, job, gpu, slot, tail: float = 0.0):
        """The correctness stretch in `checkpoints` + 1 pieces: each after the first begins with a checkpoint's
        write with the lane let go; with compile_outside_lane each piece's calls compile first with the lane let
        go (the compiles spread evenly: the first call of each shape compiles, and the checkpoints fall between
        the shapes). Each let-go is followed by a wait to take the lane back, as child/lanes.py's are: a timing
        that came meanwhile goes first (the records' lane_wait_after_checkpoint and _after_compile). A checkpoint
        in `kept_checkpoints` writes inside the hold instead: no let-go, no wait to take the lane back, and a
        waiting timing waits for the write too. `tail`: a hung call's seconds, held in the last piece's hold."""
        pieces = job.checkpoints + 1 if job.unlaned > 0 and job.checkpoints > 0 else 1
        compile_out = self.setup.compile_outside_lane and job.compile > 0
        shared = job.correctness - (job.compile if compile_out else 0.0)
        shares = job.checkpoint_shares or (1.0 / max(job.checkpoints, 1),) * job.checkpoints
        kept = job.kept_checkpoints or (False,) * job.checkpoints
        hold = 0.0          # seconds of the shared hold not yet run (one hold until the lane is let go)
        for k in range(pieces):
            if k:
                write = job.unlaned * shares[k - 1]
                if kept[k - 1]:
                    hold += write
                else:
                    yield from self.laned(i, job, gpu, slot, "correctness", hold, "shared")
                    hold = 0.0
                    yield from self.host(i, job, gpu, slot, "checkpoint (unlaned)", write)
            if compile_out:
                if k:       # taken back after the checkpoint (or held through it), then let go as the call compiles
                    yield from self.laned(i, job, gpu, slot, "correctness", hold, "shared")
                    hold = 0.0
                yield from self.host(i, job, gpu, slot, "compile (unlaned)", job.compile / pieces)
            hold += shared / pieces
        yield from self.laned(i, job, gpu, slot, "hung" if tail else "correctness", hold + tail,
                              "shared")

    def check(self, i, job, gpu, slot, ref: Event | None):
        if job.check_prefetch > 0:     # the outputs read before the lane (EvalConfig.read_outputs_outside_lane)
            seconds = job.check_prefetch / self.setup.read_arena_speedup     # Setup.read_arena_speedup
            yield from self.host(i, job, gpu, slot, "check prefetch", seconds)
        body = job.check
        if ref is not None:
            t = self.sim.now
            yield Acquire(ref)
            self.stage(i, job, gpu, slot, "wait reference", t, wait=True)
            body = max(0.0, job.check - job.check_ref)
        yield from self.laned(i, job, gpu, slot, "check", body, "shared")


def simulate(jobs: list[Job], setup: Setup = Setup(), warm_first: bool = False) -> RunResult:
    """Runs `jobs` in order through the slots of every GPU (a free slot takes the next job), from an idle
    machine; `warm_first`: every slot starts with a ready pre-started child (the warm env.step)."""
    run = _Run(list(jobs), setup, warm_first)
    n_gpus = setup.gpus_per_host * setup.hosts
    for slot in range(setup.slots_per_gpu):
        for gpu in range(n_gpus):
            run.sim.start(run.slot(gpu, slot))
    run.sim.run()
    makespan = max((d.end for d in run.done), default=0.0)
    return RunResult(makespan, sorted(run.done, key=lambda d: d.job), run.sim.trace, n_gpus,
                     run.server.busy_s if run.server else 0.0, run.store.busy_s if run.store else 0.0)


def step_p50(steps: list[Job], setup: Setup = Setup()) -> float:
    """The warm env.step: each step alone, its child pre-started during the agent's turn; the median."""
    return statistics.median(simulate([s], setup, warm_first=True).makespan for s in steps)
