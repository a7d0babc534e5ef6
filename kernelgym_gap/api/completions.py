"""Model replies to submissions: the code block of a reply (`extract_code`, the rule the chat agent and the
trainer integrations use) and `score_completions`, raw replies in, one record per reply out."""
from __future__ import annotations

import ast
import bisect
import re
from collections.abc import Sequence

from kernelgym_gap.api.batch import evaluate_many
from kernelgym_gap.api.lanes import EvalRequest
from kernelgym_gap.core.dsls import NAMES as DSL_NAMES
from kernelgym_gap.core.record import EvalRecord

_THINK_OPEN = re.compile(r"<(think|thinking|reasoning)>", re.I)
_THINK_CLOSE = {tag: re.compile(rf"</{tag}>", re.I) for tag in ("think", "thinking", "reasoning")}
_FENCE_LINE = re.compile(r"[ \t]*(`{3,}|~{3,})[ \t]*([\w+.#-]*)")     # matched at a line's start only
_PURE_FENCE = re.compile(r"[ \t]*(`{3,}|~{3,})[ \t]*")
_PY_LANGS = {"python", "py", "python3", "", *DSL_NAMES}      # a fence may name the DSL


def _parses(code: str) -> bool:
    try:
        ast.parse(code)
        return True
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False


def _defines(code: str, name: str | None) -> bool:
    if not name or name not in code:       # no parse for the blocks that cannot define it (thousands in a loop)
        return False
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        head = re.compile(rf"[ \t]*def[ \t]+{re.escape(name)}[ \t]*\(")    # per line: linear in the code
        return any(head.match(line) for line in code.split("\n"))
    return any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name for n in tree.body)


def _drop_reasoning(text: str) -> str:
    """`text` less its <think>...</think> blocks (also <thinking>, <reasoning>; any case), in linear time: an
    opening tag without its closing tag stays, and once a tag has no closing tag further on, no later
    opening of it is searched again (a backtracking regex rescans the rest of the reply for each one)."""
    out, pos, unclosed = [], 0, set()
    while True:
        m = _THINK_OPEN.search(text, pos)
        while m is not None and m.group(1).lower() in unclosed:
            m = _THINK_OPEN.search(text, m.end())
        if m is None:
            break
        tag = m.group(1).lower()
        close = _THINK_CLOSE[tag].search(text, m.end())
        if close is None:
            unclosed.add(tag)
            continue
        out.append(text[pos:m.start()])
        pos = close.end()
    out.append(text[pos:])
    return "".join(out)


def _fenced_blocks(lines: list[str]) -> tuple[list[tuple[str, str]], int | None]:
    """The closed fenced blocks as (language, body), and the index of the last opening-like fence line (None:
    none), in one pass over the lines plus an index of the closing lines. The rule is the former regex's
    (`^[ \\t]*(`{3,}|~{3,})[ \\t]*([\\w+.#-]*)[^\\n]*\\n(.*?)^[ \\t]*\\1[ \\t]*$`, multiline, leftmost and
    non-overlapping), without its backtracking: a block opens at a fence line of run length L (ending in its
    newline) and closes at the first later line that is a run of exactly k of the same character alone, for
    the largest k <= L (k >= 3) that has such a line; with k < L the language is empty. An opening that
    nothing closes is skipped."""
    closing: dict[tuple[str, int], list[int]] = {}
    for i, line in enumerate(lines):
        m = _PURE_FENCE.fullmatch(line[:-1] if line.endswith("\n") else line)
        if m is not None:
            closing.setdefault((m.group(1)[0], len(m.group(1))), []).append(i)
    blocks, last, i = [], None, 0
    while i < len(lines):
        m = _FENCE_LINE.match(lines[i])
        if m is None or not lines[i].endswith("\n"):
            i += 1
            continue
        last = i
        ch, run = m.group(1)[0], len(m.group(1))
        end = None
        for k in range(run, 2, -1):         # sum over openings of their run lengths: linear in the reply
            at = closing.get((ch, k))
            if at:
                n = bisect.bisect_right(at, i)
                if n < len(at):
                    end, lang = at[n], (m.group(2).lower() if k == run else "")
                    break
        if end is None:
            i += 1
            continue
        blocks.append((lang, "".join(lines[i + 1:end])))
        i = end + 1
    return blocks, last


def extract_code(reply: str, entry_point: str | None = None) -> str:
    """The submission in a model's reply.

    Reasoning blocks (<think>...</think>) are dropped first. Among fenced code blocks (``` or ~~~) tagged
    python/py/triton/tilelang or untagged (else any fenced block), the last one that defines the entry
    point wins (models revise as they go), else the longest that parses, else the longest. Without a closed
    fence: the text after the last opening fence (a reply cut off by max_tokens). Without any fence: the
    reply as it is, and the gate says what is wrong with it (feedback for the next turn).

    Linear in the reply's length (a line scanner, no backtracking regex): a policy that repeats fence lines
    by the thousand made the former regexes quadratic (a 128 KiB reply took a minute)."""
    text = _drop_reasoning(reply or "")
    lines = text.splitlines(keepends=True)
    blocks, last_fence = _fenced_blocks(lines)
    code_blocks = [b for lang, b in blocks if lang in _PY_LANGS] or [b for _, b in blocks]
    if code_blocks:
        with_entry = [b for b in code_blocks if _defines(b, entry_point)]
        if with_entry:
            return with_entry[-1].strip("\n") + "\n"
        by_length = sorted(code_blocks, key=len, reverse=True)       # stable: the first of equal lengths
        return next((b for b in by_length if _parses(b)), by_length[0]).strip("\n") + "\n"
    if last_fence is not None:
        return "".join(lines[last_fence + 1:]).strip("\n") + "\n"
    stripped = text.strip()
    return stripped + "\n" if stripped else ""


def score_completions(task_id: str, completions: Sequence[str], dsl: str = "triton", backend: str = "auto",
                      **kwargs) -> list[EvalRecord]:
    """Raw model replies for one task in, one record per reply out (in order): each reply's code block
    (`extract_code`) is evaluated. Keyword arguments go to `evaluate_many` (workers, config, ray, ...)."""
    from kernelgym_gap.core.registry import TaskRegistry, default_registry
    if kwargs.get("tasks_dir") is not None and kwargs.get("registry") is None:
        kwargs["registry"] = TaskRegistry(kwargs.pop("tasks_dir"))    # loaded once, for the entry point too
    registry = kwargs.get("registry") or default_registry()
    entry = registry.get(task_id).entry_point
    requests = [EvalRequest(task_id, extract_code(c, entry), dsl, backend, tag=i) for i, c in enumerate(completions)]
    return evaluate_many(requests, **kwargs)
