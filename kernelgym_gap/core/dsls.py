"""The registry of DSLs: every list of DSL names in the package reads `NAMES` (or `DSLS`) here, and the
trusted side reads a DSL's static rules here, so that it needs nothing of `kernelgym_gap.dsl` (the adapters,
which run inside the untrusted child).

A DSL's entry says what can be known of it without importing it: the import root a submission must use, the
decorators that make a function a kernel (the gate's "written in this DSL"), the backends on which an
evaluation also runs the compile probe, and the distributions whose versions a record and the cache key
carry. The adapter classes (`kernelgym_gap/dsl/`) take these from their entry;
tests/test_dsl_registry.py checks that the adapters and this registry name the same DSLs and agree."""
from __future__ import annotations

import ast
import dataclasses

from kernelgym_gap.core.errors import UnknownChoiceError


@dataclasses.dataclass(frozen=True)
class DSLInfo:
    name: str
    module: str                              # the import root a submission must use
    kernel_decorators: frozenset             # dotted-name tails that make a function a kernel
    compile_probe_on: frozenset = frozenset()    # backends whose evaluations also run the compile probe
    distributions: tuple[str, ...] = ()      # packages whose versions identify a result (records, cache key)

    def looks_like(self, tree: ast.Module) -> bool:
        """The gate's rule: the source imports the DSL and defines a kernel with one of its decorators."""
        return self.module in imported_roots(tree) and has_decorated_function(tree, self.kernel_decorators)

    def needs_compile_probe(self, backend: str) -> bool:
        return backend in self.compile_probe_on


DEFAULT = "triton"
DSLS: dict[str, DSLInfo] = {
    # the interpreter (cpu) accepts kernels that do not compile for a GPU: a probe compiles them for sm_90
    "triton": DSLInfo("triton", "triton",
                      frozenset({("triton", "jit"), ("jit",), ("triton", "autotune"), ("triton", "heuristics")}),
                      compile_probe_on=frozenset({"cpu"}), distributions=("triton",)),
    # records have always carried triton's version, whatever the DSL
    "tilelang": DSLInfo("tilelang", "tilelang",
                        frozenset({("T", "prim_func"), ("prim_func",), ("tilelang", "jit"),
                                   ("tilelang", "language", "prim_func"), ("tl", "jit"), ("jit",)}),
                        distributions=("triton", "tilelang")),
}
NAMES: tuple[str, ...] = tuple(DSLS)


def info(dsl: str) -> DSLInfo:
    """The registry's entry for `dsl`; UnknownChoiceError (a ValueError) for another name."""
    try:
        return DSLS[dsl]
    except (KeyError, TypeError):       # TypeError: an unhashable value from a JSON body, say
        raise UnknownChoiceError("dsl", dsl if isinstance(dsl, str) else repr(dsl), NAMES) from None


def needs_compile_probe(dsl: str, backend: str) -> bool:
    """Whether an evaluation of `dsl` on `backend` also runs the compile probe (today: Triton on cpu)."""
    return info(dsl).needs_compile_probe(backend)


# ------------------------------------------------------------------------- reading a source (the gate)

def dotted(node: ast.AST) -> tuple[str, ...]:
    """A decorator's dotted name (`triton.jit`, `T.prim_func(...)` -> ("T", "prim_func"))."""
    if isinstance(node, ast.Call):
        return dotted(node.func)
    if isinstance(node, ast.Attribute):
        return dotted(node.value) + (node.attr,)
    if isinstance(node, ast.Name):
        return (node.id,)
    return ()


def imported_roots(tree: ast.Module) -> set[str]:
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def has_decorated_function(tree: ast.Module, wanted) -> bool:
    """Whether a function carries one of the `wanted` decorators, matched on the dotted name's last parts."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for dec in node.decorator_list:
                name = dotted(dec)
                if any(name[-len(w):] == w for w in wanted if len(name) >= len(w)):
                    return True
    return False
