"""What a trainer logs of one evaluation, and the record-shaped failure of an item that was not evaluated
(integrations/scorer.py's module docstring says when each applies).

`completion_text` turns a trainer's completion (a string, or chat messages) into the reply text;
`reward_of` / `number_reward` the reward of a record; `record_terms` the terms a trainer logs;
`RejectedItem` the failure of an item the adapters could not evaluate (status `invalid_item`, the reason).
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import enum
from typing import Any

from kernelgym_gap.core.record import EvalRecord
from kernelgym_gap.core.status import Status
from kernelgym_gap.core.terms import Headline, TrainerTerms


def completion_text(completion: Any) -> str:
    """The reply text of a trainer's completion: a string as it is; chat messages (a list of {"role",
    "content"} dicts, TRL's and verifiers' conversational format): the assistant messages' contents joined
    (content given as a list of parts: their "text"); a single message dict: its content."""
    if completion is None:
        return ""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return _content(completion.get("content"))
    if isinstance(completion, (list, tuple)):
        msgs = [m for m in completion if _role(m) in (None, "assistant")]
        return "\n\n".join(_content(m.get("content") if isinstance(m, dict) else getattr(m, "content", m))
                           for m in msgs)
    return _content(getattr(completion, "content", completion))


def _role(m: Any) -> str | None:
    return m.get("role") if isinstance(m, dict) else getattr(m, "role", None)


def _content(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, (list, tuple)):
        return "".join(p.get("text", "") if isinstance(p, dict) else str(getattr(p, "text", p)) for p in content)
    return str(content)


class ItemStatus(str, enum.Enum):
    """The status of an item that was not evaluated (beside core.status.Status, which is an evaluation's)."""
    INVALID_ITEM = "invalid_item"

    @property
    def is_failure(self) -> bool:
        return True

    def __str__(self) -> str:
        return self.value


@dataclasses.dataclass(frozen=True)
class RejectedItem:
    """An item the adapters could not evaluate (unknown task or dsl, a reply that is not text): shaped like an
    EvalRecord where trainers read one (status, correct, reward, message, terms), so that it is that sample's
    failure in the rewards and the logs, never an exception in the trainer."""
    task: str | None
    dsl: str | None
    message: str
    status: ItemStatus = ItemStatus.INVALID_ITEM
    correct: bool = False
    reward: float = 0.0
    reward_mode: str = ""
    terms: dict = dataclasses.field(default_factory=dict)
    diagnosis: dict | None = None

    @property
    def ok(self) -> bool:
        return False


def reward_of(record: EvalRecord | RejectedItem, failure_reward: float = 0.0) -> float | None:
    """The record's reward; `failure_reward` when the evaluation failed (any status but `ok`) or the item was
    rejected; None for `unverified` (compiled but not run: not scored, docs/backends.md)."""
    if record.status is Status.UNVERIFIED:
        return None
    if record.status.is_failure:
        return float(failure_reward)
    return float(record.reward)


def number_reward(record: EvalRecord | RejectedItem, failure_reward: float = 0.0) -> float:
    """reward_of for trainers that need a number for every sample (verl, verifiers, TRL's tool environment):
    an unverified record (not scored) gives `failure_reward`, its status says why."""
    r = reward_of(record, failure_reward)
    return float(failure_reward) if r is None else r


def record_terms(record: EvalRecord, failure_reward: float = 0.0) -> dict[str, Any]:
    """The record flattened for a trainer's logs: `score` (reward_of), `reward` (the record's own), `acc`
    and `correct` (1.0 / 0.0), the numeric terms (`correctness`, `performance`, `E`, `U`: None when not
    measured, e.g. on the cpu backend), `status`, `reward_mode` and `reason` (strings; reason: the message
    of a record that is not ok, "" when ok). The same keys every time. `score` is always a number (an
    unverified record: `failure_reward`, status `unverified`)."""
    head = Headline.of(record.terms)      # a RejectedItem's terms are {}: every number None

    def num(v):
        return None if v is None else float(v)
    correct = 1.0 if record.correct else 0.0
    return TrainerTerms(score=number_reward(record, failure_reward), reward=float(record.reward), acc=correct,
                        correct=correct, correctness=num(head.correctness), performance=num(head.performance),
                        E=num(head.E), U=num(head.U), status=record.status.value, reward_mode=record.reward_mode,
                        reason="" if record.ok else str(record.message or record.status.value)).to_dict()


def rejected_future(task: Any, dsl: Any, reason: str) -> concurrent.futures.Future:
    """A future already holding the RejectedItem of an item that cannot be evaluated."""
    f: concurrent.futures.Future = concurrent.futures.Future()
    f.set_result(RejectedItem(None if task is None else str(task)[:200], None if dsl is None else str(dsl)[:50],
                              reason[:2000]))
    return f


def feedback_of(record: EvalRecord | RejectedItem) -> str:
    """The feedback text a multi-turn rollout shows for a record (api.env.feedback_text), or a rejected
    item's status and reason."""
    if isinstance(record, RejectedItem):
        return f"status: {record.status.value}\n{record.message}"
    from kernelgym_gap.api.env import feedback_text
    return feedback_text(record)
