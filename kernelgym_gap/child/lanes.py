"""The GPU's lane as one child holds it (core/lane.py has the lock itself): shared for the correctness trials,
exclusive for the timing, and let go while the DSL compiles inside a shape's first correctness call.

A first call compiles the kernel's specialization (and, autotuned, every config) before it launches anything:
seconds of CPU work during which the child needs no GPU. Held shared all along, it keeps every other
evaluation's timing waiting (a writer waits for the readers in). With `Job.compile_outside_lane` the child
lets the lane go for each compilation and takes it again, shared, before the launch; the GPU work of the call
still runs under the lane, so a measurement still never shares the GPU. Taking it again waits behind the
timings that came meanwhile, for as long as the child's lane budget allows (as the stage's own wait does; past
it the call goes on without the lane and says so in the phases). The call's own bound (60 s for a first call)
counts those waits, and an autotuned kernel compiles once per config, so once a call has waited
LET_GO_WAIT_S in all, its later compiles keep the lane. Only first calls let go: a later call's bound is a
small multiple of the library's time, too short to queue behind a timing.

Phases (seconds, the record's latency as child_<name>): `lane_wait_<mode>` and `lane_timeout_<mode>` as
before (`lane_wait_recheck`: the shared stretch of the timed shapes' rechecks after the timing, with
TimingConfig.recheck_outside_exclusive); `compile_unlaned`, the compile time spent with the lane let go; `lane_wait_after_compile`, the waits
to take it again (both summed over the calls).

Disk work between correctness calls lets the shared lane go too (`unlaned`): a checkpoint (child/run.py)
writes the finished trials' outputs, host copies already in memory, and on the H200 such writes took 1-8 s per
evaluation inside the shared lane (docs/architecture.md). Its phases: `checkpoint_unlaned`, the time spent
with the lane let go, and `lane_wait_after_checkpoint`, the waits to take it back. A device-held output's copy
to the host inside such a write is GPU work, though (the copy engine reads the GPU's memory): with
Placement.outputs_copy_laned each copy holds the shared lane for itself alone (`copying`), so that it never runs
beside another evaluation's timing, and the file write stays outside."""
from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from kernelgym_gap.core.lane import Hold, Lane, LaneTimeout, hold_if_possible

LET_GO_WAIT_S = 20.0      # after this much waiting to take the lane back in one call, its compiles keep it
_NOW = time.perf_counter


class ChildLane:
    """One child's hold of its GPU's lane (None: no lane, every method just runs its block)."""

    def __init__(self, lane: Lane | None, budget_s: float | None, phases: dict):
        self.lane, self.budget_s, self.phases = lane, budget_s, phases
        self.waited = 0.0               # lane waits so far, against budget_s
        self.holding: str | None = None
        self.let_go_allowed = False     # set around a first call when the job asks for it
        self._depth = 0                 # nested compiles let go once
        self._call_wait = 0.0           # this call's waits to take the lane back, against LET_GO_WAIT_S

    def _left(self) -> float | None:
        return None if self.budget_s is None else max(self.budget_s - self.waited, 0.0)

    @contextlib.contextmanager
    def stage(self, mode: str, name: str | None = None) -> Iterator[None]:
        """Holds the lane for a stretch: shared for the correctness trials, exclusive for the timing. The wait
        goes into the phases as `lane_wait_<name>` (`name` defaults to the mode; a second stretch of the same
        mode names itself, as the rechecks after the timing do with "recheck", so that it does not overwrite
        the first one's wait). Without a lane the stretch just runs; past the wait budget (or on a descriptor
        the submission broke) it runs without the lane, and `lane_timeout_<name>` says how long it waited."""
        key = name or mode
        with hold_if_possible(self.lane, mode, self._left()) as got:
            if isinstance(got, LaneTimeout):
                self.waited += got.waited_s
                self.phases[f"lane_timeout_{key}"] = got.waited_s
            elif isinstance(got, Hold):
                self.waited += got.wait_s
                self.phases[f"lane_wait_{key}"] = got.wait_s
                self.holding = mode
            elif self.lane is not None:         # its descriptors failed
                self.phases[f"lane_timeout_{key}"] = 0.0
            try:
                yield
            finally:
                self.holding = None

    @contextlib.contextmanager
    def first_call(self, allowed: bool) -> Iterator[None]:
        """Around a shape's first correctness call: compiles inside it may let the lane go (`let_go`)."""
        self.let_go_allowed, self._call_wait = allowed, 0.0
        try:
            yield
        finally:
            self.let_go_allowed = False

    @contextlib.contextmanager
    def let_go(self) -> Iterator[None]:
        """Around one compilation (dsl adapters' `compiling()`): the shared lane released for it and taken
        again after, when a first call allows it and the lane is held shared; else nothing changes."""
        if (not self.let_go_allowed or self.holding != "shared" or self._depth
                or self._call_wait >= LET_GO_WAIT_S):
            yield
            return
        self._depth += 1
        try:
            self.lane.release()
        except OSError:                     # a descriptor the submission broke: keep going as we are
            self._depth -= 1
            yield
            return
        self.holding = None
        t = _NOW()
        try:
            yield
        finally:
            self._add("compile_unlaned", _NOW() - t)
            self._take_back()
            self._depth -= 1

    @contextlib.contextmanager
    def unlaned(self, name: str) -> Iterator[None]:
        """Around disk work between two correctness calls (a checkpoint, child/run.py): the shared lane let go
        for it and taken back after, within the lane budget, so another evaluation's timing never waits on
        this child's disk. The next call starts only once this returns: what the block wrote is then written
        (a killed process loses none of it), and the call's GPU work runs under the lane again. Held
        exclusive (the timing's stretch is never broken) or not held, the block just runs. When the block
        raises, the lane is not taken back: the child only writes its report and ends."""
        if self.holding != "shared" or self._depth:
            yield
            return
        try:
            self.lane.release()
        except OSError:                     # a descriptor the submission broke: keep going as we are
            yield
            return
        self.holding = None
        t = _NOW()
        try:
            yield
        finally:
            self._add(f"{name}_unlaned", _NOW() - t)
        self._take_back(f"lane_wait_after_{name}")

    @contextlib.contextmanager
    def copying(self) -> Iterator[None]:
        """Around one copy of an output off the GPU where the child holds no lane (a checkpoint's or the final
        outputs' write, Placement.outputs_copy_laned): the shared lane held for the copy alone, so that the copy
        engine's traffic never runs beside another evaluation's timing, and let go before the file write. Held
        already (shared or exclusive), or no lane: the copy just runs. Past the lane budget, or on a descriptor the
        submission broke, the copy runs without it (`lane_timeout_copies`). `lane_wait_copies` sums the waits,
        `copies_laned` counts the holds."""
        if self.lane is None or self.holding is not None:
            yield
            return
        try:
            got = self.lane.acquire("shared", self._left())
        except LaneTimeout as e:
            self.waited += e.waited_s
            self._add("lane_timeout_copies", e.waited_s)
            yield
            return
        except OSError:
            self._add("lane_timeout_copies", 0.0)
            yield
            return
        self.waited += got.wait_s
        self._add("lane_wait_copies", got.wait_s)
        self._add("copies_laned", 1.0)
        try:
            yield
        finally:
            try:
                self.lane.release()
            except OSError:
                pass

    def _take_back(self, key: str = "lane_wait_after_compile") -> None:
        in_call = self.let_go_allowed       # a first call's compile: its waits count against LET_GO_WAIT_S
        try:
            got = self.lane.acquire("shared", self._left())
        except LaneTimeout as e:
            self.waited += e.waited_s
            self._call_wait += e.waited_s if in_call else 0.0
            self._add("lane_timeout_shared", e.waited_s)
            return
        except OSError:
            self._add("lane_timeout_shared", 0.0)
            return
        self.waited += got.wait_s
        self._call_wait += got.wait_s if in_call else 0.0
        self._add(key, got.wait_s)
        self.holding = "shared"

    def _add(self, key: str, seconds: float) -> None:
        self.phases[key] = self.phases.get(key, 0.0) + seconds
