"""The DSL adapters, one module per DSL behind one protocol (base.DSLAdapter): what the harness knows about
Triton and TileLang. Safe to import in the parent: no DSL is imported until an adapter's methods run."""
from __future__ import annotations

from kernelgym_gap.dsl.base import DSLAdapter, DSLCompileError, KernelUnverified, LaunchLog
from kernelgym_gap.dsl.tilelang import TileLangAdapter
from kernelgym_gap.dsl.triton import TritonAdapter

ADAPTERS: dict[str, type[DSLAdapter]] = {"triton": TritonAdapter, "tilelang": TileLangAdapter}


def adapter_class(dsl: str) -> type[DSLAdapter]:
    """The adapter class of a DSL (its class-level rules need no DSL imported); ValueError for another name."""
    try:
        return ADAPTERS[dsl]
    except KeyError:
        raise ValueError(dsl) from None


def make_adapter(dsl: str, backend: str, compile_only: bool = False) -> DSLAdapter:
    """The adapter a child uses for a job (`compile_only`: a compile probe mode, launches compile for sm_90)."""
    return adapter_class(dsl).for_backend(backend, compile_only=compile_only)


def needs_compile_probe(dsl: str, backend: str) -> bool:
    """Whether an evaluation of `dsl` on `backend` also runs the compile probe (today: Triton on cpu)."""
    return adapter_class(dsl).needs_compile_probe(backend)


__all__ = ["ADAPTERS", "DSLAdapter", "DSLCompileError", "KernelUnverified", "LaunchLog", "TileLangAdapter",
           "TritonAdapter", "adapter_class", "make_adapter", "needs_compile_probe"]
