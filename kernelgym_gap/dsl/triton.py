"""The Triton adapter: counts launches through JITFunction.run / InterpretedFunction.run (triton 3.6 and 3.7
alike); on the cpu backend runs the interpreter, and in the compile probe compiles for sm_90 instead."""
from __future__ import annotations

import gc
import hashlib
import inspect
import math

from kernelgym_gap.core.dsls import DSLS
from kernelgym_gap.dsl.watch import WATCH, dsl_region, user_callback
from kernelgym_gap.dsl.base import DSLAdapter, DSLCompileError, LaunchLog, StreamWatch, check_args, tensor_bytes

_TORCH_TO_TRITON = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float64": "fp64",
                    "int32": "i32", "int64": "i64", "int16": "i16", "int8": "i8", "uint8": "u8", "bool": "i1",
                    "float8_e4m3fn": "fp8e4nv", "float8_e5m2": "fp8e5"}      # issue 34's low-bit tasks


def compile_error_summary(e: BaseException) -> str:
    """Triton's own words for why a kernel does not compile, on one line: the compiler's message (the
    innermost one, for an error inside a called @jit function) and the kernel line it points at, instead
    of the 12-line source excerpt CompilationError prints."""
    node, src = getattr(e, "node", None), getattr(e, "src", None)
    message = getattr(e, "error_message", None)
    if message is None or not hasattr(e, "src"):
        lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
        return (lines[-1] if lines else type(e).__name__)[:300]
    lines = [ln.strip() for ln in str(message).strip().splitlines() if ln.strip()]
    text = (lines[-1] if lines else type(e).__name__)[:300]
    lineno = getattr(node, "lineno", None)
    if src and lineno:
        src_lines = src.split("\n")
        if 0 < lineno <= len(src_lines):
            text += f" (line {lineno} of the kernel: {' '.join(src_lines[lineno - 1].split())[:120]})"
    return text


def _grid_programs(grid) -> int:
    if isinstance(grid, int):
        return grid
    return math.prod(int(g) for g in tuple(grid)[:3]) if grid else 1


class TritonAdapter(DSLAdapter):
    """Counts launches through JITFunction.run / InterpretedFunction.run (triton 3.6 and 3.7 alike).

    In `compile_only` mode (the cpu backend's compile probe, a child run without the interpreter) a launch
    compiles the kernel's specialization for sm_90 instead of running it, and autotuned kernels compile
    every config: the interpreter alone would accept kernels that cannot compile for the GPU."""

    info = DSLS["triton"]

    def __init__(self, interpret: bool, compile_only: bool = False, backend: str = "cpu"):
        self.interpret = interpret
        self.compile_only = compile_only
        self.log = LaunchLog()
        self.streams = StreamWatch(backend)
        self._compiled: set = set()
        self._sources: dict = {}        # kernel function -> sha256 of its source

    # -- class level ----------------------------------------------------------------------------------------
    @classmethod
    def for_backend(cls, backend: str, compile_only: bool = False) -> TritonAdapter:
        return cls(interpret=backend == "cpu" and not compile_only, compile_only=compile_only, backend=backend)

    @classmethod
    def preimport(cls) -> None:
        import triton  # noqa: F401

    @classmethod
    def versions(cls) -> dict[str, str]:
        import triton
        return {"triton": triton.__version__}

    @staticmethod
    def is_compile_error(exc: BaseException) -> bool:
        from triton.compiler.errors import CompilationError
        return isinstance(exc, (CompilationError, DSLCompileError))

    # -- the launch path ------------------------------------------------------------------------------------
    def install(self) -> None:
        import triton.runtime.jit as jit
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
            cls.run = self._wrap_run(cls.run)
        self._wrap_compile(jit.JITFunction)
        self._wrap_autotuner()

    def _wrap_run(self, original):
        adapter = self

        def run(fn_self, *args, grid, warmup, _original=original, **kwargs):
            check_args("Triton", args, kwargs)
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
            adapter.log.record(seen[-1] if seen else 0, tensor_bytes(args, kwargs))
            return result

        return run

    def _wrap_compile(self, cls) -> None:
        """A kernel's compilation (JITFunction._do_compile, triton 3.6 and 3.7: a cache miss in run, before the
        launch) inside `compiling()`. Without that method (another triton), compiles run as they are."""
        original = getattr(cls, "_do_compile", None)
        if original is None:
            return
        adapter = self

        def _do_compile(fn_self, *args, _original=original, **kwargs):
            with adapter.compiling():
                return _original(fn_self, *args, **kwargs)

        cls._do_compile = _do_compile

    def _wrap_autotuner(self) -> None:
        from triton.runtime.autotuner import Autotuner
        adapter = self
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

    # -- specializations and the compile probe --------------------------------------------------------------
    def _specialization(self, fn_self, args, kwargs):
        """The launch as a KernelSpec (argument types, constexpr values, options), or None with a note when
        an argument has a type the probe cannot name."""
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
            kind = self._argument_type(params[name].annotation, value)
            if kind is None:
                self.log.notes.add(f"compile probe skipped {fn.__name__}: argument {name} is a "
                                   f"{type(value).__name__}")
                return None, bound
            signature[name] = kind
            if kind != "constexpr":
                continue
            if value is None or type(value) in (bool, int, float, str):
                constexprs[name] = value
            else:               # a tl.dtype, a function: compared by repr, not carried to another process
                constexprs[name], exact = f"repr:{value!r}", False
        spec = KernelSpec(module=getattr(fn, "__module__", "?"), qualname=getattr(fn, "__qualname__", "?"),
                          source_sha256=self.source_sha256(fn), signature=signature, constexprs=constexprs,
                          options=options, exact=exact)
        return spec, bound

    @staticmethod
    def _argument_type(annotation, value) -> str | None:
        """A kernel argument's type as triton.compile names it in a signature; None when it cannot be named."""
        import torch
        ann = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
        if "constexpr" in ann or value is None:
            return "constexpr"
        if isinstance(value, torch.Tensor):
            return "*" + _TORCH_TO_TRITON[str(value.dtype).removeprefix("torch.")]
        if isinstance(value, bool):
            return "i1"
        if isinstance(value, int):
            return "i32" if -2**31 <= value < 2**31 else "i64"
        if isinstance(value, float):
            return "fp32"
        return None

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
                                  f"{type(e).__name__}: {compile_error_summary(e)}") from e
        self._compiled.add(key)

    @staticmethod
    def live_kernels() -> list:
        """Every JITFunction alive in this process (kernels made inside functions or shadowed included)."""
        from triton.runtime.jit import JITFunction
        return [obj for obj in gc.get_objects() if isinstance(obj, JITFunction)]

    # -- what the integrity snapshots cover -------------------------------------------------------------------
    def watched(self) -> tuple[list, list]:
        import triton.runtime.jit as jit
        from triton.runtime.autotuner import Autotuner, Heuristics
        classes = [jit.JITFunction, Autotuner, Heuristics]
        try:
            from triton.runtime.interpreter import GridExecutor, InterpretedFunction
            classes += [InterpretedFunction, GridExecutor]
        except ImportError:
            pass
        return [jit], classes

    def hook_reader(self):
        import triton
        knobs = getattr(getattr(triton, "knobs", None), "runtime", None)   # the object at the snapshot

        def read() -> dict:
            state = {}
            if knobs is None:
                return state
            for name in ("launch_enter_hook", "launch_exit_hook", "kernel_load_start_hook",
                         "kernel_load_end_hook"):
                chain = getattr(knobs, name, None)
                state[f"triton.knobs.runtime.{name}"] = tuple(getattr(chain, "calls", ()) or ())
            for name in ("jit_cache_hook", "jit_post_compile_hook", "add_stages_inspection_hook"):
                state[f"triton.knobs.runtime.{name}"] = getattr(knobs, name, None)
            return state

        return read
