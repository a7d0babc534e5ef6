"""The chat agent against a local HTTP server that speaks the OpenAI chat-completions protocol and answers
with SCRIPTED completions (no model anywhere; only loopback traffic): prompts, multi-turn feedback, code
extraction, the API key, retries, timeouts, and one real episode through the CLI."""
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from kernelgym_gap.cli import main as cli
from kernelgym_gap.api.agent import load_agent
from kernelgym_gap.api.completions import extract_code
from kernelgym_gap.api.env import KernelEnv
from kernelgym_gap.core.record import EvalRecord
from kernelgym_gap.core.status import Status


class ScriptedServer:
    """POST /v1/chat/completions answers from `script`, one item per request:
    a str (the completion), ("status", code, headers), ("sleep", seconds, str), ("raw", bytes)."""

    def __init__(self):
        self.script: list = []
        self.requests: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append({"path": self.path, "body": body, "headers": dict(self.headers)})
                item = server.script.pop(0) if server.script else "no script left"
                if isinstance(item, tuple) and item[0] == "status":
                    self.send_response(item[1])
                    for k, v in (item[2] if len(item) > 2 else {}).items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(b'{"error": {"message": "scripted failure"}}')
                    return
                if isinstance(item, tuple) and item[0] == "sleep":
                    time.sleep(item[1])
                    item = item[2]
                payload = item[1] if isinstance(item, tuple) and item[0] == "raw" else json.dumps({
                    "id": f"cmpl-{len(server.requests)}", "object": "chat.completion", "model": body["model"],
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": item}}],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                try:
                    self.wfile.write(payload)
                except OSError:
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    s = ScriptedServer()
    yield s
    s.close()


@pytest.fixture
def chat_mod():
    load_agent("chat", model="m")
    return sys.modules["kernelgym_gap_agents.chat"]


def _agent(server, **kw):
    kw.setdefault("sleep", lambda s: None)
    return load_agent("chat", base_url=server.base_url, model="scripted-model", **kw)


def _record(status=Status.COMPILE_ERROR, reward=0.0, message="scripted feedback: line 3 is wrong"):
    return EvalRecord(task="kernelgym_gap/AddReLU-v0", task_version=0, dsl="triton", backend="cpu", status=status,
                      correct=status is Status.OK, reward=reward, reward_mode="correctness", terms={},
                      message=message)


def reference_source(registry) -> str:
    task = registry.get("AddReLU")
    return task.solution_path(task.solutions[0]).read_text()


def test_extract_code_rules():
    assert extract_code("Here:\n```python\ndef f():\n    return 1\n```\nDone.") == "def f():\n    return 1\n"
    two = "```python\ndef helper(): pass\n```\ntext\n```python\nimport x\ndef add_relu(x, y):\n    pass\n```\n"
    assert extract_code(two, "add_relu").startswith("import x\ndef add_relu")
    assert extract_code("<think>```python\ndef add_relu(): bad\n```</think>```py\ndef add_relu(): pass\n```",
                        "add_relu") == "def add_relu(): pass\n"
    assert extract_code("```bash\nls\n```\n```\ndef g(): pass\n```") == "def g(): pass\n"
    assert extract_code("```python\ndef cut_off(x):\n    return") == "def cut_off(x):\n    return\n"
    assert extract_code("def bare(): pass") == "def bare(): pass\n"
    assert extract_code("") == ""


def test_prompt_from_observation_and_multi_turn_feedback(server, registry):
    server.script = ["First try:\n```python\ndef add_relu(x, y):\n    return x\n```",
                     "Fixed:\n```python\n" + reference_source(registry) + "```"]
    seen = []

    def evaluate(task, source, dsl, backend, config):
        seen.append(source)
        return _record() if len(seen) == 1 else _record(Status.OK, 1.0, "")
    env = KernelEnv(task_id="AddReLU", backend="cpu", max_steps=3, evaluator=evaluate)
    agent = _agent(server, temperature=0.2, max_tokens=512, seed=7)
    from kernelgym_gap.cli.agents import run_episode
    ep = run_episode(env, agent, seed=0)
    assert [s["status"] for s in ep["steps"]] == ["compile_error", "ok"]      # a correct kernel ends it (cpu)
    assert seen[0] == "def add_relu(x, y):\n    return x\n" and seen[1] == reference_source(registry)
    first, second = (r["body"] for r in server.requests)
    assert server.requests[0]["path"] == "/v1/chat/completions"
    assert first["model"] == "scripted-model" and first["temperature"] == 0.2 and first["max_tokens"] == 512
    assert first["seed"] == 7
    roles = [m["role"] for m in first["messages"]]
    assert roles == ["system", "user"] and "triton" in first["messages"][0]["content"]
    task_msg = first["messages"][1]["content"]
    assert "kernelgym_gap/AddReLU-v0" in task_msg and "add_relu(x: Tensor[M, N]" in task_msg
    assert "torch.relu(x + y)" in task_msg                                   # the reference source
    # turn two carries the whole conversation and the step's feedback
    assert [m["role"] for m in second["messages"]] == ["system", "user", "assistant", "user"]
    assert second["messages"][2]["content"].startswith("First try:")
    follow = second["messages"][3]["content"]
    assert "compile_error" in follow and "scripted feedback: line 3 is wrong" in follow
    assert "(2 submission(s) left)" in follow
    assert agent.usage["prompt_tokens"] == 20 and agent.usage["requests"] == 2


def test_api_key_from_the_named_environment_variable(server, monkeypatch):
    monkeypatch.setenv("MY_ENDPOINT_KEY", "sk-test-123")
    server.script = ["```python\npass\n```", "```python\npass\n```"]
    agent = _agent(server, api_key_env="MY_ENDPOINT_KEY")
    agent.reset("obs", {"dsl": "triton", "max_steps": 1})
    agent.act("obs", {})
    assert server.requests[0]["headers"]["Authorization"] == "Bearer sk-test-123"
    monkeypatch.delenv("MY_ENDPOINT_KEY")
    agent = _agent(server, api_key_env="MY_ENDPOINT_KEY")
    agent.reset("obs", {"dsl": "triton", "max_steps": 1})
    agent.act("obs", {})
    assert "Authorization" not in server.requests[1]["headers"]


def test_retries_on_429_and_5xx_with_backoff(server):
    server.script = [("status", 429, {"Retry-After": "2"}), ("status", 503), "```python\ndef ok(): pass\n```"]
    sleeps = []
    agent = _agent(server, sleep=sleeps.append, max_retries=3, backoff_s=0.5, seed=1)
    agent.reset("obs", {"dsl": "triton", "max_steps": 1})
    assert agent.act("obs", {}) == "def ok(): pass\n"
    assert len(server.requests) == 3 and agent.usage["retries"] == 2
    assert sleeps[0] >= 2.0                                  # Retry-After honoured
    assert 0.25 <= sleeps[1] <= 1.0                          # 0.5 * 2**1 with jitter in [0.5, 1]


def test_a_refusal_is_not_retried(server, chat_mod):
    server.script = [("status", 401), "never sent"]
    agent = _agent(server)
    agent.reset("obs", {"dsl": "triton", "max_steps": 1})
    with pytest.raises(chat_mod.ChatEndpointError, match="HTTP 401"):
        agent.act("obs", {})
    assert len(server.requests) == 1


def test_timeouts_are_retried_then_reported(server, chat_mod):
    server.script = [("sleep", 1.0, "late"), ("sleep", 1.0, "late")]
    agent = _agent(server, timeout_s=0.2, max_retries=1)
    agent.reset("obs", {"dsl": "triton", "max_steps": 1})
    t = time.perf_counter()
    with pytest.raises(chat_mod.ChatTimeoutError, match="gave up after 2 attempt"):
        agent.act("obs", {})
    assert time.perf_counter() - t < 5
    server.script = [("sleep", 0.6, "late"), "```python\ndef fine(): pass\n```"]
    agent = _agent(server, timeout_s=0.3, max_retries=2)
    agent.reset("obs", {"dsl": "triton", "max_steps": 1})
    assert agent.act("obs", {}) == "def fine(): pass\n"


def test_garbage_answers_are_endpoint_errors(server, chat_mod):
    server.script = [("raw", b"not json at all")]
    agent = _agent(server, max_retries=0)
    agent.reset("obs", {"dsl": "triton", "max_steps": 1})
    with pytest.raises(chat_mod.ChatEndpointError, match="not JSON"):
        agent.act("obs", {})
    server.script = [("raw", b'{"choices": []}')]
    with pytest.raises(chat_mod.ChatEndpointError, match="not a chat-completions answer"):
        agent.act("obs", {})


def test_unreachable_endpoint_stops_the_episode_with_exit_3(capsys, monkeypatch):
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()                               # nothing listens there now
    monkeypatch.setattr("kernelgym_gap.engine.pipeline.evaluate", lambda *a, **k: pytest.fail("nothing to evaluate"))
    rc = cli.main(["episode", "--agent", "chat", "--task", "AddReLU", "--backend", "cpu",
                   "--base-url", f"http://127.0.0.1:{port}/v1", "--model", "m", "--max-retries", "1",
                   "--agent-arg", "backoff_s=0.01", "--json"])
    captured = capsys.readouterr()
    assert rc == 3
    assert json.loads(captured.out)["steps"] == []
    assert "cannot reach the endpoint" in captured.err


def test_chat_episode_through_the_cli_with_a_real_evaluation(server, registry, capsys):
    """One command, as a user would point the agent at a served model: a scripted wrong answer (the gate
    rejects it, no child runs), then the reference solution, evaluated for real on the cpu backend."""
    server.script = ["```python\ndef add_relu(x, y):\n    return (\n```",
                     "```python\n" + reference_source(registry) + "```"]
    rc = cli.main(["episode", "--agent", "chat", "--task", "AddReLU", "--backend", "cpu", "--steps", "2",
                   "--base-url", server.base_url, "--model", "scripted-model", "--seed", "0", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert [s["status"] for s in out["steps"]] == ["syntax_error", "ok"]
    assert out["best"]["reward"] == 1.0 and out["usage"]["requests"] == 2
    assert "syntax_error" in server.requests[1]["body"]["messages"][-1]["content"]
