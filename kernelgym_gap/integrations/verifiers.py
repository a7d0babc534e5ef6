"""verifiers (prime-rl, the Environments Hub): `load_environment(...)` returns a `vf.Environment`.

    import kernelgym_gap.integrations.verifiers as kg
    env = kg.load_environment(backend="cuda", tasks=["GELU", "Softmax"])            # single turn
    env = kg.load_environment(backend="cuda", multi_turn=True, max_turns=4)         # feedback, then revise

Written against verifiers' classic environment API (`vf.SingleTurnEnv`, `vf.MultiTurnEnv`, `vf.Rubric`:
verifiers 0.1.x to 0.3.x, where 0.3 serves it from `verifiers.legacy`); verifiers 0.4 dropped that API for
its v1 taskset/harness stack, which this module does not target (the `[verifiers]` extra pins `<0.4`).

* Tasks: the built-in ones, or `tasks_dir=` (a directory such as `import kernelbench`'s output, or several:
  core/registry.TaskSource), the same source for the dataset and the rubric's Scorer.
* Dataset: `datasets.verifiers_rows` (chat prompt: the environment's observation text; `info` with
  kernel_task, dsl, backend: verifiers reserves info["task"]).
* Rubric: `kernel_reward` (weight 1; the record's reward, `failure_reward` for a failed evaluation) and
  `kernel_correct` (a metric, weight 0). Individual reward functions of a group are awaited together
  (`asyncio.gather`), and each goes to one shared Scorer, which evaluates what arrives together as one
  `evaluate_many` batch (cache in front).
* Multi-turn: after each reply the environment evaluates its code and answers with the feedback text (status,
  message, E and U on cuda); the rollout stops at a correct kernel when `stop_when_correct` (default: on the
  cpu backend, where correctness is all the reward measures) or after `max_turns` replies. The reward is the
  last reply's.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kernelgym_gap.integrations.scorer import Scorer, completion_text, shared_scorer
from kernelgym_gap.integrations.terms import feedback_of, number_reward, rejected_future

RECORDS = "kernelgym_records"          # state key: the records of a rollout's evaluated replies
EVALUATED = "kernelgym_evaluated"      # state key: how many replies of the rollout have been evaluated


def _vf():
    import verifiers as vf
    if not hasattr(vf, "MultiTurnEnv"):
        raise ImportError(f"verifiers {getattr(vf, '__version__', '?')} has no classic environment API "
                          "(vf.MultiTurnEnv); install the [verifiers] extra (verifiers<0.4)")
    return vf


def _last_reply(messages: Any) -> str:
    """The text of the last assistant message."""
    msgs = list(messages or [])
    for m in reversed(msgs):
        role = m.get("role") if isinstance(m, dict) else getattr(m, "role", None)
        if role == "assistant":
            return completion_text([m])
    return completion_text(messages) if isinstance(messages, str) else ""


async def _evaluate_reply(scorer: Scorer, info: dict, reply: str):
    """The reply's record; a RejectedItem (that rollout's failure, with the reason) when the row has no
    kernel_task or names an unknown task or dsl: never an exception in the rollout."""
    import asyncio
    if not info.get("kernel_task"):
        f = rejected_future(None, info.get("dsl"), "not evaluated: a kernelgym_gap rollout needs "
                                                   "info['kernel_task'] (verifiers_rows makes it)")
    else:
        f = scorer.submit_replies([(info["kernel_task"], reply, info.get("dsl") or "triton")])[0]
    return await asyncio.wrap_future(f)


def _info(state) -> dict:
    info = state.get("info") or {}
    return info if isinstance(info, dict) else {}


def make_rubric(scorer: Scorer, failure_reward: float = 0.0):
    """The rubric: kernel_reward (weight 1) and kernel_correct (weight 0)."""
    vf = _vf()

    async def kernel_reward(completion, state, **kwargs) -> float:
        records = state.setdefault(RECORDS, [])
        replies = [m for m in (completion or []) if (m.get("role") if isinstance(m, dict)
                                                      else getattr(m, "role", None)) == "assistant"]
        if len(replies) > state.get(EVALUATED, 0):        # the last reply was not evaluated during the rollout
            records.append(await _evaluate_reply(scorer, _info(state), _last_reply(completion)))
            state[EVALUATED] = len(replies)
        return number_reward(records[-1], failure_reward) if records else float(failure_reward)

    async def kernel_correct(state, **kwargs) -> float:
        records = state.get(RECORDS) or []
        return 1.0 if records and records[-1].correct else 0.0

    return vf.Rubric(funcs=[kernel_reward, kernel_correct], weights=[1.0, 0.0])


def load_environment(tasks: Sequence[str] | None = None, dsls: Sequence[str] = ("triton",), backend: str = "auto",
                     multi_turn: bool = False, max_turns: int = 4, failure_reward: float = 0.0,
                     split: str | None = "train", eval_split: str | None = "test",
                     stop_when_correct: bool | None = None, scorer: Scorer | None = None,
                     system_prompt: str | None = None, tasks_dir: Any = None, **scorer_settings: Any):
    """A verifiers environment over the tasks (module docstring). tasks: names (None: all); dsls: the DSLs
    to include; backend: "cpu", "cuda" or "auto"; split / eval_split: the dataset and eval dataset splits
    (datasets.task_split; None: every task); scorer: a Scorer to share (else a process-wide one per
    settings: config, workers, warm, store, ray); tasks_dir: the task source (module docstring)."""
    vf = _vf()
    import datasets
    from kernelgym_gap.integrations.datasets import SYSTEM_PROMPT, verifiers_rows
    from kernelgym_gap.integrations.trl import with_source
    scorer = scorer or shared_scorer(backend, **with_source(scorer_settings, tasks_dir, scorer))
    backend = scorer.backend
    rows_kw = {"system_prompt": system_prompt or SYSTEM_PROMPT, "max_steps": max_turns if multi_turn else 1,
               "registry": scorer.registry}     # the rows and the rubric read the same tasks

    def rows(s):
        return verifiers_rows(tasks, dsls, backend, s, **rows_kw)
    train = rows(split) or rows(None)               # a task list that is all "test" still trains
    evals = rows(eval_split) if eval_split else []
    kwargs: dict[str, Any] = {"dataset": datasets.Dataset.from_list(train),
                              "rubric": make_rubric(scorer, failure_reward)}
    if evals:
        kwargs["eval_dataset"] = datasets.Dataset.from_list(evals)
    if not multi_turn:
        return vf.SingleTurnEnv(**kwargs)
    if stop_when_correct is None:
        from kernelgym_gap.core.backend import backend as backend_info
        stop_when_correct = not backend_info(backend).measures_time
    return _multi_turn_class(vf)(scorer=scorer, stop_when_correct=stop_when_correct, max_turns=max_turns,
                                 **kwargs)


def _multi_turn_class(vf):
    class KernelMultiTurnEnv(vf.MultiTurnEnv):
        """Each reply is evaluated; the feedback is the next user message (module docstring)."""

        def __init__(self, scorer: Scorer, stop_when_correct: bool, **kwargs):
            super().__init__(**kwargs)
            self.kg_scorer, self.kg_stop_when_correct = scorer, stop_when_correct

        async def env_response(self, messages, state, **kwargs):
            record = await _evaluate_reply(self.kg_scorer, _info(state), _last_reply(messages))
            state.setdefault(RECORDS, []).append(record)
            state[EVALUATED] = state.get(EVALUATED, 0) + 1
            text = feedback_of(record)
            if record.correct and self.kg_stop_when_correct:
                state["final_env_response"] = [{"role": "user", "content": text}]
                return state["final_env_response"]
            return [{"role": "user", "content": text + "\n\nRevise the kernel and answer with the whole "
                                                        "module in one ```python block."}]

    return KernelMultiTurnEnv
