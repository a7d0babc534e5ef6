"""Replays a task's reference solutions, one per step (optimized ones first). The baseline every other
agent is compared with, and the main job's way of running the whole suite through the environment."""
from __future__ import annotations

from typing import Any

from kernelgym_gap.core.registry import TaskRegistry, default_registry
from kernelgym_gap.core.task import SOLUTION_KINDS, Solution


class ReplayAgent:
    name = "replay"

    def __init__(self, registry: TaskRegistry | None = None, kinds: tuple[str, ...] = ("optimized", "slow")):
        self.registry = registry or default_registry()
        if isinstance(kinds, str) or not set(kinds) <= set(SOLUTION_KINDS):   # not a string's characters
            raise ValueError(f"kinds={kinds!r}: expected a list of {', '.join(SOLUTION_KINDS)}")
        self.kinds = tuple(kinds)
        self.queue: list[Solution] = []
        self.last: Solution | None = None
        self._task = None

    def solutions(self, task_id: str, dsl: str) -> list[Solution]:
        task = self.registry.get(task_id)
        order = {k: i for i, k in enumerate(self.kinds)}
        sols = [s for s in task.solutions if s.dsl == dsl and s.kind in order]
        return sorted(sols, key=lambda s: order[s.kind])

    def reset(self, observation: str, info: dict[str, Any]) -> None:
        self._task = self.registry.get(info["task"])
        self.queue = self.solutions(info["task"], info["dsl"])

    def act(self, observation: str, info: dict[str, Any]) -> str:
        if not self.queue:
            raise RuntimeError(f"no reference solution left to replay for {self._task.id}")
        self.last = self.queue.pop(0)
        return self._task.solution_path(self.last).read_text()


def make_agent(**kwargs) -> ReplayAgent:
    return ReplayAgent(**kwargs)
