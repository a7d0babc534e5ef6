"""A search agent: hill-climbs on the reward by rewriting a solution's tunable constants.

It starts from the task's optimized reference solution for the episode's DSL, finds the tunable integer
literals in it with the `ast` module (never by matching text), and proposes neighbours: one constant halved
or doubled (powers of two only, within bounds per kind of constant; pipeline stage counts also step by
one, since 3 is a common depth). The best source by reward is kept (a
tie keeps the incumbent); after each improvement the neighbours of the new best are proposed. When every
single-constant neighbour of the best has been tried it tries pairs, and when those run out it resubmits
the best. After an improvement the moves that repeat it (the same constants, the same direction) are tried
first. Deterministic for a given seed: the seed orders the neighbours.

What counts as tunable (`find_tunables`):
  * keyword arguments with a tunable name: `num_warps=4`, `num_stages=3`, `BLOCK_M=64`, `threads=128`;
  * entries of dict literals keyed by a tunable name: `triton.Config({"BLOCK_M": 128, ...}, ...)`;
  * defaults of parameters with a tunable name: `BLOCK: tl.constexpr = 1024`, `def build(block_M=128)`;
  * literals inside the value assigned to a tunable name: `num_warps = min(max(block // 256, 1), 16)`,
    `BLOCK_N = 1024`;
  * positions of a literal tuple table looped over with tunable targets:
    `for bm, bn, warps in ((128, 64, 4), ...)` where `bm` feeds `"BLOCK_M": bm` and `warps` `num_warps=`.
A name is tunable when it is num_warps / num_stages / num_ctas / threads (and spellings of them), starts
with block/tile/group/split/chunk (any case), or ends in _size; or when it is passed as the value of a
tunable keyword or dict entry (the data flow the tuple-table case needs).
"""
from __future__ import annotations

import ast
import dataclasses
import hashlib
import random
import re
from typing import Any

from kernelgym_gap.core.errors import KernelGymError
from kernelgym_gap.core.registry import TaskRegistry, default_registry

_EXACT = {"num_warps": "warps", "warps": "warps", "nwarps": "warps", "num_stages": "stages", "stages": "stages",
          "nstages": "stages", "num_ctas": "ctas", "threads": "threads", "num_threads": "threads",
          "nthreads": "threads", "threads_per_block": "threads"}
_PREFIX = re.compile(r"^(block|blk|tile|group|split|chunk)", re.IGNORECASE)   # over identifiers only
_BOUNDS = {"warps": (1, 32), "stages": (1, 8), "ctas": (1, 4), "threads": (32, 1024), "size": (1, 1 << 16),
           "embedded": (1, 1 << 16)}


def tunable_kind(name: str) -> str | None:
    """The kind of constant a name holds ("warps", "stages", "ctas", "threads", "size"), or None."""
    low = name.lower()
    if low in _EXACT:
        return _EXACT[low]
    if _PREFIX.match(name) or low.endswith("_size") or low.startswith("size_"):
        return "size"
    return None


def _is_pow2(v: int) -> bool:
    return v >= 1 and v & (v - 1) == 0


@dataclasses.dataclass(frozen=True)
class Site:
    """One tunable integer literal: where it is in the source and what it tunes."""
    name: str             # the tunable it belongs to (keyword, dict key, parameter or assigned name)
    kind: str             # bounds class: warps, stages, ctas, threads, size, embedded
    value: int
    lineno: int
    col: int              # UTF-8 byte offsets, as ast reports them
    end_col: int

    @property
    def key(self) -> tuple[int, int]:
        return (self.lineno, self.col)

    def neighbours(self) -> list[int]:
        lo, hi = _BOUNDS[self.kind]
        if self.kind == "stages":   # pipeline depths are small counts (3 is common): step by one as well
            cands = sorted({self.value - 1, self.value + 1, self.value // 2, self.value * 2})
        else:
            cands = [self.value // 2, self.value * 2]
        return [v for v in cands if lo <= v <= hi and v != self.value
                and (self.kind == "stages" or _is_pow2(v))]

    def describe(self, new: int) -> str:
        return f"{self.name}: {self.value} -> {new} (line {self.lineno})"


def _int_literal(node: ast.AST) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    return None


def _str_key(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _target_names(target: ast.AST) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, ast.Attribute):
        return [target.attr]
    return []


class _Finder:
    def __init__(self, tree: ast.Module):
        self.tree = tree
        self.sites: dict[tuple[int, int], Site] = {}
        self.flows: dict[str, str] = {}    # plain names passed as the value of a tunable -> its kind

    def add(self, node: ast.AST, name: str, kind: str, direct: bool, parent: ast.AST | None = None) -> None:
        v = _int_literal(node)
        if v is None or not (_is_pow2(v) or (direct and kind == "stages" and 1 <= v <= 8)):
            return
        if not direct:
            # Inside an expression a 1 is usually an offset; keep it only as a bound of min()/max().
            if v == 1 and not (isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name)
                               and parent.func.id in ("min", "max")):
                return
            kind = "embedded"
        key = (node.lineno, node.col_offset)
        if key not in self.sites:
            self.sites[key] = Site(name, kind, v, node.lineno, node.col_offset, node.end_col_offset)

    def add_expr(self, expr: ast.AST, name: str, kind: str) -> None:
        """A tunable's value: a literal directly, or the literals inside an expression."""
        if _int_literal(expr) is not None:
            self.add(expr, name, kind, True)
            return
        if isinstance(expr, ast.Name):
            self.flows.setdefault(expr.id, kind)
            return
        for parent in ast.walk(expr):
            for child in ast.iter_child_nodes(parent):
                if isinstance(child, ast.Constant):
                    self.add(child, name, kind, False, parent)

    def run(self) -> list[Site]:
        # Pass 1: keywords, dict entries and parameter defaults; record names that flow into tunables.
        for node in ast.walk(self.tree):
            if isinstance(node, ast.keyword) and node.arg and (kind := tunable_kind(node.arg)):
                self.add_expr(node.value, node.arg, kind)
            elif isinstance(node, ast.Dict):
                for k, v in zip(node.keys, node.values):
                    name = _str_key(k)
                    if name and (kind := tunable_kind(name)):
                        self.add_expr(v, name, kind)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                a = node.args
                positional = a.posonlyargs + a.args
                for arg, default in zip(positional[len(positional) - len(a.defaults):], a.defaults):
                    if kind := tunable_kind(arg.arg):
                        self.add_expr(default, arg.arg, kind)
                for arg, default in zip(a.kwonlyargs, a.kw_defaults):
                    if default is not None and (kind := tunable_kind(arg.arg)):
                        self.add_expr(default, arg.arg, kind)
        # Pass 2: assignments to tunable names (or names that flow into one), and tuple tables.
        for node in ast.walk(self.tree):
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if node.value is None:
                    continue
                for t in targets:
                    if isinstance(t, ast.Tuple) and isinstance(node.value, ast.Tuple) \
                            and len(t.elts) == len(node.value.elts):
                        pairs = [(n, v) for e, v in zip(t.elts, node.value.elts) for n in _target_names(e)]
                    else:
                        pairs = [(n, node.value) for n in _target_names(t)]
                    for name, value in pairs:
                        kind = tunable_kind(name) or self.flows.get(name)
                        if kind:
                            self.add_expr(value, name, kind)
            elif isinstance(node, (ast.For, ast.comprehension)):
                self._table(node.target, node.iter)
        return sorted(self.sites.values(), key=lambda s: s.key)

    def _table(self, target: ast.AST, iterable: ast.AST) -> None:
        if not (isinstance(target, ast.Tuple) and isinstance(iterable, (ast.Tuple, ast.List))):
            return
        names = [e.id if isinstance(e, ast.Name) else None for e in target.elts]
        for row in iterable.elts:
            if not isinstance(row, (ast.Tuple, ast.List)) or len(row.elts) != len(names):
                continue
            for name, cell in zip(names, row.elts):
                kind = name and (tunable_kind(name) or self.flows.get(name))
                if kind:
                    self.add(cell, name, kind, True)


def find_tunables(source: str) -> list[Site]:
    """Every tunable integer literal of a Python source (empty when it does not parse)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    return _Finder(tree).run()


def rewrite(source: str, changes: dict[tuple[int, int], int], sites: list[Site]) -> str:
    """The source with the literals at the given sites replaced; everything else byte for byte."""
    by_key = {s.key: s for s in sites}
    lines = source.encode("utf-8").splitlines(keepends=True)
    for key in sorted(changes, reverse=True):    # right to left, so earlier offsets stay valid
        s = by_key[key]
        line = lines[s.lineno - 1]
        lines[s.lineno - 1] = line[: s.col] + str(int(changes[key])).encode() + line[s.end_col:]
    return b"".join(lines).decode("utf-8")


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


class SearchAgent:
    name = "search"

    def __init__(self, seed: int | None = 0, registry: TaskRegistry | None = None, start_source: str | None = None,
                 start_file: str | None = None, pairs: bool = True, **_ignored):
        self.seed = 0 if seed is None else int(seed)
        self.registry = registry or default_registry()
        if start_file is not None:
            with open(start_file, encoding="utf-8") as f:
                start_source = f.read()
        self.fixed_start = start_source
        self.pairs = pairs
        self.history: list[dict[str, Any]] = []

    # ---- the episode ------------------------------------------------------------------------------
    def reset(self, observation: str, info: dict[str, Any]) -> None:
        task = self.registry.get(info["task"])
        self.rng = random.Random(f"{self.seed}:{task.id}:{info['dsl']}")
        self.start = self.fixed_start if self.fixed_start is not None else self._reference(task, info["dsl"])
        self.sites = find_tunables(self.start)
        self.values = {s.key: s.value for s in self.sites}      # the constants of the best source
        self.best_source, self.best_reward, self.best_values = None, float("-inf"), dict(self.values)
        self.tried: set[str] = set()
        self.queue: list[tuple[dict, str]] = []
        self.pending: tuple[str, dict, str] | None = None       # (source, values, description) in flight
        self.history = []
        self.last_note: str | None = None
        self.momentum: dict[tuple[int, int], bool] = {}        # site -> moved up, in the last improvement
        self._stage = "single"

    @staticmethod
    def _reference(task, dsl: str) -> str:
        sols = [s for s in task.solutions if s.dsl == dsl]
        if not sols:
            raise KernelGymError(f"{task.id} has no reference solution in {dsl} to start the search from "
                                 "(give one with start_file=PATH)")
        best = next((s for s in sols if s.kind == "optimized"), sols[0])
        return task.solution_path(best).read_text()

    def act(self, observation: str, info: dict[str, Any]) -> str:
        if self.pending is not None:
            self._observe(info)
        if self.best_source is None and not self.history:
            return self._submit(self.start, dict(self.values), "start: the reference solution"
                                if self.fixed_start is None else "start: the given solution")
        while True:
            if not self.queue:
                self._refill()
            if not self.queue:
                return self._submit(self.best_source or self.start, dict(self.best_values),
                                    "resubmit the best (no untried neighbour left)")
            values, desc = self.queue.pop(0)
            source = rewrite(self.start, {k: v for k, v in values.items() if v != self.values[k]}, self.sites)
            if _sha(source) not in self.tried:
                return self._submit(source, values, desc)

    def _submit(self, source: str, values: dict, desc: str) -> str:
        self.tried.add(_sha(source))
        self.pending = (source, values, desc)
        self.last_note = desc
        return source

    def _observe(self, info: dict[str, Any]) -> None:
        source, values, desc = self.pending
        self.pending = None
        reward = float(info.get("reward", 0.0) or 0.0)
        improved = reward > self.best_reward
        self.history.append({"step": len(self.history) + 1, "change": desc, "reward": reward,
                             "status": info.get("status"), "improved": improved})
        if improved:
            # The direction each constant moved in: the next round tries the same moves again first.
            self.momentum = {k: (v > self.best_values[k]) for k, v in values.items()
                             if self.best_reward > float("-inf") and v != self.best_values[k]}
            self.best_source, self.best_reward, self.best_values = source, reward, dict(values)
            self.queue = []          # climb from the new best
            self._stage = "single"

    def _refill(self) -> None:
        base = self.best_values
        by_key = {s.key: s for s in self.sites}
        singles = []
        for key, v in base.items():
            s = dataclasses.replace(by_key[key], value=v)
            for nv in s.neighbours():
                singles.append(({**base, key: nv}, s.describe(nv)))
        self.rng.shuffle(singles)
        # Moves that repeat the last improvement's direction go first (a stable sort keeps the seeded order).
        singles.sort(key=lambda c: not any(c[0][k] != base[k] and (c[0][k] > base[k]) == up
                                           for k, up in self.momentum.items()))
        if self._stage == "single":
            self._stage = "pairs" if self.pairs else "done"
            fresh = [c for c in singles if self._untried(c[0])]
            if fresh:
                self.queue = fresh
                return
        if self._stage == "pairs":
            self._stage = "done"
            pairs = []
            for i, (va, da) in enumerate(singles):
                for vb, db in singles[i + 1:]:
                    ka = {k for k in va if va[k] != base[k]}
                    kb = {k for k in vb if vb[k] != base[k]}
                    if ka & kb:
                        continue
                    pairs.append(({**va, **{k: vb[k] for k in kb}}, f"{da}; {db}"))
            self.rng.shuffle(pairs)
            self.queue = [c for c in pairs if self._untried(c[0])]

    def _untried(self, values: dict) -> bool:
        return _sha(rewrite(self.start, {k: v for k, v in values.items() if v != self.values[k]},
                            self.sites)) not in self.tried


def make_agent(**kwargs) -> SearchAgent:
    return SearchAgent(**kwargs)
