"""Finds task files under tasks/<category>/<name>/task.py and registers them by versioned id."""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.util
import sys
from pathlib import Path

from kernelgym_gap.core.errors import TaskDefinitionError, UnknownTaskError
from kernelgym_gap.core.task import TaskSpec

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_TASKS_DIR = PROJECT_ROOT / "tasks"


def load_task_file(path: Path) -> TaskSpec:
    category, name = path.parent.parent.name, path.parent.name
    module_name = f"kernelgym_gap_tasks.{category}.{name}"
    if path.resolve().parent.parent.parent != DEFAULT_TASKS_DIR.resolve():
        # another directory's task of the same category and folder name is another module
        module_name += "_" + hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
    if module_name in sys.modules:
        module = sys.modules[module_name]
    else:
        spec = importlib.util.spec_from_file_location(module_name, path)
        if spec is None or spec.loader is None:
            raise TaskDefinitionError(f"cannot import {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except Exception:
            del sys.modules[module_name]
            raise
    task = getattr(module, "TASK", None)
    if not isinstance(task, TaskSpec):
        raise TaskDefinitionError(f"{path} defines no TASK = TaskSpec(...)")
    task = dataclasses.replace(task, directory=path.parent)
    if task.category != category:
        raise TaskDefinitionError(f"{path}: category {task.category!r} but filed under {category!r}")
    problems = task.validate()
    if problems:
        raise TaskDefinitionError(f"{task.id} ({path}): " + "; ".join(problems))
    return task


class TaskRegistry:
    """An immutable view of the tasks in one directory."""

    def __init__(self, tasks_dir: Path = DEFAULT_TASKS_DIR):
        # absolute: the child and the trusted checker find a task by this path from their own directories
        self.tasks_dir = Path(tasks_dir).absolute()
        if not self.tasks_dir.is_dir():
            if self.tasks_dir != DEFAULT_TASKS_DIR.absolute():
                raise TaskDefinitionError(f"task directory {tasks_dir} not found (no such directory: "
                                          f"{self.tasks_dir})")
            raise TaskDefinitionError(
                f"task directory {self.tasks_dir} not found; install the project with `pip install -e .` "
                "from its checkout so that tasks/ sits beside the package")
        tasks: dict[str, TaskSpec] = {}
        for path in sorted(self.tasks_dir.glob("*/*/task.py")):
            task = load_task_file(path)
            if task.id in tasks:
                raise TaskDefinitionError(f"{task.id} defined twice ({path})")
            tasks[task.id] = task
        self._tasks = tasks

    def __iter__(self):
        return iter(self._tasks.values())

    def __len__(self) -> int:
        return len(self._tasks)

    def ids(self) -> list[str]:
        return list(self._tasks)

    def get(self, task_id: str) -> TaskSpec:
        """By full id (`kernelgym_gap/LayerNorm-v0`), or by bare name (`LayerNorm`) for the newest version."""
        if task_id in self._tasks:
            return self._tasks[task_id]
        by_name = sorted((t for t in self._tasks.values() if t.name == task_id), key=lambda t: t.version)
        if not by_name:         # `layernorm`, `kernelgym_gap/layernorm-v0`: names are matched case-insensitively
            folded = task_id.casefold()
            by_name = sorted((t for t in self._tasks.values() if folded in (t.name.casefold(), t.id.casefold())),
                             key=lambda t: t.version)
        if by_name:
            return by_name[-1]
        raise UnknownTaskError(task_id, list(self._tasks) + sorted({t.name for t in self._tasks.values()}))


@functools.lru_cache(maxsize=None)
def default_registry() -> TaskRegistry:
    return TaskRegistry(DEFAULT_TASKS_DIR)


def get_task(task_id: str) -> TaskSpec:
    return default_registry().get(task_id)


def find_task(task_id: str, tasks_dir: str | Path | None = None) -> TaskSpec:
    """One task by id, for the child and the trusted checker: task files are loaded one at a time until it
    is found, so a broken task file elsewhere in the directory does not fail this evaluation. The one
    lookup the parent, the child and the checker share (the parent holds a TaskRegistry already)."""
    root = Path(tasks_dir).absolute() if tasks_dir else DEFAULT_TASKS_DIR
    for path in sorted(root.glob("*/*/task.py")):
        try:
            task = load_task_file(path)
        except Exception:  # noqa: BLE001 - another task's problem; the full registry reports it
            continue
        if task.id == task_id:
            return task
    return TaskRegistry(root).get(task_id)   # raises with the registry's own message
