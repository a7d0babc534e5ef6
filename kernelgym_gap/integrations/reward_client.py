"""The reward server's clients: `RewardClient` (Python), `compute_score` (verl's custom reward function) and
`reward_func` (OpenRLHF's custom reward file: `--remote_rm_url <path of this file>`), all sending the token
as `Authorization: Bearer` (the only form the server takes).

Retries are idempotent: each batch gets a request id (`request_id`, a fresh uuid unless given), sent again
unchanged on every retry, so a batch the server already answered is answered from its request log and one
in flight is joined, never evaluated twice. The client retries connection errors (the server restarting,
a connection cut mid-answer), 429 and 503 (after Retry-After) with exponential backoff, for `retry_for_s` in
all; any other refusal raises RewardServerError at once, with the server's reason."""
from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Sequence
from typing import Any

TOKEN_ENV, URL_ENV = "KERNELGYM_GAP_TOKEN", "KERNELGYM_GAP_REWARD_URL"


class RewardServerError(RuntimeError):
    """The server refused the batch (its status and reason), or did not answer within the retry time."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class RewardClient:
    """`RewardClient("http://host:8100", token).score([{"task": "GELU", "completion": reply}])` returns the
    server's JSON: rewards, terms, records (None for an invalid item) and errors (which items were bad)."""

    def __init__(self, url: str | None = None, token: str | None = None, timeout: float = 3600.0,
                 retry_for_s: float = 600.0, client_id: str | None = None):
        self.url = (url or os.environ.get(URL_ENV) or "").rstrip("/")
        if not self.url:
            raise ValueError(f"no reward server url (url= or ${URL_ENV})")
        self.token = token or os.environ.get(TOKEN_ENV)
        self.timeout, self.retry_for_s = timeout, retry_for_s
        # the server's fairness is per client: one queue per trainer process
        self.client_id = client_id or f"{socket.gethostname()[:40]}:{os.getpid()}"
        self.attempts = 0           # requests sent, retries included (the load script reads it)

    def _post(self, path: str, body: dict) -> dict:
        import httpx
        headers = {"X-Client-Id": self.client_id}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        deadline = time.monotonic() + self.retry_for_s
        delay = 0.5
        while True:
            self.attempts += 1
            try:
                r = httpx.post(self.url + path, json=body, headers=headers, timeout=self.timeout)
            except httpx.TransportError as e:         # refused, reset, cut mid-answer: the server restarts
                wait, why = delay, f"{type(e).__name__}: {e}"
            else:
                if r.status_code == 200:
                    return r.json()
                if r.status_code not in (429, 503):
                    raise RewardServerError(f"reward server answered {r.status_code}: {r.text[:500]}", r.status_code)
                try:
                    wait = max(delay, float(r.headers.get("retry-after", delay)))
                except ValueError:
                    wait = delay
                why = f"{r.status_code}: {r.text[:200]}"
            if time.monotonic() + wait > deadline:
                raise RewardServerError(f"reward server did not answer within {self.retry_for_s:g} s (last: {why})")
            time.sleep(wait)
            delay = min(delay * 2, 30.0)

    def score(self, items: Sequence[dict], failure_reward: float = 0.0, request_id: str | None = None) -> dict:
        return self._post("/score", {"items": list(items), "failure_reward": failure_reward,
                                     "request_id": request_id or uuid.uuid4().hex})

    def rewards(self, items: Sequence[dict], failure_reward: float = 0.0) -> list[float]:
        return self.score(items, failure_reward)["rewards"]


def compute_score(data_source: Any, solution_str: str, ground_truth: Any = None, extra_info: dict | None = None,
                  *, url: str | None = None, token: str | None = None, dsl: str | None = None,
                  failure_reward: float = 0.0, **kwargs: Any) -> dict:
    """verl's custom reward function, scored by a reward server (see integrations.verl for the local one).
    The task and DSL are read as there; the server's backend is the server's. An unknown task comes back as
    this sample's failure (terms["status"] == "invalid_item", terms["reason"]), never an exception."""
    info = extra_info if isinstance(extra_info, dict) else {}
    item = {"task": str(info.get("task") or data_source), "dsl": str(info.get("dsl") or dsl or "triton"),
            "completion": solution_str or ""}
    return RewardClient(url, token).score([item], failure_reward)["terms"][0]


def reward_func(queries: Sequence[str], prompts: Sequence[str], labels: Sequence[str], **kwargs: Any) -> dict:
    """OpenRLHF's custom reward function (`--remote_rm_url /path/to/reward_client.py --label_key task`): the
    label is the task, the reply is the query less its prompt; url and token from $KERNELGYM_GAP_REWARD_URL
    and $KERNELGYM_GAP_TOKEN. OpenRLHF's plain remote URL mode sends no token; this file sends it."""
    items = [{"task": str(label), "completion": q[len(p):] if isinstance(p, str) and q.startswith(p) else q}
             for q, p, label in zip(queries, prompts, labels)]
    out = RewardClient().score(items)
    rewards, correct = out["rewards"], [t["correct"] for t in out["terms"]]
    try:
        import torch
        rewards_t = torch.tensor(rewards, dtype=torch.float32)
        return {"rewards": rewards_t, "scores": rewards_t, "extra_logs": {"correct": torch.tensor(correct)}}
    except ImportError:
        return {"rewards": rewards, "scores": rewards, "extra_logs": {"correct": correct}}
