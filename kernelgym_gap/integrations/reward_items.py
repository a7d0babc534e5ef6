"""What the reward server reads from a request: the batch, item by item.

A request-level fault is BadBatch (400, nothing evaluated): a body that is not JSON this server takes
(serving/jsonbody.py: nested too deep, NaN or Infinity, a lone surrogate), no list of items, too many of them,
a failure reward that is not a finite number, a malformed request id. An item-level fault is that item's
failure only (`Item.error`, reported in its terms with status `invalid_item` and the reason, and in the
answer's `errors`): an unknown task or dsl, an item that is not an object, no or two texts, a text that is not
a string or is over the size limit. The other items are evaluated as usual."""
from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

from kernelgym_gap.api.completions import extract_code
from kernelgym_gap.core.task import DSLS

MAX_SOURCE_CHARS = 256 * 1024
REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
INVALID = "invalid_item"


class BadBatch(ValueError):
    """A request the server refuses whole with 400."""


@dataclasses.dataclass
class Item:
    index: int
    task_id: str | None = None
    source: str | None = None
    dsl: str = "triton"
    error: str | None = None


@dataclasses.dataclass
class Batch:
    items: list[Item]
    failure_reward: float
    request_id: str | None
    kind: str = "score"          # "openrlhf": answered in OpenRLHF's shape


def failure_reward_of(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(float(value)):
        raise BadBatch('"failure_reward" must be a finite number')
    return float(value)


def _item(i: int, it: Any, registry) -> Item:
    if not isinstance(it, dict):
        return Item(i, error=f"item {i} is not an object")
    task, dsl = it.get("task"), it.get("dsl") or "triton"
    if not isinstance(task, str) or not task.strip():
        return Item(i, error=f'item {i}: "task" must be a task id or name')
    try:
        spec = registry.get(task.strip())
    except Exception as e:  # noqa: BLE001 - UnknownTaskError and friends: this item's failure
        return Item(i, error=f"item {i}: {e}")
    if dsl not in DSLS:
        return Item(i, spec.id, error=f"item {i}: unknown dsl {dsl!r}; one of {', '.join(DSLS)}")
    source, completion = it.get("source"), it.get("completion")
    if (source is None) == (completion is None):
        return Item(i, spec.id, error=f'item {i}: give exactly one of "source" and "completion"')
    text = source if source is not None else completion
    if not isinstance(text, str):
        return Item(i, spec.id, error=f"item {i}: the source or completion must be a string")
    if len(text) > MAX_SOURCE_CHARS:
        return Item(i, spec.id, error=f"item {i}: {len(text)} characters; the limit is {MAX_SOURCE_CHARS}")
    code = text if source is not None else extract_code(text, spec.entry_point)    # linear time
    return Item(i, spec.id, code, dsl)


def parse_batch(data: Any, registry, max_items: int) -> Batch:
    """The /score body ({"items": [...], "failure_reward": x, "request_id": "..."}) as a Batch, or BadBatch."""
    if not isinstance(data, dict) or not isinstance(data.get("items"), list):
        raise BadBatch('the body must be a JSON object with a list "items"')
    items = data["items"]
    if not items:
        raise BadBatch('"items" is empty')
    if len(items) > max_items:
        raise BadBatch(f"{len(items)} items; this server takes at most {max_items} per request (split the batch)")
    failure = failure_reward_of(data.get("failure_reward", 0.0))
    rid = data.get("request_id")
    if rid is not None and (not isinstance(rid, str) or not REQUEST_ID.fullmatch(rid)):
        raise BadBatch('"request_id" must be 1-128 characters of letters, digits and ._:-')
    return Batch([_item(i, it, registry) for i, it in enumerate(items)], failure, rid)


def parse_openrlhf(data: Any, registry, max_items: int) -> Batch:
    """OpenRLHF's remote reward request ({"query": [...], "prompts": [...], "labels": [...]}): the label is the
    task, the reply is the query less its prompt."""
    if not isinstance(data, dict) or not isinstance(data.get("query"), list):
        raise BadBatch('OpenRLHF sends {"query": [...], "prompts": [...], "labels": [...]}')
    queries = data["query"]
    prompts = data.get("prompts")
    if prompts is None:
        prompts = [None] * len(queries)
    labels = data.get("labels")
    if not isinstance(prompts, list) or not isinstance(labels, list):
        raise BadBatch('"prompts" and "labels" must be lists (the task of each query: --label_key)')
    if len(labels) != len(queries) or len(prompts) != len(queries):
        raise BadBatch('"labels" (the task of each query: --label_key) and "prompts" must match "query"')
    items = []
    for q, p, label in zip(queries, prompts, labels):
        reply = q[len(p):] if isinstance(q, str) and isinstance(p, str) and q.startswith(p) else q
        items.append({"task": label, "completion": reply})
    batch = parse_batch({"items": items, "failure_reward": data.get("failure_reward", 0.0),
                         "request_id": data.get("request_id")}, registry, max_items)
    batch.kind = "openrlhf"
    return batch


def invalid_terms(reason: str, failure_reward: float) -> dict[str, Any]:
    """The terms of an item that was not evaluated: scorer.record_terms' keys, the failure reward, the reason."""
    return {"score": failure_reward, "reward": 0.0, "acc": 0.0, "correct": 0.0, "correctness": None,
            "performance": None, "E": None, "U": None, "status": INVALID, "reward_mode": "", "reason": reason}
