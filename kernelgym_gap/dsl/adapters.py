"""What the child needs to know about each DSL: how to see its kernels launch, and which exceptions are
compile errors. Imported only inside the child, after the backend's environment variables are set."""
from __future__ import annotations

import dataclasses
import hashlib
import inspect
import logging
import math
import sys
import threading

from kernelgym_gap.child.integrity import WATCH, dsl_region, user_callback

log = logging.getLogger(__name__)


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


def _tensor_bytes(*groups) -> int:
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


def _check_args(kind: str, args, kwargs) -> None:
    """A kernel's tensor arguments must be plain tensors: a subclass's __torch_dispatch__ would run the
    submission's own code inside the launch, where the op recorder does not look."""
    import torch
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, torch.Tensor) and type(a) is not torch.Tensor:
            WATCH.note(f"passed a tensor subclass ({type(a).__qualname__}) to a {kind} kernel")
            raise TypeError(f"kernelgym_gap: {kind} kernel arguments must be plain torch.Tensor, "
                            f"not {type(a).__qualname__}")


class _StreamWatch:
    """On the cuda backend, which stream each launch went to: the kernel must run on the harness's stream
    (the timing code synchronises the whole device, but the checks and the diagnosis assume one stream).
    `expected` is the stream current when the runner started; timing code may set it to its own."""

    def __init__(self, backend: str):
        self.enabled = backend == "cuda"
        self.expected = None

    def check(self, log: "LaunchLog") -> None:
        if not self.enabled:
            return
        import torch
        current = torch.cuda.current_stream().cuda_stream
        if self.expected is None:
            self.expected = current
        if current != self.expected:
            with log.lock:
                log.side_stream += 1


def _grid_programs(grid) -> int:
    if isinstance(grid, int):
        return grid
    return math.prod(int(g) for g in tuple(grid)[:3]) if grid else 1


# ---------------------------------------------------------------------------------------------- triton

_TORCH_TO_TRITON = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float64": "fp64",
                    "int32": "i32", "int64": "i64", "int16": "i16", "int8": "i8", "uint8": "u8", "bool": "i1"}


class TritonAdapter:
    """Counts launches through JITFunction.run / InterpretedFunction.run (triton 3.6 and 3.7 alike).

    In `compile_only` mode (the cpu backend's compile probe, a child run without the interpreter) a launch
    compiles the kernel's specialization for sm_90 instead of running it, and autotuned kernels compile
    every config: the interpreter alone would accept kernels that cannot compile for the GPU."""

    name = "triton"

    def __init__(self, interpret: bool, compile_only: bool = False, backend: str = "cpu"):
        self.interpret = interpret
        self.compile_only = compile_only
        self.log = LaunchLog()
        self.streams = _StreamWatch(backend)
        self._compiled: set = set()
        self._sources: dict = {}        # kernel function -> sha256 of its source

    def install(self) -> None:
        import triton.runtime.jit as jit
        from triton.runtime.autotuner import Autotuner

        adapter = self
        classes = [jit.JITFunction]
        if self.interpret:
            from triton.runtime.interpreter import InterpretedFunction
            classes.append(InterpretedFunction)
        if self.streams.enabled:
            # Build the driver's helpers now, not in the submission's code (a compiler runs, files are written).
            from triton.runtime import driver
            driver.active.get_current_device()
            driver.active.utils  # noqa: B018
        for cls in classes:
            original = cls.run

            def run(fn_self, *args, grid, warmup, _original=original, **kwargs):
                _check_args("Triton", args, kwargs)
                if getattr(fn_self, "pre_run_hooks", None):
                    WATCH.note(f"registered a pre-run hook on kernel {getattr(fn_self, '__name__', '?')}")
                    raise TypeError("kernelgym_gap: kernels may not carry pre-run hooks")
                with dsl_region():
                    if warmup:
                        return _original(fn_self, *args, grid=grid, warmup=warmup, **kwargs)
                    if adapter.compile_only:
                        try:
                            adapter._compile_for_gpu(fn_self, args, kwargs)
                        except DSLCompileError as e:
                            adapter.log.compile_errors.append(str(e))
                            raise
                        adapter.log.record(0)
                        return None
                    if adapter.interpret:
                        adapter._note_launch(fn_self, args, kwargs)
                    adapter.streams.check(adapter.log)
                    seen: list[int] = []
                    try:
                        result = _original(fn_self, *args, grid=adapter._watch_grid(grid, seen), warmup=warmup,
                                           **kwargs)
                    except BaseException:
                        with adapter.log.lock:
                            adapter.log.failed += 1
                        raise
                # counted only once the launch went through: a launch that raised carried no work
                adapter.log.record(seen[-1] if seen else 0, _tensor_bytes(args, kwargs))
                return result

            cls.run = run
        for name in ("_bench", "check_disk_cache"):
            if hasattr(Autotuner, name):
                original_method = getattr(Autotuner, name)

                def in_region(self_, *args, _original=original_method, **kwargs):
                    with dsl_region():
                        return _original(self_, *args, **kwargs)

                setattr(Autotuner, name, in_region)
        original_tune = Autotuner.run

        def tune(self_, *args, **kwargs):
            if adapter.compile_only:
                for config in self_.configs:
                    self_.fn.run(*args, **{**kwargs, **config.all_kwargs()})
                return None
            if adapter.interpret and len(self_.configs) > 1:
                # The interpreter cannot benchmark: evaluate the first config only (noted in the record).
                self_.configs = self_.configs[:1]
                adapter.log.notes.add("autotune: the interpreter evaluates the first config only")
            return original_tune(self_, *args, **kwargs)

        Autotuner.run = tune

    @staticmethod
    def _watch_grid(grid, seen: list):
        if callable(grid):
            user_grid = user_callback(grid)   # the submission's code: watched like the rest of it

            def wrapped(meta, _grid=user_grid):
                g = _grid(meta)
                seen.append(_grid_programs(g))
                return g
            return wrapped
        seen.append(_grid_programs(grid))
        return grid

    def _specialization(self, fn_self, args, kwargs):
        """The launch as a KernelSpec (argument types, constexpr values, options), or None with a note when
        an argument has a type the probe cannot name."""
        import torch
        from kernelgym_gap.core.record import KernelSpec

        kwargs = dict(kwargs)
        options = {k: v for k in ("num_warps", "num_stages", "num_ctas", "maxnreg")
                   if (v := kwargs.pop(k, None)) is not None}
        for k in ("debug", "ir_override"):
            kwargs.pop(k, None)
        fn = fn_self.fn
        params = inspect.signature(fn).parameters
        try:
            bound = inspect.signature(fn).bind(*args, **kwargs)
        except TypeError as e:
            raise DSLCompileError(f"{fn.__name__}: {e}") from e
        bound.apply_defaults()
        signature, constexprs, exact = {}, {}, True
        for name, value in bound.arguments.items():
            ann = params[name].annotation
            ann = ann if isinstance(ann, str) else getattr(ann, "__name__", str(ann))
            if "constexpr" in ann or value is None:
                signature[name] = "constexpr"
                if value is None or type(value) in (bool, int, float, str):
                    constexprs[name] = value
                else:               # a tl.dtype, a function: compared by repr, not carried to another process
                    constexprs[name], exact = f"repr:{value!r}", False
            elif isinstance(value, torch.Tensor):
                signature[name] = "*" + _TORCH_TO_TRITON[str(value.dtype).removeprefix("torch.")]
            elif isinstance(value, bool):
                signature[name] = "i1"
            elif isinstance(value, int):
                signature[name] = "i32" if -2**31 <= value < 2**31 else "i64"
            elif isinstance(value, float):
                signature[name] = "fp32"
            else:
                self.log.notes.add(f"compile probe skipped {fn.__name__}: argument {name} is a "
                                   f"{type(value).__name__}")
                return None, bound
        spec = KernelSpec(module=getattr(fn, "__module__", "?"), qualname=getattr(fn, "__qualname__", "?"),
                          source_sha256=self.source_sha256(fn), signature=signature, constexprs=constexprs,
                          options=options, exact=exact)
        return spec, bound

    def source_sha256(self, fn) -> str:
        """sha256 of a kernel function's source text (cached): how a KernelSpec names the kernel it launched."""
        digest = self._sources.get(fn)
        if digest is None:
            try:
                text = inspect.getsource(fn)
            except (OSError, TypeError):
                text = ""
            digest = self._sources[fn] = hashlib.sha256(text.encode()).hexdigest()
        return digest

    def _note_launch(self, fn_self, args, kwargs) -> None:
        """The interpreter's launch, recorded as a KernelSpec for the compile probe (the cpu backend)."""
        try:
            spec, _ = self._specialization(fn_self, args, kwargs)
        except DSLCompileError:
            return                  # the launch itself raises the same binding error
        if spec is not None:
            self.log.add_spec(spec)

    def _compile_for_gpu(self, fn_self, args, kwargs) -> None:
        spec, bound = self._specialization(fn_self, args, kwargs)
        if spec is None:
            return
        constexprs = {k: bound.arguments[k] for k in spec.constexprs}   # the values themselves
        self.compile_spec(fn_self, spec, constexprs)

    def compile_spec(self, fn_self, spec, constexprs=None) -> None:
        """Compiles one specialization of the JITFunction `fn_self` for sm_90 (once per spec); raises
        DSLCompileError if it does not compile."""
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource

        # the object too (two kernels may share a name and a source); by id: a JITFunction's own hash
        # computes its cache key, which raises for a kernel that references a plain Python function
        key = (id(fn_self), self.log.add_spec(spec))
        if key in self._compiled:
            return
        try:
            triton.compile(ASTSource(fn_self, dict(spec.signature), dict(spec.constexprs if constexprs is None
                                                                          else constexprs)),
                           target=GPUTarget("cuda", 90, 32), options=dict(spec.options) or None)
        except Exception as e:  # noqa: BLE001 - anything triton.compile raises means it does not compile
            # CompilationError mostly; triton 3.x raises RuntimeError for a non-jit function it cannot follow
            raise DSLCompileError(f"{fn_self.fn.__name__} does not compile for sm_90: "
                                  f"{type(e).__name__}: {e}") from e
        self._compiled.add(key)

    @staticmethod
    def is_compile_error(exc: BaseException) -> bool:
        from triton.compiler.errors import CompilationError
        return isinstance(exc, (CompilationError, DSLCompileError))


# -------------------------------------------------------------------------------------------- tilelang

class TileLangAdapter:
    """Counts launches through JITKernel.__call__; a kernel that fails to build on the C target is lowered
    for CUDA sm_90a and compiled with nvcc instead, and reported as unverified (never as correct)."""

    name = "tilelang"

    def __init__(self, backend: str):
        self.backend = backend
        self.log = LaunchLog()
        self.streams = _StreamWatch(backend)
        self.unverified: list[str] = []

    def install(self) -> None:
        from tilelang.jit.kernel import JITKernel

        adapter = self
        original_init = JITKernel.__init__
        original_call = JITKernel.__call__
        self._original_init = original_init

        def init(k_self, func=None, *args, **kwargs):
            if adapter.backend == "cpu":
                # The C target cannot vectorise fp16 (see docs/backends.md); this changes no results.
                kwargs["pass_configs"] = {**(kwargs.get("pass_configs") or {}), "tirx.disable_vectorize": True}
            with dsl_region():
                try:
                    original_init(k_self, func, *args, **kwargs)
                except Exception as e:
                    if adapter.backend == "cpu" and func is not None and not kwargs.get("from_database"):
                        adapter._try_cuda(func, kwargs, e)
                    raise DSLCompileError(f"TileLang kernel failed to compile: {type(e).__name__}: {e}") from e
                k_self._kg_programs = _tilelang_programs(func)

        def call(k_self, *args, **kwargs):
            _check_args("TileLang", args, kwargs)
            with dsl_region():
                adapter.streams.check(adapter.log)
                try:
                    result = original_call(k_self, *args, **kwargs)
                except BaseException:
                    with adapter.log.lock:
                        adapter.log.failed += 1
                    raise
            adapter.log.record(getattr(k_self, "_kg_programs", 0), _tensor_bytes(args, kwargs, result))
            return result

        JITKernel.__init__ = init
        JITKernel.__call__ = call
        # The kernel cache (tilelang.compile -> cached) reads and writes its own files: DSL machinery too.
        tjit = sys.modules["tilelang.jit"]
        for module in (tjit, sys.modules.get("tilelang.cache")):
            original_cached = getattr(module, "cached", None) if module is not None else None
            if original_cached is not None:
                def cached(*args, _original=original_cached, **kwargs):
                    with dsl_region():
                        return _original(*args, **kwargs)
                module.cached = cached

    def _try_cuda(self, func, kwargs, c_error: Exception) -> None:
        from tilelang.jit.kernel import JITKernel
        cuda_kwargs = {k: v for k, v in kwargs.items() if k in ("out_idx", "pass_configs", "compile_flags")}
        try:
            self._original_init(JITKernel.__new__(JITKernel), func, target={"kind": "cuda", "arch": "sm_90a"},
                                execution_backend="tvm_ffi", **cuda_kwargs)
        except Exception as e:
            raise DSLCompileError(f"TileLang kernel compiles neither for the C target ({type(c_error).__name__}: "
                                  f"{_first_line(c_error)}) nor for CUDA sm_90a ({type(e).__name__}: "
                                  f"{_first_line(e)})") from e
        raise KernelUnverified(
            f"the TileLang kernel does not lower to the C target ({type(c_error).__name__}: "
            f"{_first_line(c_error)}); it was lowered for CUDA sm_90a and compiled with nvcc instead, "
            "so it builds for the H200 but its correctness is unverified on the cpu backend")

    @staticmethod
    def is_compile_error(exc: BaseException) -> bool:
        return isinstance(exc, DSLCompileError)



def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[-1][:300] if text else type(e).__name__


def _tilelang_programs(func) -> int:
    """Blocks launched: the product of the blockIdx extents bound in the prim_func (0 when dynamic)."""
    try:
        from tvm import tir
        extents = {}

        def visit(node):
            if isinstance(node, tir.AttrStmt) and node.attr_key == "thread_extent":
                tag = node.node.thread_tag
                if tag.startswith("blockIdx") and isinstance(node.value, tir.IntImm):
                    extents[tag] = int(node.value)

        tir.stmt_functor.post_order_visit(func.body, visit)
        return math.prod(extents.values()) if extents else 0
    except Exception:  # noqa: BLE001 - a diagnosis aid, never a reason to fail
        return 0


def make_adapter(dsl: str, backend: str, compile_only: bool = False):
    if dsl == "triton":
        return TritonAdapter(interpret=backend == "cpu" and not compile_only, compile_only=compile_only,
                             backend=backend)
    if dsl == "tilelang":
        return TileLangAdapter(backend)
    raise ValueError(dsl)
