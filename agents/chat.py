"""A chat agent for any OpenAI-compatible chat-completions endpoint (vLLM, SGLang, llama.cpp's server,
Ollama's /v1, hosted APIs): for evaluating model checkpoints in the environment.

Per episode it keeps one conversation: a system prompt, the first observation as the user's message, the
model's reply, then after each step a user message with that step's feedback (status, reward, the
harness's message), and so on, so that the model can repair its kernel across turns. The submission is
the code block of the reply (`kernelgym_gap.api.completions.extract_code`, the rule trainers use too).

HTTP is plain urllib (no SDK): POST {base_url}/chat/completions with JSON in and out. 429 and 5xx answers,
connection failures and timeouts are retried with exponential backoff (honouring Retry-After on 429, with
seeded jitter); each request has its own timeout, and when the retries are spent `act` raises
ChatEndpointError rather than scoring the model for the endpoint's failure.

Settings: base_url (or OPENAI_BASE_URL; the URL up to and including /v1), model (or OPENAI_MODEL), the API
key read from the environment variable named by api_key_env (OPENAI_API_KEY by default; none is sent when
it is unset, which local servers accept). Requests to a loopback address never go through an HTTP proxy
(a proxy from *_proxy variables applies to other hosts as urllib decides).

The tests (tests/test_chat.py) run this agent against a local HTTP server that speaks the chat-completions
protocol and answers with scripted completions: no model is involved there.
"""
from __future__ import annotations

import ipaddress
import json
import os
import random
import re
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from kernelgym_gap.api.completions import extract_code  # noqa: F401 - the rule lives with the batch API, shared
from kernelgym_gap.core.errors import HarnessError

RETRY_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504})

SYSTEM_PROMPT = """You are an expert GPU kernel engineer. You write {dsl} kernels that are correct first and \
then as fast as the hardware allows (close to the library operator and to the memory/compute roofline).
Answer with one complete, self-contained Python module in a single ```python fenced code block: imports, the \
{dsl} kernel, and the entry-point function the task names, which launches the kernel and returns a new \
torch.Tensor. Do not call the PyTorch operator you are replacing. After each submission you will be told how \
it was evaluated; reply with a corrected or faster module in the same form."""

FOLLOW_UP = """Your submission for step {step} was evaluated.
{feedback}

Reply with the complete revised module in one ```python code block ({remaining} submission(s) left)."""


class ChatEndpointError(HarnessError):
    """The endpoint could not be reached or kept failing: not the model's submission failing."""


class ChatTimeoutError(ChatEndpointError):
    """The endpoint did not answer within the timeout, on every attempt."""


def _feedback_section(observation: str) -> str:
    marker = "## Feedback from the previous step"
    i = observation.find(marker)
    return observation[i + len(marker):].strip() if i >= 0 else ""


def _entry_point(observation: str) -> str | None:
    m = re.search(r"Define a top-level function `(\w+)\(", observation)
    return m.group(1) if m else None


class ChatAgent:
    name = "chat"

    def __init__(self, base_url: str | None = None, model: str | None = None, api_key: str | None = None,
                 api_key_env: str = "OPENAI_API_KEY", temperature: float | None = 0.0,
                 max_tokens: int | None = None, timeout_s: float = 120.0, max_retries: int = 4,
                 backoff_s: float = 1.0, max_backoff_s: float = 30.0, seed: int | None = None,
                 system_prompt: str | None = None, max_history_turns: int | None = None,
                 extra_body: dict | None = None, sleep=time.sleep, **_ignored):
        self.base_url = (base_url or os.environ.get("OPENAI_BASE_URL") or "http://127.0.0.1:8000/v1").rstrip("/")
        self.model = model or os.environ.get("OPENAI_MODEL")
        if not self.model:
            raise ValueError("the chat agent needs a model name (--model, or OPENAI_MODEL)")
        self.api_key = api_key if api_key is not None else os.environ.get(api_key_env)
        self.temperature, self.max_tokens = temperature, max_tokens
        self.timeout_s, self.max_retries = float(timeout_s), int(max_retries)
        self.backoff_s, self.max_backoff_s = float(backoff_s), float(max_backoff_s)
        self.seed = seed
        self.system_prompt = system_prompt
        self.max_history_turns = max_history_turns
        self.extra_body = dict(extra_body or {})
        self._sleep = sleep
        self._jitter = random.Random(seed)
        self.messages: list[dict[str, str]] = []
        self.usage = {"prompt_tokens": 0, "completion_tokens": 0, "requests": 0, "retries": 0}
        self.last_reply: str | None = None
        self._entry: str | None = None
        self._step = 0
        self._max_steps = 1

    @property
    def url(self) -> str:
        return self.base_url if self.base_url.endswith("/chat/completions") else self.base_url + "/chat/completions"

    def _opener(self) -> urllib.request.OpenerDirector:
        if self.__dict__.get("_opener_cache") is None:
            host = urllib.parse.urlsplit(self.url).hostname or ""
            handlers = [urllib.request.ProxyHandler({})] if _is_loopback(host) else []
            self._opener_cache = urllib.request.build_opener(*handlers)
        return self._opener_cache

    # ---- the episode ------------------------------------------------------------------------------
    def reset(self, observation: str, info: dict[str, Any]) -> None:
        dsl = info.get("dsl", "triton")
        system = (self.system_prompt or SYSTEM_PROMPT).format(dsl=dsl)
        self.messages = [{"role": "system", "content": system}, {"role": "user", "content": observation}]
        self._entry = _entry_point(observation)
        self._step = 0
        self._max_steps = int(info.get("max_steps", 1))
        self.last_reply = None

    def act(self, observation: str, info: dict[str, Any]) -> str:
        if not self.messages:
            self.reset(observation, info)
        if self._step > 0:
            feedback = _feedback_section(observation) or self._feedback_from_info(info)
            self.messages.append({"role": "user", "content": FOLLOW_UP.format(
                step=self._step, feedback=feedback, remaining=max(self._max_steps - self._step, 1))})
        reply = self.complete(self._window())
        self.messages.append({"role": "assistant", "content": reply})
        self.last_reply = reply
        self._step += 1
        return extract_code(reply, self._entry)

    @staticmethod
    def _feedback_from_info(info: dict[str, Any]) -> str:
        lines = [f"status: {info.get('status')}   correct: {info.get('correct')}   reward: {info.get('reward')}"]
        if info.get("message"):
            lines.append(str(info["message"])[:4000])
        return "\n".join(lines)

    def _window(self) -> list[dict[str, str]]:
        """The conversation sent: all of it, or the system prompt, the task and the last turns."""
        if self.max_history_turns is None or len(self.messages) <= 2 + 2 * self.max_history_turns:
            return list(self.messages)
        return self.messages[:2] + self.messages[-2 * self.max_history_turns:]

    # ---- HTTP -------------------------------------------------------------------------------------
    def complete(self, messages: list[dict[str, str]]) -> str:
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        if self.temperature is not None:
            body["temperature"] = self.temperature
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        if self.seed is not None:
            body["seed"] = self.seed
        body.update(self.extra_body)
        data = self._post(json.dumps(body).encode("utf-8"))
        return self._content(data)

    def _post(self, payload: bytes) -> dict:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        last = ""
        timeouts = 0
        for attempt in range(self.max_retries + 1):
            retry_after = None
            req = urllib.request.Request(self.url, data=payload, headers=headers, method="POST")
            self.usage["requests"] += 1
            try:
                with self._opener().open(req, timeout=self.timeout_s) as resp:
                    raw = resp.read()
                try:
                    return json.loads(raw)
                except ValueError:
                    raise ChatEndpointError(f"{self.url} answered 200 with a body that is not JSON: "
                                            f"{raw[:200]!r}") from None
            except urllib.error.HTTPError as e:
                detail = e.read()[:500].decode("utf-8", "replace")
                last = f"HTTP {e.code}: {detail}"
                if e.code not in RETRY_STATUSES and e.code < 500:
                    raise ChatEndpointError(f"{self.url} refused the request ({last})") from None
                retry_after = _retry_after(e.headers.get("Retry-After") if e.headers else None)
            except (TimeoutError, socket.timeout) as e:
                timeouts += 1
                last = f"no answer within {self.timeout_s:g} s ({e})"
            except urllib.error.URLError as e:
                if isinstance(e.reason, (TimeoutError, socket.timeout)):
                    timeouts += 1
                    last = f"no answer within {self.timeout_s:g} s"
                else:
                    last = f"cannot reach the endpoint: {e.reason}"
            except (ConnectionError, OSError) as e:
                last = f"connection failed: {e}"
            if attempt == self.max_retries:
                break
            self.usage["retries"] += 1
            delay = min(self.backoff_s * 2 ** attempt, self.max_backoff_s) * (0.5 + self._jitter.random() / 2)
            if retry_after is not None:
                delay = min(max(delay, retry_after), self.max_backoff_s)
            self._sleep(delay)
        cls = ChatTimeoutError if timeouts == self.max_retries + 1 else ChatEndpointError
        raise cls(f"{self.url}: gave up after {self.max_retries + 1} attempt(s); last: {last}")

    def _content(self, data: dict) -> str:
        try:
            choice = data["choices"][0]
            content = choice["message"].get("content")
        except (KeyError, IndexError, TypeError, AttributeError):
            raise ChatEndpointError(f"{self.url}: not a chat-completions answer: {str(data)[:300]}") from None
        usage = data.get("usage") or {}
        for k in ("prompt_tokens", "completion_tokens"):
            if isinstance(usage.get(k), int):
                self.usage[k] += usage[k]
        if isinstance(content, list):   # content parts
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        return content or ""


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        return None


def make_agent(**kwargs) -> ChatAgent:
    return ChatAgent(**kwargs)
