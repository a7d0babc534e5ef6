"""verifiers: load_environment builds a classic vf.Environment; one rollout runs with a scripted client (a
real openai.AsyncOpenAI whose HTTP transport answers scripted chat completions), scored by our rubric on the
cpu backend. Single turn, and multi turn (a broken kernel, the feedback, then the fix)."""
import json

import pytest

vf = pytest.importorskip("verifiers")
httpx = pytest.importorskip("httpx")
openai = pytest.importorskip("openai")

import kernelgym_gap.integrations.verifiers as kg_vf  # noqa: E402


def _replies(registry):
    task = registry.get("AddReLU")
    good = task.solution_path(task.solutions[0]).read_text()
    bad = good.replace("tl.maximum(s, 0.0)", "s")
    return f"```python\n{good}```", f"```python\n{bad}```"


def _scripted_client(replies, seen):
    """verifiers' OpenAI chat client over a transport that answers `replies` in turn."""
    from verifiers.legacy.clients import OpenAIChatCompletionsClient
    turn = iter(replies)

    def handle(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append(body["messages"])
        content = next(turn)
        return httpx.Response(200, json={
            "id": f"cmpl-{len(seen)}", "object": "chat.completion", "created": 0, "model": body["model"],
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}})
    http = httpx.AsyncClient(transport=httpx.MockTransport(handle))
    return OpenAIChatCompletionsClient(openai.AsyncOpenAI(api_key="scripted", base_url="http://scripted/v1",
                                                          http_client=http))


def _one_rollout(env, client):
    import asyncio
    row = env.get_dataset()[0]
    rollout_input = {"prompt": row["prompt"], "answer": row["answer"], "info": row["info"], "example_id": 0}
    return asyncio.run(env.run_rollout(rollout_input, client, "scripted-model", {}, state_columns=["info"]))


def test_single_turn_rollout_with_scripted_client(registry):
    good, bad = _replies(registry)
    env = kg_vf.load_environment(tasks=["AddReLU"], backend="cpu", split=None, eval_split=None, workers=2)
    assert isinstance(env, vf.SingleTurnEnv)
    row = env.get_dataset()[0]
    assert row["info"]["kernel_task"] == "AddReLU" and "add_relu" in row["prompt"][-1]["content"]
    seen = []
    out = _one_rollout(env, _scripted_client([good], seen))
    assert len(seen) == 1 and "AddReLU" in seen[0][-1]["content"]
    assert out["reward"] == 1.0 and out["metrics"]["kernel_correct"] == 1.0
    out = _one_rollout(env, _scripted_client([bad], []))
    assert out["reward"] == 0.0 and out["metrics"]["kernel_correct"] == 0.0


def test_multi_turn_rollout_feedback_then_fix(registry):
    good, bad = _replies(registry)
    env = kg_vf.load_environment(tasks=["AddReLU"], backend="cpu", multi_turn=True, max_turns=3, split=None,
                                 eval_split=None, workers=2)
    assert isinstance(env, vf.MultiTurnEnv)
    seen = []
    out = _one_rollout(env, _scripted_client([bad, good, bad], seen))
    assert len(seen) == 2                                 # stopped at the correct kernel (cpu backend)
    feedback = seen[1][-1]["content"]
    assert seen[1][-1]["role"] == "user" and "mismatch" in feedback
    assert out["reward"] == 1.0 and out["metrics"]["kernel_correct"] == 1.0


def test_the_documented_evaluate_sync_call_with_a_wrapped_client(registry):
    """docs/training.md's call: `evaluate_sync(client=OpenAIChatCompletionsClient(AsyncOpenAI(...)), ...)`. A
    bare openai client is refused by verifiers 0.3 ("Unsupported client type"), which the docs now say."""
    good, _ = _replies(registry)
    env = kg_vf.load_environment(backend="cpu", tasks=["AddReLU"], dsls=["triton"], workers=2)
    seen = []
    results = env.evaluate_sync(client=_scripted_client([good], seen), model="my-model", num_examples=1,
                                rollouts_per_example=1)
    assert len(seen) == 1 and [o["reward"] for o in results["outputs"]] == [1.0]
    with pytest.raises(ValueError, match="Unsupported client type"):
        env.evaluate_sync(client=openai.AsyncOpenAI(api_key="x", base_url="http://127.0.0.1:9/v1"),
                          model="my-model", num_examples=1, rollouts_per_example=1)
