"""The DSL adapters, one module per DSL behind one protocol (base.DSLAdapter): what the child does with
Triton and TileLang. The DSLs' names and static rules (the gate's, the compile probe's) are the registry's,
core/dsls.py, which the trusted side reads instead of this package."""
from __future__ import annotations

from kernelgym_gap.core.dsls import NAMES, info

from kernelgym_gap.dsl.base import DSLAdapter, DSLCompileError, KernelUnverified, LaunchLog
from kernelgym_gap.dsl.tilelang import TileLangAdapter
from kernelgym_gap.dsl.triton import TritonAdapter

ADAPTERS: dict[str, type[DSLAdapter]] = {a.info.name: a for a in (TritonAdapter, TileLangAdapter)}
# every DSL of the registry has its adapter, and no adapter stands outside it
assert tuple(ADAPTERS) == NAMES, (tuple(ADAPTERS), NAMES)


def adapter_class(dsl: str) -> type[DSLAdapter]:
    """The adapter class of a DSL (its class-level rules need no DSL imported); UnknownChoiceError (a
    ValueError) for another name."""
    return ADAPTERS[info(dsl).name]


def make_adapter(dsl: str, backend: str, compile_only: bool = False) -> DSLAdapter:
    """The adapter a child uses for a job (`compile_only`: a compile probe mode, launches compile for sm_90)."""
    return adapter_class(dsl).for_backend(backend, compile_only=compile_only)


__all__ = ["ADAPTERS", "DSLAdapter", "DSLCompileError", "KernelUnverified", "LaunchLog", "TileLangAdapter",
           "TritonAdapter", "adapter_class", "make_adapter"]
