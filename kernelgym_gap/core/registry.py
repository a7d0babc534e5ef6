"""Finds task files under tasks/<category>/<name>/task.py and registers them by versioned id."""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.util
import os
import sys
from pathlib import Path

from kernelgym_gap.core.builtin import PACKAGE_PARENT
from kernelgym_gap.core.builtin import tasks_dir as builtin_tasks_dir
from kernelgym_gap.core.errors import TaskDefinitionError, UnknownTaskError
from kernelgym_gap.core.task import TaskSpec

# the folder that holds the package (the sandbox binds it and puts it on the child's path), and the built-in
# tasks, package data read through importlib.resources (core/builtin.py)
PROJECT_ROOT = PACKAGE_PARENT
DEFAULT_TASKS_DIR = builtin_tasks_dir()


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
        except Exception as e:      # a task author's mistake: one line naming the file, not a traceback
            del sys.modules[module_name]
            raise TaskDefinitionError(f"{path}: loading it failed: {type(e).__name__}: {e}") from e
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


def smoke_test(task: TaskSpec, path: Path) -> None:
    """A user's task run once at its smallest cpu shape before anything is judged with it: inputs of every
    distribution, then the reference. Without this a broken reference or an unknown distribution name came
    out as the submission's crash (reward 0) or a traceback. The project's own tasks are held to the same
    by the tests instead (tests/test_registry.py), so loading tasks/ costs nothing; imported tasks were run
    by the importer."""
    import torch

    from kernelgym_gap.core.task import numel
    w = task.workload("cpu")
    shape, dtype = min(w.all_shapes(), key=numel), w.dtypes[0]
    at = f"{task.id} ({path}), cpu shape {list(shape)} {dtype}"
    ins = None
    for dist in task.distributions:
        try:
            gen = torch.Generator(device="cpu").manual_seed(0)    # core/inputs.generator's, without its import
            ins = task.make_inputs(tuple(shape), dtype, gen, dist, "cpu")
        except Exception as e:  # noqa: BLE001 - the author's code: any failure is the task's
            raise TaskDefinitionError(f"{at}: make_inputs failed for distribution {dist!r}: "
                                      f"{type(e).__name__}: {e}") from None
    try:
        with torch.no_grad():
            out = task.reference(*ins)
    except Exception as e:  # noqa: BLE001
        raise TaskDefinitionError(f"{at}: the reference failed: {type(e).__name__}: {e}") from None
    if type(out) is not torch.Tensor:
        raise TaskDefinitionError(f"{at}: the reference returned {type(out).__name__}, not a torch.Tensor")


def users_tasks_dir(task: TaskSpec) -> str | None:
    """The directory a task came from when it is a user's (--tasks-dir), None for the project's own tasks/:
    what must travel with the task's id to another process (a Ray actor) or into a printed reproduce line."""
    return None if task.tasks_dir in (None, str(DEFAULT_TASKS_DIR.absolute())) else task.tasks_dir


def _layout_hint(root: Path) -> str:
    if any(root.glob("*/task.py")):
        return f" (this looks like a category folder: pass its parent, {root.parent})"
    if any(root.glob("*/*/*/task.py")):
        return " (they are one level deeper here: pass the folder that holds the category folders)"
    return ""


def _load_dir(root: Path) -> list[TaskSpec]:
    """Every task of one directory (tasks/ or a user's: a user's tasks that were not imported are smoke
    tested first)."""
    users = root != DEFAULT_TASKS_DIR.absolute()
    if not root.is_dir():
        if users:
            raise TaskDefinitionError(f"task directory {root} not found (no such directory)")
        # the built-in tasks are package data (core/builtin.py): only a package built without them (not by
        # setup.py) lacks them (tests/test_package_data.py)
        raise TaskDefinitionError(
            f"the built-in tasks directory {root} not found: this installation of kernelgym_gap carries no "
            "built-in tasks (kernelgym_gap/builtin_tasks, built from the checkout's tasks/ by setup.py). "
            "Point at a tasks directory with --tasks-dir DIR "
            "(tasks, eval, run, submit, bench, episode, serve-reward) or tasks_dir=DIR (gym.make, TaskRegistry, "
            "the trainer adapters and datasets), e.g. the checkout's tasks/, or "
            "install the checkout editable (`pip install -e .`)")
    tasks = []
    for path in sorted(root.glob("*/*/task.py")):
        task = load_task_file(path)
        if users and not task.origin:
            smoke_test(task, path)
        tasks.append(task)
    if not tasks:
        raise TaskDefinitionError(f"no task in {root}: tasks are files <category>/<name>/task.py under "
                                  f"it{_layout_hint(root)}")
    return tasks


# The word that names the project's own tasks/ inside a task source of several directories
# (`--tasks-dir builtin --tasks-dir ./kb`); a directory of that name is reached as ./builtin.
BUILTIN = "builtin"

# A task source: None (the built-in tasks/), one directory, or several (BUILTIN among them for tasks/),
# or a TaskRegistry already made from one. Every front end takes one (tasks_dir=, --tasks-dir).
TaskSource = "None | str | os.PathLike | Sequence[str | os.PathLike] | TaskRegistry"


def source_dirs(source=None) -> tuple[Path, ...]:
    """The absolute directories of a task source (see TaskSource), in order, each once."""
    if source is None:
        return (DEFAULT_TASKS_DIR.absolute(),)
    items = [source] if isinstance(source, (str, os.PathLike)) else source
    if not isinstance(items, (list, tuple)):
        raise TypeError(f"a task source is a directory, a list of directories or None, not "
                        f"{type(source).__name__}")
    if not items:
        raise TaskDefinitionError("an empty list of task directories: name one, or builtin for tasks/")
    dirs: list[Path] = []
    for item in items:
        if not isinstance(item, (str, os.PathLike)) or not str(item):
            raise TypeError(f"a task directory is a path, not {type(item).__name__} {item!r}")
        d = DEFAULT_TASKS_DIR.absolute() if str(item) == BUILTIN else Path(item).expanduser().absolute()
        if d not in dirs:
            dirs.append(d)
    return tuple(dirs)


class TaskRegistry:
    """An immutable view of the tasks of one task source: tasks/, a user's directory, or several of them
    (an id defined in two is refused). Each task keeps the directory it came from (TaskSpec.tasks_dir):
    that is what travels with its id to the child, the checker and other processes."""

    def __init__(self, tasks_dir=DEFAULT_TASKS_DIR):
        # absolute: the child and the trusted checker find a task by this path from their own directories
        self.tasks_dirs = source_dirs(tasks_dir)
        self.tasks_dir = self.tasks_dirs[0]         # the first: for callers that know one directory only
        tasks: dict[str, TaskSpec] = {}
        for root in self.tasks_dirs:
            for task in _load_dir(root):
                if task.id in tasks:
                    raise TaskDefinitionError(f"{task.id} defined twice ({tasks[task.id].directory} and "
                                              f"{task.directory})")
                tasks[task.id] = task
        self._tasks = tasks

    def is_builtin(self) -> bool:
        return self.tasks_dirs == (DEFAULT_TASKS_DIR.absolute(),)

    def source(self) -> list[str] | None:
        """The source as plain data for another process (the reward server's slots, a subprocess): None for
        the built-in tasks, else the directories, tasks/ spelled BUILTIN."""
        if self.is_builtin():
            return None
        return [BUILTIN if d == DEFAULT_TASKS_DIR.absolute() else str(d) for d in self.tasks_dirs]

    def __repr__(self) -> str:
        # stable across equal sources: shared_scorer keys its Scorers by the repr of their settings
        return f"TaskRegistry({self.source() or BUILTIN!r})"

    def __iter__(self):
        return iter(self._tasks.values())

    def __len__(self) -> int:
        return len(self._tasks)

    def ids(self) -> list[str]:
        return list(self._tasks)

    def get(self, task_id: str) -> TaskSpec:
        """By full id (`kernelgym_gap/LayerNorm-v1`), or by bare name (`LayerNorm`) for the newest version."""
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


def task_source(source=None) -> TaskRegistry:
    """The registry of a task source (TaskSource above): what every front end calls with its tasks_dir= or
    --tasks-dir. A registry is returned as it is; None is the built-in tasks; directories are loaded once
    per process (like the built-in tasks: a trainer's reward function calls this per sample)."""
    if isinstance(source, TaskRegistry):
        return source
    dirs = source_dirs(source)
    if dirs == (DEFAULT_TASKS_DIR.absolute(),):
        return default_registry()
    return _registry_of(dirs)


@functools.lru_cache(maxsize=64)
def _registry_of(dirs: tuple[Path, ...]) -> TaskRegistry:
    return TaskRegistry(list(dirs))


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
