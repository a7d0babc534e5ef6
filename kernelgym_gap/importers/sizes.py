"""A problem file's sizes, found in its source and set by re-running its module-level assignments.

A KernelBench problem writes its sizes as module-level literals (`batch_size = 16`, `input_shape = (32768,)`)
and derives others from them (`bias_shape = (out_features, 1, 1)`, `hidden = 4 * dim`). A size is a literal
int, or one element of a literal tuple of ints (named `input_shape[0]`), that get_inputs() or
get_init_inputs() read, directly or through derived assignments. A shape sets sizes by rewriting those
literals in the module's syntax tree before it runs, so every derived global is recomputed from them:
setting the attribute after the module ran left `bias_shape` at its original value (issue 36: 12 problems
refused as "over the cpu budget" because their bias stayed full size).
"""
from __future__ import annotations

import ast
import re

_ELEMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\[(\d+)\]$")


_OPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
        ast.FloorDiv: lambda a, b: a // b if b else None, ast.LShift: lambda a, b: a << b if 0 <= b < 64 else None,
        ast.Pow: lambda a, b: a ** b if 0 <= b < 64 and abs(a) < 1 << 16 else None}


def _int_literal(node) -> int | None:
    """An int written as a literal or as arithmetic on literals (`N = 2048 * 2`, `1 << 14`); None else."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _int_literal(node.operand)
        return None if v is None else (-v if isinstance(node.op, ast.USub) else v)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        a, b = _int_literal(node.left), _int_literal(node.right)
        if a is not None and b is not None:
            v = _OPS[type(node.op)](a, b)
            return v if isinstance(v, int) and abs(v) < 1 << 62 else None
    return None


def _literal_ints(node) -> list[int] | None:
    """The values of a literal int, or of a literal tuple/list of ints; None for anything else."""
    v = _int_literal(node)
    if v is not None:
        return [v]
    if isinstance(node, (ast.Tuple, ast.List)) and node.elts:
        vals = [_int_literal(e) for e in node.elts]
        if all(x is not None for x in vals):
            return vals
    return None


# a mixed tuple's literal counts as a size only above this: `(out_channels, 1, 1)`'s ones are broadcast
# markers and `(batch_size, 3, 224, 224)`'s 3 is a channel count its model's layers are built for; its 224s
# are the image's sides (level3 9_ResNet18, refused as over the cpu budget while they could not shrink)
MIXED_TUPLE_MIN = 9


def _tuple_sizes(node) -> dict[int, int] | None:
    """{element index: value} of the sizes a literal tuple/list holds: every element of an all-literal one;
    of a tuple mixing names and literals (`(batch_size, 3, 224, 224)`), its literals of at least
    MIXED_TUPLE_MIN. None where there are none, or `node` is not a tuple/list."""
    if not isinstance(node, (ast.Tuple, ast.List)) or not node.elts:
        return None
    vals = [_int_literal(e) for e in node.elts]
    if all(v is not None for v in vals):
        return dict(enumerate(vals))
    mixed = {i: v for i, v in enumerate(vals) if v is not None and v >= MIXED_TUPLE_MIN}
    return mixed or None


def _pairs(stmt) -> list[tuple[str, ast.expr]] | None:
    """(name, value) of a top-level assignment to plain names: `a = v`, `a = b = v`, `a: int = v`, and
    `a, b = 1, 2` (element by element); None for any other statement."""
    if isinstance(stmt, ast.Assign):
        if all(isinstance(t, ast.Name) for t in stmt.targets):
            return [(t.id, stmt.value) for t in stmt.targets]
        if (len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Tuple)
                and all(isinstance(e, ast.Name) for e in stmt.targets[0].elts)
                and isinstance(stmt.value, ast.Tuple) and len(stmt.value.elts) == len(stmt.targets[0].elts)
                and all(_literal_ints(v) is not None for v in stmt.value.elts)):
            return [(t.id, v) for t, v in zip(stmt.targets[0].elts, stmt.value.elts)]
    elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
        return [(stmt.target.id, stmt.value)]
    return None


def _assignments(tree: ast.Module):
    """([name], value node, statement) of each top-level assignment to plain names."""
    for stmt in tree.body:
        for name, value in _pairs(stmt) or ():
            yield [name], value, stmt


def _names_in(node) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _functions_read(tree: ast.Module, names=("get_inputs", "get_init_inputs")) -> set[str]:
    read = set()
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name in names:
            read |= _names_in(stmt)
    return read


def find_sizes(source: str) -> dict[str, int]:
    """The problem's sizes in source order: {name or name[i]: value}. Only literals reached from get_inputs()
    or get_init_inputs() (through any chain of derived module-level assignments) count; the last assignment
    of a name wins, as when the module runs."""
    tree = ast.parse(source)
    assigns = list(_assignments(tree))
    needed = _functions_read(tree)
    changed = True
    while changed:                      # close over derived globals: hidden = 4 * dim reaches dim
        changed = False
        for targets, value, _ in assigns:
            if set(targets) & needed:
                new = _names_in(value) - needed
                if new:
                    needed |= new
                    changed = True
    last: dict[str, int | dict[int, int] | None] = {}
    for targets, value, _ in assigns:
        for t in targets:
            last[t] = _tuple_sizes(value) if isinstance(value, (ast.Tuple, ast.List)) else _int_literal(value)
    sizes: dict[str, int] = {}
    seen: set[str] = set()
    for targets, value, _ in assigns:
        for t in targets:
            if t not in needed or t in seen or last.get(t) is None:
                continue
            seen.add(t)
            vals = last[t]
            if isinstance(vals, dict):
                for i, v in vals.items():
                    sizes[f"{t}[{i}]"] = v
            else:
                sizes[t] = vals
    return sizes


def _split(sizes: dict[str, int]) -> tuple[dict[str, int], dict[str, dict[int, int]]]:
    plain, elements = {}, {}
    for k, v in sizes.items():
        m = _ELEMENT.match(k)
        if m:
            elements.setdefault(m.group(1), {})[int(m.group(2))] = int(v)
        else:
            plain[k] = int(v)
    return plain, elements


class _Setter(ast.NodeTransformer):
    """Rewrites the literal of each size assignment to the shape's value (the last assignment of a name, so
    an earlier one a later literal overrides is left as the module would leave it)."""

    def __init__(self, plain, elements, last_stmt):
        self.plain, self.elements, self.last_stmt = plain, elements, last_stmt
        self.done: set[str] = set()

    def _value_for(self, name: str, value):
        if name in self.plain and _int_literal(value) is not None:
            self.done.add(name)
            return ast.Constant(self.plain[name])
        if name in self.elements and _tuple_sizes(value):
            # the sizes' literals rewritten, every other element (a name, a small literal) kept as written
            elts = [ast.Constant(self.elements[name][i]) if i in self.elements[name] else e
                    for i, e in enumerate(value.elts)]
            self.done.add(name)
            return type(value)(elts=elts, ctx=ast.Load())
        return None

    def rewrite(self, tree: ast.Module) -> ast.Module:
        body = []
        for stmt in tree.body:
            pairs = _pairs(stmt) or []
            mine = {t for t, _ in pairs if self.last_stmt.get(t) is stmt and (t in self.plain or t in self.elements)}
            if not mine:
                body.append(stmt)
                continue
            # one assignment per name (`M = N = 2048`, `d, h, w = 24, 48, 48`), so each takes its own value
            for t, value in pairs:
                new = self._value_for(t, value) if t in mine else None
                body.append(ast.copy_location(
                    ast.Assign(targets=[ast.Name(t, ast.Store())], value=new or value), stmt))
        tree.body = body
        return ast.fix_missing_locations(tree)


def compile_with_sizes(source: str, filename: str, sizes: dict[str, int] | None):
    """The module's code with `sizes` written into its size literals (derived globals then follow them).
    Returns (code, sizes that had no literal site: the caller sets those as attributes after the run)."""
    tree = ast.parse(source, filename)
    if not sizes:
        return compile(tree, filename, "exec"), {}
    plain, elements = _split(sizes)
    last_stmt = {}
    for targets, _, stmt in _assignments(tree):
        for t in targets:
            last_stmt[t] = stmt
    setter = _Setter(plain, elements, last_stmt)
    tree = setter.rewrite(tree)
    rest = {k: v for k, v in plain.items() if k not in setter.done}
    missing = [k for k in elements if k not in setter.done]
    if missing:
        raise ValueError(f"no literal tuple to set for {missing}")
    return compile(tree, filename, "exec"), rest
