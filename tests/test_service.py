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
from kernelgym_gap.core.config import EvalConfig
from kernelgym_gap.core.errors import HarnessError, UnknownTaskError
from kernelgym_gap.core.placement import Placement
from kernelgym_gap.core.record import EvalRecord
from kernelgym_gap.core.registry import default_registry
from kernelgym_gap.core.status import Status

PKG = Path(__file__).resolve().parents[1] / "kernelgym_gap"


def _record(task, dsl, backend, reward=1.0):
    return EvalRecord(task=task.id, task_version=task.version, dsl=dsl, backend=backend, status=Status.OK,
                      correct=True, reward=reward, reward_mode="correctness", terms={}, message="")


class Stub:
    """engine.evaluate's shape; records (source, gpu_index, lane_dir, thread, kw) per call, from the
    Placement the service passes beside the config."""

    def __init__(self, delay: float = 0.0):
        self.calls, self.lock, self.delay = [], threading.Lock(), delay

    def __call__(self, task, source, dsl, backend, config, placement=None, **kw):
        time.sleep(self.delay)
        with self.lock:
            self.calls.append((source, placement.gpu_index, placement.lane_dir, threading.current_thread().name,
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
    svc = EvalService("cuda", EvalConfig(), gpus=[2, 5], per_gpu=2, evaluator=ev,
                      placement=Placement(scratch_root=str(tmp_path)))
    assert svc.slots == [2, 5, 2, 5] and svc.lane_dir and svc.lane_dir.startswith(str(tmp_path))
    recs = svc.map([EvalRequest("AddReLU", f"s{i}", backend="cuda") for i in range(6)])
    lane_dir = svc.lane_dir
    svc.close()
    assert {c[1] for c in ev.calls} <= {2, 5} and {c[2] for c in ev.calls} == {lane_dir}
    assert {r.device["gpu_index"] for r in recs} <= {2, 5}
    assert not os.path.exists(lane_dir)                            # removed by close()
    # a placement naming its own lane directory keeps it; one GPU per slot takes no lane directory of the service's
    own = Placement(lane_dir=str(tmp_path), scratch_root=str(tmp_path))
    svc = EvalService("cuda", gpus=[0, 1], per_gpu=2, evaluator=ev, placement=own)
    assert svc.lane_dir is not None and svc.placement(0) == own.replace(gpu_index=0)
    svc.close()
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

    def __init__(self, device="cuda", gpu_index=0, scratch_root=None, plan=None, start_early=False,
                 read_arena_bytes=0):
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


def test_the_cache_key_hashes_the_config_whole_and_placement_is_not_on_it():
    import dataclasses

    from kernelgym_gap.core.placement import FIELDS, PlacementFieldError
    from kernelgym_gap.store.cache_key import canonical, settings_hash
    base = EvalConfig()
    # the hash is the whole config's, nothing left out: no placement field exists on it to leave out
    flat = canonical(dataclasses.asdict(base))
    assert not any(f'"{f}"' in flat for f in FIELDS)
    assert settings_hash(base) != settings_hash(base.replace(trial_seed=1))
    assert settings_hash(base) != settings_hash(base.replace(compile_outside_lane=True))   # measured: hashed
    with pytest.raises(PlacementFieldError, match="library_cache_path"):
        base.replace(library_cache_path="/elsewhere/lib.json")


def test_the_result_cache_says_what_a_hit_is_and_serves_cached_evaluate_full(tmp_path):
    """ResultCache.get gives a CacheHit: from memory (no ids) or from the store (the measuring evaluation and
    the cache-hit submission recorded for this request); strict makes a store that cannot record raise.
    api/cached.cached_evaluate_full answers through it and looks nothing up itself."""
    import inspect

    from kernelgym_gap.api import cached
    from kernelgym_gap.api.result_cache import ResultCache
    from kernelgym_gap.store.db import Store
    store = Store(tmp_path / "r.sqlite3")
    task = default_registry().get("AddReLU")
    cache = ResultCache(4, store, "me")
    key = cache.key(task, "src", "triton", "cpu", EvalConfig(trial_seed=1))
    record = _record(task, "triton", "cpu")
    sid = cache.put(key, record, "src")
    mem = cache.get(key)
    assert mem.record == record and mem.cache_hit and (mem.evaluation_id, mem.submission_id) == (None, None)
    hit = ResultCache(0, store, "other").get(key)
    assert hit.cache_hit and hit.record.status is Status.OK and hit.evaluation_id is not None
    assert hit.submission_id not in (None, sid)

    class Refusing(Store):
        def add_cache_hit(self, *a, **k):
            raise RuntimeError("read-only")
    refusing = ResultCache(0, Refusing(tmp_path / "r.sqlite3"), "x")
    assert refusing.get(key).submission_id is None            # a cache: logged, the record still comes back
    with pytest.raises(RuntimeError):
        refusing.get(key, strict=True)
    code = inspect.getsource(cached.cached_evaluate_full)
    assert "ResultCache(" in code and "lookup(" not in code and "add_cache_hit(" not in code
    res = cached.cached_evaluate_full(store, task, "src", "triton", "cpu", EvalConfig(trial_seed=1), "third")
    assert res.cache_hit and res.evaluation_id == hit.evaluation_id and res.submission_id not in (sid, hit.submission_id)


def test_two_evaluations_that_differ_only_in_placement_share_a_cache_key(tmp_path):
    """Through the service: the same request on two services placed apart (scratch root, cache paths, held
    outputs, lanes) is evaluated once, the second served from the first one's store."""
    from kernelgym_gap.store.db import Store
    ev = Stub()
    store = Store(tmp_path / "r.sqlite3")
    here = Placement(scratch_root=str(tmp_path), library_cache_path=str(tmp_path / "a.json"))
    there = Placement(held_output_bytes=0, calibration_path=str(tmp_path / "c.json"), keep_scratch=True,
                      baselines_path=str(tmp_path / "b.json"), lane_dir=str(tmp_path))
    with EvalService("cpu", slots=1, store=store, evaluator=ev, submitter="a", placement=here) as one:
        key_here = one.cache.key(one._task("AddReLU"), "src", "triton", "cpu", one.config, one.placement(0))
        one.submit(EvalRequest("AddReLU", "src", backend="cpu")).result(10)
    with EvalService("cpu", slots=1, store=store, evaluator=ev, submitter="b", placement=there) as two:
        key_there = two.cache.key(two._task("AddReLU"), "src", "triton", "cpu", two.config, two.placement(0))
        two.submit(EvalRequest("AddReLU", "src", backend="cpu")).result(10)
    assert key_here == key_there and len(ev.calls) == 1
    assert ev.calls[0][2] == "auto"          # the first service's placement reached the evaluator


def test_each_slot_passes_its_own_placement_to_the_engine(monkeypatch, tmp_path):
    """The built-in evaluator (engine.pipeline.evaluate) gets placement= per slot: the service's placement
    with the slot's GPU and the service's lanes; the config it gets is the request's, untouched."""
    from kernelgym_gap.engine import pipeline
    seen = []

    def engine(task, source, dsl, backend, config, checker=None, children=None, placement=None):
        seen.append((config, placement))
        time.sleep(0.05)                     # long enough for every slot to take one
        return _record(task, dsl, backend)
    monkeypatch.setattr(pipeline, "evaluate", engine)
    config = EvalConfig(trial_seed=3)
    base = Placement(scratch_root=str(tmp_path), library_cache_path=str(tmp_path / "lib.json"))
    with EvalService("cuda", config, gpus=[1, 4], per_gpu=2, warm=False, placement=base) as svc:
        svc.map([EvalRequest("AddReLU", f"s{i}", backend="cuda") for i in range(8)])
        lanes = svc.lane_dir
    assert {c for c, _ in seen} == {config}
    assert {p.gpu_index for _, p in seen} == {1, 4}
    assert {p.replace(gpu_index=0) for _, p in seen} == {base.replace(lane_dir=lanes)}


def test_a_five_argument_evaluator_is_called_without_placement():
    """A custom evaluator written to (task, source, dsl, backend, config), a Ray one, keeps working."""
    calls = []

    def five(task, source, dsl, backend, config):
        calls.append(source)
        return _record(task, dsl, backend)
    assert not service_mod.takes_placement(five) and service_mod.takes_placement(Stub())
    with EvalService("cpu", slots=1, evaluator=five) as svc:
        svc.map([EvalRequest("AddReLU", "x", backend="cpu")])
    assert calls == ["x"]


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
                      r"replace\([^)]*\bgpu_index=")
ALLOWED = {
    "api/service.py": "the service",
    "api/warm.py": "defines WarmPool and WarmChecker",
    "api/lanes.py": "defines worker_slots",
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


# ---- the next request taken ahead (Placement.prestart_for_next) ------------------------------------------

class PlanPool:
    """A WarmPool without processes: its children are a namespace holding the service's plan, which the Ahead
    stub calls as the engine's Launcher does when a child ends (ChildPool.refill_after)."""

    def __init__(self, device="cuda", gpu_index=0, scratch_root=None, plan=None, start_early=False,
                 read_arena_bytes=0):
        import types
        self.checker, self.children = object(), types.SimpleNamespace(plan=plan, close=lambda: None)

    def close(self):
        pass


class Ahead:
    """An evaluator whose child 'ends' (the plan called) at once, then waits for the test's event of its
    source (if any); records (source, thread, the spec the plan returned) per call."""

    def __init__(self, gates=None, plan=True):
        self.calls, self.lock, self.gates, self.plan = [], threading.Lock(), gates or {}, plan
        self.planned, self.threads = {}, {}

    def __call__(self, task, source, dsl, backend, config, placement=None, children=None, **kw):
        spec = children.plan(None) if self.plan and children is not None and children.plan is not None else None
        with self.lock:
            self.planned[source] = spec
            self.threads[source] = threading.current_thread().name
        gate = self.gates.get(source)
        if gate is not None:
            assert gate.wait(30)
        with self.lock:
            self.calls.append((source, threading.current_thread().name))
        return _record(task, dsl, backend)


def _thread_running(ev, source):
    """The name of the service thread evaluating `source` (the Ahead stub notes it as the call starts)."""
    deadline = time.time() + 10
    while source not in ev.threads and time.time() < deadline:
        time.sleep(0.01)
    return ev.threads[source]


def _ahead_service(monkeypatch, ev, slots=1, on=True):
    from kernelgym_gap.api import warm
    monkeypatch.setattr(warm, "WarmPool", PlanPool)
    return EvalService("cpu", slots=slots, warm=True, evaluator=ev,
                       placement=Placement(prestart_for_next=on))


def test_a_slot_takes_its_next_request_as_its_child_ends(monkeypatch):
    from kernelgym_gap.sandbox.prestart import ChildSpec
    ev = Ahead()
    with _ahead_service(monkeypatch, ev) as svc:
        recs = svc.map([EvalRequest("AddReLU", s, backend="cpu") for s in ("a", "b", "c")])
    assert [c[0] for c in ev.calls] == ["a", "b", "c"] and all(r.status is Status.OK for r in recs)
    # a's and b's child ends each took the next request and built the spec of its child; c's found none
    assert isinstance(ev.planned["a"], ChildSpec) and isinstance(ev.planned["b"], ChildSpec)
    assert ev.planned["c"] is None
    with _ahead_service(monkeypatch, ev := Ahead(), on=False) as svc:     # off: no plan at all
        svc.map([EvalRequest("AddReLU", s, backend="cpu") for s in ("a", "b")])
    assert ev.planned == {"a": None, "b": None}


def test_an_idle_slot_runs_the_request_a_busy_one_took_ahead(monkeypatch):
    gates = {"a": threading.Event(), "x": threading.Event()}
    ev = Ahead(gates, plan=False)                 # the test plays the child's end itself
    with _ahead_service(monkeypatch, ev, slots=2) as svc:
        fa = svc.submit(EvalRequest("AddReLU", "a", backend="cpu"))
        fx = svc.submit(EvalRequest("AddReLU", "x", backend="cpu"))
        deadline = time.time() + 10
        while len(ev.planned) < 2 and time.time() < deadline:     # both slots busy
            time.sleep(0.01)
        a_slot = int(_thread_running(ev, "a").rsplit("-", 1)[1])      # kgg-service-cpu-<slot>
        # b queued while both slots are busy; a's child ends and its slot takes b ahead
        fb = svc.submit(EvalRequest("AddReLU", "b", backend="cpu"))
        assert svc._take_ahead(a_slot, None) is not None and not svc._jobs and a_slot in svc._ahead
        gates["x"].set()                          # x's slot frees: it runs b, while a's slot is still busy
        assert fb.result(10).status is Status.OK and not fa.done()
        gates["a"].set()
        fa.result(10), fx.result(10)
    ran = dict(ev.calls)
    assert ran["b"] == ran["x"] != ran["a"]       # the idle slot ran it, not the one that took it ahead


def test_close_cancels_a_request_taken_ahead(monkeypatch):
    gates = {"a": threading.Event()}
    ev = Ahead(gates)
    svc = _ahead_service(monkeypatch, ev)
    fa = svc.submit(EvalRequest("AddReLU", "a", backend="cpu"))
    deadline = time.time() + 10
    while "a" not in ev.planned and time.time() < deadline:
        time.sleep(0.01)
    fb = svc.submit(EvalRequest("AddReLU", "b", backend="cpu"))
    assert svc._take_ahead(0, None) is not None and 0 in svc._ahead
    closer = threading.Thread(target=svc.close)
    closer.start()
    time.sleep(0.2)
    gates["a"].set()                               # the running evaluation ends; what was taken ahead does not start
    closer.join(10)
    assert fa.result(10).status is Status.OK and fb.cancelled()
    assert [c[0] for c in ev.calls] == ["a"]


def test_a_cancelled_request_is_not_taken_ahead(monkeypatch):
    gates = {"a": threading.Event()}
    ev = Ahead(gates)
    with _ahead_service(monkeypatch, ev) as svc:
        svc.submit(EvalRequest("AddReLU", "a", backend="cpu"))
        deadline = time.time() + 10
        while "a" not in ev.planned and time.time() < deadline:
            time.sleep(0.01)
        fb = svc.submit(EvalRequest("AddReLU", "b", backend="cpu"))
        fc = svc.submit(EvalRequest("AddReLU", "c", backend="cpu"))
        assert fb.cancel()
        assert svc._take_ahead(0, None) is not None and svc._ahead[0].source == "c"
        gates["a"].set()
        assert fc.result(10).status is Status.OK
    assert [c[0] for c in ev.calls] == ["a", "c"]


def test_the_next_requests_child_is_pre_started_for_its_spec(tmp_path):
    """The real engine on cpu: two requests whose children differ (the second's sandbox wall deadline). Taken
    ahead, the second runs in a child pre-started for it; without, in a cold one (the pool's child was
    pre-started for the first's spec)."""
    import dataclasses
    reg = default_registry()
    task = reg.get("AddReLU")
    sol = next(s for s in task.solutions if s.dsl == "triton" and s.kind == "optimized")
    source = task.solution_path(sol).read_text()
    first = EvalConfig(trial_seed=0)
    second = first.replace(sandbox=dataclasses.replace(first.sandbox, wall_s=first.sandbox.wall_s + 1))
    pre = {}
    for on in (True, False):
        with EvalService("cpu", slots=1, warm=True, placement=Placement(scratch_root=str(tmp_path),
                                                                        prestart_for_next=on)) as svc:
            fa = svc.submit_task(task, source, "triton", first)
            fb = svc.submit_task(task, source, "triton", second)
            a, b = fa.result(300), fb.result(300)
        assert a.status is b.status is Status.OK
        pre[on] = "child_preimport" in b.latency
    assert pre == {True: True, False: False}
