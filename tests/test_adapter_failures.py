"""Every trainer adapter scores an item it cannot evaluate (an unknown task, no task, an unknown dsl or
backend, a reply that is not text) as that sample's failure: `failure_reward`, status `invalid_item` and the
reason in the logged terms, while the other samples of the batch are evaluated as usual. Before issue 37,
verl's compute_score raised UnknownTaskError inside the trainer (and ValueError for a row without a task),
TRL's reward function raised for the whole batch, and verifiers' rubric raised in the rollout."""
import asyncio

import pytest

from kernelgym_gap.integrations import verl
from kernelgym_gap.integrations.scorer import Scorer, record_terms, shared_scorer
from kernelgym_gap.integrations.terms import RejectedItem
from kernelgym_gap.integrations.trl import KernelToolEnv, reward_function

TERMS = {"score", "reward", "acc", "correct", "correctness", "performance", "E", "U", "status", "reward_mode",
         "reason"}


def _good(registry):
    task = registry.get("AddReLU")
    return "```python\n" + task.solution_path(task.solutions[0]).read_text() + "```\n"


def test_verl_compute_score_unknown_task_is_that_samples_failure():
    out = verl.compute_score("NoSuchTask", "```python\nx = 1\n```", None, {}, backend="cpu", failure_reward=-1.0)
    assert set(out) == TERMS
    assert out["score"] == -1.0 and out["status"] == "invalid_item" and "NoSuchTask" in out["reason"]
    out = verl.compute_score(None, "anything", None, None, backend="cpu")
    assert out["score"] == 0.0 and out["status"] == "invalid_item" and "needs the task" in out["reason"]
    out = verl.compute_score("GELU", "anything", None, {"dsl": "cuda-c"}, backend="cpu")
    assert out["status"] == "invalid_item" and "cuda-c" in out["reason"]
    out = verl.compute_score("GELU", "anything", None, {"backend": "tpu"}, backend="cpu")
    assert out["status"] == "invalid_item" and "tpu" in out["reason"]
    out = asyncio.run(verl.compute_score_async("NoSuchTask", "x", None, {}, backend="cpu"))
    assert out["status"] == "invalid_item"


def test_verl_batch_scores_the_good_sample_beside_bad_ones(registry):
    good = _good(registry)
    out = verl.compute_score_batch(["AddReLU", "NoSuchTask", "AddReLU", "AddReLU", None],
                                   [good, good, "", good, good],
                                   extra_infos=[None, None, None, {"dsl": "fortran"}, None], backend="cpu")
    assert [o["status"] for o in out] == ["ok", "invalid_item", "entry_point_missing", "invalid_item",
                                          "invalid_item"]
    assert [o["score"] for o in out] == [1.0, 0.0, 0.0, 0.0, 0.0]
    assert all(set(o) == TERMS for o in out)          # verl stacks the terms: the same keys for every sample
    assert out[0]["reason"] == "" and "NoSuchTask" in out[1]["reason"] and "fortran" in out[3]["reason"]


def test_trl_reward_function_isolates_bad_rows(registry):
    good = _good(registry)
    f = reward_function(backend="cpu", failure_reward=-0.5, scorer=shared_scorer("cpu"))
    rewards = f(prompts=["p"] * 5, completions=[good, good, "", 12345, good],
                task=["AddReLU", "NoSuchTask", "AddReLU", "AddReLU", "AddReLU"],
                dsl=["triton", "triton", "triton", "triton", "pascal"])
    assert rewards == [1.0, -0.5, -0.5, -0.5, -0.5]
    status = [r.status.value for r in f.last_records]
    assert status == ["ok", "invalid_item", "entry_point_missing", "entry_point_missing", "invalid_item"]
    assert isinstance(f.last_records[1], RejectedItem) and "NoSuchTask" in f.last_records[1].message
    assert record_terms(f.last_records[4], -0.5)["reason"].startswith("not evaluated: unknown dsl")


def test_trl_tool_environment_with_an_unknown_task():
    env = KernelToolEnv(backend="cpu", scorer=shared_scorer("cpu"))
    assert "NoSuchTask" in env.reset(task="NoSuchTask")          # no prompt of its own: says why, no raise
    env.reset(task="NoSuchTask", prompt=[{"role": "user", "content": "x"}])
    feedback = env.submit_kernel("def f(): pass")
    assert feedback.startswith("status: invalid_item") and "NoSuchTask" in feedback
    assert env.get_reward() == 0.0


def test_verifiers_reply_without_a_task_is_the_rollouts_failure():
    from kernelgym_gap.integrations.verifiers import _evaluate_reply
    scorer = shared_scorer("cpu")
    rec = asyncio.run(_evaluate_reply(scorer, {}, "```python\nx=1\n```"))
    assert rec.status.value == "invalid_item" and "kernel_task" in rec.message
    rec = asyncio.run(_evaluate_reply(scorer, {"kernel_task": "NoSuchTask"}, "x"))
    assert rec.status.value == "invalid_item" and "NoSuchTask" in rec.message


def test_score_replies_keeps_order_and_misuse_of_submit_many_still_raises():
    """submit_replies is the lenient path; submit_many (callers that hand over resolved sources) still
    refuses an unknown task at once, as documented."""
    s = Scorer("cpu")
    try:
        recs = s.score_replies([("NoSuchTask", "x", "triton"), ("GELU", None, "triton"), ("GELU", "x")])
        assert [r.status.value for r in recs] == ["invalid_item", "invalid_item", "entry_point_missing"]
        assert "text" in recs[1].message
        with pytest.raises(KeyError):
            s.submit_many([("NoSuchTask", "x", "triton")])
    finally:
        s.close()
