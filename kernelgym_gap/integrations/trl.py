"""TRL: a reward function for `GRPOTrainer(reward_funcs=...)` and an environment for `environment_factory=`.

    from trl import GRPOConfig, GRPOTrainer
    from kernelgym_gap.integrations.datasets import task_dataset
    from kernelgym_gap.integrations.trl import reward_function

    trainer = GRPOTrainer(model=..., reward_funcs=reward_function(backend="cuda"),
                          train_dataset=task_dataset(backend="cuda", split="train"), args=GRPOConfig(...))

`reward_function(...)` returns `f(prompts, completions, task=[ids], **columns) -> list[float]`, TRL's custom
reward shape: the task of each completion from a dataset column (default "task"; ids or names as
`kernelgym-gap tasks` prints them, e.g. "GELU"), the DSL from the "dsl" column when there is one, the code
from the completion's fenced block (`api.completions.extract_code`; chat completions: the assistant
messages), one float per completion (the record's reward; a failed evaluation scores `failure_reward`, 0 by
default; a row whose task is None scores None, "not applicable", which TRL ignores; so does an `unverified`
record, not scored: docs/backends.md; an unknown task or dsl is that row's failure, status `invalid_item`
with the reason in `f.last_records`, never an exception in the trainer). All completions of a
call are scored at once through the batch path (`scorer.Scorer`: evaluate_many, the result cache, the warm
pool with warm=True). The function also logs, through the `log_metric` / `log_extra` hooks TRL passes,
the fraction of correct kernels and each completion's status.

`KernelToolEnv` is an environment for `environment_factory=` (TRL >= 1.0 with transformers >= 5.2): its
one public method `submit_kernel(source)` is the model's tool (the feedback text back), `reset(**row)` picks
the row's task, `get_reward()` is the last submission's reward. `environment_factory(backend=..., ...)`
returns a factory with settings. TRL calls the tools of different rollouts one after another, so each tool
call is one evaluation (cached, and warm with warm=True); a reward function scores a whole batch at once.

Tasks outside tasks/ (`import kernelbench`'s output, a user's own): pass the same `tasks_dir=` (a directory,
or several, core/registry.TaskSource) to `task_dataset` and to `reward_function` / `environment_factory`.
"""
from __future__ import annotations

import functools
import random
from collections.abc import Callable, Sequence
from typing import Any

from kernelgym_gap.core.registry import task_source
from kernelgym_gap.integrations.scorer import Scorer, completion_text, shared_scorer
from kernelgym_gap.integrations.terms import feedback_of, number_reward, reward_of

DEFAULT_NAME = "kernelgym_gap"


def with_source(settings: dict, tasks_dir: Any, scorer: Scorer | None) -> dict:
    """The Scorer settings with the task source's registry (tasks_dir=: one directory or several). A Scorer
    passed in has its own registry already: naming a source beside it is refused, not silently dropped."""
    if tasks_dir is None:
        return settings
    if scorer is not None or "registry" in settings:
        raise ValueError("pass tasks_dir= or a scorer= / registry= (which has its tasks already), not both")
    return {**settings, "registry": task_source(tasks_dir)}


def _column(values: Any, n: int, default: Any) -> list:
    if values is None:
        return [default] * n
    if isinstance(values, str):
        return [values] * n
    values = list(values)
    if len(values) != n:
        raise ValueError(f"a column has {len(values)} values for {n} completions")
    return values


def reward_function(backend: str = "auto", dsl: str = "triton", failure_reward: float = 0.0, *,
                    task_column: str = "task", dsl_column: str = "dsl", scorer: Scorer | None = None,
                    name: str = DEFAULT_NAME, log: bool = True, tasks_dir: Any = None,
                    **scorer_settings: Any) -> Callable[..., list]:
    """A TRL reward function (module docstring). backend: "cpu", "cuda" or "auto"; dsl: the DSL when the
    dataset has no `dsl_column`; failure_reward: the score of a failed evaluation; scorer: a Scorer to share
    (else one is made from `scorer_settings`: config, workers, warm, store, ray, ...). The function's
    `__name__` (`name`) is what TRL logs it under (`rewards/<name>/mean`); `f.scorer` is its Scorer and
    `f.last_records` the records of its last call, one per completion (None where the row had no task).
    tasks_dir: where the tasks are (module docstring; None: the built-in tasks)."""
    scorer_settings = with_source(scorer_settings, tasks_dir, scorer)
    scorer = scorer or Scorer(backend, **scorer_settings)

    def reward(prompts: Sequence | None = None, completions: Sequence | None = None, **kwargs: Any) -> list:
        completions = list(completions or [])
        n = len(completions)
        if task_column not in kwargs:
            raise ValueError(f"the dataset has no {task_column!r} column: the reward needs each row's task "
                             f"(task_dataset() makes one; or reward_function(task_column=...))")
        tasks = _column(kwargs[task_column], n, None)
        dsls = _column(kwargs.get(dsl_column), n, dsl)
        items, where = [], []
        for i, (task, completion, d) in enumerate(zip(tasks, completions, dsls)):
            if task is None:
                continue
            items.append((task, completion_text(completion), d or dsl))
            where.append(i)
        records = scorer.score_replies(items)       # an item it cannot evaluate: a RejectedItem, not a raise
        rewards: list[float | None] = [None] * n
        for i, record in zip(where, records):
            rewards[i] = reward_of(record, failure_reward)
        aligned: list = [None] * n       # one per completion, like the rewards: None where the row has no task
        for i, record in zip(where, records):
            aligned[i] = record
        reward.last_records = aligned
        if log and records:
            log_metric, log_extra = kwargs.get("log_metric"), kwargs.get("log_extra")
            if callable(log_metric):
                log_metric(f"{name}/correct", sum(1.0 for r in records if r.correct) / len(records))
            if callable(log_extra):
                status = [None] * n
                for i, record in zip(where, records):
                    status[i] = record.status.value
                log_extra(f"{name}/status", status)
        return rewards

    reward.__name__ = reward.__qualname__ = name
    reward.scorer = scorer
    reward.last_records = []
    return reward


class KernelToolEnv:
    """One rollout's kernel task for TRL's `environment_factory` (module docstring). Only `reset`,
    `get_reward` and the tool `submit_kernel` are public: TRL exposes every other public method as a tool."""

    def __init__(self, backend: str = "auto", dsl: str = "triton", failure_reward: float = 0.0,
                 tasks: Sequence[str] | None = None, max_submissions: int = 4, scorer: Scorer | None = None,
                 tasks_dir: Any = None, **scorer_settings: Any):
        self._scorer = scorer or shared_scorer(backend, **with_source(scorer_settings, tasks_dir, scorer))
        self._dsl_default, self._failure = dsl, float(failure_reward)
        self._tasks = list(tasks) if tasks else [t.name for t in self._scorer.registry]
        self._max = max_submissions
        self._task: str | None = None
        self._dsl = dsl
        self._records: list = []

    def reset(self, **kwargs: Any) -> str | None:
        """Starts a rollout on the row's task (`task` column; else one drawn from `tasks`). Returns the
        task's observation text when the row carries no prompt of its own, else None (the prompt has it)."""
        from kernelgym_gap.api.env import observation_text
        self._task = str(kwargs.get("task") or random.choice(self._tasks))
        self._dsl = str(kwargs.get("dsl") or self._dsl_default)
        self._records = []
        if kwargs.get("prompt"):
            return None
        try:
            task = self._scorer.registry.get(self._task)
        except KeyError as e:           # UnknownTaskError: the rollout goes on; each submission is its failure
            return f"not a task here: {e}"
        return observation_text(task, self._dsl, self._scorer.backend, 0, self._max, "")

    def submit_kernel(self, source: str) -> str:
        """Evaluate a kernel for the current task and return the evaluation's feedback.

        Args:
            source: The complete Python module: imports, the kernel, and the entry-point function.

        Returns:
            The status, correctness, reward and the harness's message for this submission.
        """
        if self._task is None:
            raise RuntimeError("reset() first")
        if len(self._records) >= self._max:
            return f"the submission budget ({self._max}) is spent; the last reward stands"
        record = self._scorer.score_replies([(self._task, source, self._dsl)])[0]
        self._records.append(record)
        return feedback_of(record)

    def get_reward(self) -> float:
        """The last submission's reward (failure_reward when nothing was submitted)."""
        return number_reward(self._records[-1], self._failure) if self._records else self._failure


def environment_factory(backend: str = "auto", scorer: Scorer | None = None,
                        **settings: Any) -> Callable[[], KernelToolEnv]:
    """`GRPOTrainer(environment_factory=environment_factory(backend="cuda", max_submissions=4))`: a factory
    whose environments share one Scorer (cache, warm pool). Settings: KernelToolEnv's (dsl, failure_reward,
    tasks, max_submissions) and the Scorer's (config, workers, warm, store, ray, tasks_dir)."""
    if scorer is None:
        own = {k: settings.pop(k) for k in ("config", "workers", "warm", "store", "ray") if k in settings}
        scorer = shared_scorer(backend, **with_source(own, settings.pop("tasks_dir", None), None))
    return functools.partial(KernelToolEnv, scorer=scorer, **settings)
