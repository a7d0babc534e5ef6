"""Registers every task and the suite with Gymnasium under their versioned ids. Light on purpose (no engine,
no sandbox): `import kernelgym_gap` runs it, and so does every child process that imports the package."""
from __future__ import annotations

import logging

import gymnasium as gym

from kernelgym_gap.core.ids import SUITE_ID
from kernelgym_gap.core.registry import TaskRegistry, default_registry, users_tasks_dir

log = logging.getLogger(__name__)

ENTRY_POINT = "kernelgym_gap.api.env:KernelEnv"


def register_envs(registry: TaskRegistry | None = None) -> list[str]:
    """Registers every task of `registry` (default: tasks/) and the suite (idempotent); returns the ids. A
    registry of another directory (`--tasks-dir`, `import kernelbench`) registers its ids bound to it, so
    that `gym.make(id)` finds the task there (an id registered already keeps its first directory)."""
    registry = registry or default_registry()
    ids = []
    for task in registry:
        if task.id not in gym.registry:       # each task bound to its own directory (a source may have several)
            where = users_tasks_dir(task)
            kwargs = {"task_id": task.id, **({"tasks_dir": where} if where else {})}
            gym.register(id=task.id, entry_point=ENTRY_POINT, kwargs=kwargs)
        ids.append(task.id)
    if SUITE_ID not in gym.registry:
        gym.register(id=SUITE_ID, entry_point=ENTRY_POINT, kwargs={})
    return ids + [SUITE_ID]
