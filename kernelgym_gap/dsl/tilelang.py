"""The TileLang adapter: counts launches through JITKernel.__call__; on the cpu backend builds for the C
target, and a kernel that fails to build there is lowered for CUDA sm_90a and compiled with nvcc instead,
then reported as unverified (never as correct)."""
from __future__ import annotations

import math
import sys

from kernelgym_gap.core.dsls import DSLS
from kernelgym_gap.dsl.watch import dsl_region
from kernelgym_gap.dsl.base import (DSLAdapter, DSLCompileError, KernelUnverified, LaunchLog, StreamWatch,
                                    check_args, tensor_bytes)


def _last_line(e: BaseException) -> str:
    """The last line of an exception's text: a TVM/TileLang error's text is its C++ traceback, then the
    message, so the tail is the useful line."""
    text = str(e).strip().splitlines()
    return text[-1][:300] if text else type(e).__name__


def _tilelang_programs(func) -> int:
    """Blocks launched: the product of the blockIdx extents bound in the prim_func (0 when dynamic).

    Where the blocks are bound depends on the version: TileLang 0.1.15's T.Kernel is a `For` over a
    thread_binding to blockIdx.x in `tvm.tirx`; older ones an AttrStmt "thread_extent" in `tvm.tir`. Reading
    only the old form gave 0 on 0.1.15, so the "too few programs" diagnosis never fired for TileLang."""
    try:
        try:
            from tvm import tirx as tir
        except ImportError:
            from tvm import tir
        extents = {}

        def visit(node):
            if isinstance(node, tir.AttrStmt) and node.attr_key == "thread_extent":
                tag = node.node.thread_tag
                if tag.startswith("blockIdx") and isinstance(node.value, tir.IntImm):
                    extents[tag] = int(node.value)
            binding = getattr(node, "thread_binding", None) if isinstance(node, tir.For) else None
            if binding is not None and binding.thread_tag.startswith("blockIdx") \
                    and isinstance(node.extent, tir.IntImm):
                extents[binding.thread_tag] = int(node.extent)

        tir.stmt_functor.post_order_visit(func.body, visit)
        return math.prod(extents.values()) if extents else 0
    except Exception:  # noqa: BLE001 - a diagnosis aid, never a reason to fail
        return 0


class TileLangAdapter(DSLAdapter):
    """Counts launches through JITKernel.__call__; a kernel that fails to build on the C target is lowered
    for CUDA sm_90a and compiled with nvcc instead, and reported as unverified (never as correct)."""

    info = DSLS["tilelang"]

    def __init__(self, backend: str):
        self.backend = backend
        self.log = LaunchLog()
        self.streams = StreamWatch(backend)
        self.unverified: list[str] = []

    # -- class level ----------------------------------------------------------------------------------------
    @classmethod
    def for_backend(cls, backend: str, compile_only: bool = False) -> TileLangAdapter:
        return cls(backend)         # no compile probe for TileLang (needs_compile_probe is False)

    @classmethod
    def preimport(cls) -> None:
        import tilelang  # noqa: F401
        import triton  # noqa: F401 - versions() reports it

    @classmethod
    def versions(cls) -> dict[str, str]:
        import tilelang
        import triton       # records have always carried triton's version, whatever the DSL
        return {"triton": triton.__version__, "tilelang": getattr(tilelang, "__version__", "?")}

    @staticmethod
    def is_compile_error(exc: BaseException) -> bool:
        return isinstance(exc, DSLCompileError)

    # -- the launch path ------------------------------------------------------------------------------------
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
                    with adapter.compiling():       # the kernel compiles here (CPU work)
                        original_init(k_self, func, *args, **kwargs)
                except Exception as e:
                    if adapter.backend == "cpu" and func is not None and not kwargs.get("from_database"):
                        adapter._try_cuda(func, kwargs, e)
                    raise DSLCompileError(f"TileLang kernel failed to compile: {type(e).__name__}: {e}") from e
                k_self._kg_programs = _tilelang_programs(func)

        def call(k_self, *args, **kwargs):
            check_args("TileLang", args, kwargs)
            with dsl_region():
                adapter.streams.check(adapter.log)
                try:
                    result = original_call(k_self, *args, **kwargs)
                except BaseException:
                    with adapter.log.lock:
                        adapter.log.failed += 1
                    raise
            adapter.log.record(getattr(k_self, "_kg_programs", 0), tensor_bytes(args, kwargs, result))
            return result

        JITKernel.__init__ = init
        JITKernel.__call__ = call
        self._wrap_cache()

    @staticmethod
    def _wrap_cache() -> None:
        """The kernel cache (tilelang.compile -> cached) reads and writes its own files: DSL machinery too."""
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
                                  f"{_last_line(c_error)}) nor for CUDA sm_90a ({type(e).__name__}: "
                                  f"{_last_line(e)})") from e
        raise KernelUnverified(
            "the TileLang kernel compiles for the GPU (CUDA sm_90a) but not for the cpu backend's C target, so it "
            "was not run: correctness unverified here, not a failure (--backend cuda checks it)\n"
            f"C target: {type(c_error).__name__}: {_last_line(c_error)[:200]}")

    # -- what the integrity snapshots cover -------------------------------------------------------------------
    def watched(self) -> tuple[list, list]:
        from tilelang.jit.kernel import JITKernel
        return [sys.modules["tilelang.jit"]], [JITKernel]   # (the attribute tilelang.jit is the decorator)
