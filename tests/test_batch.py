"""The batch API (evaluate_many, score_completions) and the Gymnasium vector environment over KernelEnv."""
import os
import random
import threading
import time

import numpy as np
import pytest

from kernelgym_gap.api.batch import EvalRequest, evaluate_many
from kernelgym_gap.api.completions import score_completions
from kernelgym_gap.api.lanes import visible_gpus
from kernelgym_gap.api.vector import make_vector_env
from kernelgym_gap.core.config import EvalConfig
from kernelgym_gap.core.errors import HarnessError, UnknownChoiceError, UnknownTaskError
from kernelgym_gap.core.placement import Placement
from kernelgym_gap.core.record import EvalRecord
from kernelgym_gap.core.status import Status


def _source(registry, name="AddReLU", index=0):
    task = registry.get(name)
    return task.solution_path(task.solutions[index]).read_text()


def _wrong_add_relu(registry):
    """The optimized AddReLU without its ReLU: finite, non-zero and wrong (a mismatch)."""
    src = _source(registry)
    assert src.count("tl.maximum(s, 0.0)") == 2
    return src.replace("tl.maximum(s, 0.0)", "s")


class Recorder:
    """A double of engine.evaluate that sleeps a random while and remembers who ran what."""

    def __init__(self, fail_on: str | None = None):
        self.calls, self.lock, self.fail_on = [], threading.Lock(), fail_on
        self.active = self.peak = 0

    def __call__(self, task, source, dsl, backend, config, placement):
        with self.lock:
            self.active += 1
            self.peak = max(self.peak, self.active)
            self.calls.append((source, backend, placement.gpu_index, threading.current_thread().name))
        time.sleep(random.uniform(0.01, 0.05))
        with self.lock:
            self.active -= 1
        if source == self.fail_on:
            raise RuntimeError("the harness broke")
        return EvalRecord(task=task.id, task_version=task.version, dsl=dsl, backend=backend, status=Status.OK,
                          correct=True, reward=1.0, reward_mode="correctness", terms={}, message=source,
                          device={"name": "double"})


def test_records_come_back_in_request_order_from_parallel_workers():
    ev = Recorder()
    reqs = [EvalRequest("AddReLU", f"src{i}", backend="cpu") for i in range(12)]
    recs = evaluate_many(reqs, workers=3, evaluator=ev)
    assert [r.message for r in recs] == [f"src{i}" for i in range(12)]
    assert ev.peak <= 3 and len({c[3] for c in ev.calls}) > 1
    assert evaluate_many([], evaluator=ev) == []


def test_per_request_config_and_progress():
    ev = Recorder()
    seen = []
    cfg = EvalConfig(trial_seed=11)
    reqs = [EvalRequest("AddReLU", "a", backend="cpu"), EvalRequest("GELU", "b", backend="cpu", config=cfg)]
    evaluate_many(reqs, workers=2, config=EvalConfig(trial_seed=5), evaluator=ev,
                  progress=lambda d, t, w: seen.append((d, t)))
    by_source = {c[0]: c for c in ev.calls}
    assert sorted(seen) == [(1, 2), (2, 2)]
    assert len(by_source) == 2


def test_misuse_fails_before_anything_runs():
    ev = Recorder()
    with pytest.raises(UnknownTaskError):
        evaluate_many([EvalRequest("AddReLU", "a", backend="cpu"), EvalRequest("NoSuchTask", "b", backend="cpu")],
                      evaluator=ev)
    with pytest.raises(UnknownChoiceError):
        evaluate_many([EvalRequest("AddReLU", "a", dsl="cuda-c", backend="cpu")], evaluator=ev)
    with pytest.raises(ValueError):
        evaluate_many([EvalRequest("AddReLU", "a", backend="cpu")], workers=0, evaluator=ev)
    with pytest.raises(TypeError):
        evaluate_many([("AddReLU", "a")], evaluator=ev)
    assert ev.calls == []


def test_identical_submissions_in_a_batch_are_evaluated_once():
    """A GRPO group often holds the same completion several times: one evaluation, every caller its record."""
    ev = Recorder()
    sources = ["a", "b", "a", "c", "b", "a"]
    recs = evaluate_many([EvalRequest("AddReLU", s, backend="cpu") for s in sources], workers=2, evaluator=ev)
    assert [r.message for r in recs] == sources
    assert sorted(c[0] for c in ev.calls) == ["a", "b", "c"]
    # another task, dsl or setting is another evaluation
    recs = evaluate_many([EvalRequest("AddReLU", "a", backend="cpu"), EvalRequest("GELU", "a", backend="cpu"),
                          EvalRequest("AddReLU", "a", backend="cpu", config=EvalConfig(seeds_per_shape=1))],
                         workers=1, evaluator=ev)
    assert len(ev.calls) == 3 + 3


def test_a_harness_failure_is_that_requests_record_and_the_batch_goes_on():
    """Issue 31: an exception the harness raised on one request used to fail the whole batch (every other
    submission lost its record). Now it is that request's protocol_error, stage "harness", naming the error."""
    ev = Recorder(fail_on="bad")
    reqs = [EvalRequest("AddReLU", s, backend="cpu") for s in ("a", "bad", "c")]
    recs = evaluate_many(reqs, workers=1, evaluator=ev)
    assert [r.status for r in recs] == [Status.OK, Status.PROTOCOL_ERROR, Status.OK]
    bad = recs[1]
    assert bad.stage == "harness" and bad.reward == 0.0 and bad.correct is False
    assert "RuntimeError: the harness broke" in bad.message
    assert bad.terms["flags"] == ["harness_error: RuntimeError"]
    assert EvalRecord.from_json(bad.to_json()) == bad
    assert [c[0] for c in ev.calls] == ["a", "bad", "c"]        # the request after it still ran


def test_misuse_found_while_evaluating_still_fails_the_batch():
    class Misuse(Recorder):
        def __call__(self, task, source, dsl, backend, config):
            if source == "bad":
                raise UnknownChoiceError("dsl", "cuda-c", ("triton", "tilelang"))
            return super().__call__(task, source, dsl, backend, config)
    reqs = [EvalRequest("AddReLU", s, backend="cpu") for s in ("a", "bad", "c")]
    with pytest.raises(HarnessError, match="unknown dsl"):
        evaluate_many(reqs, workers=1, evaluator=Misuse())


def test_cuda_pins_one_worker_per_gpu(monkeypatch):
    """GPU placement logic, with the backend check and the engine replaced (this machine has no GPU)."""
    monkeypatch.setattr("kernelgym_gap.api.batch.resolve_backend", lambda b: "cuda" if b in ("cuda", "auto") else b)
    ev = Recorder()
    reqs = [EvalRequest("AddReLU", f"s{i}", backend="cuda") for i in range(8)]
    recs = evaluate_many(reqs, gpus=[2, 5], workers=8, evaluator=ev, per_gpu=1)
    assert ev.peak <= 2
    by_thread = {}
    for _, _, gpu, thread in ev.calls:
        by_thread.setdefault(thread, set()).add(gpu)
    assert all(len(g) == 1 for g in by_thread.values()) and set().union(*by_thread.values()) <= {2, 5}
    assert {r.device["gpu_index"] for r in recs} <= {2, 5}
    assert all(r.device["gpu_index"] == c[2] for r, c in zip(recs, sorted(ev.calls, key=lambda c: int(c[0][1:]))))
    with pytest.raises(HarnessError, match="no GPU"):
        evaluate_many(reqs, gpus=[], evaluator=ev)


class LaneRecorder:
    """A double of engine.evaluate that takes its GPU's lane like a child does (shared for its "trials",
    exclusive for its "timing"), each hold on descriptors of its own, and records when it was inside."""

    def __init__(self):
        self.sections, self.lock, self.lane_dirs, self.threads = [], threading.Lock(), set(), {}

    def _inside(self, where, mode, seconds):
        from kernelgym_gap.core.lane import held
        with held(where.lane_dir, where.gpu_index, mode):
            t0 = time.monotonic()
            time.sleep(seconds)
            t1 = time.monotonic()
        with self.lock:
            self.sections.append((where.gpu_index, mode, t0, t1))

    def __call__(self, task, source, dsl, backend, config, placement):
        with self.lock:
            self.lane_dirs.add(placement.lane_dir)
            self.threads.setdefault(threading.current_thread().name, set()).add(placement.gpu_index)
        self._inside(placement, "shared", 0.05)
        self._inside(placement, "exclusive", 0.02)
        return EvalRecord(task=task.id, task_version=task.version, dsl=dsl, backend=backend, status=Status.OK,
                          correct=True, reward=1.0, reward_mode="correctness", terms={}, message=source)


def _overlap(a, b) -> bool:
    return a[2] < b[3] and b[2] < a[3]


def test_cuda_per_gpu_slots_share_a_gpu_but_never_its_timing(monkeypatch, tmp_path):
    """per_gpu=3 on two pretended GPUs: six workers, three per GPU; their "trials" overlap, their "timings"
    never overlap anything else on the same GPU; the lane directory is made for the call and removed."""
    monkeypatch.setattr("kernelgym_gap.api.batch.resolve_backend", lambda b: "cuda" if b in ("cuda", "auto") else b)
    ev = LaneRecorder()
    reqs = [EvalRequest("AddReLU", f"s{i}", backend="cuda") for i in range(18)]
    recs = evaluate_many(reqs, gpus=[2, 5], per_gpu=3, evaluator=ev, placement=Placement(scratch_root=str(tmp_path)))
    assert [r.message for r in recs] == [f"s{i}" for i in range(18)]
    assert len(ev.threads) == 6 and all(len(g) == 1 for g in ev.threads.values())
    assert sorted(g for gs in ev.threads.values() for g in gs) == [2, 2, 2, 5, 5, 5]
    (lane_dir,) = ev.lane_dirs
    assert lane_dir is not None and lane_dir.startswith(str(tmp_path)) and not os.path.exists(lane_dir)
    shared_overlapped = False
    for a in ev.sections:
        for b in ev.sections:
            if a is b or a[0] != b[0] or not _overlap(a, b):
                continue
            assert a[1] == b[1] == "shared", f"a timing shared GPU {a[0]}: {a} {b}"
            shared_overlapped = True
    assert shared_overlapped


def test_per_gpu_one_is_one_evaluation_per_gpu_without_lanes(monkeypatch):
    from kernelgym_gap.api.lanes import worker_slots
    monkeypatch.setattr("kernelgym_gap.api.batch.resolve_backend", lambda b: "cuda" if b in ("cuda", "auto") else b)
    ev = LaneRecorder()
    evaluate_many([EvalRequest("AddReLU", f"s{i}", backend="cuda") for i in range(4)], gpus=[0, 1], per_gpu=1,
                  evaluator=ev)
    assert ev.lane_dirs == {"auto"} and len(ev.threads) == 2
    assert worker_slots(["cuda"], None, [2, 5], per_gpu=3) == {"cuda": [2, 5, 2, 5, 2, 5]}
    assert worker_slots(["cuda"], 3, [2, 5], per_gpu=3) == {"cuda": [2, 5, 2]}
    assert worker_slots(["cuda", "cpu"], 2, [0], per_gpu=4) == {"cpu": [None, None], "cuda": [0, 0]}
    with pytest.raises(ValueError):
        worker_slots(["cuda"], None, [0], per_gpu=0)


def test_a_placement_keeps_its_own_lane_dir(monkeypatch, tmp_path):
    monkeypatch.setattr("kernelgym_gap.api.batch.resolve_backend", lambda b: "cuda" if b in ("cuda", "auto") else b)
    ev = LaneRecorder()
    own = Placement(lane_dir=str(tmp_path))
    evaluate_many([EvalRequest("AddReLU", f"s{i}", backend="cuda") for i in range(3)], gpus=[0],
                  evaluator=ev, placement=own)
    assert ev.lane_dirs == {str(tmp_path)}


def test_cpu_batches_take_no_lanes():
    ev = LaneRecorder()
    evaluate_many([EvalRequest("AddReLU", f"s{i}", backend="cpu") for i in range(3)], workers=2, evaluator=ev)
    assert ev.lane_dirs == {"auto"}


def test_visible_gpus_reads_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    assert visible_gpus() == [3, 1]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert visible_gpus() == []


def test_score_completions_extracts_the_code_blocks():
    ev = Recorder()
    replies = ["Sure!\n```python\ndef add_relu(x, y):\n    return x\n```\n", "no code at all"]
    recs = score_completions("AddReLU", replies, backend="cpu", evaluator=ev, workers=2)
    assert [r.message for r in recs] == ["def add_relu(x, y):\n    return x\n", "no code at all\n"]


@pytest.mark.slow
def test_real_batch_on_the_cpu_backend(registry):
    """Three real sandboxed evaluations, two at a time: a correct kernel, a wrong one, a gate failure."""
    reqs = [EvalRequest("AddReLU", _source(registry), backend="cpu"),
            EvalRequest("AddReLU", _wrong_add_relu(registry), backend="cpu"),
            EvalRequest("AddReLU", "def add_relu(x, y):\n    return (\n", backend="cpu")]
    recs = evaluate_many(reqs, workers=2, config=EvalConfig(trial_seed=0))
    assert [r.status for r in recs] == [Status.OK, Status.MISMATCH, Status.SYNTAX_ERROR]
    assert [r.reward for r in recs] == [1.0, 0.0, 0.0]
    assert all(r.backend == "cpu" and r.task == "kernelgym_gap/AddReLU-v0" for r in recs)


def test_vector_env_rejects_bad_sizes():
    with pytest.raises(ValueError):
        make_vector_env(0, "AddReLU", backend="cpu")


def _double(task, source, dsl, backend, config):
    """A correct and a failed step differ in type where Gymnasium's vector info merge cares: E is a float
    or None, diagnosis a dict or None, failure None or a dict."""
    from kernelgym_gap.core.record import FailureDetail
    ok = "x + y" in source
    return EvalRecord(task=task.id, task_version=task.version, dsl=dsl, backend=backend,
                      status=Status.OK if ok else Status.MISMATCH, correct=ok, reward=float(ok),
                      reward_mode="correctness", terms={"E": 0.5 if ok else None, "U": 0.25 if ok else None},
                      message="",
                      diagnosis={"verdict": "efficient"} if ok else None,
                      failure=None if ok else FailureDetail(max_abs_err=1.0))


def test_sync_and_async_vector_envs_agree_with_a_double():
    actions = ("def add_relu(x, y):\n    return x + y\n", "def add_relu(x, y):\n    return x\n")
    results = []
    for asynchronous in (False, True):
        envs = make_vector_env(2, "AddReLU", asynchronous=asynchronous, backend="cpu", max_steps=2,
                               evaluator=_double)
        try:
            obs, info = envs.reset(seed=0)
            assert obs[0].startswith("# Task kernelgym_gap/AddReLU-v0") and obs[0] == obs[1]
            obs, reward, term, trunc, info = envs.step(actions)
            results.append((list(reward), list(term), list(trunc), list(info["status"])))
            assert "Feedback from the previous step\nstatus: mismatch" in obs[1]
            assert info["terms"][0]["E"] == 0.5 and info["terms"][1]["E"] is None
            assert info["diagnosis"][0]["verdict"] == "efficient" and info["diagnosis"][1] is None
            assert info["record"][1]["failure"]["max_abs_err"] == 1.0 and info["record"][0]["failure"] is None
        finally:
            envs.close()
    assert results[0] == results[1] == ([1.0, 0.0], [True, False], [False, False], ["ok", "mismatch"])


@pytest.mark.slow
def test_async_vector_env_runs_real_evaluations_in_parallel(registry):
    """gymnasium.vector.AsyncVectorEnv over KernelEnv, each copy in its own process, through the engine."""
    import gymnasium as gym
    envs = make_vector_env(2, "AddReLU", backend="cpu", max_steps=2, config=EvalConfig(trial_seed=0))
    assert isinstance(envs, gym.vector.AsyncVectorEnv)
    try:
        obs, info = envs.reset(seed=1)
        assert "AddReLU" in obs[0] and list(info["task"]) == ["kernelgym_gap/AddReLU-v0"] * 2
        obs, reward, term, trunc, info = envs.step((_source(registry), _wrong_add_relu(registry)))
        assert list(info["status"]) == ["ok", "mismatch"]
        assert np.allclose(reward, [1.0, 0.0]) and list(term) == [True, False] and list(trunc) == [False, False]
        rec = info["record"]
        assert rec[0]["status"] == "ok" and rec[1]["failure"]["trial"] is not None
        assert rec[0]["source_sha256"] != rec[1]["source_sha256"]
    finally:
        envs.close()


def test_a_harness_failure_on_the_warm_path_is_that_requests_record():
    """The warm pool's path (each worker's WarmPool handed to the evaluator): one request's exception is its
    own record, and the requests after it on the same worker and warm pool are still evaluated."""
    seen = []

    def warm_double(task, source, dsl, backend, config, checker=None, children=None):
        seen.append((source, checker is not None, children is not None))
        if source == "bad":
            raise RecursionError("maximum recursion depth exceeded while decoding a JSON array")
        return EvalRecord(task=task.id, task_version=task.version, dsl=dsl, backend=backend, status=Status.OK,
                          correct=True, reward=1.0, reward_mode="correctness", terms={}, message=source)
    reqs = [EvalRequest("AddReLU", s, backend="cpu") for s in ("a", "bad", "c")]
    recs = evaluate_many(reqs, workers=1, evaluator=warm_double, warm=True)
    assert [r.status for r in recs] == [Status.OK, Status.PROTOCOL_ERROR, Status.OK]
    assert "RecursionError" in recs[1].message and recs[1].stage == "harness"
    assert seen == [("a", True, True), ("bad", True, True), ("c", True, True)]
