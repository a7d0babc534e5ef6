"""The event loop and the resources of the simulator: a heap of (time, sequence, callback), processes written
as generators that yield requests (Delay, Acquire), a GPU lane with core/lane.py's semantics, single servers
and a pool of host cores. Deterministic: ties are broken by the order events were scheduled."""
from __future__ import annotations

import dataclasses
import heapq
from collections import deque
from collections.abc import Callable, Generator


class Sim:
    """The clock and the event heap; `trace` gets one Interval per stage a process reports."""

    def __init__(self):
        self.now = 0.0
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = 0
        self.trace: list[Interval] = []

    def at(self, t: float, fn: Callable[[], None]) -> None:
        heapq.heappush(self._heap, (t, self._seq, fn))
        self._seq += 1

    def start(self, gen: Generator) -> None:
        """Runs a process (a generator of requests) from now."""
        self.at(self.now, lambda: self._step(gen, None))

    def _step(self, gen: Generator, value) -> None:
        try:
            request = gen.send(value)
        except StopIteration:
            return
        request.begin(self, lambda v=None: self._step(gen, v))

    def run(self, until: float | None = None) -> float:
        while self._heap:
            t, _, fn = self._heap[0]
            if until is not None and t > until:
                break
            heapq.heappop(self._heap)
            self.now = t
            fn()
        return self.now

    def record(self, **kw) -> None:
        self.trace.append(Interval(**kw))


@dataclasses.dataclass(frozen=True)
class Interval:
    """One stage of one evaluation on the timeline (seconds on the run's clock). `lane` is "shared",
    "exclusive" or "" (no lane held); `wait` marks a wait for a resource rather than work."""
    job: int
    name: str
    gpu: int
    slot: int
    stage: str
    start: float
    end: float
    lane: str = ""
    wait: bool = False
    row: str = "slot"          # "slot": the evaluation's own stages; "pre-start": the slot's next child;
                               # "checker": the checker's early reference (they overlap the slot's stages)


@dataclasses.dataclass
class Delay:
    seconds: float

    def begin(self, sim: Sim, resume: Callable) -> None:
        sim.at(sim.now + max(0.0, self.seconds), resume)


@dataclasses.dataclass
class Acquire:
    """Waits for `resource` (a Lane, Server or Cores) in `mode`; resumes with the wait in seconds."""
    resource: object
    mode: str = ""

    def begin(self, sim: Sim, resume: Callable) -> None:
        t0 = sim.now
        self.resource.request(sim, self.mode, lambda: resume(sim.now - t0))


class Lane:
    """One GPU's lane as core/lane.py makes it: a gate (a mutex) and the data lock. A reader passes the gate
    once no writer holds the data; a writer keeps the gate while it waits for the readers to drain and until it
    is done, so readers behind it wait (writer preference). flock(2) promises no order among the gate's
    waiters: `rng` None takes them in arrival order (FIFO), an `rng` (random.Random) picks the next one at
    random, the two ends of what flock may do."""

    def __init__(self, index: int = 0, rng=None):
        self.index = index
        self.readers = 0
        self.writer = False
        self.gate: Callable | None = None      # a writer that holds the gate and waits for the readers
        self.queue: list[tuple[str, Callable]] = []
        self.rng = rng

    def request(self, sim: Sim, mode: str, grant: Callable) -> None:
        if mode not in ("shared", "exclusive"):
            raise ValueError(f"lane mode must be 'shared' or 'exclusive', not {mode!r}")
        self.queue.append((mode, grant))
        self._admit(sim)

    def _admit(self, sim: Sim) -> None:
        if self.gate is not None and not self.readers:
            self.writer, grant, self.gate = True, self.gate, None
            sim.at(sim.now, grant)
        while self.queue and not self.writer and self.gate is None:
            mode, grant = self.queue.pop(self.rng.randrange(len(self.queue)) if self.rng else 0)
            if mode == "exclusive" and self.readers:
                self.gate = grant               # it holds the gate and waits for the readers to drain
            elif mode == "exclusive":
                self.writer = True
                sim.at(sim.now, grant)
            else:
                self.readers += 1
                sim.at(sim.now, grant)

    def release(self, sim: Sim, mode: str) -> None:
        if mode == "exclusive":
            if not self.writer:
                raise RuntimeError("exclusive release without a holder")
            self.writer = False
        else:
            if self.readers <= 0:
                raise RuntimeError("shared release without a holder")
            self.readers -= 1
        self._admit(sim)


class Server:
    """A single FCFS server (the reward server's dispatch, the SQLite store's writes): one request at a
    time; the holder releases it after its service time (Pipeline.serve)."""

    def __init__(self, name: str, service_s: float):
        self.name, self.service_s = name, service_s
        self.busy = False
        self.queue: deque[Callable] = deque()
        self.served = 0
        self.busy_s = 0.0

    def request(self, sim: Sim, mode: str, grant: Callable) -> None:
        self.queue.append(grant)
        self._admit(sim)

    def _admit(self, sim: Sim) -> None:
        if not self.busy and self.queue:
            self.busy = True
            sim.at(sim.now, self.queue.popleft())

    def release(self, sim: Sim, mode: str = "") -> None:
        self.busy = False
        self.served += 1
        self.busy_s += self.service_s
        self._admit(sim)


class Cores:
    """The host's cores: a counting semaphore in arrival order. Host-bound stages (the child's imports and
    set-up, compiles, the outputs' write, the check's host part) hold one core each."""

    def __init__(self, n: int):
        if n < 1:
            raise ValueError("a host needs at least one core")
        self.free = n
        self.queue: deque[Callable] = deque()

    def request(self, sim: Sim, mode: str, grant: Callable) -> None:
        self.queue.append(grant)
        self._admit(sim)

    def _admit(self, sim: Sim) -> None:
        while self.free and self.queue:
            self.free -= 1
            sim.at(sim.now, self.queue.popleft())

    def release(self, sim: Sim, mode: str = "") -> None:
        self.free += 1
        self._admit(sim)


class Event:
    """A one-shot signal (a pre-started child is ready, the checker's reference is computed): a request
    waits until it is set; after that, requests pass at once."""

    def __init__(self):
        self.done = False
        self.waiters: list[Callable] = []

    def request(self, sim: Sim, mode: str, grant: Callable) -> None:
        if self.done:
            sim.at(sim.now, grant)
        else:
            self.waiters.append(grant)

    def set(self, sim: Sim) -> None:
        self.done = True
        for grant in self.waiters:
            sim.at(sim.now, grant)
        self.waiters.clear()
