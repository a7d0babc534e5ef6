"""Many evaluations at once, for trainers that score a batch of completions, and the vector environment.

`evaluate_many(requests, workers)` evaluates a list of `EvalRequest`s and returns their `EvalRecord`s in
request order. Each evaluation already runs in its own sandboxed child process (engine.evaluate), so the
parent's pool is made of threads: a thread waits on its child and nothing of the submission runs in the
parent.

  * cpu backend: `workers` threads (default: the machine's CPU count) share the queue.
  * cuda backend: one worker per GPU of the host (all visible GPUs unless `gpus=` names some), each
    evaluation pinned to its worker's GPU through `EvalConfig.gpu_index`; with one GPU the evaluations
    queue, since two timings on one GPU at once would disturb each other. The GPU an evaluation used is
    written into its record's device info as `device["gpu_index"]`.
  * `ray="auto"` or `ray="host:port"`: the same requests go to a pool of Ray actors (kernelgym_gap.api.ray_pool)
    and come back as the same records.

`score_completions(task_id, completions, ...)` is the trainer's shortcut: raw model replies in, records out,
the submission of each reply being its code block (`extract_code`, the same rule the chat agent uses).

`make_vector_env(n, ...)` is the documented way to build a Gymnasium vector environment over KernelEnv:
observations and actions are `spaces.Text`, which `AsyncVectorEnv` garbles through shared memory, so it
always passes `shared_memory=False`.
"""
from __future__ import annotations

import ast
import dataclasses
import functools
import logging
import os
import queue
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym

from kernelgym_gap.core.config import EvalConfig
from kernelgym_gap.core.errors import HarnessError, UnknownChoiceError
from kernelgym_gap.core.record import EvalRecord
from kernelgym_gap.core.task import BACKENDS, DSLS, TaskSpec

log = logging.getLogger(__name__)

# (task, source, dsl, backend, config) -> record: engine.evaluate's shape, as in KernelEnv.
Evaluator = Callable[[TaskSpec, str, str, str, EvalConfig], EvalRecord]
Progress = Callable[[int, int, str], None]


@dataclasses.dataclass(frozen=True)
class EvalRequest:
    """One submission to evaluate. `config=None` takes the batch's config; `tag` is the caller's own label
    (a completion id, a prompt index) and is not used by the harness."""
    task_id: str
    source: str
    dsl: str = "triton"
    backend: str = "auto"
    config: EvalConfig | None = None
    tag: Any = None


def visible_gpus() -> list[int]:
    """Indices of this host's GPUs as the evaluation child names them (its CUDA_VISIBLE_DEVICES value).

    engine.evaluate builds the child's environment from scratch and sets CUDA_VISIBLE_DEVICES to
    `config.gpu_index`, so that index is a host-level one. If the parent itself was restricted with
    integer CUDA_VISIBLE_DEVICES, only those are used."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        parts = [p.strip() for p in env.split(",") if p.strip()]
        if all(p.isdigit() for p in parts):
            return [int(p) for p in parts]
        log.warning("CUDA_VISIBLE_DEVICES=%r is not a list of indices; using every device torch sees", env)
    import torch
    return list(range(torch.cuda.device_count()))


def _resolve(requests: Sequence[EvalRequest], registry) -> tuple[list[TaskSpec], list[str]]:
    """Checks every request before anything runs: a misuse fails the whole batch at once."""
    from kernelgym_gap.engine.pipeline import resolve_backend
    resolved: dict[str, str] = {}
    tasks, backends = [], []
    for i, r in enumerate(requests):
        if not isinstance(r, EvalRequest):
            raise TypeError(f"request {i} is a {type(r).__name__}, not an EvalRequest")
        if r.dsl not in DSLS:
            raise UnknownChoiceError("dsl", r.dsl, DSLS)
        if r.backend not in resolved:
            resolved[r.backend] = resolve_backend(r.backend)
        tasks.append(registry.get(r.task_id))
        backends.append(resolved[r.backend])
    return tasks, backends


def evaluate_many(requests: Sequence[EvalRequest], workers: int | None = None, *,
                  config: EvalConfig | None = None, gpus: Sequence[int] | None = None, ray: Any = None,
                  registry=None, evaluator: Evaluator | None = None,
                  progress: Progress | None = None, warm: bool = False) -> list[EvalRecord]:
    """Evaluates every request; returns the records in request order.

    workers: parallel evaluations on the cpu backend (default os.cpu_count()); on the cuda backend at most
        one per GPU (a larger number is capped, a smaller one uses the first GPUs of `gpus`).
    config: the default for requests whose config is None.
    gpus: host GPU indices for the cuda backend (default: all, see visible_gpus()).
    ray: None for the local pool; "auto" or a cluster address for Ray actors started for this call and
        stopped after it (see ray_pool.RayPool); or a RayPool kept by the caller across batches (a trainer
        scoring batch after batch should keep one: actors start in about a second, Ray itself in several).
    evaluator: replaces engine.evaluate in the local pool (a store-backed cache, a test double).
    warm: each worker of the local pool holds one warm.WarmPool for the call (cuda: pinned to the
        worker's GPU; cpu: a cpu one) and passes its parts to the evaluator as `checker=` and `children=`
        (engine.evaluate takes them; a custom evaluator must too). Each submission still runs in a fresh,
        single-use child (pre-started by the pool or not).
    Raises for misuse (unknown task, dsl or backend) before evaluating anything, and HarnessError if an
    evaluation itself raised (the remaining requests are not started)."""
    from kernelgym_gap.core.registry import default_registry
    requests = list(requests)
    if not requests:
        return []
    if workers is not None and workers < 1:
        raise ValueError("workers must be at least 1")
    registry = registry or default_registry()
    default_config = config or EvalConfig()
    if ray is not None:
        if warm:
            raise ValueError("warm= applies to the local pool; a Ray actor's evaluations use a fresh checker")
        if evaluator is not None or gpus is not None:
            raise ValueError("evaluator= and gpus= apply to the local pool; a Ray pool places its own actors")
        if not isinstance(ray, str):     # a RayPool the caller keeps across batches
            return ray.evaluate(requests, config=default_config, progress=progress, registry=registry)
        from kernelgym_gap.api.ray_pool import RayPool
        with RayPool(address=ray, backend=_one_backend(requests), workers=workers) as pool:
            return pool.evaluate(requests, config=default_config, progress=progress, registry=registry)
    tasks, backends = _resolve(requests, registry)
    if evaluator is None:
        from kernelgym_gap.engine.pipeline import evaluate as evaluator
    pool = _LocalPool(evaluator, _slots(backends, workers, gpus), progress, len(requests), warm=warm,
                      scratch_root=default_config.scratch_root)
    for i, (r, task, backend) in enumerate(zip(requests, tasks, backends)):
        pool.put(i, backend, task, r.source, r.dsl, r.config or default_config)
    return pool.join()


def _one_backend(requests: Sequence[EvalRequest]) -> str:
    """The backend of a Ray batch. "auto" is decided by the cluster (cuda when it has GPUs), not by this
    process, which may be a head node without one."""
    asked = {r.backend for r in requests} - {"auto"}
    if len(asked) > 1:
        raise ValueError(f"a Ray batch evaluates one backend at a time; this one mixes {sorted(asked)}")
    for b in asked:
        if b not in BACKENDS:
            raise UnknownChoiceError("backend", b, BACKENDS + ("auto",))
    return asked.pop() if asked else "auto"


def _slots(backends: Sequence[str], workers: int | None, gpus: Sequence[int] | None) -> dict[str, list[int | None]]:
    """Worker slots per backend: GPU indices for cuda, None for each cpu worker."""
    slots: dict[str, list[int | None]] = {}
    if "cpu" in backends:
        slots["cpu"] = [None] * (workers or os.cpu_count() or 1)
    if "cuda" in backends:
        host = list(gpus) if gpus is not None else visible_gpus()
        if not host:
            raise HarnessError("the cuda backend was asked for but no GPU is visible")
        if workers is not None and workers > len(host):
            log.warning("workers=%d capped to %d: one evaluation per GPU at a time (timings on a shared GPU "
                        "disturb each other)", workers, len(host))
        slots["cuda"] = host[: workers or len(host)]
    return slots


class _LocalPool:
    """Threads that each take (index, job) from their backend's queue and run the evaluator."""

    def __init__(self, evaluator: Evaluator, slots: dict[str, list[int | None]], progress: Progress | None,
                 total: int, warm: bool = False, scratch_root: str | None = None):
        self.evaluator, self.progress, self.total = evaluator, progress, total
        self.warm, self.scratch_root = warm, scratch_root
        self.results: dict[int, EvalRecord] = {}
        self.queues = {b: queue.Queue() for b in slots}
        self.lock = threading.Lock()
        self.failed: BaseException | None = None
        self.done = 0
        self.threads = [threading.Thread(target=self._work, args=(b, gpu), daemon=True,
                                         name=f"kgg-eval-{b}-{gpu if gpu is not None else k}")
                        for b, gs in slots.items() for k, gpu in enumerate(gs)]
        self.slots = slots

    def put(self, index: int, backend: str, *job) -> None:
        self.queues[backend].put((index, job))

    def join(self) -> list[EvalRecord]:
        for b, q in self.queues.items():
            for _ in self.slots[b]:
                q.put(None)
        for t in self.threads:
            t.start()
        for t in self.threads:
            t.join()
        if self.failed is not None:
            raise HarnessError(f"an evaluation raised: {self.failed!r}") from self.failed
        return [self.results[i] for i in range(self.total)]

    def _work(self, backend: str, gpu: int | None) -> None:
        if not self.warm:
            return self._loop(backend, gpu, self.evaluator)
        from kernelgym_gap.api.warm import WarmPool
        try:
            warm = WarmPool(device=backend, gpu_index=gpu if gpu is not None else 0, scratch_root=self.scratch_root)
        except BaseException as e:  # noqa: BLE001 - reported after the pool drains
            log.exception("the warm pool of worker %s/%s did not start", backend, gpu)
            with self.lock:
                self.failed = self.failed or e
            return self._loop(backend, gpu, self.evaluator)     # drains the queue (failed is set)
        with warm:
            self._loop(backend, gpu, functools.partial(self.evaluator, checker=warm.checker,
                                                       children=warm.children))

    def _loop(self, backend: str, gpu: int | None, evaluator: Evaluator) -> None:
        q = self.queues[backend]
        while True:
            item = q.get()
            if item is None:
                return
            index, (task, source, dsl, config) = item
            if self.failed is not None:
                continue
            try:
                if gpu is not None:
                    config = config.replace(gpu_index=gpu)
                record = evaluator(task, source, dsl, backend, config)
                if gpu is not None:
                    record = dataclasses.replace(record, device={**record.device, "gpu_index": gpu})
            except BaseException as e:  # noqa: BLE001 - reported after the pool drains
                log.exception("evaluation %d raised", index)
                with self.lock:
                    self.failed = self.failed or e
                continue
            with self.lock:
                self.results[index] = record
                self.done += 1
                done = self.done
            if self.progress:
                self.progress(done, self.total, f"{task.name}: {record.status.value}")


# ---- completions -> submissions ---------------------------------------------------------------------

_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([\w+.#-]*)[^\n]*\n(.*?)^[ \t]*\1[ \t]*$", re.S | re.M)
_OPEN_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([\w+.#-]*)[^\n]*\n", re.M)
_THINK = re.compile(r"<(think|thinking|reasoning)>.*?</\1>", re.S | re.I)
_PY_LANGS = {"python", "py", "python3", "triton", "tilelang", ""}


def _parses(code: str) -> bool:
    try:
        ast.parse(code)
        return True
    except (SyntaxError, ValueError):
        return False


def _defines(code: str, name: str | None) -> bool:
    if not name:
        return False
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return re.search(rf"^\s*def\s+{re.escape(name)}\s*\(", code, re.M) is not None
    return any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name for n in tree.body)


def extract_code(reply: str, entry_point: str | None = None) -> str:
    """The submission in a model's reply.

    Reasoning blocks (<think>...</think>) are dropped first. Among fenced code blocks (``` or ~~~) tagged
    python/py/triton/tilelang or untagged (else any fenced block), the last one that defines the entry
    point wins (models revise as they go), else the longest that parses, else the longest. Without a closed
    fence: the text after the last opening fence (a reply cut off by max_tokens). Without any fence: the
    reply as it is, and the gate says what is wrong with it (feedback for the next turn)."""
    text = _THINK.sub("", reply or "")
    blocks = [(m.group(2).lower(), m.group(3)) for m in _FENCE.finditer(text)]
    code_blocks = [b for lang, b in blocks if lang in _PY_LANGS] or [b for _, b in blocks]
    if code_blocks:
        with_entry = [b for b in code_blocks if _defines(b, entry_point)]
        if with_entry:
            return with_entry[-1].strip("\n") + "\n"
        parsing = [b for b in code_blocks if _parses(b)]
        return max(parsing or code_blocks, key=len).strip("\n") + "\n"
    opened = list(_OPEN_FENCE.finditer(text))
    if opened:
        return text[opened[-1].end():].strip("\n") + "\n"
    stripped = text.strip()
    return stripped + "\n" if stripped else ""


def score_completions(task_id: str, completions: Sequence[str], dsl: str = "triton", backend: str = "auto",
                      **kwargs) -> list[EvalRecord]:
    """Raw model replies for one task in, one record per reply out (in order): each reply's code block
    (`extract_code`) is evaluated. Keyword arguments go to `evaluate_many` (workers, config, ray, ...)."""
    from kernelgym_gap.core.registry import default_registry
    registry = kwargs.get("registry") or default_registry()
    entry = registry.get(task_id).entry_point
    requests = [EvalRequest(task_id, extract_code(c, entry), dsl, backend, tag=i) for i, c in enumerate(completions)]
    return evaluate_many(requests, **kwargs)


# ---- Gymnasium vector API -----------------------------------------------------------------------------

class InfoMapping(Mapping):
    """A read-only mapping that is not a dict. Gymnasium's vector environments merge a dict-valued info entry
    key by key into typed numpy arrays; a step's `terms`, `diagnosis` and `record` hold None in one copy
    where another has a dict or a float (a failed and a correct kernel in one batch), which that merge
    cannot take (it raises, and AsyncVectorEnv then hangs in close()). Wrapped in this class they are kept
    whole: `info["record"][i]["status"]`. Picklable, so it crosses AsyncVectorEnv's pipes."""

    __slots__ = ("_data",)

    def __init__(self, data: dict):
        self._data = dict(data)

    def __getitem__(self, key):
        return self._data[key]

    def __iter__(self):
        return iter(self._data)

    def __len__(self):
        return len(self._data)

    def __repr__(self):
        return f"InfoMapping({self._data!r})"

    def __getstate__(self):
        return self._data

    def __setstate__(self, state):
        self._data = state

    def to_dict(self) -> dict:
        return dict(self._data)


def vector_info(info: dict) -> dict:
    """A KernelEnv info made safe for Gymnasium's vector merge: its dict values become InfoMapping. The
    scalars stay as they are; note that `correct` (None for an unverified kernel) is merged into a bool
    array when the first copy's value is a bool, so read the exact value from `info["record"][i]`."""
    return {k: InfoMapping(v) if isinstance(v, dict) else v for k, v in info.items()}


class VectorInfo(gym.Wrapper):
    """Wraps KernelEnv for gymnasium.vector.*VectorEnv (see InfoMapping); make_vector_env applies it."""

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        return obs, vector_info(info)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, terminated, truncated, vector_info(info)


def _make_env(kwargs: dict):
    from kernelgym_gap.api.env import KernelEnv
    return VectorInfo(KernelEnv(**kwargs))


def make_vector_env(n: int, task_id: str | None = None, *, asynchronous: bool = True,
                    gpus: Sequence[int] | None = None, context: str | None = None, ray: str | None = None,
                    **env_kwargs):
    """`n` KernelEnv copies as one Gymnasium vector environment (AsyncVectorEnv: one process per copy, so
    the copies' evaluations run in parallel; SyncVectorEnv with asynchronous=False).

    Text observations need `shared_memory=False` (with shared memory AsyncVectorEnv returns a string of
    '0's instead of the observation): this helper always passes it. Each copy is wrapped in VectorInfo, so
    that infos of failed and correct steps merge (`info["record"][i]` is the i-th copy's record). On the
    cuda backend copy i evaluates on GPU gpus[i % len(gpus)] (default: all visible GPUs). With
    `ray="auto"` or an address, each copy evaluates through its own Ray actor instead (ray_pool.RayEvaluator;
    Ray places the actors, one GPU or one CPU slot each); AsyncVectorEnv then starts its copies with
    "spawn", since a process forked from a Ray driver cannot use Ray. Other keyword arguments go to
    KernelEnv (task_ids, dsl, backend, max_steps, config, stop_when_correct, evaluator, ...)."""
    from kernelgym_gap.engine.pipeline import resolve_backend
    if n < 1:
        raise ValueError("n must be at least 1")
    env_kwargs = dict(env_kwargs, task_id=task_id)
    backend = resolve_backend(env_kwargs.get("backend", "auto"))
    env_kwargs["backend"] = backend
    if ray is not None:
        if "evaluator" in env_kwargs or gpus is not None:
            raise ValueError("ray= gives each copy a Ray evaluator; it combines with neither evaluator= nor gpus=")
        from kernelgym_gap.api.ray_pool import RayEvaluator, driver_address
        address = driver_address(ray)
        context = context or "spawn"
    base = env_kwargs.get("config") or EvalConfig()
    host = (list(gpus) if gpus is not None else visible_gpus()) if backend == "cuda" and ray is None else []
    fns = []
    for i in range(n):
        kw = dict(env_kwargs)
        if host:
            kw["config"] = base.replace(gpu_index=host[i % len(host)])
        if ray is not None:
            kw["evaluator"] = RayEvaluator(address, backend)
        fns.append(functools.partial(_make_env, kw))
    if not asynchronous:
        return gym.vector.SyncVectorEnv(fns)
    return gym.vector.AsyncVectorEnv(fns, shared_memory=False, context=context)


__all__ = ["EvalRequest", "InfoMapping", "VectorInfo", "evaluate_many", "extract_code", "make_vector_env",
           "score_completions", "vector_info", "visible_gpus"]
