"""What every DSL adapter provides, and what they share.

An adapter class carries everything the harness knows about one DSL. Its class-level part is safe in the
parent (it imports no DSL): the gate's rule for "written in this DSL" (`looks_like`), whether the cpu backend
runs a compile probe (`needs_compile_probe`), what a pre-started child imports (`preimport`) and which
versions a record reports (`versions`). Its instance, made inside the child after the backend's environment
variables are set, sees the DSL's kernels launch (`install`, `log`, `streams`), tells compile errors apart
(`is_compile_error`), and names the DSL's own launch paths for the integrity snapshots (`watched`,
`hook_reader`)."""
from __future__ import annotations

import ast
import contextlib
import dataclasses
import threading
from typing import Callable, ClassVar

from kernelgym_gap.core.dsls import DSLInfo
from kernelgym_gap.dsl.watch import WATCH


class KernelUnverified(Exception):
    """A kernel that could be compiled for the GPU but not run on this backend."""


class DSLCompileError(Exception):
    """A kernel that failed to compile; wraps the DSL's own exception."""


@dataclasses.dataclass
class LaunchLog:
    launches: int = 0
    max_programs: int = 0
    failed: int = 0                 # launches that raised (a submission may catch the error and fall back)
    side_stream: int = 0            # launches on a stream other than the one the harness set (cuda)
    compile_errors: list = dataclasses.field(default_factory=list)   # kept even when the submission caught them
    specs: dict = dataclasses.field(default_factory=dict)   # KernelSpec.key() -> KernelSpec: launched or compiled
    notes: set = dataclasses.field(default_factory=set)
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)

    handed_bytes: int = 0           # bytes of the distinct tensors handed to the kernels since the reset

    def add_spec(self, spec) -> str:
        """Keeps a KernelSpec (once per content); returns its key."""
        key = spec.key()
        with self.lock:
            self.specs.setdefault(key, spec)
        return key

    def record(self, programs: int, handed_bytes: int = 0) -> None:
        with self.lock:
            self.launches += 1
            self.max_programs = max(self.max_programs, int(programs))
            self.handed_bytes += int(handed_bytes)

    def reset(self) -> None:
        with self.lock:
            self.launches = 0
            self.max_programs = 0
            self.handed_bytes = 0
            self.failed = 0
            self.side_stream = 0


def tensor_bytes(*groups) -> int:
    """Bytes of the distinct tensors among a launch's arguments (and results): what the kernel is handed,
    an upper bound of what it can move. A harness diagnostic only: it never fails a launch."""
    try:
        import torch
        seen, total = set(), 0
        for group in groups:
            items = group.values() if isinstance(group, dict) else (group if isinstance(group, (list, tuple))
                                                                     else (group,))
            for a in items:
                if type(a) is torch.Tensor:
                    key = (a.data_ptr(), a.numel(), a.dtype)
                    if key not in seen:
                        seen.add(key)
                        total += a.numel() * a.element_size()
        return total
    except Exception:  # noqa: BLE001 - diagnostics must not break a launch
        return 0


def check_args(kind: str, args, kwargs) -> None:
    """A kernel's tensor arguments must be plain tensors: a subclass's __torch_dispatch__ would run the
    submission's own code inside the launch, where the op recorder does not look."""
    import torch
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, torch.Tensor) and type(a) is not torch.Tensor:
            WATCH.note(f"passed a tensor subclass ({type(a).__qualname__}) to a {kind} kernel")
            raise TypeError(f"kernelgym_gap: {kind} kernel arguments must be plain torch.Tensor, "
                            f"not {type(a).__qualname__}")


class StreamWatch:
    """On the cuda backend, which stream each launch went to: the kernel must run on the harness's stream
    (the timing code synchronises the whole device, but the checks and the diagnosis assume one stream).
    `expected` is the stream current when the runner started; timing code may set it to its own."""

    def __init__(self, backend: str):
        self.enabled = backend == "cuda"
        self.expected = None

    def check(self, log: LaunchLog) -> None:
        if not self.enabled:
            return
        import torch
        current = torch.cuda.current_stream().cuda_stream
        if self.expected is None:
            self.expected = current
        if current != self.expected:
            with log.lock:
                log.side_stream += 1


# ------------------------------------------------------------------------------------------ the protocol

class DSLAdapter:
    """The base of TritonAdapter and TileLangAdapter (see the module's docstring)."""

    # the DSL's entry in the registry (core/dsls.py): its name, import root, kernel decorators and where it
    # needs the compile probe are read there, by the trusted side too, which imports no adapter
    info: ClassVar[DSLInfo]

    log: LaunchLog
    streams: StreamWatch
    # set by the child (child/lanes.py) while compiles may run with the GPU's lane let go: a context manager
    # factory entered around each compilation of the DSL's (CPU work); None: compiles run as they are
    compile_hook: Callable[[], contextlib.AbstractContextManager] | None = None

    def compiling(self) -> contextlib.AbstractContextManager:
        """Entered around one compilation (`compile_hook`'s context, or nothing)."""
        hook = self.compile_hook
        return hook() if hook is not None else contextlib.nullcontext()

    # -- class level: safe in the parent -------------------------------------------------------------------
    @classmethod
    def looks_like(cls, tree: ast.Module) -> bool:
        """The gate's rule (core/dsls.py: DSLInfo.looks_like)."""
        return cls.info.looks_like(tree)

    @classmethod
    def needs_compile_probe(cls, backend: str) -> bool:
        """Whether an evaluation on `backend` also runs the compile probe (kernelgym_gap/sandbox/probe.py)."""
        return cls.info.needs_compile_probe(backend)

    @classmethod
    def for_backend(cls, backend: str, compile_only: bool = False) -> DSLAdapter:
        raise NotImplementedError

    @classmethod
    def preimport(cls) -> None:
        """The DSL's imports, made by a pre-started child before its job (sandbox/prestart.py)."""
        raise NotImplementedError

    @classmethod
    def versions(cls) -> dict[str, str]:
        """The DSL packages' versions, as a record reports them."""
        raise NotImplementedError

    # -- instance: inside the child --------------------------------------------------------------------------
    def install(self) -> None:
        """Wraps the DSL's launch (and compile) paths: counts launches in `log`, checks streams and arguments,
        runs the DSL's machinery inside `dsl_region()`."""
        raise NotImplementedError

    @staticmethod
    def is_compile_error(exc: BaseException) -> bool:
        raise NotImplementedError

    def watched(self) -> tuple[list, list]:
        """The DSL's modules and classes that the integrity snapshots cover (its launch paths)."""
        return [], []

    def hook_reader(self) -> Callable[[], dict]:
        """A function giving the DSL's launch hooks as {name: state}, compared before and after each call."""
        return dict
