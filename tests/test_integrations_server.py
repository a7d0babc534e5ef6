"""The reward server over loopback (a real uvicorn on 127.0.0.1, under the shared serving layer's settings): a
batch answered with records, the token required, a malformed batch refused with 400 while the server stays
up, a bad item answered as that item's failure, a full queue refused with 429; and the datasets rows the
trainers read. The hardening of issue 32 (R2-R8, restarts): test_reward_server_hardening.py."""
import socket
import threading
import time

import pytest

httpx = pytest.importorskip("httpx")
uvicorn = pytest.importorskip("uvicorn")
pytest.importorskip("starlette")

from kernelgym_gap.integrations.reward_server import RewardClient, create_app  # noqa: E402
from kernelgym_gap.integrations.scorer import Scorer, shared_scorer  # noqa: E402

TOKEN = "s3cret-token"


class Served:
    def __init__(self, app, **settings):
        from kernelgym_gap.serving.protocol import server_config
        self.app = app
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.url = "http://127.0.0.1:%d" % self.sock.getsockname()[1]
        self.server = uvicorn.Server(server_config(app, **settings))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self):
        self.thread.start()
        for _ in range(200):
            if self.server.started:
                return self
            time.sleep(0.05)
        raise RuntimeError("the server did not start")

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()
        if hasattr(self.app, "close"):
            self.app.close()


def _sources(registry):
    task = registry.get("AddReLU")
    good = task.solution_path(task.solutions[0]).read_text()
    return good, good.replace("tl.maximum(s, 0.0)", "s")


def test_batch_over_loopback_token_and_malformed(registry):
    good, bad = _sources(registry)
    app = create_app(shared_scorer("cpu", workers=2), TOKEN, max_pending=16, max_items=8)
    with Served(app) as srv:
        items = [{"task": "AddReLU", "source": good}, {"task": "AddReLU", "completion": f"```python\n{bad}```"},
                 {"task": "kernelgym_gap/AddReLU-v0", "dsl": "triton", "source": good}]
        # no token, a wrong token: refused, nothing evaluated
        r = httpx.post(srv.url + "/score", json={"items": items})
        assert r.status_code == 401 and "token" in r.json()["error"]
        r = httpx.post(srv.url + "/score", json={"items": items}, headers={"Authorization": "Bearer nope"})
        assert r.status_code == 403
        # malformed batches: 400 and a reason
        auth = {"Authorization": f"Bearer {TOKEN}"}
        for body, why in [(b"{not json", "not JSON"), (b'{"items": []}', "empty"), (b'[1, 2]', "items"),
                          (b'{"items": [' + b'{"task": "GELU", "source": "x"},' * 8 + b'{"task": "GELU", "source": "x"}]}',
                           "at most")]:
            r = httpx.post(srv.url + "/score", content=body, headers=auth)
            assert r.status_code == 400 and why in r.json()["error"], (body[:40], r.text)
        # a bad item is that item's failure, never the batch's: the good item beside it is evaluated
        for item, why in [({"task": "NoSuchTask", "source": "x"}, "NoSuchTask"), ({"task": "GELU", "dsl": "cuda-c",
                           "source": "x"}, "dsl"), ({"task": "GELU", "source": "x", "completion": "y"}, "exactly one"),
                          ({"task": "GELU", "source": 5}, "string")]:
            r = httpx.post(srv.url + "/score", json={"items": [item, items[0]], "failure_reward": -1.0}, headers=auth,
                           timeout=600)
            assert r.status_code == 200, r.text
            out = r.json()
            assert out["rewards"] == [-1.0, 1.0] and out["records"][0] is None
            assert out["terms"][0]["status"] == "invalid_item" and why in out["terms"][0]["reason"]
            assert out["errors"] == [{"item": 0, "status": "invalid_item", "reason": out["terms"][0]["reason"]}]
        # the server is still up: a real batch, answered in order, with records
        out = RewardClient(srv.url, TOKEN, timeout=600).score(items)
        assert out["rewards"] == [1.0, 0.0, 1.0]
        # the records are their public view (engine/feedback.public_view): a trainer sees no held-out shape,
        # seed or reproduce call (issue 31)
        assert [r["status"] for r in out["records"]] == ["ok", "mismatch", "ok"]
        failed = out["records"][1]["failure"]["trial"]
        assert "shape" not in failed and "seed" not in failed or failed["split"] == "public"
        assert out["terms"][1]["status"] == "mismatch"
        # OpenRLHF's request shape: the label is the task, the reply is the query less its prompt
        r = httpx.post(srv.url + "/openrlhf", headers=auth, json={
            "query": ["PROMPT```python\n" + good + "```", "PROMPT" + bad], "prompts": ["PROMPT", "PROMPT"],
            "labels": ["AddReLU", "AddReLU"]}, timeout=600)
        assert r.status_code == 200 and r.json()["rewards"] == [1.0, 0.0]
        health = httpx.get(srv.url + "/health").json()
        assert health["ok"] and health["pending"] == 0 and health["served"] >= 5


def test_full_queue_is_refused_with_429(registry):
    from reward_fakes import fake_record
    scorer = Scorer("cpu", workers=1, evaluator=fake_record)
    app = create_app(scorer, TOKEN, max_pending=2)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with Served(app) as srv:
        first = {}

        def occupy():
            first["r"] = httpx.post(srv.url + "/score", headers=auth, timeout=60,
                                    json={"items": [{"task": "GELU", "source": "sleep:1.5 a"},
                                                    {"task": "GELU", "source": "sleep:1.5 b"}]})
        t = threading.Thread(target=occupy)
        t.start()
        for _ in range(100):
            if httpx.get(srv.url + "/health").json()["pending"] == 2:
                break
            time.sleep(0.02)
        r = httpx.post(srv.url + "/score", headers=auth, json={"items": [{"task": "GELU", "source": "c"}]})
        assert r.status_code == 429 and r.headers["retry-after"]
        t.join(60)
        assert first["r"].status_code == 200 and first["r"].json()["rewards"] == [1.0, 1.0]
        r = httpx.post(srv.url + "/score", headers=auth, json={"items": [{"task": "GELU", "source": "c"}]}, timeout=60)
        assert r.status_code == 200
    scorer.close()


def test_dataset_rows_for_each_trainer(registry):
    datasets = pytest.importorskip("datasets")
    from kernelgym_gap.integrations.datasets import task_dataset, task_dataset_dict, task_rows, verl_rows
    rows = task_rows(backend="cpu")
    assert {r["dsl"] for r in rows} == {"triton", "tilelang"} and {r["split"] for r in rows} == {"train", "test"}
    assert len({(r["task"], r["dsl"]) for r in rows}) == len(rows)
    by_task = {}
    for r in rows:                                             # a task's split is the same for every DSL
        by_task.setdefault(r["task"], set()).add(r["split"])
    assert all(len(s) == 1 for s in by_task.values())
    gelu = next(r for r in rows if r["task"] == "GELU" and r["dsl"] == "triton")
    assert [m["role"] for m in gelu["prompt"]] == ["system", "user"] and "`gelu(x" in gelu["prompt"][1]["content"]
    ds = task_dataset(tasks=["GELU", "AddReLU"], dsls=["triton"], backend="cpu")
    assert isinstance(ds, datasets.Dataset) and sorted(ds["task"]) == ["AddReLU", "GELU"]
    dd = task_dataset_dict(backend="cpu", test_tasks=["GELU"])
    assert set(dd["test"]["task"]) == {"GELU"} and "GELU" not in dd["train"]["task"]
    v = verl_rows(tasks=["GELU"], dsls=["triton"], backend="cpu")[0]
    assert v["extra_info"]["task"] == "GELU" and v["data_source"] == registry.get("GELU").id   # its current version


def test_serve_reward_maps_timed_shapes_into_the_config():
    import argparse

    from kernelgym_gap.cli.options import eval_config
    from kernelgym_gap.cli.serve_reward import add_commands
    parser = argparse.ArgumentParser()
    add_commands(parser.add_subparsers())
    assert eval_config(parser.parse_args(["serve-reward", "--timed-shapes", "2"])).timed_shapes == 2
    assert eval_config(parser.parse_args(["serve-reward"])).timed_shapes is None


def test_serve_reward_gpu_lays_the_slots_out_on_those_gpus(monkeypatch):
    # `--gpu` was parsed and then ignored: the slots were laid out on every visible GPU whatever it said
    import argparse
    import types

    from kernelgym_gap.cli import serve_reward
    from kernelgym_gap.integrations import reward_slots
    parser = argparse.ArgumentParser()
    serve_reward.add_commands(parser.add_subparsers())
    seen = {}

    class FakeScorer:
        def __init__(self, backend, **kw):
            seen.update(kw, backend=backend)
            self.backend = backend

        def close(self):
            pass

    def fake_app(scorer, token, **kw):
        return types.SimpleNamespace(service=types.SimpleNamespace(pool=types.SimpleNamespace(slots=[])),
                                     close=lambda: None)

    import kernelgym_gap.integrations.reward_app as reward_app
    import kernelgym_gap.integrations.scorer as scorer_mod
    import kernelgym_gap.serving.protocol as protocol
    monkeypatch.setattr(scorer_mod, "Scorer", FakeScorer)
    monkeypatch.setattr(reward_app, "create_app", fake_app)
    monkeypatch.setattr(protocol, "serve", lambda app, **kw: None)
    args = parser.parse_args(["serve-reward", "--backend", "cpu", "--gpu", "1", "--gpu", "3"])
    assert serve_reward.cmd_serve_reward(args) == 0 and seen["gpus"] == [1, 3]
    assert serve_reward.cmd_serve_reward(parser.parse_args(["serve-reward", "--backend", "cpu"])) == 0
    assert seen["gpus"] is None
    # the slot pool lays its slots out by the service's rule on those GPUs, 4 each (no GPU is needed to plan)
    planned = {}
    monkeypatch.setattr("kernelgym_gap.api.service.plan_slots",
                        lambda backend, workers, gpus=None, per_gpu=1: planned.update(gpus=gpus, per_gpu=per_gpu)
                        or [])
    fake = types.SimpleNamespace(backend="cuda", config=None, registry=None, store=None, submitter="t",
                                 evaluator=None, warm=False, workers=None, gpus=[1, 3])
    pool = reward_slots.SlotPool(fake)
    try:
        assert planned == {"gpus": [1, 3], "per_gpu": 4}
    finally:
        pool.close()
