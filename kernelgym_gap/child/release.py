"""The timed calls of one shape as the bench makes them (cuda backend): their outputs released under watch, and
the bench guarded against the calls (issue 35, 2026-12-07).

Why. A submission's output is submission code when it goes: a `weakref.finalize` on it, a tensor subclass's
`__del__`, an object in its `__dict__`, a DLPack deleter all run at its release. Inside the benchmark loop
every output was dropped the moment `Bench._rep` (or a warm-up) got it back, outside any watched stretch, so a
finalizer there ran unguarded and unrecorded, and could rewrite an output the child still holds (an earlier
shape's recheck copy; with `hand_over_outputs`, every device copy held through the timing) with torch's
answer (`tests/fixtures/hostile/finalizer_in_timing.py`). And the bench is one more harness object the calls
can reach (gc.get_objects()): `bench._rep = fake` on the instance would make every later repetition a
reading the submission chose (`tests/fixtures/hostile/bench_rep_shadow.py`).

What. `TimedCalls(i)` calls the entry on input set i % n and keeps a reference to what it returned, so the
bench dropping it runs nothing. The kept outputs go together under watch (`release_watched`, which the recheck
shares): before a call once KEEP_CALLS or KEEP_BYTES of storage are kept (31-38 us for 32 at the median on the
cpu, scripts/probes/release_cost.py, after a repetition's start event, behind the bench's 0.3 ms spin kernel
like the launch's own; an output past KEEP_BYTES goes before the next call, the library's too (`AfterKernel`):
one at most alive, as before), between the probe and the full timing, after it, and at the shape's end. Torch
compute or a kernel launch seen there (none when an honest output goes) is an integrity violation (WATCH).

After every call, before the harness touches the bench again, the bench (and its graph timers) must keep
exactly its class and have no instance attribute named like a class-level function, method or property; a
shadow is noted and undone at once (the class put back, the attribute removed), so the harness never runs it.
In-process, like the snapshots and child/instances.py: a submission that edits this module's objects
themselves (a TimedCalls' slots, its class, restored before the stretch ends) is not stopped by it; the
instance registry checks TimedCalls and the bench at the stretch's end (docs/security.md)."""
from __future__ import annotations

from kernelgym_gap.child import recorders
from kernelgym_gap.child.graph_timing import GraphTimer
from kernelgym_gap.child.instances import shadow_names
from kernelgym_gap.child.recorders import describe_ops
from kernelgym_gap.dsl.watch import WATCH

KEEP_CALLS = 32             # outputs kept at most before they are let go together (~50 us to let 32 go, cpu)
KEEP_BYTES = 256 << 20      # storage kept at most before they are let go (a larger output goes at the next call)
_MISSING = object()


def release_watched(kept: list, what: str, log=None) -> None:
    """Empties `kept` under watch (recorders.watching); torch compute and moves of `log.launches` there noted."""
    launches = getattr(log, "launches", 0)
    with recorders.watching() as watch:
        kept.clear()
    if watch.ops:
        WATCH.note(f"computed with torch as the harness released {what} ({describe_ops(watch.ops)})")
    moved = getattr(log, "launches", 0) - launches
    if moved:
        WATCH.note(f"launched {moved} kernel(s) as the harness released {what}")


def _storage_bytes(out) -> int:
    try:
        return int(out.untyped_storage().nbytes())
    except Exception:       # noqa: BLE001 - not a tensor (a tuple, None): counted by KEEP_CALLS alone
        return 0


# the bench's data the harness sets once and that the calls must not change: the L2 flush buffer (a smaller one
# is a warm cache, hack family A13), the timing config, the spin that hides the host's launch cost, the
# synchronize's measured cost (subtracted from each device-wide reading)
PINNED = ("flush", "cfg", "spin_cycles", "sync_overhead_ms", "sync_jitter_ms")


class BenchState:
    """The bench as made, taken before any call of the submission (time_submission): its class, the descriptor
    names an instance attribute must not take, its pinned data, and its config's fields."""

    __slots__ = ("bench", "cls", "names", "pins", "cfg_fields")

    def __init__(self, bench):
        self.bench, self.cls = bench, type(bench)
        self.names = shadow_names(self.cls)
        own = getattr(bench, "__dict__", {})
        self.pins = {name: own[name] for name in PINNED if name in own}
        self.cfg_fields = dict(getattr(own.get("cfg"), "__dict__", {}))


class TimedCalls:
    """`calls(i)`: the entry on `sets[i % len(sets)]`, its output kept (above). `release()` lets every kept
    output go under watch; `keep(obj)` keeps something else the submission made (a graph timer's outputs)."""

    __slots__ = ("entry", "sets", "log", "state", "pending", "pending_bytes", "what",
                 "__weakref__")     # Bench._warm's warm_once keys its estimates by the callable, weakly

    def __init__(self, entry, sets, log, state: BenchState | None = None, what: str = "a timed call's output"):
        """`log`: the DSL adapter's launch log (its `launches` count); `state`: the bench to guard (BenchState)."""
        self.entry, self.sets, self.log, self.state, self.what = entry, sets, log, state, what
        self.pending: list = []
        self.pending_bytes = 0

    def __call__(self, i: int):
        if len(self.pending) >= KEEP_CALLS or self.pending_bytes >= KEEP_BYTES:
            _RELEASE(self)
        out = self.entry(*self.sets[i % len(self.sets)])
        _GUARD(self)
        _KEEP(self, out)
        return out

    def keep(self, obj) -> None:
        self.pending.append(obj)
        self.pending_bytes += _storage_bytes(obj)

    def release(self) -> None:
        """Lets the kept outputs go under watch (release_watched), then guards the bench: that ran submission code."""
        if self.pending:
            release_watched(self.pending, self.what, self.log)
            self.pending_bytes = 0
            _GUARD(self)

    def close(self) -> None:
        """The shape's end: every kept output let go under watch, and the inputs no longer held by this object;
        a class swapped on it is noted (its own calls could not see it)."""
        if type(self) is not TimedCalls:
            WATCH.note(f"swapped the class of the harness's timed calls (TimedCalls -> {type(self).__qualname__})")
            object.__setattr__(self, "__class__", TimedCalls)
        _RELEASE(self)
        self.sets, self.entry = (), None

    def guard_bench(self) -> None:
        """The bench and its graph timers as the harness made them (above); a shadow, a swap or a pinned value
        changed is undone and noted."""
        state = self.state
        if state is None:
            return
        bench = state.bench
        _undo(bench, state.cls, state.names, "timing bench")
        own = getattr(bench, "__dict__", None)
        if own is None:
            return
        for name, value in state.pins.items():
            if own.get(name, _MISSING) is not value:
                WATCH.note(f"replaced the harness's timing bench.{name}")
                own[name] = value
        cfg_own = getattr(own.get("cfg"), "__dict__", None)
        if cfg_own is not None and cfg_own != state.cfg_fields:
            WATCH.note("changed the harness's timing config (bench.cfg)")
            cfg_own.clear()
            cfg_own.update(state.cfg_fields)
        timers = own.get("_timers")
        if type(timers) is dict:
            for timer in timers.values():
                _undo(timer, GraphTimer, _TIMER_NAMES, "graph timer")


class AfterKernel:
    """The library's callable in the same bench (`library(i)`), which first lets the kernel's kept outputs go
    when they hold KEEP_BYTES or more: with the repetitions interleaved, a large output of the kernel would
    otherwise stay alive through the library's call beside its own, twice the memory the loop held before
    (one output at a time). Small ones stay kept (the release's host cost is not paid per call)."""

    __slots__ = ("calls", "fn", "__weakref__")

    def __init__(self, calls: TimedCalls, fn):
        self.calls, self.fn = calls, fn

    def __call__(self, i: int):
        if self.calls.pending_bytes >= KEEP_BYTES:
            _RELEASE(self.calls)
        return self.fn(i)


def _undo(obj, cls: type, names: frozenset, label: str) -> None:
    if type(obj) is not cls:
        WATCH.note(f"swapped the class of the harness's {label} ({cls.__qualname__} -> {type(obj).__qualname__})")
        try:
            object.__setattr__(obj, "__class__", cls)
        except TypeError:
            pass
    own = getattr(obj, "__dict__", None)
    if own is None:
        return
    for name in own.keys() & names:
        WATCH.note(f"shadowed the harness's {label}.{name} on the instance")
        own.pop(name, None)


_TIMER_NAMES = shadow_names(GraphTimer)
# bound at import, before the submission loads: called through these, a shadow on a TimedCalls (it has no
# __dict__, but its class could be swapped) is not what the harness runs between the calls
_RELEASE = TimedCalls.release
_KEEP = TimedCalls.keep
_GUARD = TimedCalls.guard_bench
CLOSE = TimedCalls.close


def settle(fn) -> None:
    """Lets a TimedCalls' kept outputs go under watch (child/timing.time_shape, between the probe and the full
    timing, and after it); any other callable (a scripted bench's, the library's) has none."""
    if type(fn) is TimedCalls:
        _RELEASE(fn)
