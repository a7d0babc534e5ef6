"""`import kernelbench --keep-modelnew`: a problem file's own `class ModelNew` kept as its task's solution.

KernelBench's solution files (a model's or a person's answer) are the problem file plus a `ModelNew`. Kept,
the task ships that file as a reference solution, so `kernelgym-gap bench --agent replay` replays it and
scores it with this harness's reward beside KernelBench's own fast_p. Read from the syntax tree only (this
runs in the trusted parent: nothing of the file runs here). A ModelNew is kept only in a DSL this harness
runs (its imports name triton or tilelang); a CUDA `load_inline` one is reported as not kept, with why.
"""
from __future__ import annotations

import ast

from kernelgym_gap.core.task import DSLS

SOLUTION_FILE = "modelnew.py"


def _imported_roots(tree: ast.Module) -> set[str]:
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            roots.add(node.module.split(".")[0])
    return roots


def solution_of(source: bytes) -> dict | None:
    """None when the file defines no top-level `class ModelNew`; else the Solution's fields (dsl set), or
    {"why": ...} when it cannot be kept."""
    try:
        tree = ast.parse(source.decode("utf-8"))
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return None
    if not any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in tree.body):
        return None
    dsls = [d for d in DSLS if d in _imported_roots(tree)]
    if len(dsls) != 1:
        why = ("it imports neither triton nor tilelang (a CUDA load_inline kernel is not a DSL this harness "
               "runs)" if not dsls else f"it imports more than one DSL ({', '.join(dsls)})")
        return {"why": why}
    return {"file": SOLUTION_FILE, "dsl": dsls[0], "kind": "optimized",
            "note": "the problem file's own ModelNew (import kernelbench --keep-modelnew)"}
