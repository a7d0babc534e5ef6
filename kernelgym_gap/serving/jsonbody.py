"""Untrusted JSON in, plain Python out, or BadJSON (a 400) saying what is wrong. Never a 500:

- nesting deeper than MAX_DEPTH is refused (the parser's own RecursionError on very deep input included);
- NaN, Infinity and -Infinity (Python's json accepts them; JSON does not) are refused;
- a lone surrogate escape (\\ud800) is refused: the text could not be encoded again (a record, a log, the
  database) and would fail later, far from the request.
"""
from __future__ import annotations

import json

MAX_DEPTH = 64


class BadJSON(ValueError):
    """The body is not JSON this server takes."""


def _no_constant(name: str):
    raise BadJSON(f"{name} is not a JSON number")


def _check(value, max_depth: int) -> None:
    """Walks the parsed value without recursion: its depth, and every string (keys included)."""
    stack = [(value, 0)]
    while stack:
        v, depth = stack.pop()
        if depth > max_depth:
            raise BadJSON(f"the JSON is nested more than {max_depth} levels deep")
        if isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                raise BadJSON("a string holds a lone surrogate (\\ud800-\\udfff not in a pair)") from None
        elif isinstance(v, dict):
            stack.extend((k, depth + 1) for k in v)
            stack.extend((x, depth + 1) for x in v.values())
        elif isinstance(v, list):
            stack.extend((x, depth + 1) for x in v)


def parse(raw: bytes | str, max_depth: int = MAX_DEPTH):
    """The JSON value of `raw` (UTF-8), or BadJSON."""
    try:
        text = raw.decode("utf-8") if isinstance(raw, (bytes, bytearray)) else raw
    except UnicodeDecodeError as e:
        raise BadJSON(f"the body is not UTF-8: {e}") from None
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except BadJSON:
        raise
    except RecursionError:
        raise BadJSON(f"the JSON is nested more than {max_depth} levels deep") from None
    except ValueError as e:
        raise BadJSON(f"the body is not JSON: {e}") from None
    _check(value, max_depth)
    return value
