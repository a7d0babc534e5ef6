"""An evaluation pool of Ray actors: `per_gpu` actors per GPU on the cuda backend (each asks Ray for 1/per_gpu
of a GPU; the actors of one GPU share it through its lane, core/lane.py: trials side by side, timings one at
a time), one per CPU slot on the cpu backend. Each actor evaluates through the same sandboxed engine
(engine.evaluate starts one child per evaluation on the actor's node) and sends back `EvalRecord.to_dict()`;
the caller rebuilds the record with `EvalRecord.from_dict`, so the records are the ones the local pool returns.

Selecting a cluster (`address`):
  "auto"    use Ray if this process already initialised it; else connect to a running cluster (RAY_ADDRESS,
            or the latest one started on this machine with `ray start`); else start a local instance.
            (Ray's own address="auto" raises when no cluster runs; ours falls back to a local one.)
  "local"   always start a new local instance.
  other     a cluster address (`host:6379`, `ray://host:10001`).

Every node must have the project (the same checkout, installed with `pip install -e .`): the evaluation
child reads the task files from the checkout beside the package.
"""
from __future__ import annotations

import dataclasses
import functools
import logging
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from kernelgym_gap.api.lanes import EvalRequest
from kernelgym_gap.core.config import EvalConfig
from kernelgym_gap.core.errors import HarnessError, UnknownChoiceError
from kernelgym_gap.core.record import EvalRecord
from kernelgym_gap.core.task import DSLS

log = logging.getLogger(__name__)


def _import_ray():
    try:
        import ray
    except ImportError:
        raise HarnessError("Ray is not installed: pip install -e '.[scale]' (or pip install ray)") from None
    return ray


class _EvalActor:
    """Runs inside a Ray worker process. Holds nothing of a submission between calls."""

    def __init__(self, backend: str, lanes: str | None = None):
        import socket
        self.backend = backend
        self.gpu_index: int | None = None
        # the lane directory of this pool on this node (the actors sharing a GPU run on its node)
        self.lane_dir = os.path.join(tempfile.gettempdir(), lanes) if lanes and backend == "cuda" else None
        if backend == "cuda":
            import ray
            ids = ray.get_gpu_ids()
            if not ids:
                raise HarnessError("a cuda evaluation actor was placed without a GPU")
            try:
                # Ray reports host-level ids: the engine puts this index in the child's CUDA_VISIBLE_DEVICES.
                self.gpu_index = int(ids[0])
            except (TypeError, ValueError):
                raise HarnessError(f"Ray gave this actor GPU id {ids[0]!r}, not an index") from None
        self.node = socket.gethostname()
        # the actor's one-slot evaluation service: its GPU, its node's lane directory (warm pools stay off on
        # this path: a Ray actor's evaluations use a fresh checker)
        from kernelgym_gap.api.service import EvalService
        self.service = EvalService(backend, slots=[self.gpu_index] if backend == "cuda" else 1, warm=False,
                                   lane_dir=self.lane_dir)

    def placement(self) -> dict[str, Any]:
        return {"node": self.node, "pid": os.getpid(), "gpu_index": self.gpu_index, "lane_dir": self.lane_dir}

    def drop_lanes(self) -> None:
        self.service.close()
        if self.lane_dir is not None:
            shutil.rmtree(self.lane_dir, ignore_errors=True)

    def evaluate(self, task_id: str, source: str, dsl: str, config: EvalConfig,
                 tasks_dir: str | None = None) -> dict[str, Any]:
        """task_id: the full id; tasks_dir: a user's task directory (the same path on every node), None for
        the project's own tasks/ (wherever this node has it)."""
        from kernelgym_gap.core.registry import find_task
        task = find_task(task_id, tasks_dir)
        # placed on this actor's GPU and lanes by the service; a harness failure is this request's own record
        # there, a misuse raises
        record = self.service.submit_task(task, source, dsl, config).result()
        return {"record": record.to_dict(), **self.placement()}


@functools.lru_cache(maxsize=None)
def _actor_class():
    ray = _import_ray()
    return ray.remote(_EvalActor)


class RayPool:
    """A fixed set of evaluation actors. Use as a context manager, or call close()."""

    def __init__(self, address: str | None = "auto", backend: str = "auto", workers: int | None = None,
                 init_kwargs: dict | None = None, per_gpu: int = 1):
        if per_gpu < 1:
            raise ValueError("per_gpu must be at least 1")
        ray = _import_ray()
        self._ray = ray
        self.owns_ray = False
        if not ray.is_initialized():
            kw = dict(init_kwargs or {})
            kw.setdefault("include_dashboard", False)
            kw.setdefault("log_to_driver", False)
            if address in (None, "auto"):
                ray.init(**kw)
            else:
                ray.init(address=address, **kw)
            self.owns_ray = True
        elif address not in (None, "auto"):
            log.info("Ray is already initialised in this process; using it instead of %s", address)
        resources = ray.cluster_resources()
        n_gpu, n_cpu = int(resources.get("GPU", 0)), int(resources.get("CPU", 0))
        if backend == "auto":
            backend = "cuda" if n_gpu > 0 else "cpu"
        if backend not in ("cpu", "cuda"):
            raise UnknownChoiceError("backend", backend, ("cpu", "cuda", "auto"))
        if backend == "cuda":
            if n_gpu == 0:
                raise HarnessError("the Ray cluster has no GPU resources for the cuda backend")
            n = min(n_gpu * per_gpu, workers) if workers else n_gpu * per_gpu
            options = {"num_gpus": 1 / per_gpu, "num_cpus": 1 if n_cpu >= n else 0}
        else:
            n = workers or max(n_cpu, 1)
            if n > n_cpu:
                log.warning("%d cpu actors asked for on a cluster of %d CPUs: some will wait", n, n_cpu)
            options = {"num_cpus": 1}
        self.backend = backend
        cls = _actor_class()
        lanes = f"kgg-lanes-{uuid.uuid4().hex[:12]}" if backend == "cuda" and per_gpu > 1 else None
        self.actors = [cls.options(**options).remote(backend, lanes) for _ in range(n)]
        try:
            self.actor_placements = ray.get([a.placement.remote() for a in self.actors])
        except Exception as e:
            self.close()
            raise HarnessError(f"the Ray evaluation actors did not start: {e}") from e
        self.placements: list[dict[str, Any]] = []   # where each request of the last batch ran

    @property
    def size(self) -> int:
        return len(self.actors)

    def evaluate(self, requests: Sequence, config: EvalConfig | None = None,
                 progress: Callable[[int, int, str], None] | None = None, registry=None) -> list[EvalRecord]:
        """EvalRequests in, records out in request order; each actor takes the next request when free."""
        from kernelgym_gap.core.registry import default_registry
        registry = registry or default_registry()
        requests = list(requests)
        # an unknown task fails here, before anything is sent
        return self._dispatch(requests, [registry.get(r.task_id) for r in requests], config, progress)

    def _dispatch(self, requests: list, tasks: list, config: EvalConfig | None, progress) -> list[EvalRecord]:
        from kernelgym_gap.core.registry import users_tasks_dir
        ray = self._ray
        default_config = config or EvalConfig()
        for r in requests:
            if r.dsl not in DSLS:
                raise UnknownChoiceError("dsl", r.dsl, DSLS)
            if r.backend not in ("auto", self.backend):
                raise ValueError(f"this Ray pool evaluates on {self.backend}; a request asks for {r.backend}")
        where = [users_tasks_dir(t) for t in tasks]     # a user's tasks_dir travels with the id
        results: list[EvalRecord | None] = [None] * len(requests)
        placements: list[dict | None] = [None] * len(requests)
        free = list(self.actors)
        pending: dict[Any, tuple[int, Any]] = {}
        nxt = done = 0
        failure: BaseException | None = None
        while nxt < len(requests) or pending:
            while free and nxt < len(requests) and failure is None:
                r = requests[nxt]
                actor = free.pop(0)
                ref = actor.evaluate.remote(tasks[nxt].id, r.source, r.dsl, r.config or default_config, where[nxt])
                pending[ref] = (nxt, actor)
                nxt += 1
            if failure is not None and not pending:
                break
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                index, actor = pending.pop(ref)
                free.append(actor)
                try:
                    out = ray.get(ref)
                except Exception as e:  # an actor died or the harness raised inside it
                    failure = failure or e
                    continue
                record = EvalRecord.from_dict(out.pop("record"))
                if out.get("gpu_index") is not None:
                    record = dataclasses.replace(record, device={**record.device, "gpu_index": out["gpu_index"]})
                results[index], placements[index] = record, out
                done += 1
                if progress:
                    progress(done, len(requests), f"{record.task}: {record.status.value}")
        if failure is not None:
            raise HarnessError(f"a Ray evaluation failed: {failure}") from failure
        self.placements = placements
        return results

    def evaluate_one(self, task_id: str, source: str, dsl: str, config: EvalConfig) -> EvalRecord:
        return self.evaluate([EvalRequest(task_id, source, dsl, self.backend, config)])[0]

    def evaluator(self):
        """An engine.evaluate-shaped callable (task, source, dsl, backend, config) for KernelEnv: the task as
        the env holds it, from whichever directory it came."""
        def run(task, source, dsl, backend, config):
            return self._dispatch([EvalRequest(task.id, source, dsl, self.backend, config)], [task], config, None)[0]
        return run

    def close(self) -> None:
        try:
            self._ray.get([a.drop_lanes.remote() for a in getattr(self, "actors", [])], timeout=10)
        except Exception:  # noqa: BLE001 - an actor already gone leaves a few empty files in its /tmp
            pass
        for a in getattr(self, "actors", []):
            try:
                self._ray.kill(a)
            except Exception:  # noqa: BLE001 - already gone
                pass
        self.actors = []
        if self.owns_ray and self._ray.is_initialized():
            self._ray.shutdown()
            self.owns_ray = False

    def __enter__(self) -> "RayPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class RayEvaluator:
    """An engine.evaluate-shaped callable that evaluates on a Ray cluster through one actor of its own,
    started in whichever process first calls it (an AsyncVectorEnv copy). Pickles as its address alone."""

    def __init__(self, address: str, backend: str):
        self.address, self.backend = address, backend
        self._pool = None

    def __getstate__(self):
        return {"address": self.address, "backend": self.backend}

    def __setstate__(self, state):
        self.__init__(state["address"], state["backend"])

    def __call__(self, task, source, dsl, backend, config):
        if self._pool is None:
            self._pool = RayPool(address=self.address, backend=self.backend, workers=1)
        return self._pool._dispatch([EvalRequest(task.id, source, dsl, self.backend, config)], [task], config,
                                    None)[0]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None


def driver_address(setting: str = "auto") -> str:
    """The address every vector copy connects to: the Ray this process uses, initialised here if needed
    (a running cluster, else a local instance, as RayPool's "auto"), so that copies never start their own."""
    ray = _import_ray()
    if not ray.is_initialized():
        kw = {"include_dashboard": False, "log_to_driver": False}
        if setting != "auto":
            kw["address"] = setting
        ray.init(**kw)
    return ray.get_runtime_context().gcs_address
