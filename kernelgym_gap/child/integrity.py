"""Integrity inside the child: what the submission may not do while its code runs, and what it may not have
changed once it returns. Imported only inside the child (`runner.py`).

Three parts, all in-process and so all, in principle, defeatable by a submission that sets out to find and
patch them (ctypes, gc): the OS layers in sandbox.py and the parent's own checks are the real boundary.
docs/security.md says what each part stops and what it does not.

- `WATCH`: whether submission code is running now (`submission_code()`: the import, each entry call, and
  the release of what it returned), and whether the DSL's own machinery is running inside it
  (`dsl_region()`: a kernel launch or compilation, entered by the adapters in dsl.py).
- Guards (`install_guards`): an audit hook and thread-start wrappers that refuse, while submission code runs
  outside a DSL region, to start processes or threads, send signals, open sockets, or create, change or
  remove files; each refusal is recorded and fails the evaluation as an integrity violation even when the
  submission catches the exception.
- `OpRecorder` / `HostRecorder` (`watching()`): a TorchDispatchMode recording every aten op the submission
  itself runs outside a DSL region, minus an allow-list of allocation, view, metadata and copy ops, and a
  TorchFunctionMode recording tensor data taken to the host (`numpy`, `tolist`, `__array__`,
  `__dlpack__`). Either means the library, not the kernel, did (part of) the work: `library_compute`.
- `Integrity`: snapshots, taken before the submission loads, of everything timing and checking rely on
  (timers, synchronisation, events, streams, the DSL launch paths, this harness's own modules and
  classes, builtins, signal handlers, trace hooks, gc callbacks, the threads alive), compared by identity
  after each call: a replacement through `setattr(obj, "name", f)` is caught the same as `obj.name = f`.
"""
from __future__ import annotations

import builtins
import collections
import contextlib
import gc
import os
import signal
import sys
import threading
import time

import _thread

_MISSING = object()
_CACHED_CLASS_ATTRS = frozenset({"__slotnames__"})   # pickle caches it on the class at the first save


# ---------------------------------------------------------------------------------------------- state

class _Watch:
    def __init__(self):
        self.active = False          # submission code may be running
        self.dsl_depth = 0           # inside the DSL's launch/compile machinery
        self.events: list[str] = []  # refused or forbidden actions, in order
        self.backend = "cpu"

    @property
    def recording(self) -> bool:
        return self.active and self.dsl_depth == 0

    def note(self, what: str) -> None:
        if len(self.events) < 100:
            self.events.append(what)


WATCH = _Watch()


class SandboxDenied(PermissionError):
    """Raised into the submission when it tries something the harness forbids (recorded as well)."""


@contextlib.contextmanager
def submission_code():
    """Submission code runs inside: guards on, DSL regions reset (a launch inside re-enters its own)."""
    saved = WATCH.active, WATCH.dsl_depth
    WATCH.active, WATCH.dsl_depth = True, 0
    try:
        yield
    finally:
        WATCH.active, WATCH.dsl_depth = saved


@contextlib.contextmanager
def dsl_region():
    """The DSL's own machinery runs inside (interpreter copies, compilers, caches): not the submission's."""
    WATCH.dsl_depth += 1
    try:
        yield
    finally:
        WATCH.dsl_depth -= 1


def user_callback(fn):
    """Wraps a callable the submission hands to the DSL (a grid function): it runs as submission code."""
    def wrapped(*args, **kwargs):
        if not WATCH.active:
            return fn(*args, **kwargs)
        saved = WATCH.dsl_depth
        WATCH.dsl_depth = 0
        try:
            return fn(*args, **kwargs)
        finally:
            WATCH.dsl_depth = saved
    return wrapped


# --------------------------------------------------------------------------------------------- guards

_PROCESS_EVENTS = {"os.fork", "os.forkpty", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
                   "subprocess.Popen", "pty.spawn", "os.startfile"}
_SIGNAL_EVENTS = {"os.kill", "os.killpg", "signal.pthread_kill"}
_SOCKET_EVENTS = {"socket.__new__", "socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg",
                  "socket.getaddrinfo", "socket.gethostbyname"}
_FS_EVENTS = {"os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.symlink", "os.link", "os.chmod",
              "os.chown", "os.truncate", "os.utime", "os.mkfifo", "os.mknod", "shutil.rmtree", "os.chflags",
              "os.setxattr", "os.removexattr"}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_installed = False


def _audit(event: str, args) -> None:
    if not WATCH.recording:
        return
    what = None
    if event in _PROCESS_EVENTS:
        what = f"started a process ({event})"
    elif event in _SIGNAL_EVENTS:
        what = f"sent a signal ({event} {args[:2]!r})"
    elif event in _SOCKET_EVENTS:
        what = f"used the network ({event})"
    elif event in _FS_EVENTS:
        what = f"changed the file system ({event} {str(args[0])[:120]!r})"
    elif event == "open":
        path, mode, flags = (tuple(args) + (None, None, None))[:3]
        writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or \
                 (isinstance(flags, int) and flags & _WRITE_FLAGS)
        if writes:
            what = f"opened a file for writing ({str(path)[:120]!r})"
    if what is not None:
        WATCH.note(what)
        raise SandboxDenied(f"kernelgym_gap: a submission may not do this: {what}")


def _thread_guard(original):
    def start_new_thread(function, args, kwargs=None, *rest):
        if WATCH.recording:
            WATCH.note("started a thread")
            raise SandboxDenied("kernelgym_gap: a submission may not start threads (work would escape the "
                                "checks and the timing)")
        return original(function, args, *(() if kwargs is None else (kwargs,)), *rest)
    start_new_thread.__wrapped__ = None   # no pointer back to the original
    return start_new_thread


def install_guards(backend: str) -> None:
    """Once per child, before the submission is imported (an audit hook cannot be removed)."""
    global _installed
    if _installed:
        return
    _installed = True
    WATCH.backend = backend
    sys.addaudithook(_audit)
    guard = _thread_guard(_thread.start_new_thread)
    _thread.start_new_thread = guard
    if hasattr(_thread, "start_new"):
        _thread.start_new = guard
    threading._start_new_thread = guard


# --------------------------------------------------------------------------------------- op recording

# aten ops a submission may run itself: allocation, views and metadata, copies and dtype conversion.
ALLOWED_OPS = frozenset("""
empty empty_like empty_strided new_empty new_empty_strided empty_permuted
zeros zeros_like new_zeros ones ones_like new_ones full full_like new_full scalar_tensor
fill fill_ zero zero_
view _unsafe_view view_as reshape _reshape_alias as_strided as_strided_ permute transpose transpose_ t t_
expand expand_as contiguous clone copy copy_ _copy_from _copy_from_and_resize _to_copy to detach detach_ alias
lift_fresh lift_fresh_copy select slice narrow unsqueeze unsqueeze_ squeeze squeeze_ flatten unflatten unbind
split split_with_sizes chunk movedim swapaxes unfold view_as_real view_as_complex conj resolve_conj
_local_scalar_dense sym_size sym_stride sym_numel sym_storage_offset size stride numel dim is_contiguous
is_same_size is_pinned pin_memory _pin_memory set_ resize_ record_stream _has_compatible_shallow_copy_type
""".split())

HOST_EXTRACTION = frozenset({"numpy", "tolist", "__array__", "__dlpack__", "__array_interface__"})


def _op_name(func) -> str:
    try:
        return func._overloadpacket.__name__
    except AttributeError:
        return getattr(func, "__name__", str(func))


def _device_to_host(name: str, args, kwargs) -> bool:
    import torch
    if name == "_to_copy" and args and isinstance(args[0], torch.Tensor) and args[0].is_cuda:
        dev = kwargs.get("device")
        return dev is not None and torch.device(dev).type == "cpu"
    if name in ("copy_", "_copy_from") and len(args) > 1 and all(isinstance(a, torch.Tensor) for a in args[:2]):
        dst, src = (args[0], args[1]) if name == "copy_" else (args[1], args[0])
        return src.is_cuda and dst.device.type == "cpu"
    return False


def _make_modes():
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    class OpRecorder(TorchDispatchMode):
        """Records the aten ops the submission runs itself (not inside a DSL launch) beyond the allow-list."""

        @classmethod
        def _should_skip_dynamo(cls):
            # torch would otherwise wrap __torch_dispatch__ in a dynamo-disable that imports torch._dynamo
            # (3 s, and it writes temporary files) on the first op
            return False

        def __init__(self):
            super().__init__()
            self.ops: collections.Counter = collections.Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if WATCH.recording:
                name = _op_name(func)
                if name not in ALLOWED_OPS:
                    self.ops[str(func)] += 1
                elif WATCH.backend == "cuda" and _device_to_host(name, args, kwargs):
                    self.ops[f"{func} (device to host)"] += 1
            return func(*args, **kwargs)

    class HostRecorder(TorchFunctionMode):
        """Records tensor data taken out of torch (to numpy, lists, DLPack) by the submission."""

        def __init__(self):
            super().__init__()
            self.ops: collections.Counter = collections.Counter()

        def __torch_function__(self, func, types, args=(), kwargs=None):
            if WATCH.recording:
                name = getattr(func, "__name__", "")
                if name in HOST_EXTRACTION:
                    self.ops[f"Tensor.{name} (tensor data taken out of torch)"] += 1
            return func(*args, **(kwargs or {}))

    return OpRecorder, HostRecorder


_MODES = None


class Watching:
    """One watched stretch of submission code: guards on, both recorders pushed. `ops` after exit."""

    def __init__(self):
        global _MODES
        if _MODES is None:
            _MODES = _make_modes()
        self.dispatch, self.function = _MODES[0](), _MODES[1]()
        self.ops: collections.Counter = collections.Counter()

    def __enter__(self):
        import torch
        self._lens = torch._C._len_torch_dispatch_stack(), torch._C._len_torch_function_stack()
        self._stack = contextlib.ExitStack()
        self._stack.enter_context(self.function)
        self._stack.enter_context(self.dispatch)
        self._stack.enter_context(submission_code())
        return self

    def __exit__(self, *exc, _watch=WATCH):
        import torch
        if not (_watch.active and _watch.dsl_depth == 0) or sys.modules[__name__].WATCH is not _watch:
            # nothing of the harness leaves these changed at the end of a call: the submission did
            _watch.note("changed the harness's watch state (kernelgym_gap.child.integrity.WATCH)")
        intact = (torch._C._len_torch_dispatch_stack() == self._lens[0] + 1
                  and torch._C._get_dispatch_stack_at(self._lens[0]) is self.dispatch
                  and torch._C._len_torch_function_stack() == self._lens[1] + 1
                  and torch._C._get_function_stack_at(self._lens[1]) is self.function)
        if not intact:
            WATCH.note("changed torch's mode stacks (removed or added a dispatch/function mode)")
            # put the stacks back as they were before the call, whatever the submission did
            self._stack.pop_all()
            WATCH.active, WATCH.dsl_depth = False, 0
            while torch._C._len_torch_dispatch_stack() > self._lens[0]:
                torch._C._pop_torch_dispatch_stack()
            while torch._C._len_torch_function_stack() > self._lens[1]:
                torch._C._pop_torch_function_stack()
        else:
            self._stack.close()
        self.ops = self.dispatch.ops + self.function.ops
        return False


def watching() -> Watching:
    return Watching()


def describe_ops(ops: collections.Counter, limit: int = 6) -> str:
    items = ops.most_common()
    text = ", ".join(f"{name} x{n}" for name, n in items[:limit])
    return text + (f" and {len(items) - limit} more" if len(items) > limit else "")


# ---------------------------------------------------------------------------------- leftover processes

def _status_field(pid: str, field: str) -> str | None:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


def _cgroup_of(pid: str) -> str | None:
    try:
        with open(f"/proc/{pid}/cgroup") as fh:
            return fh.read()
    except OSError:
        return None


def leftover_processes() -> list[int]:
    """Processes of this sandbox other than this one and its ancestors: a daemon the submission forked (even
    with a raw fork() through ctypes, which no audit hook sees). Only where they can be told apart from the
    host's: in the sandbox's own pid namespace, or by this child's own cgroup (sandbox.py tells us which)."""
    mode = os.environ.get("KGG_SANDBOX", "")
    own_cgroup = os.environ.get("KGG_SANDBOX_CGROUP") == "1"
    if mode not in ("bwrap", "unshare") and not own_cgroup:
        return []
    me = os.getpid()
    ancestors, p = set(), str(me)
    for _ in range(64):
        ppid = _status_field(p, "PPid")
        if not ppid or ppid == "0":
            break
        ancestors.add(int(ppid))
        p = ppid
    my_cgroup = _cgroup_of("self") if own_cgroup else None
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        if pid == me or pid in ancestors:
            continue
        if _status_field(name, "Tgid") not in (None, name):
            continue
        if my_cgroup is not None and _cgroup_of(name) != my_cgroup:
            continue
        state = _status_field(name, "State") or ""
        if state.startswith(("Z", "X")):
            continue
        found.append(pid)
    return found


# ------------------------------------------------------------------------------------------ snapshots

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


class Integrity:
    """Snapshots of what timing and checking rely on, compared after the submission had its chance.

    Module namespaces are compared name by name for the names present at the snapshot (lazy imports add
    names legitimately); class namespaces also flag new names (they would shadow inherited methods)."""

    def __init__(self, adapter, extra_modules: tuple = (), extra_classes: tuple = (), task=None):
        import torch
        import torch.nn.functional
        modules = [time, os, threading, _thread, builtins, gc, signal, torch, torch.cuda, torch.overrides,
                   sys.modules[__name__]]
        # what the library baseline is made of (its time is E's numerator: slowing it down inflates E)
        modules.append(torch.nn.functional)
        extra_classes = tuple(extra_classes) + (type(torch._C._VariableFunctions),)
        for name in ("_nn", "_linalg", "_special", "_fft"):
            if isinstance(getattr(torch._C, name, None), type(sys)):
                modules.append(getattr(torch._C, name))
        for name in ("linalg", "special", "fft"):
            mod = getattr(torch, name, None)
            if isinstance(mod, type(sys)):
                modules.append(mod)
        self._task = task
        self._task_fields = dict(_stable_dict(task)) if task is not None else {}
        if task is not None:
            mod = sys.modules.get(getattr(getattr(task, "reference", None), "__module__", None) or "")
            if mod is not None:
                modules.append(mod)
        classes = [torch.Tensor, torch._C.TensorBase, torch.cuda.Event, torch.cuda.Stream,
                   getattr(torch._C, "_CudaEventBase", None), getattr(torch._C, "_CudaStreamBase", None),
                   Watching, _Watch]
        try:
            import torch.utils._python_dispatch as pyd
            modules.append(pyd)
        except ImportError:
            pass
        for name in ("kernelgym_gap.child.runner", "kernelgym_gap.dsl.adapters", "kernelgym_gap.core.inputs",
                     "kernelgym_gap.core.record"):
            mod = sys.modules.get(name)
            if mod is not None:
                modules.append(mod)
                classes += [v for v in vars(mod).values()
                            if isinstance(v, type) and v.__module__ == name]
        if _MODES is not None:
            classes += list(_MODES)
        classes += list(type(adapter).__mro__[:-1])
        classes.append(type(adapter.log))
        if adapter.name == "triton":
            import triton
            import triton.runtime.jit as jit
            from triton.runtime.autotuner import Autotuner, Heuristics
            modules.append(jit)
            classes += [jit.JITFunction, Autotuner, Heuristics]
            try:
                from triton.runtime.interpreter import GridExecutor, InterpretedFunction
                classes += [InterpretedFunction, GridExecutor]
            except ImportError:
                pass
            self._triton_knobs = getattr(getattr(triton, "knobs", None), "runtime", None)
        else:
            tjit = sys.modules["tilelang.jit"]   # (the attribute tilelang.jit is the decorator)
            from tilelang.jit.kernel import JITKernel
            modules.append(tjit)
            classes.append(JITKernel)
            self._triton_knobs = None
        modules += list(extra_modules)
        classes += list(extra_classes)
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
        knobs = self._triton_knobs
        if knobs is not None:
            for name in ("launch_enter_hook", "launch_exit_hook", "kernel_load_start_hook",
                         "kernel_load_end_hook"):
                chain = getattr(knobs, name, None)
                state[f"triton.knobs.runtime.{name}"] = tuple(getattr(chain, "calls", ()) or ())
            for name in ("jit_cache_hook", "jit_post_compile_hook", "add_stages_inspection_hook"):
                state[f"triton.knobs.runtime.{name}"] = getattr(knobs, name, None)
        return state

    def violations(self) -> list[str]:
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
        for which in ("ITIMER_REAL", "ITIMER_VIRTUAL", "ITIMER_PROF"):
            if signal.getitimer(getattr(signal, which))[0] > 0:
                found.append(f"a timer ({which}) was left armed")
        new = [t for t in threading.enumerate() if t.ident not in self._threads]
        if new:
            found.append(f"the submission left {len(new)} thread(s) running")
        elif self._thread_count is not None and _thread._count() > self._thread_count:
            found.append(f"the submission left {_thread._count() - self._thread_count} low-level thread(s) running")
        left = leftover_processes()
        if left:
            found.append(f"the submission left {len(left)} process(es) running")
        if sys.modules[__name__].WATCH is not self._watch:
            found.append(f"{__name__}.WATCH was replaced")
        found += [f"the submission {e}" for e in self._watch.events]
        return found[:50]
