"""The prompts of every task and DSL as a Hugging Face `datasets.Dataset`, so that a training script is a few
lines (docs/training.md).

    from kernelgym_gap.integrations.datasets import task_dataset
    train = task_dataset(backend="cuda", split="train")      # TRL: prompt (chat), task, dsl, split, ...

Each row is one (task, DSL) pair: `prompt` is chat-formatted (a system message, then the environment's own
observation text as the user message: statement, reference, shapes, entry point, what the reward measures
on `backend`), `task` is the task's name ("GELU", what reward_function and compute_score read), `task_id`
its versioned id, `dsl`, `split` ("train" or "test"), `category`, `level`. The split is fixed per task (the
same task is in the same split for every DSL): the tasks named in `test_tasks`, else about `test_fraction`
of the tasks chosen by a hash of their name, so it does not change when tasks are added.

`tasks_dir=` picks the task source (core/registry.TaskSource: None for the built-in tasks, a directory such
as `import kernelbench`'s output, or several, "builtin" among them); the reward side must be given the same
source (reward_function(tasks_dir=...), compute_score's tasks_dir reward kwarg, serve-reward --tasks-dir). An
imported task ships no reference solution: its rows are every DSL's (TaskSpec.dsls).

`verl_rows(...)` gives the same rows in verl's RL dataset layout (data_source, prompt, ability,
reward_model, extra_info with task, dsl, backend) and `verifiers_rows(...)` in verifiers' (prompt, answer,
info with kernel_task, dsl, backend).
"""
from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from kernelgym_gap.core.task import DSLS

SYSTEM_PROMPT = ("You write GPU kernels. Answer with one complete Python module in a single ```python code "
                 "block: the imports, the kernel, and the entry-point function the task names.")


def task_split(name: str, test_fraction: float = 0.2, test_tasks: Sequence[str] | None = None) -> str:
    if test_tasks is not None:
        return "test" if name in set(test_tasks) else "train"
    h = int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "big") / 2 ** 32
    return "test" if h < test_fraction else "train"


def task_rows(tasks: Sequence[str] | None = None, dsls: Sequence[str] = DSLS, backend: str = "cpu",
              split: str | None = None, *, system_prompt: str | None = SYSTEM_PROMPT, max_steps: int = 1,
              test_fraction: float = 0.2, test_tasks: Sequence[str] | None = None, registry=None,
              tasks_dir=None) -> list[dict]:
    """The rows as plain dicts (task_dataset's columns). tasks: names or ids (None: all); dsls: the DSLs to
    include (a task appears only for the DSLs it supports); backend: whose observation text (what the
    reward measures) the prompt carries; split: "train", "test" or None (both); tasks_dir: the task source
    (module docstring), or registry: a TaskRegistry already loaded."""
    from kernelgym_gap.api.env import observation_text
    from kernelgym_gap.core.registry import task_source
    if registry is not None and tasks_dir is not None:
        raise ValueError("pass registry= or tasks_dir=, not both")
    registry = task_source(registry if registry is not None else tasks_dir)
    if isinstance(dsls, str):       # "triton" would be read as its letters
        dsls = (dsls,)
    specs = [registry.get(t) for t in tasks] if tasks else list(registry)
    rows = []
    for task in specs:
        s = task_split(task.name, test_fraction, test_tasks)
        if split is not None and s != split:
            continue
        for dsl in dsls:
            if dsl not in task.dsls:
                continue
            obs = observation_text(task, dsl, backend, 0, max_steps, "")
            prompt = ([{"role": "system", "content": system_prompt}] if system_prompt else [])
            prompt.append({"role": "user", "content": obs})
            rows.append({"prompt": prompt, "task": task.name, "task_id": task.id, "dsl": dsl, "split": s,
                         "category": task.category, "level": task.level, "entry_point": task.entry_point})
    return rows


def task_dataset(tasks: Sequence[str] | None = None, dsls: Sequence[str] = DSLS, backend: str = "cpu",
                 split: str | None = None, **kwargs: Any):
    """A `datasets.Dataset` of task_rows(...) (TRL's conversational prompt format)."""
    import datasets
    return datasets.Dataset.from_list(task_rows(tasks, dsls, backend, split, **kwargs))


def task_dataset_dict(tasks: Sequence[str] | None = None, dsls: Sequence[str] = DSLS, backend: str = "cpu",
                      **kwargs: Any):
    """A `datasets.DatasetDict` with "train" and "test"."""
    import datasets
    return datasets.DatasetDict({s: task_dataset(tasks, dsls, backend, s, **kwargs) for s in ("train", "test")})


def verl_rows(tasks: Sequence[str] | None = None, dsls: Sequence[str] = DSLS, backend: str = "cpu",
              split: str | None = None, **kwargs: Any) -> list[dict]:
    """Rows in verl's RL dataset layout; write them with `datasets.Dataset.from_list(rows).to_parquet(path)`
    and point `data.train_files` at it. compute_score reads extra_info["task"], ["dsl"] and ["backend"]."""
    out = []
    for i, r in enumerate(task_rows(tasks, dsls, backend, split, **kwargs)):
        out.append({"data_source": r["task_id"], "prompt": r["prompt"], "ability": "gpu_kernel",
                    "reward_model": {"style": "rule", "ground_truth": r["task"]},
                    "extra_info": {"task": r["task"], "dsl": r["dsl"], "backend": backend, "split": r["split"],
                                   "index": i}})
    return out


def verifiers_rows(tasks: Sequence[str] | None = None, dsls: Sequence[str] = DSLS, backend: str = "cpu",
                   split: str | None = None, **kwargs: Any) -> list[dict]:
    """Rows in verifiers' layout: prompt (chat), answer (unused: the harness is the judge), info (the task
    under "kernel_task": verifiers reserves info["task"] for its own task payloads)."""
    return [{"prompt": r["prompt"], "answer": "",
             "info": {"kernel_task": r["task"], "dsl": r["dsl"], "backend": backend, "split": r["split"]}}
            for r in task_rows(tasks, dsls, backend, split, **kwargs)]
