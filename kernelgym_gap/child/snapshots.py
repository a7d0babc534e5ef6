"""Snapshots: everything timing and checking rely on, taken before the submission loads and compared after
each stretch of its code: timers, synchronisation, events, streams, the DSL launch paths, this harness's own
modules and classes, builtins, signal handlers, trace hooks, gc callbacks, the threads alive. Compared by
identity: a replacement through `setattr(obj, "name", f)` is caught the same as `obj.name = f`, and by the
code, defaults and closure of every Python function among them (`f.__code__ = g.__code__` keeps `f`)."""
from __future__ import annotations

import builtins
import gc
import os
import signal
import sys
import threading
import time

import _thread

from kernelgym_gap.child import guards, recorders
from kernelgym_gap.child.watch import WATCH, WatchState

_MISSING = object()
_CACHED_CLASS_ATTRS = frozenset({"__slotnames__"})   # pickle caches it on the class at the first save

# This harness's modules inside the child (those imported by then): their functions and classes, and their
# binding of WATCH, must be untouched. A module added to or renamed in the child or the DSL adapters belongs
# here. (`kernelgym_gap.child.runner` runs as __main__ in a real child; its work is in `child.run`.)
HARNESS_MODULES = (
    "kernelgym_gap.child.runner", "kernelgym_gap.child.run", "kernelgym_gap.child.failure",
    "kernelgym_gap.child.compile_modes", "kernelgym_gap.child.module_entry", "kernelgym_gap.child.integrity",
    "kernelgym_gap.child.watch", "kernelgym_gap.child.marks", "kernelgym_gap.child.outputs",
    "kernelgym_gap.child.lanes",
    "kernelgym_gap.child.guards", "kernelgym_gap.child.recorders", "kernelgym_gap.child.snapshots",
    "kernelgym_gap.dsl", "kernelgym_gap.dsl.base", "kernelgym_gap.dsl.triton", "kernelgym_gap.dsl.tilelang",
    "kernelgym_gap.core.inputs", "kernelgym_gap.core.record", "kernelgym_gap.core.lane",
    "kernelgym_gap.core.tensor_file",
)


def _code_state(value):
    """What a replacement in place would change in a Python function: its code, defaults and closure
    contents (`f.__code__ = ...` keeps the function's identity)."""
    f = getattr(value, "__func__", value)          # classmethod, staticmethod, bound method
    code = getattr(f, "__code__", None)
    if code is None or not hasattr(f, "__defaults__"):
        return None
    cells = ()
    for c in f.__closure__ or ():
        try:
            cells += (c.cell_contents,)
        except ValueError:                     # an empty cell
            cells += (_MISSING,)
    kw = f.__kwdefaults__
    return code, f.__defaults__, dict(kw) if kw else None, cells


def _same_code(a, b) -> bool:
    if a is None or b is None:
        return a is b
    return (a[0] is b[0] and a[1] is b[1] and a[2] == b[2] and len(a[3]) == len(b[3])
            and all(x is y for x, y in zip(a[3], b[3])))


def _stable_dict(obj) -> dict:
    try:
        return dict(vars(obj))
    except TypeError:
        return {}


def _torch_watched() -> tuple[list, list]:
    """torch's modules and classes that timing, synchronisation and the library baseline are made of (the
    baseline's time is E's numerator: slowing it down inflates E)."""
    import torch
    import torch.nn.functional
    modules = [torch, torch.cuda, torch.overrides, torch.nn.functional]
    for name in ("_nn", "_linalg", "_special", "_fft"):
        if isinstance(getattr(torch._C, name, None), type(sys)):
            modules.append(getattr(torch._C, name))
    for name in ("linalg", "special", "fft"):
        mod = getattr(torch, name, None)
        if isinstance(mod, type(sys)):
            modules.append(mod)
    try:
        import torch.utils._python_dispatch as pyd
        modules.append(pyd)
    except ImportError:
        pass
    classes = [torch.Tensor, torch._C.TensorBase, torch.cuda.Event, torch.cuda.Stream,
               getattr(torch._C, "_CudaEventBase", None), getattr(torch._C, "_CudaStreamBase", None),
               type(torch._C._VariableFunctions)]
    return modules, classes


def _harness_watched() -> tuple[list, list]:
    """This harness's own modules and the classes defined in them."""
    modules, classes = [], [recorders.Watching, WatchState]
    for name in HARNESS_MODULES:
        mod = sys.modules.get(name)
        if mod is not None:
            modules.append(mod)
            classes += [v for v in vars(mod).values() if isinstance(v, type) and v.__module__ == name]
    return modules, classes + list(recorders.mode_classes())


class Integrity:
    """Snapshots of what timing and checking rely on, compared after the submission had its chance.

    Module namespaces are compared name by name for the names present at the snapshot (lazy imports add
    names legitimately); class namespaces also flag new names (they would shadow inherited methods)."""

    def __init__(self, adapter, extra_modules: tuple = (), extra_classes: tuple = (), task=None):
        torch_modules, torch_classes = _torch_watched()
        harness_modules, harness_classes = _harness_watched()
        dsl_modules, dsl_classes = adapter.watched()
        modules = [time, os, threading, _thread, builtins, gc, signal] + torch_modules + harness_modules
        classes = torch_classes + harness_classes
        self._task = task
        self._task_fields = dict(_stable_dict(task)) if task is not None else {}
        if task is not None:
            mod = sys.modules.get(getattr(getattr(task, "reference", None), "__module__", None) or "")
            if mod is not None:
                modules.append(mod)
        classes += list(type(adapter).__mro__[:-1]) + [type(adapter.log)] + list(dsl_classes)
        modules += list(dsl_modules) + list(extra_modules)
        classes += list(extra_classes)
        self._launch_hooks = adapter.hook_reader()     # the DSL's launch hooks, read the same way each time
        # harness code the adapter enters around each compile, inside the DSL's region (guards off there):
        # a submission that swapped it would have its own code run unwatched
        self._adapter = adapter
        # modules: their functions and classes (module-level flags and counters change legitimately)
        self._modules = [(m.__name__, m, {k: v for k, v in _stable_dict(m).items()
                                          if callable(v) and not isinstance(v, type(sys))})
                         for m in modules]
        seen, self._classes = set(), []
        for c in classes:
            if c is not None and id(c) not in seen:
                seen.add(id(c))
                self._classes.append((f"{c.__module__}.{c.__qualname__}", c, _stable_dict(c)))
        self._hooks = self._hook_state()
        self._watch = WATCH
        self._watch_bindings = [(m.__name__, m) for m in harness_modules if vars(m).get("WATCH") is WATCH]
        self._codes = {}
        for label, _, snap in self._modules + self._classes:
            for name, value in snap.items():
                state = _code_state(value)
                if state is not None:
                    self._codes[f"{label}.{name}"] = (value, state)
        for name, value in self._task_fields.items():
            state = _code_state(value)
            if state is not None:
                self._codes[f"task.{name}"] = (value, state)
        self._threads = {t.ident for t in threading.enumerate()}
        self._thread_count = _thread._count() if hasattr(_thread, "_count") else None
        self.threads = threading.active_count()

    def _hook_state(self) -> dict:
        state = {"sys.gettrace": sys.gettrace(), "sys.getprofile": sys.getprofile(),
                 "threading trace hook": getattr(threading, "_trace_hook", None),
                 "threading profile hook": getattr(threading, "_profile_hook", None),
                 "sys.excepthook": sys.excepthook, "sys.unraisablehook": sys.unraisablehook,
                 "threading.excepthook": threading.excepthook, "gc.callbacks": tuple(gc.callbacks)}
        for sig in signal.valid_signals():
            try:
                state[f"signal handler {signal.Signals(sig).name}"] = signal.getsignal(sig)
            except (ValueError, OSError):
                pass
        state.update(self._launch_hooks())
        state["the DSL adapter's compile hook"] = getattr(self._adapter, "compile_hook", None)
        return state

    def violations(self) -> list[str]:
        found = self._replaced()
        for label, (value, state) in self._codes.items():
            if not _same_code(_code_state(value), state):
                found.append(f"{label} was changed in place (its code, defaults or closure)")
        if self._task is not None:
            current = _stable_dict(self._task)
            for name, value in self._task_fields.items():
                if current.get(name, _MISSING) is not value:
                    found.append(f"the task's {name} was replaced")
        now = self._hook_state()
        for name, value in self._hooks.items():
            other = now.get(name, _MISSING)
            if other is not value and other != value:
                found.append(f"{name} was changed")
        found += self._left_running()
        for label, mod in self._watch_bindings:
            if vars(mod).get("WATCH", _MISSING) is not self._watch:
                found.append(f"{label}.WATCH was replaced")
        found += [f"the submission {e}" for e in self._watch.events]
        return found[:50]

    def _replaced(self) -> list[str]:
        """Module and class attributes replaced since the snapshot (and class attributes added)."""
        found = []
        for label, mod, snap in self._modules:
            current = vars(mod)
            for name, value in snap.items():
                if current.get(name, _MISSING) is not value:
                    found.append(f"{label}.{name} was replaced")
        for label, cls, snap in self._classes:
            current = vars(cls)
            for name, value in snap.items():
                if current.get(name, _MISSING) is not value:
                    found.append(f"{label}.{name} was replaced")
            for name in current.keys() - snap.keys() - _CACHED_CLASS_ATTRS:
                found.append(f"{label}.{name} was added")
        return found

    def _left_running(self) -> list[str]:
        """Timers armed, threads and processes the submission left behind."""
        found = []
        for which in ("ITIMER_REAL", "ITIMER_VIRTUAL", "ITIMER_PROF"):
            if signal.getitimer(getattr(signal, which))[0] > 0:
                found.append(f"a timer ({which}) was left armed")
        new = [t for t in threading.enumerate() if t.ident not in self._threads]
        if new:
            found.append(f"the submission left {len(new)} thread(s) running")
        elif self._thread_count is not None and _thread._count() > self._thread_count:
            found.append(f"the submission left {_thread._count() - self._thread_count} low-level thread(s) running")
        left = guards.leftover_processes()
        if left:
            found.append(f"the submission left {len(left)} process(es) running")
        return found
