"""The package's shape, checked from its source: no import cycles between modules (function-level imports
included), no module importing another module's private names, no module far over its size aim, and
`core/` importing no other subpackage (it is the bottom layer). docs/architecture.md describes it."""
import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "kernelgym_gap"
MAX_LINES = 450          # the aim is ~400; past this a module has more than one concern


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def _imports(name: str, path: Path) -> list[tuple[str, list[str]]]:
    """(imported module, names taken from it) for every import in the file, at any depth."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name, []) for a in node.names if a.name.startswith("kernelgym_gap")]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            if not base.startswith("kernelgym_gap"):
                continue
            names = [a.name for a in node.names]
            # `from pkg import module` names a module, not a symbol
            mods = [f"{base}.{n}" for n in names if f"{base}.{n}" in MODULES]
            found += [(m, []) for m in mods]
            symbols = [n for n in names if f"{base}.{n}" not in MODULES]
            if symbols:
                found.append((base, symbols))
    return found


GRAPH = {name: {m for m, _ in _imports(name, path) if m in MODULES and m != name}
         for name, path in MODULES.items()}


def _cycles() -> list[list[str]]:
    seen, stack, on_stack, cycles = set(), [], set(), []

    def visit(n):
        seen.add(n)
        stack.append(n)
        on_stack.add(n)
        for m in sorted(GRAPH[n]):
            # importing a package runs its __init__, which may import back: only module -> module edges count
            if m in on_stack:
                cycles.append(stack[stack.index(m):] + [m])
            elif m not in seen:
                visit(m)
        stack.pop()
        on_stack.discard(n)

    for n in sorted(GRAPH):
        if n not in seen:
            visit(n)
    return [c for c in cycles if not any(MODULES[x].name == "__init__.py" for x in c[:-1])]


def test_no_import_cycles():
    assert _cycles() == []


def test_no_private_names_imported_across_modules():
    offenders = [f"{name} imports {sym} from {mod}" for name, path in MODULES.items()
                 for mod, syms in _imports(name, path) for sym in syms
                 if sym.startswith("_") and not sym.startswith("__") and mod != name]
    assert offenders == []


@pytest.mark.parametrize("name", sorted(MODULES))
def test_module_size(name):
    lines = len(MODULES[name].read_text().splitlines())
    assert lines <= MAX_LINES, f"{name} has {lines} lines"


def test_core_is_the_bottom_layer():
    upward = sorted(f"{n} -> {m}" for n, deps in GRAPH.items() if n.startswith("kernelgym_gap.core")
                    for m in deps if not m.startswith("kernelgym_gap.core") and m != "kernelgym_gap")
    assert upward == []
