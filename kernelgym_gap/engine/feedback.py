"""What an agent may read of a record: held-out shapes and seeds never (issue 31, finding 5).

A record's `message` is the agent's feedback (the environment's observation and info["message"], TRL's and
verifiers' tool replies, the reward server's terms). A failure on a held-out shape used to say
`heldout shape [3, 96]`, its seed and a `reproduce(...)` line there: a policy under RL learns the hidden
shapes from it and special-cases them. Now:

  * the checker words a held-out failure in kind (judge/checker.py: "held-out shape, float32, large inputs",
    the error kind, the mismatch as a fraction and the first bad values without their indices);
  * every message goes through `scrub` as the record is made (engine/evaluation.Evaluation.record): any
    held-out shape in any written form ([7, 96], (7, 96), torch.Size([7, 96]), 7x96), any held-out seed and
    any held-out element count are replaced by placeholders, wherever they came from (the parent's own
    text, another stage's, the child's). Text the child provided (its report's message and traceback, its
    stderr in a crash) gets `scrub(..., dims=True)`: every number equal to a held-out dimension that no
    public shape has is replaced too (a Triton error that prints a tensor's size, an index error that names
    a bound), even where that hits an unrelated number (a line number): over-scrubbing costs a little
    feedback, under-scrubbing leaks a shape;
  * the record keeps everything for people: `failure.trial` (the whole trial), `failure.reproduce` (the
    call that regenerates its inputs; `kernelgym-gap eval` prints it in its text output), the per-shape
    timings in `terms["per_shape"]`. `public_view` is the record as an agent or the public may see it
    (held-out trials' shapes, seeds and reproduce calls removed).

Public shapes are shown to agents in the task's statement anyway: their failures keep their shape.

The scoring machine's layout is not the agent's either: `scrub_paths` replaces the task's directory (a
user's --tasks-dir or tasks/, as given and resolved) with `<tasks_dir>` in the message, and the
`tasks_dir='...'` argument of any reproduce call in the public view; the record keeps the real path for people.
"""
from __future__ import annotations

import copy
import dataclasses
import math
import re
from collections.abc import Iterable
from kernelgym_gap.core.terms import map_shape_rows

SHAPE = "<held-out shape>"
SEED = "<held-out seed>"
DIM = "<held-out dim>"
SIZE = "<held-out size>"
TASKS_DIR = "<tasks_dir>"
_TASKS_DIR_ARG = re.compile(r"tasks_dir=(['\"])(?:(?!\1).)*\1")      # reproduce_call's tasks_dir='...'
# a number standing alone: not part of a word, a decimal or an exponent (1e+03)
_NUMBER = r"(?<![\w.+\-]){}(?![\w]|\.\d)"


@dataclasses.dataclass(frozen=True)
class Secrets:
    """What of the held-out trials an agent must not read."""
    shapes: tuple[tuple[int, ...], ...] = ()
    seeds: frozenset[int] = frozenset()
    dims: frozenset[int] = frozenset()      # held-out dimensions that no public shape has (> 1)
    sizes: frozenset[int] = frozenset()     # element counts of the held-out shapes (> 1)

    def __bool__(self) -> bool:
        return bool(self.shapes or self.seeds)


def secrets_of(trials: Iterable, public_shapes: Iterable = ()) -> Secrets:
    """The secrets of `trials` (Trial records, correctness and timing alike) whose split is held-out."""
    public = {tuple(int(d) for d in s) for s in public_shapes}
    held = [t for t in trials if getattr(t, "split", "public") != "public"]
    shapes = {tuple(int(d) for d in t.shape) for t in held} - public
    public_dims = {d for s in public for d in s}
    return Secrets(shapes=tuple(sorted(shapes, key=lambda s: (-len(s), s))),
                   seeds=frozenset(int(t.seed) for t in held),
                   dims=frozenset(d for s in shapes for d in s if d > 1 and d not in public_dims),
                   sizes=frozenset(n for s in shapes if (n := math.prod(s)) > 1))


def _shape_pattern(shape: tuple[int, ...]) -> re.Pattern:
    dims = [rf"(?<!\d){d}(?!\d)" for d in shape]
    listed = r"\s*,\s*".join(dims)
    crossed = r"\s*[x×*]\s*".join(dims)
    forms = [rf"torch\.Size\(\[\s*{listed}\s*,?\s*\]\)", rf"[\[(]\s*{listed}\s*,?\s*[\])]"]
    if len(shape) > 1:
        forms.append(crossed)
    return re.compile("|".join(forms))


def scrub(text: str, secrets: Secrets, dims: bool = False) -> str:
    """`text` with the held-out shapes, seeds and element counts replaced by placeholders (see the module
    docstring); with `dims`, every standalone number equal to a secret dimension too (child-provided text)."""
    if not text or not secrets:
        return text
    for shape in secrets.shapes:
        text = _shape_pattern(shape).sub(SHAPE, text)
    for seed in sorted(secrets.seeds, reverse=True):
        text = re.sub(_NUMBER.format(seed), SEED, text)
    for size in sorted(secrets.sizes, reverse=True):
        text = re.sub(_NUMBER.format(size), SIZE, text)
    if dims:
        for d in sorted(secrets.dims, reverse=True):
            text = re.sub(_NUMBER.format(d), DIM, text)
    return text


def reveals(text: str, secrets: Secrets, dims: bool = True) -> list[str]:
    """What of `secrets` is still readable in `text` (for tests and audits): shapes, seeds, sizes and, with
    `dims`, secret dimensions."""
    found = [f"shape {list(s)}" for s in secrets.shapes if _shape_pattern(s).search(text)]
    found += [f"seed {s}" for s in secrets.seeds if re.search(_NUMBER.format(s), text)]
    found += [f"size {n}" for n in secrets.sizes if re.search(_NUMBER.format(n), text)]
    if dims:
        found += [f"dim {d}" for d in secrets.dims if re.search(_NUMBER.format(d), text)]
    return found


def scrub_paths(text: str, paths: Iterable = ()) -> str:
    """`text` with each of `paths` (directories of the scoring machine: a task's tasks dir) replaced by
    <tasks_dir>, longest first, and every reproduce call's tasks_dir='...' argument likewise."""
    if not text:
        return text
    for path in sorted({str(p) for p in paths if p and len(str(p)) > 1}, key=len, reverse=True):
        text = text.replace(path, TASKS_DIR)
    return _TASKS_DIR_ARG.sub(f"tasks_dir='{TASKS_DIR}'", text)


def task_paths(task) -> tuple[str, ...]:
    """The spellings of a task's directory on this machine that a message may carry (as given, resolved)."""
    import os
    where = getattr(task, "tasks_dir", None)
    return (where, os.path.realpath(where)) if where else ()


def public_view(record: dict) -> dict:
    """A record's dict (EvalRecord.to_dict()) as an agent or the public may see it: a held-out failure's
    trial keeps its split, dtype and distribution only, its reproduce call and traceback go, and the
    per-shape timing rows of held-out shapes keep their ratios (E, U) and labels only. The record itself is not changed."""
    out = copy.deepcopy(record)
    failure = out.get("failure") or None
    if isinstance(failure, dict) and isinstance(failure.get("trial"), dict) \
            and failure["trial"].get("split") != "public":
        trial = failure["trial"]
        failure["trial"] = {k: trial.get(k) for k in ("index", "dtype", "distribution", "split")}
        failure["reproduce"] = None
        failure["first_bad"] = [{**b, "index": None} for b in failure.get("first_bad") or [] if isinstance(b, dict)]
        failure["traceback_tail"] = None
    if isinstance(failure, dict):
        for key in ("reproduce", "traceback_tail"):
            if isinstance(failure.get(key), str):
                failure[key] = scrub_paths(failure[key])
    if isinstance(out.get("message"), str):
        out["message"] = scrub_paths(out["message"])
    if "terms" in out:
        out["terms"] = map_shape_rows(out["terms"], lambda r: r if r.get("split") == "public"
                                      else {k: r.get(k) for k in _HELD_OUT_ROW})
    return out


# what a held-out shape's timing row keeps in public: ratios and labels, no absolute size (bytes, grid,
# times and the floor all tell the shape's size)
_HELD_OUT_ROW = ("dtype", "split", "E", "U", "E_compile", "library_U", "bound", "kernel_spread",
                 "library_spread", "early_exit", "library_source")
