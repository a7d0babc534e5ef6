"""Model replies to submissions: the code block of a reply (`extract_code`, the rule the chat agent and the
trainer integrations use) and `score_completions`, raw replies in, one record per reply out."""
from __future__ import annotations

import ast
import re
from collections.abc import Sequence

from kernelgym_gap.api.batch import evaluate_many
from kernelgym_gap.api.lanes import EvalRequest
from kernelgym_gap.core.record import EvalRecord

_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([\w+.#-]*)[^\n]*\n(.*?)^[ \t]*\1[ \t]*$", re.S | re.M)
_OPEN_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([\w+.#-]*)[^\n]*\n", re.M)
_THINK = re.compile(r"<(think|thinking|reasoning)>.*?</\1>", re.S | re.I)
_PY_LANGS = {"python", "py", "python3", "triton", "tilelang", ""}


def _parses(code: str) -> bool:
    try:
        ast.parse(code)
        return True
    except (SyntaxError, ValueError):
        return False


def _defines(code: str, name: str | None) -> bool:
    if not name:
        return False
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return re.search(rf"^\s*def\s+{re.escape(name)}\s*\(", code, re.M) is not None
    return any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name for n in tree.body)


def extract_code(reply: str, entry_point: str | None = None) -> str:
    """The submission in a model's reply.

    Reasoning blocks (<think>...</think>) are dropped first. Among fenced code blocks (``` or ~~~) tagged
    python/py/triton/tilelang or untagged (else any fenced block), the last one that defines the entry
    point wins (models revise as they go), else the longest that parses, else the longest. Without a closed
    fence: the text after the last opening fence (a reply cut off by max_tokens). Without any fence: the
    reply as it is, and the gate says what is wrong with it (feedback for the next turn)."""
    text = _THINK.sub("", reply or "")
    blocks = [(m.group(2).lower(), m.group(3)) for m in _FENCE.finditer(text)]
    code_blocks = [b for lang, b in blocks if lang in _PY_LANGS] or [b for _, b in blocks]
    if code_blocks:
        with_entry = [b for b in code_blocks if _defines(b, entry_point)]
        if with_entry:
            return with_entry[-1].strip("\n") + "\n"
        parsing = [b for b in code_blocks if _parses(b)]
        return max(parsing or code_blocks, key=len).strip("\n") + "\n"
    opened = list(_OPEN_FENCE.finditer(text))
    if opened:
        return text[opened[-1].end():].strip("\n") + "\n"
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
