"""verl: `compute_score` for `reward.custom_reward_function`, loadable by path.

    reward.custom_reward_function.path=$(python -c "import kernelgym_gap.integrations.verl as m; print(m.__file__)")
    reward.custom_reward_function.name=compute_score          # or compute_score_batch with the batch manager
    +reward.custom_reward_function.reward_kwargs.backend=cuda
    +reward.custom_reward_function.reward_kwargs.tasks_dir=/data/kb_tasks   # tasks outside tasks/ (imported)

`compute_score(data_source, solution_str, ground_truth, extra_info=None, **reward_kwargs)` returns a dict:
"score" (the record's reward; a failed evaluation scores `failure_reward`, 0 by default) and the record's
terms (scorer.record_terms: acc, correct, correctness, performance, E, U, status, reward_mode), which verl
logs as reward_extra_info. The task is `extra_info["task"]` when given, else `data_source` (a task id or
name); the backend `extra_info["backend"]`, else the `backend` reward kwarg, else "auto"; the DSL
`extra_info["dsl"]`, else the `dsl` kwarg, else "triton". The code is the reply's fenced block
(`extract_code`). A sample that cannot be evaluated (no task, an unknown task, dsl or backend, a reply that is
not text) scores `failure_reward` with status `invalid_item` and the `reason` in its terms: one sample's
failure, never an exception inside the trainer. An `unverified` record (not scored: docs/backends.md)
scores `failure_reward` with status `unverified`.

verl's reward managers call compute_score once per sample, from several executor threads at once; every
call goes to one process-wide Scorer per settings (`scorer.shared_scorer`), which coalesces the calls that
arrive together into one `evaluate_many` batch and caches results. `compute_score_async` is the same for
managers that await an async function; `compute_score_batch` takes verl's batch manager's lists
(`reward.reward_manager.name=batch`).

The tasks are the built-in ones unless the `tasks_dir` reward kwarg names another source (a directory such as
`import kernelbench`'s output, or a list of them, "builtin" among them: core/registry.TaskSource); the rows
must come from the same source (`verl_rows(tasks_dir=...)`). A source that cannot be loaded raises on the
first call: it is the run's configuration, not one sample's fault.

This file imports only kernelgym_gap (verl loads it with `importlib` by path, as a module of its own).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kernelgym_gap.core.errors import UnknownChoiceError
from kernelgym_gap.core.registry import task_source
from kernelgym_gap.integrations.scorer import record_terms, shared_scorer
from kernelgym_gap.integrations.terms import rejected_future

SCORER_SETTINGS = ("config", "workers", "warm", "store", "ray", "window_s")


def _request(data_source: Any, solution_str: Any, extra_info: Any, backend: str | None, dsl: str | None):
    info = extra_info if isinstance(extra_info, dict) else {}
    task = info.get("task") or data_source       # None: that sample's failure (_submit says why)
    return (task or None, str(info.get("backend") or backend or "auto"), str(info.get("dsl") or dsl or "triton"),
            "" if solution_str is None else solution_str)


def _scorer(backend: str, kwargs: dict):
    settings = {k: kwargs[k] for k in SCORER_SETTINGS if k in kwargs}
    if kwargs.get("tasks_dir") is not None:      # loaded once per process (task_source), shared by every call
        settings["registry"] = task_source(kwargs["tasks_dir"])
    return shared_scorer(backend, **settings)


def _submit(requests: list[tuple], kwargs: dict) -> list:
    """Futures in request order; requests of different backends go to their own Scorer."""
    futures: list = [None] * len(requests)
    by_backend: dict[str, list[int]] = {}
    for i, r in enumerate(requests):
        by_backend.setdefault(r[1], []).append(i)
    for backend, idx in by_backend.items():
        try:
            scorer = _scorer(backend, kwargs)
        except UnknownChoiceError as e:         # a sample's extra_info["backend"] that does not exist
            for i in idx:
                futures[i] = rejected_future(requests[i][0], requests[i][2], f"not evaluated: {e}")
            continue
        todo = []
        for i in idx:
            if requests[i][0] is None:
                futures[i] = rejected_future(None, requests[i][2], "not evaluated: compute_score needs the task: "
                                                                   "extra_info['task'] or data_source")
            else:
                todo.append(i)
        items = [(requests[i][0], requests[i][3], requests[i][2]) for i in todo]
        for i, f in zip(todo, scorer.submit_replies(items) if items else []):
            futures[i] = f
    return futures


def compute_score(data_source: Any, solution_str: str, ground_truth: Any = None, extra_info: dict | None = None,
                  *, backend: str | None = None, dsl: str | None = None, failure_reward: float = 0.0,
                  **kwargs: Any) -> dict[str, Any]:
    """One sample's score and terms (module docstring). Other keyword arguments (verl passes some of its
    own) are ignored, except the Scorer settings config, workers, warm, store, ray, window_s and the task
    source tasks_dir."""
    f = _submit([_request(data_source, solution_str, extra_info, backend, dsl)], kwargs)[0]
    return record_terms(f.result(), failure_reward)


async def compute_score_async(data_source: Any, solution_str: str, ground_truth: Any = None,
                              extra_info: dict | None = None, *, backend: str | None = None,
                              dsl: str | None = None, failure_reward: float = 0.0, **kwargs: Any) -> dict[str, Any]:
    """compute_score for reward managers that await an async function."""
    import asyncio
    f = _submit([_request(data_source, solution_str, extra_info, backend, dsl)], kwargs)[0]
    return record_terms(await asyncio.wrap_future(f), failure_reward)


def compute_score_batch(data_sources: Sequence[Any], solution_strs: Sequence[str],
                        ground_truths: Sequence[Any] | None = None, extra_infos: Sequence[dict] | None = None,
                        *, backend: str | None = None, dsl: str | None = None, failure_reward: float = 0.0,
                        **kwargs: Any) -> list[dict[str, Any]]:
    """verl's batch reward manager's shape: lists in, one dict per sample out, all evaluated as one batch."""
    n = len(solution_strs)
    infos = list(extra_infos) if extra_infos is not None else [None] * n
    requests = [_request(ds, s, info, backend, dsl) for ds, s, info in zip(list(data_sources), solution_strs, infos)]
    return [record_terms(f.result(), failure_reward) for f in _submit(requests, kwargs)]
