"""Snapshots: everything timing and checking rely on, taken before the submission loads and compared after
each stretch of its code: timers, synchronisation, events, streams, the DSL launch paths, this harness's own
modules and classes, builtins, signal handlers, trace hooks, gc callbacks, the threads alive. Compared by
identity: a replacement through `setattr(obj, "name", f)` is caught the same as `obj.name = f`, and by the
code, defaults and closure of every Python function among them (`f.__code__ = g.__code__` keeps `f`).

What is covered is derived from what is loaded, not kept in a list (until 2026-12-05 a hand-kept list left
out child/timing.py, and a submission that wrapped its `time_shape` passed: issue 31): every module of this
package in sys.modules at the snapshot (`harness_modules`), every global of each (its constants and module
bindings too, not only its callables), the classes defined in them, and the modules they bind (statistics,
dataclasses, os, ... : what the harness's code calls through them). A harness module loaded after the
snapshot, by the harness or by the submission, is covered from the first comparison that sees it, and a
harness module's entry in sys.modules may not be replaced."""
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
from kernelgym_gap.child.instances import HarnessInstances
from kernelgym_gap.dsl.watch import WATCH, WatchState

_MISSING = object()
_CACHED_CLASS_ATTRS = frozenset({"__slotnames__"})   # pickle caches it on the class at the first save

HARNESS_PACKAGE = "kernelgym_gap"


def is_harness_name(name: str) -> bool:
    return name == HARNESS_PACKAGE or name.startswith(HARNESS_PACKAGE + ".")


def harness_modules() -> list[tuple[str, object]]:
    """(name, module) for every module of this package loaded now, and `__main__` when it is one of them (a
    real child runs child/runner.py as __main__)."""
    found = [(name, mod) for name, mod in list(sys.modules.items())
             if is_harness_name(name) and isinstance(mod, type(sys))]
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if isinstance(main, type(sys)) and is_harness_name(getattr(spec, "name", None) or ""):
        found.append(("__main__", main))
    return found


def _harness_snapshot(mod) -> dict:
    """A harness module's globals, all but the interpreter's own dunders: its functions and classes, and its
    constants (DEVICE_EXCESS, SPIN_MS, ...) and module bindings, which nothing rebinds after the snapshot
    (`guards._installed` and `recorders._MODES`, its only `global` statements, are set before it)."""
    return {k: v for k, v in _stable_dict(mod).items() if not (k.startswith("__") and k.endswith("__"))}


_TABLES = (dict, set, list)


def _table_copy(value):
    """A harness module's table (tensor_file.DTYPES, dsl.ADAPTERS, ...) as it is now, to compare its contents
    later: a table changed in place keeps its identity."""
    return dict(value) if isinstance(value, dict) else list(value)


def _same_table(value, copy) -> bool:
    try:
        if isinstance(value, dict):
            return value.keys() == copy.keys() and all(value[k] is v for k, v in copy.items())
        if isinstance(value, set):
            return len(value) == len(copy) and all(x in value for x in copy)
        return len(value) == len(copy) and all(a is b for a, b in zip(value, copy))
    except Exception:  # noqa: BLE001 - keys whose comparison raises were put there by the submission
        return False


def _bound_modules(harness: list) -> list:
    """The modules this harness's modules bind as globals (statistics, dataclasses, torch, ...), other than
    its own: the library code its timing, checks and hand-off call through them."""
    out, seen = [], set()
    for _, mod in harness:
        for v in _stable_dict(mod).values():
            if isinstance(v, type(sys)) and not is_harness_name(v.__name__) and id(v) not in seen:
                seen.add(id(v))
                out.append(v)
    return out


def _code_state(value):
    """What a replacement in place would change in a Python function: its code, defaults and closure
    contents (`f.__code__ = ...` keeps the function's identity)."""
    f = getattr(value, "__func__", value)          # classmethod, staticmethod, bound method
    if isinstance(f, type):                        # a class (types.FunctionType has a __code__ descriptor)
        return None
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


def _callables(mod) -> dict:
    return {k: v for k, v in _stable_dict(mod).items() if callable(v) and not isinstance(v, type(sys))}


def _torch_watched() -> tuple[list, list]:
    """torch's modules and classes that timing, synchronisation and the library baseline are made of (the
    baseline's time is E's numerator: slowing it down inflates E)."""
    import torch
    import torch.nn.functional
    # torch._C: what torch.cuda.synchronize, the events and the streams call into; torch.cuda.*: its pieces
    modules = [torch, torch._C, torch.cuda, torch.overrides, torch.nn.functional, torch.autograd.grad_mode]
    modules += [m for n, m in list(sys.modules.items())
                if n.startswith("torch.cuda.") and isinstance(m, type(sys))]
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
    classes = [torch.Tensor, torch._C.TensorBase, torch.cuda.Event, torch.cuda.Stream, torch.no_grad,
               getattr(torch._C, "_CudaEventBase", None), getattr(torch._C, "_CudaStreamBase", None),
               type(torch._C._VariableFunctions)]
    return modules, classes


def _classes_of(name: str, mod) -> list:
    own = getattr(mod, "__name__", name)
    return [v for v in _stable_dict(mod).values() if isinstance(v, type) and v.__module__ == own]


class Integrity:
    """Snapshots of what timing and checking rely on, compared after the submission had its chance.

    Module namespaces are compared name by name for the names present at the snapshot (lazy imports add
    names legitimately); class namespaces also flag new names (they would shadow inherited methods)."""

    def __init__(self, adapter, extra_modules: tuple = (), extra_classes: tuple = (), task=None):
        torch_modules, torch_classes = _torch_watched()
        dsl_modules, dsl_classes = adapter.watched()
        modules = [time, os, threading, _thread, builtins, gc, signal] + torch_modules
        classes = torch_classes + [recorders.Watching, WatchState] + list(recorders.mode_classes())
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
        self._modules: list = []         # (label, module, {name: value}) compared name by name
        self._classes: list = []         # (label, class, {name: value}), new names flagged too
        self._codes: dict = {}           # label -> (function, its code state)
        self._seen: set = set()          # ids of the modules and classes covered
        self._harness: dict = {}         # harness module name -> the module object sys.modules had
        self._tables: dict = {}          # "module.name" -> (a harness module's dict/set/list, its copy)
        self._watch = WATCH
        self._watch_bindings: list = []
        # the harness's own instances (child/instances.py): the caller registers them, checked with the rest
        self.instances = HarnessInstances()
        self._cover_harness()
        for m in modules:
            # other modules: their functions and classes (their flags and counters change legitimately)
            self._add_module(m.__name__, m, _callables(m))
        for c in classes:
            self._add_class(c)
        self._hooks = self._hook_state()
        for name, value in self._task_fields.items():
            state = _code_state(value)
            if state is not None:
                self._codes[f"task.{name}"] = (value, state)
        self._threads = {t.ident for t in threading.enumerate()}
        self._thread_count = _thread._count() if hasattr(_thread, "_count") else None
        self.threads = threading.active_count()

    def _add_module(self, label: str, mod, snap: dict) -> None:
        if id(mod) in self._seen:
            return
        self._seen.add(id(mod))
        self._modules.append((label, mod, snap))
        self._add_codes(label, snap)

    def _add_class(self, c) -> None:
        if c is None or id(c) in self._seen:
            return
        self._seen.add(id(c))
        label = f"{c.__module__}.{c.__qualname__}"
        snap = _stable_dict(c)
        self._classes.append((label, c, snap))
        self._add_codes(label, snap)

    def _add_codes(self, label: str, snap: dict) -> None:
        for name, value in snap.items():
            state = _code_state(value)
            if state is not None:
                self._codes[f"{label}.{name}"] = (value, state)

    def _cover_harness(self) -> None:
        """Covers the harness modules loaded now that are not covered yet (all of them at the snapshot; at a
        later comparison, those loaded since), the classes they define and the modules they bind."""
        new = [(n, m) for n, m in harness_modules() if n not in self._harness]
        for name, mod in new:
            self._harness[name] = mod
            snap = _harness_snapshot(mod)
            self._add_module(name, mod, snap)
            self._tables.update({f"{name}.{k}": (v, _table_copy(v)) for k, v in snap.items()
                                 if type(v) in _TABLES})
            for c in _classes_of(name, mod):
                self._add_class(c)
            if vars(mod).get("WATCH") is WATCH:
                self._watch_bindings.append((name, mod))
        for m in _bound_modules(new):
            self._add_module(m.__name__, m, _callables(m))

    def covered(self) -> frozenset[str]:
        """The names of the harness modules covered (for the tests: every one loaded)."""
        return frozenset(self._harness)

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
        self._cover_harness()
        found = [f"sys.modules[{name!r}] was replaced" for name, mod in self._harness.items()
                 if sys.modules.get(name) is not mod]
        found += self._replaced()
        found += [f"{label} was changed in place" for label, (value, copy) in self._tables.items()
                  if not _same_table(value, copy)]
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
        found += self.instances.violations()
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
