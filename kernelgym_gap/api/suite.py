"""The main job: episodes over the task suite with the replay agent, one row per reference solution."""
from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time
from collections.abc import Callable

from kernelgym_gap.core import ids
from kernelgym_gap.core.terms import Headline
from kernelgym_gap.core.config import EvalConfig
from kernelgym_gap.core.dsls import NAMES as DSL_NAMES
from kernelgym_gap.core.registry import TaskRegistry, default_registry

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class SuiteRow:
    task: str
    category: str
    dsl: str
    solution: str
    kind: str
    defect: str | None
    status: str
    correct: bool | None
    reward: float
    E: float | None
    U: float | None
    verdict: str | None
    seconds: float
    record: dict
    gpu: int | None = None          # the GPU the episode was pinned to (cuda backend)


def run_suite(backend: str = "auto", dsls: tuple[str, ...] = DSL_NAMES,
              task_ids: list[str] | None = None, config: EvalConfig | None = None,
              registry: TaskRegistry | None = None, evaluator=None,
              progress: Callable[[int, int, str], None] | None = None,
              workers: int | None = None, gpus: list[int] | None = None, warm: bool = False,
              placement=None) -> list[SuiteRow]:
    """One episode per (task, dsl) with the replay agent. Episodes run in parallel: on the cuda backend one
    at a time per GPU (every visible GPU by default, each episode's evaluations pinned to its worker's GPU),
    on the cpu backend `workers` at a time (default: one per core). Rows come back in plan order. progress(finished,
    total, label) is called as each solution starts (label: task and file) and as it ends (`label: status
    reward`, finished one higher). warm: each slot of the run's api/service.EvalService holds one warm.WarmPool
    (its GPU's on cuda: a warm checker and pre-started children) that the episodes share.
    (One function of ~70 lines: the worker closure shares the plan's queue, results and first error.)"""
    from kernelgym_gap.api.agent import load_agent
    from kernelgym_gap.core.backend import resolve_backend
    if warm and evaluator is not None:
        raise ValueError("warm= applies to the built-in evaluator; pass a checker to your own evaluator")
    registry = registry or default_registry()
    backend = resolve_backend(backend)
    config = config or EvalConfig()
    tasks = [registry.get(t) for t in task_ids] if task_ids else list(registry)
    agent = load_agent("replay", registry=registry)
    plan = [(t, d) for t in tasks for d in dsls if agent.solutions(t.id, d)]
    total = sum(len(agent.solutions(t.id, d)) for t, d in plan)
    # the service's slots: one per GPU on cuda (an error when none is visible), `workers` on cpu (default
    # one per core, as bench and evaluate_many: one worker left a 2-core machine half idle between children);
    # one episode thread per slot, every step through the one service (its warm pools, one per slot)
    from kernelgym_gap.api.service import EvalService
    todo: queue.Queue = queue.Queue()
    for i, item in enumerate(plan):
        todo.put((i, item))
    results: dict[int, list[SuiteRow]] = {}
    errors: list[BaseException] = []
    lock = threading.Lock()
    finished = [0]

    def tick(label: str, outcome: str | None = None) -> None:
        """progress(finished, total, label) as an item starts, and again with `label: outcome` (and one more
        finished) as it ends."""
        with lock:
            if outcome is not None:
                finished[0] += 1
            n = finished[0]
        if progress:
            progress(n, total, label if outcome is None else f"{label}: {outcome}")

    def work(service: EvalService) -> None:
        try:
            while not errors:
                try:
                    i, (task, dsl) = todo.get_nowait()
                except queue.Empty:
                    return
                results[i] = _episode(task, dsl, backend, config, registry, service, tick)
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            errors.append(e)

    # placement (core.placement.Placement): every slot's but its GPU (scratch root, cache paths)
    with EvalService(backend, config, slots=workers, gpus=gpus, per_gpu=1, warm=warm, evaluator=evaluator,
                     registry=registry, placement=placement) as service:
        threads = [threading.Thread(target=work, args=(service,), name=f"suite-{k}", daemon=True)
                   for k in range(len(service.slots))]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    if errors:
        raise errors[0]
    return [row for i in sorted(results) for row in results[i]]


def _episode(task, dsl, backend, config, registry, service, tick) -> list[SuiteRow]:
    from kernelgym_gap.api.agent import load_agent
    from kernelgym_gap.api.env import KernelEnv
    agent = load_agent("replay", registry=registry)
    n = len(agent.solutions(task.id, dsl))
    env = KernelEnv(task_id=task.id, dsl=dsl, backend=backend, max_steps=n, config=config,
                    stop_when_correct=False, registry=registry, service=service)
    rows = []
    try:
        obs, info = env.reset(options={"task": task.id, "dsl": dsl})
        agent.reset(obs, info)
        for _ in range(n):
            source = agent.act(obs, info)
            sol = agent.last
            label = f"{task.name} {sol.file}"
            tick(label)
            t0 = time.perf_counter()
            obs, reward, terminated, truncated, info = env.step(source)
            gpu = env.last_record.device.get("gpu_index") if backend == "cuda" else None
            tick(label + (f" (GPU {gpu})" if gpu is not None else ""), f"{info['status']} {reward:.3f}")
            head = Headline.of(info["terms"])
            rows.append(SuiteRow(task=task.id, category=task.category, dsl=dsl, solution=sol.file, kind=sol.kind,
                                 defect=sol.defect, status=info["status"], correct=info["correct"],
                                 reward=reward, E=head.E, U=head.U,
                                 verdict=(info["diagnosis"] or {}).get("verdict"),
                                 seconds=time.perf_counter() - t0, record=info["record"], gpu=gpu))
            if terminated or truncated:
                break
    finally:
        env.close()
    return rows


def format_table(rows: list[SuiteRow]) -> str:
    def f(x, fmt="{:.3g}"):
        return "-" if x is None else fmt.format(x)
    header = ("task", "dsl", "solution", "kind", "status", "reward", "E", "U", "verdict", "s")
    body = [(ids.short(r.task), r.dsl, r.solution, r.kind + (f" ({r.defect})" if r.defect else ""),
             r.status, f"{r.reward:.3f}", f(r.E), f(r.U), r.verdict or "-", f"{r.seconds:.1f}") for r in rows]
    if any(r.gpu is not None for r in rows):
        header += ("gpu",)
        body = [row + ("-" if r.gpu is None else str(r.gpu),) for r, row in zip(rows, body)]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *body)]
    lines = ["  ".join(str(x).ljust(w) for x, w in zip(header, widths))]
    lines.append("  ".join("-" * w for w in widths))
    prev = None
    for r, row in zip(rows, body):
        if prev is not None and r.task != prev:
            lines.append("")
        prev = r.task
        lines.append("  ".join(str(x).ljust(w) for x, w in zip(row, widths)))
    return "\n".join(lines)
