"""A benchmark run: K independent episodes of at most S steps of one agent on every selected task, stored per
run label as they complete, resumable.

Episodes run in parallel worker threads (`parallel` at once), each in its own KernelEnv with its own agent
(sample k of a seeded agent gets seed + k). Their evaluations go through one api/service.EvalService and its
slots (`per_gpu` evaluations per GPU on cuda, their timings one at a time through the GPU's lane; `workers`
on cpu), so that while one episode's kernel is evaluated another's agent writes its next one; each slot may
hold a warm pool (the service's rule: on cuda).

Resume: every evaluated step is written to the store in one transaction with its evaluation
(store/bench.py). Run again under the same label, finished episodes are skipped; an unfinished one (killed,
or ended by an endpoint or harness error) runs again from its first step, and each step whose source is the
one stored for that step is answered from the store instead of being evaluated again (a deterministic agent:
replay, search, chat at a fixed seed, re-submits the same sources). Nothing stored is evaluated twice.
"""
from __future__ import annotations

import dataclasses
import hashlib
import logging
import queue
import re
import threading
import time
from collections.abc import Callable
from typing import Any

from kernelgym_gap.core.config import EvalConfig
from kernelgym_gap.core.errors import HarnessError, KernelGymError
from kernelgym_gap.core.record import EvalRecord

log = logging.getLogger(__name__)

LABEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@+-]{0,99}$")
LABEL_RULE = "a run label is 1-100 characters: letters, digits and ._:@+- (starting with a letter or digit)"
# settings a resumed run may change without changing what it measures
TRANSPORT_KEYS = {"base_url", "api_key_env", "timeout_s", "max_retries", "backoff_s", "max_backoff_s"}
SECRET = re.compile(r"key|token|secret|password", re.IGNORECASE)


class BenchError(KernelGymError):
    """A benchmark that cannot run as asked (a label in use with other settings, an invalid label)."""


@dataclasses.dataclass
class BenchSpec:
    label: str
    agent: str
    task_ids: list[str]
    agent_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    dsl: str = "triton"
    backend: str = "auto"
    samples: int = 1
    steps: int = 4
    seed: int | None = None
    stop_when_correct: bool | None = None
    workers: int | None = None            # evaluations at once (cuda: at most per_gpu per GPU)
    per_gpu: int = 4                      # cuda: evaluations at once per GPU, through its lane (core/lane.py)
    parallel: int | None = None           # episodes at once (default: twice the evaluation slots)
    gpus: list[int] | None = None
    warm: bool | None = None              # None: warm on cuda (pre-started children, a kept checker), cold on cpu

    def settings(self, config: EvalConfig) -> dict:
        """What the run measures, stored with it and compared when it is resumed."""
        kw = {k: ("<redacted>" if SECRET.search(k) and k != "api_key_env" else v)
              for k, v in sorted(self.agent_kwargs.items())}
        return {"agent": self.agent, "agent_kwargs": kw, "dsl": self.dsl, "backend": self.backend,
                "steps": self.steps, "samples": self.samples, "tasks": list(self.task_ids), "seed": self.seed,
                "reward_mode": config.reward.mode, "stop_when_correct": self.stop_when_correct}


def default_label(agent: str, dsl: str, backend: str, model: str | None = None) -> str:
    parts = [agent] + ([model] if model else []) + [dsl, backend]
    label = re.sub(r"[^A-Za-z0-9._:@+-]", "_", "-".join(str(p) for p in parts))
    return label[:100]


def check_label(label: str) -> str:
    if not isinstance(label, str) or not LABEL_RE.match(label):
        raise BenchError(f"{label!r}: {LABEL_RULE}")
    return label


def _differences(old: dict, new: dict) -> list[str]:
    out = []
    for k in ("agent", "dsl", "backend", "steps", "seed", "reward_mode", "stop_when_correct"):
        if old.get(k) != new.get(k):
            out.append(f"{k}: {old.get(k)!r} stored, {new.get(k)!r} now")
    a = {k: v for k, v in (old.get("agent_kwargs") or {}).items() if k not in TRANSPORT_KEYS}
    b = {k: v for k, v in (new.get("agent_kwargs") or {}).items() if k not in TRANSPORT_KEYS}
    if a != b:
        out.append(f"agent arguments: {a} stored, {b} now")
    return out


class _Stop(BaseException):
    """The run was interrupted: the episode is left unfinished (it runs again on resume)."""


def run_bench(spec: BenchSpec, store, *, config: EvalConfig | None = None, registry=None,
              evaluator: Callable | None = None, progress=None, placement=None) -> dict:
    """Runs (or resumes) the benchmark `spec` into `store`; returns what this call did: episodes in the run,
    those already done, those run now, new evaluations, stored steps reused, errors. progress: an object with
    start(label) and done(how) (cli.progress.Progress), told of each episode. evaluator: engine.evaluate's
    shape (a test double); the built-in engine by default."""
    from kernelgym_gap.core.backend import resolve_backend
    from kernelgym_gap.core.registry import default_registry
    check_label(spec.label)
    if spec.samples < 1 or spec.steps < 1:
        raise BenchError("--samples and --steps must be at least 1")
    registry = registry or default_registry()
    config = config or EvalConfig()
    if spec.seed is not None and config.trial_seed is None:
        config = config.replace(trial_seed=spec.seed)
    tasks = [registry.get(t) for t in spec.task_ids]
    spec = dataclasses.replace(spec, backend=resolve_backend(spec.backend), task_ids=[t.id for t in tasks])
    settings = spec.settings(config)
    old = store.bench_run(spec.label)
    if old is not None:
        diff = _differences(old["config"], settings)
        if diff:
            raise BenchError(f"run {spec.label!r} exists with other settings ({'; '.join(diff)}): resume it with "
                             "the same settings, or name a new run with --name")
        settings["tasks"] = list(dict.fromkeys(old["config"].get("tasks", []) + settings["tasks"]))
        settings["samples"] = max(old["config"].get("samples", 1), spec.samples)
    store.bench_put_run(spec.label, spec.agent, spec.dsl, spec.backend, settings)
    done = {(e["task_id"], e["sample"]) for e in store.bench_episodes(spec.label) if e["state"] == "done"}
    plan = [(t, k) for t in tasks for k in range(spec.samples)]
    todo = [(t, k) for t, k in plan if (t.id, k) not in done]
    # the run's evaluation service (api/service.py): its slots (`per_gpu` per GPU on cuda, `workers` on
    # cpu), their warm pools (warm: None is the service's rule) and lanes: several evaluations per GPU
    # coordinate through the GPU's lane in this user's lane directory on the host ("auto")
    from kernelgym_gap.api.service import EvalService
    lanes = EvalService(spec.backend, config, slots=spec.workers, gpus=spec.gpus, per_gpu=spec.per_gpu,
                        warm="auto" if spec.warm is None else spec.warm, evaluator=evaluator, registry=registry,
                        lane_dir="auto", placement=placement)
    state = _RunState(spec, store, config, registry, lanes, progress)
    slots = lanes.slots
    try:
        state.make_agent(0)       # loads the agent's module once, before the threads, and checks its arguments
    except (TypeError, ValueError) as e:
        raise BenchError(f"agent {spec.agent!r} cannot be made: {e}") from None
    work: queue.Queue = queue.Queue()
    for item in todo:
        work.put(item)
    n_threads = max(1, min(len(todo), spec.parallel or 2 * len(slots)))
    threads = [threading.Thread(target=state.worker, args=(work,), name=f"bench-{i}", daemon=True)
               for i in range(n_threads)]
    try:
        for th in threads:
            th.start()
        for th in threads:
            while th.is_alive():
                th.join(0.2)
    except BaseException:
        state.stop.set()
        raise
    finally:
        lanes.close()
    if state.fatal is not None:
        raise state.fatal
    return {"label": spec.label, "episodes": len(plan), "already_done": len(plan) - len(todo), "ran": len(todo),
            "evaluations": lanes.evaluated, "reused_steps": state.reused, "errors": state.errors}


class _RunState:
    def __init__(self, spec: BenchSpec, store, config, registry, lanes, progress):
        self.spec, self.store, self.config, self.registry = spec, store, config, registry
        self.lanes, self.progress = lanes, progress
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.reused = 0
        self.errors: list[dict] = []
        self.fatal: BaseException | None = None
        self.submitter = f"bench:{spec.label}"

    def worker(self, work: queue.Queue) -> None:
        while not self.stop.is_set():
            try:
                task, k = work.get_nowait()
            except queue.Empty:
                return
            try:
                self.episode(task, k)
            except _Stop:
                return
            except BaseException as e:  # noqa: BLE001 - re-raised by run_bench (the run stops)
                with self.lock:
                    self.fatal = self.fatal or e
                self.stop.set()
                return

    def make_agent(self, k: int):
        from kernelgym_gap.api.agent import load_agent
        kw = dict(self.spec.agent_kwargs)
        if self.spec.agent in ("chat", "search") and "seed" not in kw:
            kw["seed"] = (self.spec.seed or 0) + k
        if self.spec.agent in ("replay", "search"):
            kw.setdefault("registry", self.registry)
        return load_agent(self.spec.agent, **kw)

    def episode(self, task, k: int) -> None:
        from kernelgym_gap.api.env import KernelEnv
        spec, store = self.spec, self.store
        label = f"{task.name} #{k}"
        store.bench_start_episode(spec.label, task.id, k, task.category, task.level)
        stored = store.bench_episode_steps(spec.label, task.id, k)
        cur: dict[str, Any] = {"step": 0, "note": None}
        t0 = time.perf_counter()

        def evaluate(t, source, dsl, backend, config):
            step = cur["step"]
            raw = source.encode("utf-8") if isinstance(source, str) else source
            prev = stored.get(step)
            if prev is not None and prev["source_sha256"] == hashlib.sha256(raw).hexdigest():
                with self.lock:
                    self.reused += 1
                return EvalRecord.from_json(prev["record_json"])
            for s in [s for s in stored if s >= step]:      # the episode diverged from what was stored
                del stored[s]
            t1 = time.perf_counter()
            record = self.lanes.evaluate(t, source, dsl, backend, config)
            from kernelgym_gap.store.cache_key import key_from_record
            store.bench_put_step(spec.label, t.id, k, step, record, source, key_from_record(record, source, config),
                                 self.submitter, note=cur["note"], seconds=round(time.perf_counter() - t1, 3))
            return record

        agent = None
        env = KernelEnv(task_id=task.id, dsl=spec.dsl, backend=spec.backend, max_steps=spec.steps,
                        config=self.config, stop_when_correct=spec.stop_when_correct, evaluator=evaluate,
                        registry=self.registry)
        steps, error, finished = 0, None, None
        try:
            agent = self.make_agent(k)
            obs, info = env.reset(seed=None if spec.seed is None else spec.seed + k)
            agent.reset(obs, info)
            for i in range(spec.steps):
                if self.stop.is_set():
                    raise _Stop()
                cur["step"] = i + 1
                if self.progress:
                    self.progress.start(f"{label} step {i + 1}: the agent writes a kernel")
                try:
                    source = agent.act(obs, info)
                except HarnessError:
                    raise
                except (RuntimeError, StopIteration) as e:     # nothing left to submit (replay)
                    finished = str(e) or type(e).__name__
                    break
                cur["note"] = getattr(agent, "last_note", None) or getattr(getattr(agent, "last", None), "file", None)
                if self.progress:
                    self.progress.start(f"{label} step {i + 1}: evaluating")
                obs, reward, terminated, truncated, info = env.step(source)
                steps = i + 1
                if terminated or truncated:
                    break
        except _Stop:
            raise
        except Exception as e:  # noqa: BLE001 - recorded per sample (the endpoint, the harness, the agent)
            error = f"{type(e).__name__}: {e}"
            log.warning("%s: %s", label, error)
        finally:
            env.close()
        usage = dict(getattr(agent, "usage", None) or {}) or None
        store.bench_finish_episode(spec.label, task.id, k, state="error" if error else "done", steps=steps,
                                   error=error, finished=finished, usage=usage,
                                   seconds=round(time.perf_counter() - t0, 3))
        if error:
            with self.lock:
                self.errors.append({"task": task.id, "sample": k, "error": error})
        if self.progress:
            self.progress.done("error" if error else f"{steps} step(s)")


def select_tasks(registry, selector: str) -> list[str]:
    """Task ids for a selector: `all`, a category (`normalization`), a level (`level2`, `level=2`), a task
    name or id, or a comma list of these (their union, in the registry's order)."""
    tasks = list(registry)
    categories = {t.category for t in tasks}
    chosen: set[str] = set()
    for item in [p.strip() for p in (selector or "").split(",") if p.strip()]:
        low = item.lower()
        level = re.fullmatch(r"(?:level|l)[=:]?\s*(\d+)", low)
        if low == "all":
            chosen.update(t.id for t in tasks)
        elif low in categories:
            chosen.update(t.id for t in tasks if t.category == low)
        elif level:
            hits = [t.id for t in tasks if t.level == int(level.group(1))]
            if not hits:
                raise BenchError(f"no task has level {level.group(1)} (levels: "
                                 f"{', '.join(str(v) for v in sorted({t.level for t in tasks}))})")
            chosen.update(hits)
        else:
            chosen.add(registry.get(item).id)
    if not chosen:
        raise BenchError(f"--tasks {selector!r} selects no task: give all, a category ({', '.join(sorted(categories))}), "
                         "a level (level1), task names, or a comma list of these")
    return [t.id for t in tasks if t.id in chosen]
