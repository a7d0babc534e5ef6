"""The evaluation service (api/service.py, issue 33): placement, lanes, warm pools kept across calls, the
result cache, cancellation and latency; every front end goes through it (a spy counts the services and the
evaluations each one routes); and no module outside it builds a warm pool, a lane directory or a slot set."""
from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path

import pytest

from kernelgym_gap.api import service as service_mod
from kernelgym_gap.api.lanes import EvalRequest
from kernelgym_gap.api.service import EvalService
from kernelgym_gap.core.config import EvalConfig, SandboxConfig
from kernelgym_gap.core.errors import HarnessError, UnknownTaskError
from kernelgym_gap.core.placement import Placement
from kernelgym_gap.core.record import EvalRecord
from kernelgym_gap.core.status import Status

PKG = Path(__file__).resolve().parents[1] / "kernelgym_gap"


def _record(task, dsl, backend, reward=1.0):
    return EvalRecord(task=task.id, task_version=task.version, dsl=dsl, backend=backend, status=Status.OK,
                      correct=True, reward=reward, reward_mode="correctness", terms={}, message="")


class Stub:
    """engine.evaluate's shape; records (source, gpu_index, lane_dir, thread) per call."""

    def __init__(self, delay: float = 0.0):
        self.calls, self.lock, self.delay = [], threading.Lock(), delay

    def __call__(self, task, source, dsl, backend, config, **kw):
        time.sleep(self.delay)
        with self.lock:
            self.calls.append((source, config.gpu_index, config.sandbox.lane_dir, threading.current_thread().name,
                               kw))
        return _record(task, dsl, backend)


# ---- the service itself ------------------------------------------------------------------------------

def test_map_keeps_order_dedupes_and_adds_latency():
    ev = Stub()
    with EvalService("cpu", slots=2, evaluator=ev) as svc:
        recs = svc.map([EvalRequest("AddReLU", s, backend="cpu") for s in ("a", "b", "a")])
    assert all(r.task.endswith("/AddReLU-v0") for r in recs)
    assert sorted(c[0] for c in ev.calls) == ["a", "b"]              # the duplicate evaluated once
    assert recs[0] is recs[2]
    assert {"service_queue_wait", "service_total"} <= set(recs[0].latency)
    assert recs[0].latency["service_total"] >= recs[0].latency["service_queue_wait"] >= 0


def test_misuse_is_refused_before_anything_runs():
    ev = Stub()
    with EvalService("cpu", slots=1, evaluator=ev) as svc:
        with pytest.raises(UnknownTaskError):
            svc.map([EvalRequest("AddReLU", "a", backend="cpu"), EvalRequest("NoSuchTask", "b", backend="cpu")])
        with pytest.raises(TypeError):
            svc.submit(("AddReLU", "a"))
    assert ev.calls == []


def test_cuda_slots_are_placed_on_their_gpus_with_a_lane_dir_the_service_owns(tmp_path):
    ev = Stub(delay=0.05)
    svc = EvalService("cuda", EvalConfig(scratch_root=str(tmp_path)), gpus=[2, 5], per_gpu=2, evaluator=ev)
    assert svc.slots == [2, 5, 2, 5] and svc.lane_dir and svc.lane_dir.startswith(str(tmp_path))
    recs = svc.map([EvalRequest("AddReLU", f"s{i}", backend="cuda") for i in range(6)])
    lane_dir = svc.lane_dir
    svc.close()
    assert {c[1] for c in ev.calls} <= {2, 5} and {c[2] for c in ev.calls} == {lane_dir}
    assert {r.device["gpu_index"] for r in recs} <= {2, 5}
    assert not os.path.exists(lane_dir)                            # removed by close()
    # a config naming its own lane directory keeps it; one GPU per slot takes no lane directory of the service's
    own = EvalConfig(sandbox=SandboxConfig(lane_dir=str(tmp_path)))
    assert EvalService("cuda", gpus=[0, 1], per_gpu=2, evaluator=ev).placed(0, own).sandbox.lane_dir == str(tmp_path)
    single = EvalService("cuda", gpus=[3], per_gpu=1, evaluator=ev)
    assert single.lane_dir is None and single.placement(0) == Placement(gpu_index=3)


def test_a_cancelled_request_never_starts():
    gate = threading.Event()

    def blocking(task, source, dsl, backend, config, **kw):
        if source == "first":
            gate.wait(10)
        return _record(task, dsl, backend)
    with EvalService("cpu", slots=1, evaluator=blocking) as svc:
        first = svc.submit(EvalRequest("AddReLU", "first", backend="cpu"))
        second = svc.submit(EvalRequest("AddReLU", "second", backend="cpu"))
        assert second.cancel()                                       # its caller is gone
        gate.set()
        assert first.result(10).status is Status.OK
    assert second.cancelled() and svc.evaluated == 1


def test_a_harness_error_is_that_requests_record_and_misuse_stops_the_map():
    def flaky(task, source, dsl, backend, config, **kw):
        if source == "boom":
            raise RuntimeError("harness bug")
        if source == "misuse":
            raise UnknownTaskError("gone", [])
        return _record(task, dsl, backend)
    with EvalService("cpu", slots=1, evaluator=flaky) as svc:
        recs = svc.map([EvalRequest("AddReLU", s, backend="cpu") for s in ("ok", "boom")])
        assert [r.status for r in recs] == [Status.OK, Status.PROTOCOL_ERROR] and recs[1].stage == "harness"
        with pytest.raises(HarnessError):
            svc.map([EvalRequest("AddReLU", "misuse", backend="cpu")])


class FakePool:
    made: list = []

    def __init__(self, device="cuda", gpu_index=0, scratch_root=None):
        self.checker, self.children, self.closed = object(), None, False
        FakePool.made.append((device, gpu_index))

    def close(self):
        self.closed = True


def test_one_warm_pool_per_slot_kept_across_calls(monkeypatch):
    from kernelgym_gap.api import warm
    FakePool.made = []
    monkeypatch.setattr(warm, "WarmPool", FakePool)
    ev = Stub()
    svc = EvalService("cuda", gpus=[0], per_gpu=2, warm=True, evaluator=ev)
    svc.map([EvalRequest("AddReLU", f"a{i}", backend="cuda") for i in range(4)])
    svc.map([EvalRequest("AddReLU", f"b{i}", backend="cuda") for i in range(4)])
    pools = list(svc._pools.values())
    svc.close()
    assert len(FakePool.made) <= 2 and all(p.closed for p in pools)
    assert all("checker" in c[4] for c in ev.calls)


def test_the_warm_rule_is_decided_in_the_service():
    assert service_mod.decide_warm("auto", "cuda", None) is True
    assert service_mod.decide_warm("auto", "cpu", None) is False
    assert service_mod.decide_warm("auto", "cuda", Stub()) is False
    with pytest.raises(ValueError):
        service_mod.decide_warm("sometimes", "cuda", None)


def test_the_result_cache_and_its_store(tmp_path):
    from kernelgym_gap.store.db import Store
    ev = Stub()
    store = Store(tmp_path / "r.sqlite3")
    with EvalService("cpu", slots=1, cache=16, store=store, evaluator=ev, submitter="me") as svc:
        a = svc.submit(EvalRequest("AddReLU", "src", backend="cpu")).result(10)
        b = svc.submit(EvalRequest("AddReLU", "src", backend="cpu")).result(10)
    assert len(ev.calls) == 1 and a.status is b.status is Status.OK
    with EvalService("cpu", slots=1, store=store, evaluator=ev, submitter="again") as fresh:   # from the store
        fresh.submit(EvalRequest("AddReLU", "src", backend="cpu")).result(10)
    assert len(ev.calls) == 1 and store.count("submissions") >= 2


def test_the_cache_key_hashes_the_config_whole_less_placement():
    from kernelgym_gap.store.cache_key import settings_hash
    base = EvalConfig()
    assert settings_hash(base) == settings_hash(base.replace(library_cache_path="/elsewhere/lib.json"))
    assert settings_hash(base) == settings_hash(base.replace(baselines_path="/elsewhere/b.json", gpu_index=3))
    assert settings_hash(base) == settings_hash(Placement(gpu_index=1, lane_dir="/x").apply(base))
    assert settings_hash(base) != settings_hash(base.replace(trial_seed=1))
    assert settings_hash(base) != settings_hash(base.replace(compile_outside_lane=True))   # measured: hashed


# ---- every front end goes through it -----------------------------------------------------------------

@pytest.fixture
def spy(monkeypatch):
    made: list[EvalService] = []

    class Spy(EvalService):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            made.append(self)
    monkeypatch.setattr(service_mod, "EvalService", Spy)
    return made


def test_evaluate_many_goes_through_the_service(spy):
    from kernelgym_gap.api.batch import evaluate_many
    evaluate_many([EvalRequest("AddReLU", "a", backend="cpu")], workers=1, evaluator=Stub())
    assert len(spy) == 1 and spy[0].evaluated == 1


def test_the_env_goes_through_the_service(spy):
    from kernelgym_gap.api.env import KernelEnv
    env = KernelEnv(task_id="AddReLU", backend="cpu", evaluator=Stub())
    env.reset(seed=0)
    env.step("x")
    env.close()
    assert len(spy) == 1 and spy[0].evaluated == 1 and spy[0]._closed


def test_the_vector_env_goes_through_the_service(spy):
    from kernelgym_gap.api.vector import make_vector_env
    env = make_vector_env(2, "AddReLU", asynchronous=False, backend="cpu", evaluator=Stub())
    env.reset(seed=0)
    env.step(["x", "y"])
    env.close()
    assert len(spy) == 2 and [s.evaluated for s in spy] == [1, 1]


def test_run_suite_goes_through_the_service(spy):
    from kernelgym_gap.api.suite import run_suite
    rows = run_suite(backend="cpu", dsls=("triton",), task_ids=["AddReLU"], evaluator=Stub(), workers=1)
    assert rows and len(spy) == 1 and spy[0].evaluated == len(rows)


def test_the_ray_actor_holds_a_one_slot_service(spy):
    from kernelgym_gap.api.ray_pool import _EvalActor
    actor = _EvalActor("cpu")
    out = actor.evaluate("kernelgym_gap/AddReLU-v0", "def add_relu(:\n", "triton", EvalConfig())
    actor.drop_lanes()
    assert len(spy) == 1 and spy[0].slots == [None] and out["record"]["status"] == "syntax_error"


def test_bench_goes_through_the_service(spy, tmp_path):
    from kernelgym_gap.bench.runner import BenchSpec, run_bench
    from kernelgym_gap.store.db import Store
    spec = BenchSpec(label="svc", agent="replay", task_ids=["AddReLU"], backend="cpu", steps=1, workers=1)
    out = run_bench(spec, Store(tmp_path / "r.sqlite3"), evaluator=Stub())
    # the run's service evaluates; each episode's env holds a one-slot service in front of it
    assert out["evaluations"] == 1 and any(s.evaluated == 1 and s.slots == [None] for s in spy)


def test_the_scorer_goes_through_the_service(spy):
    from kernelgym_gap.integrations.scorer import Scorer
    ev = Stub()
    with Scorer(backend="cpu", evaluator=ev, workers=1) as s:
        s.score([("AddReLU", "a", "triton"), ("AddReLU", "a", "triton")])
        s.score([("AddReLU", "a", "triton")])
    assert len(spy) == 1 and spy[0].evaluated == 1 and s.stats["cache_hits"] >= 1 and len(ev.calls) == 1


def test_the_web_worker_goes_through_the_service(spy, tmp_path, monkeypatch):
    from kernelgym_gap.core.registry import default_registry
    from kernelgym_gap.engine import pipeline
    from kernelgym_gap.store.db import Store
    from kernelgym_gap.web.worker import Worker
    monkeypatch.setattr(pipeline, "evaluate", Stub())
    store = Store(tmp_path / "r.sqlite3")
    w = Worker(store, default_registry(), EvalConfig())
    sid = store.enqueue(b"source", submitter="x", task_id="kernelgym_gap/AddReLU-v0", dsl="triton", backend="cpu")
    w.run_one(store.claim_next())
    w.stop(0.1)
    assert store.submission(sid)["state"] == "done" and len(spy) == 1 and spy[0].evaluated == 1


def test_the_leaderboards_submit_goes_through_the_service(spy, tmp_path, monkeypatch):
    """api/cached.py (the leaderboard's `submit`, `caching_evaluator`): a miss through a one-slot service, a
    hit from the store without one."""
    from kernelgym_gap.api.cached import cached_evaluate_full
    from kernelgym_gap.core.registry import default_registry
    from kernelgym_gap.engine import pipeline
    from kernelgym_gap.store.db import Store
    monkeypatch.setattr(pipeline, "evaluate", Stub())
    store, task = Store(tmp_path / "r.sqlite3"), default_registry().get("AddReLU")
    first = cached_evaluate_full(store, task, "src", "triton", "cpu", EvalConfig(trial_seed=1), "x")
    assert not first.cache_hit and len(spy) == 1 and spy[0].evaluated == 1 and spy[0]._closed
    again = cached_evaluate_full(store, task, "src", "triton", "cpu", EvalConfig(trial_seed=1), "y")
    assert again.cache_hit and len(spy) == 1


# ---- nothing else builds the runtime -----------------------------------------------------------------

# where a warm pool, a lane directory or a set of slots is built; only the service (and what it delegates to:
# api/warm.py defines the pool, api/lanes.py the slots) may do it
BUILDERS = re.compile(r"\bWarmPool\(|\bWarmChecker\(|\bChildPool\(|mkdtemp\(prefix=\"kgg-lanes-|\bworker_slots\(|"
                      r"\bwith_lane\(|replace\([^)]*\bgpu_index=")
ALLOWED = {
    "api/service.py": "the service",
    "api/warm.py": "defines WarmPool and WarmChecker",
    "api/lanes.py": "defines worker_slots and with_lane",
    "sandbox/prestart.py": "defines ChildPool",
    "core/placement.py": "defines Placement",
}
# not yet on the service (issue 33 follow-up): named so that the list can only shrink
PENDING: dict[str, str] = {}


def test_nothing_outside_the_service_builds_a_pool_a_lane_or_slots():
    offenders = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        if rel in ALLOWED or rel in PENDING:
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if BUILDERS.search(code) and not code.lstrip().startswith(("def ", "class ")):
                offenders.append(f"{rel}:{n}: {line.strip()}")
    assert not offenders, "outside api/service.py:\n" + "\n".join(offenders)
    for rel in PENDING:
        assert BUILDERS.search((PKG / rel).read_text()), f"{rel} no longer builds one: drop it from PENDING"


@pytest.mark.gpu
def test_gpu_service_two_slots_share_one_gpus_lane_and_keep_statuses():
    """On a GPU: two slots on GPU 0 (one lane directory of the service's, timings one at a time), warm by the
    service's rule; the reference solutions come back with the statuses a cold evaluate gives them."""
    from kernelgym_gap.core.registry import default_registry
    from kernelgym_gap.engine.pipeline import evaluate
    task = default_registry().get("GELU")
    sources = [task.solution_path(s).read_text() for s in task.solutions if s.dsl == "triton"]
    config = EvalConfig(trial_seed=0)
    with EvalService("cuda", config, gpus=[0], per_gpu=2) as svc:
        assert svc.warm is True and svc.lane_dir is not None
        lane_dir = svc.lane_dir
        recs = svc.map([EvalRequest(task.id, s, backend="cuda") for s in sources])
    assert not os.path.exists(lane_dir)
    cold = [evaluate(task, s, "triton", "cuda", config) for s in sources]
    assert [r.status for r in recs] == [r.status for r in cold]
    assert all(r.device["gpu_index"] == 0 and r.latency["service_total"] > 0 for r in recs)
