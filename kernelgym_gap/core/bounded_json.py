"""JSON from a hostile writer, parsed within bounds: a size and a nesting depth checked before the parser
runs, and every way the parse can fail turned into one exception type.

Why not json.loads alone: its C scanner recurses once per nesting level, so a 100k-deep `[[[[...` (200 kB,
well under any size limit) raises RecursionError, which is not a ValueError and went straight through every
`except ValueError` of the parent (issue 31: `eval --json` exited 1 with a traceback, and a batch lost every
other submission with it). The depth is measured first, on the text itself, in C-speed passes:

  1. strings are cut out (a regex over `"..."` with escapes), so brackets inside strings do not count;
  2. what is left is reduced to its brackets;
  3. each pass removes the innermost `[]` / `{}` pairs; well-formed JSON of depth d is empty after d passes.

Text that is not empty after `max_depth` passes is too deep (or its brackets do not pair up, which JSON
never allows): rejected before json.loads sees it. NaN and Infinity are rejected too (JSON has no such
numbers; a value the parent's own `to_json(allow_nan=False)` could not write back must not get in).
"""
from __future__ import annotations

import json
import re
from typing import Any

MAX_DEPTH = 32              # every record of core/record.py nests 6 levels at most
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_NOT_BRACKET = re.compile(rb"[^\[\]{}]+")
_INNERMOST = re.compile(rb"\[\]|\{\}")


class BoundedJSONError(ValueError):
    """The text is too large, nested too deeply, or not JSON."""


def _reject_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def depth_problem(raw: bytes, max_depth: int) -> str | None:
    """None when the brackets of `raw` (outside strings) pair up and nest at most `max_depth` deep; else
    what is wrong ("nests deeper than ..." or "is not JSON (...)")."""
    brackets = _NOT_BRACKET.sub(b"", _STRING.sub(b"", raw))
    for _ in range(max_depth):
        if not brackets:
            return None
        shorter = _INNERMOST.sub(b"", brackets)
        if len(shorter) == len(brackets):
            return "is not JSON (its brackets do not pair up)"
        brackets = shorter
    return None if not brackets else f"nests deeper than {max_depth} levels"


def loads(text: str | bytes, *, max_bytes: int, max_depth: int = MAX_DEPTH, what: str = "the JSON") -> Any:
    """The value `text` holds, or BoundedJSONError: over `max_bytes`, deeper than `max_depth`, not UTF-8,
    not JSON, or holding NaN/Infinity. Never RecursionError, never MemoryError from nesting."""
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else bytes(text)
    if len(raw) > max_bytes:
        raise BoundedJSONError(f"{what} is {len(raw)} bytes, over the {max_bytes} allowed")
    problem = depth_problem(raw, max_depth)
    if problem is not None:
        raise BoundedJSONError(f"{what} {problem}")
    try:
        return json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except UnicodeDecodeError:
        raise BoundedJSONError(f"{what} is not UTF-8") from None
    except (ValueError, RecursionError) as e:
        raise BoundedJSONError(f"{what} is not JSON: {str(e)[:200]}") from None
