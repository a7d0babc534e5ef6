"""The harness's own instances inside the child (ChildRun, its HeldOutputs, CallMarks, lane, DSL adapter and
launch log, the Integrity itself, the timing's op counter), checked wherever the snapshots are checked.

The snapshots (snapshots.py) cover the harness's modules and classes; an instance is reachable too (gc.
get_objects()), and an instance attribute shadows its class's method: `held.add = f` on the one HeldOutputs
made the harness run `f` after a call's checks, unwatched (tests/fixtures/hostile/held_instance_hook.py, found
2026-12-06 as known_hole_held_instance_hook.py). So each registered instance must keep, at every check:
- exactly the class it was made with (`obj.__class__ = Subclass` would swap every method at once);
- no instance attribute named like a class-level descriptor (function, method, property, slot, ...): data
  the harness sets on an instance is plain, and a shadow is the submission's;
- its pinned attributes (ChildRun's held, integrity, marks, ...) the very objects registered.
Where child/run.py calls a method of these after submission code has run, it calls the class's function bound
at import (`_HELD_ADD(self.held, ...)`), so a shadow installed after the last check is never run either.

In-process like the snapshots, and so defeatable by a submission that edits this registry itself: the OS
layers and the parent's checks are the boundary (docs/security.md)."""
from __future__ import annotations

_MISSING = object()


def _class_attr(cls: type, name: str):
    """`name` as the class defines it (first in the MRO), not bound; _MISSING when no class defines it."""
    for klass in cls.__mro__:
        found = klass.__dict__.get(name, _MISSING)
        if found is not _MISSING:
            return found
    return _MISSING


def _is_descriptor(value) -> bool:
    """Functions, methods, properties, classmethods, slots: what an instance attribute must not shadow."""
    return hasattr(type(value), "__get__")


def shadow_names(cls: type) -> frozenset:
    """The names an instance attribute of `cls` must not take: its class-level descriptors (child/release.py
    checks the timing bench against them after every timed call)."""
    return frozenset(name for klass in cls.__mro__ for name in vars(klass)
                     if _is_descriptor(_class_attr(cls, name)))


class HarnessInstances:
    """The registry. `register` before the submission loads (or, for what is made later, before its code
    runs again); `violations()` after every stretch of submission code (Integrity.violations calls it)."""

    __slots__ = ("_entries", "_names")

    def __init__(self) -> None:
        # (label, object, its class, {pinned attribute: the object it held})
        self._entries: list[tuple[str, object, type, dict]] = []
        # each registered class's shadow_names, taken as it is registered, not at every check (which runs after
        # every call); a class changed later is the snapshots' to report (they cover the harness's classes)
        self._names: dict[type, frozenset] = {}

    def register(self, label: str, obj, pinned: tuple[str, ...] = ()) -> None:
        if any(o is obj for _, o, _, _ in self._entries):
            return
        own, cls = getattr(obj, "__dict__", {}), type(obj)
        if cls not in self._names:
            self._names[cls] = shadow_names(cls)
        self._entries.append((label, obj, cls, {name: own[name] for name in pinned if name in own}))

    def labels(self) -> tuple[str, ...]:
        return tuple(label for label, _, _, _ in self._entries)

    def violations(self) -> list[str]:
        found = []
        for label, obj, cls, pinned in self._entries:
            if type(obj) is not cls:
                found.append(f"the harness's {label} had its class swapped ({cls.__qualname__} -> "
                             f"{type(obj).__module__}.{type(obj).__qualname__})")
                continue
            own = getattr(obj, "__dict__", None)
            if own is None:
                continue
            names = self._names[cls]
            for name in list(own):      # a key not a str is never hashed: its __hash__ would be the submission's
                if type(name) is str and name in names \
                        and _is_descriptor(attr := _class_attr(cls, name)):    # the class as it is now, as before
                    found.append(f"the harness's {label}.{name} was shadowed on the instance "
                                 f"({cls.__qualname__}.{name} is a {type(attr).__name__})")
            for name, value in pinned.items():
                if own.get(name, _MISSING) is not value:
                    found.append(f"the harness's {label}.{name} was replaced")
        return found


def register_child_run(run) -> None:
    """The harness's instances a child/run.ChildRun holds, registered with its snapshots (`run.integrity`) once
    they are taken: the run (and which objects it holds), its kept outputs, call marks, lane, DSL adapter, launch
    log and stream watch, and the snapshots themselves. The timing's op counter is added when it is made."""
    reg = run.integrity.instances
    reg.register("ChildRun", run, pinned=("held", "marks", "lane", "adapter", "integrity", "task", "job"))
    reg.register("HeldOutputs", run.held)
    reg.register("CallMarks", run.marks)
    reg.register("ChildLane", run.lane)
    reg.register(f"DSL adapter ({type(run.adapter).__qualname__})", run.adapter, pinned=("log", "streams"))
    reg.register("DSL launch log", run.adapter.log)
    streams = getattr(run.adapter, "streams", None)    # the cuda side-stream watch (dsl/base.StreamWatch)
    if streams is not None:
        reg.register("DSL stream watch", streams)
    reg.register("Integrity", run.integrity, pinned=("instances",))
