"""Submission-derived text made safe for a terminal.

A record's message, a child's stderr excerpt, a submitter's name: all of it is written by the submission (or
whoever submitted), and printed raw it is a terminal program: ESC [ 2 J clears the screen, a carriage return
or a cursor move overwrites the real status line with a forged "reward 1.0000" (issue 32, L6). `for_terminal`
shows every control character as an escape (\\x1b, \\r, \\x7f, \\x9b ...) so that the text is printed, never
executed; tabs and, where asked, newlines stay, so that a multi-line message still reads as one. JSON output
needs none of this (json.dumps escapes control characters itself).
"""
from __future__ import annotations

import unicodedata

_NAMED = {"\r": "\\r", "\b": "\\b", "\f": "\\f", "\v": "\\v", "\x00": "\\0"}


def _escape_char(c: str) -> str:
    if c in _NAMED:
        return _NAMED[c]
    n = ord(c)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"


def for_terminal(text, keep_newlines: bool = True) -> str:
    """`text` with every control character (C0, DEL, C1, and the Unicode format characters that reorder or
    hide text: bidi overrides, zero-width joiners) shown as a visible escape. Newlines stay when
    `keep_newlines` (a message of several lines), else they are escaped too (a name, one table cell)."""
    if text is None:
        return ""
    text = str(text)
    out = []
    for c in text:
        if c == "\t" or (c == "\n" and keep_newlines):
            out.append(c)
        elif unicodedata.category(c) in ("Cc", "Cf", "Cs", "Zl", "Zp"):
            out.append(_escape_char(c))
        else:
            out.append(c)
    return "".join(out)


def one_line(text) -> str:
    """for_terminal with newlines escaped too: for names and table cells."""
    return for_terminal(text, keep_newlines=False)
