"""The static gate: checks on the submitted source made in the parent without running any of it."""
from __future__ import annotations

import ast
import dataclasses
import logging
import pickle
import re
import subprocess
import sys

from kernelgym_gap.core.status import Status
from kernelgym_gap.core.dsls import DSLS, info

log = logging.getLogger(__name__)

MAX_SOURCE_BYTES = 256 * 1024


@dataclasses.dataclass(frozen=True)
class GateResult:
    status: Status
    message: str = ""
    source: str | None = None   # the decoded text when the gate passed

    @property
    def passed(self) -> bool:
        return self.status is Status.OK


def _defines(tree: ast.Module, name: str) -> bool:
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return True
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            return True
        if isinstance(node, (ast.Import, ast.ImportFrom)) and any((a.asname or a.name) == name for a in node.names):
            return True
    return False


def _parse(text: str) -> ast.Module:
    """ast.parse, robust to CPython 3.11's "AST constructor recursion depth mismatch" SystemError (a parser
    bug, gh-106905, seen once in a long test process): retried once, then parsed in a fresh interpreter."""
    try:
        return ast.parse(text, filename="submission.py")
    except SystemError:
        pass
    try:
        return ast.parse(text, filename="submission.py")
    except SystemError:
        log.warning("ast.parse raised SystemError twice; parsing in a fresh interpreter")
    code = ("import ast, pickle, sys\n"
            "try:\n    out = ('ok', ast.parse(sys.stdin.read(), filename='submission.py'))\n"
            "except SyntaxError as e:\n    out = ('syntax', (e.msg, e.lineno))\n"
            "except (RecursionError, MemoryError):\n    out = ('deep', None)\n"
            "sys.stdout.buffer.write(pickle.dumps(out))\n")
    proc = subprocess.run([sys.executable, "-I", "-c", code], input=text.encode("utf-8"), capture_output=True,
                          timeout=60)
    kind, value = pickle.loads(proc.stdout)     # our own interpreter's output: AST nodes and constants only
    if kind == "syntax":
        err = SyntaxError(value[0])
        err.lineno = value[1]
        raise err
    if kind == "deep":
        raise RecursionError("too deep")
    return value


_CODE_LINE = re.compile(r"^[ \t]*(?:(?:def|class|import|from)\b|@)", re.M)


def _prose_hint(text: str) -> str:
    """For a source with no def, class, import or decorator at all: most likely a model's reply with no code
    block (completions.extract_code passes such a reply on as it is), so the message says so."""
    if _CODE_LINE.search(text):
        return ""
    return (" (no def, class or import in it: prose rather than a kernel file? From a model's reply, the "
            "last ```python block is taken, and this one has none)")


def check_source(raw: bytes | str, entry_point: str, dsl: str, max_bytes: int = MAX_SOURCE_BYTES,
                 module_entry_point: str | None = None) -> GateResult:
    """module_entry_point: a class name accepted in place of the entry point (an imported KernelBench task's
    `ModelNew`)."""
    # surrogatepass: a str with lone surrogates becomes bytes that fail the UTF-8 decode below
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    if len(data) > max_bytes:
        return GateResult(Status.SOURCE_TOO_LARGE, f"source is {len(data)} bytes; the limit is {max_bytes}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        return GateResult(Status.SOURCE_NOT_UTF8, f"source is not valid UTF-8: {e}")
    if "\x00" in text:
        return GateResult(Status.SOURCE_NOT_UTF8, "source contains a NUL character")
    try:
        tree = _parse(text)
    except SyntaxError as e:
        return GateResult(Status.SYNTAX_ERROR, f"line {e.lineno}: {e.msg}{_prose_hint(text)}")
    except (RecursionError, MemoryError):
        return GateResult(Status.SYNTAX_ERROR, "the source nests too deeply for the parser (e.g. a chain of "
                                               "thousands of operators)")
    if not _defines(tree, entry_point) and not (module_entry_point and _defines(tree, module_entry_point)):
        also = f" or class {module_entry_point!r}" if module_entry_point else ""
        return GateResult(Status.ENTRY_POINT_MISSING,
                          f"the module defines no top-level {entry_point!r}{also} (the task's entry "
                          f"point){_prose_hint(text)}")
    # each DSL's rule ("imports the DSL and defines a kernel with one of its decorators") is its adapter's
    if not info(dsl).looks_like(tree):
        other = [d for d, entry in DSLS.items() if d != dsl and entry.looks_like(tree)]
        hint = f" (it looks like {other[0]}: pass dsl={other[0]!r}?)" if other else ""
        return GateResult(Status.WRONG_DSL, f"no {dsl} kernel is defined in the source{hint}")
    return GateResult(Status.OK, source=text)
