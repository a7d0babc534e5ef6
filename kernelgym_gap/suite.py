"""The main job: episodes over the task suite with the replay agent, one row per reference solution."""
from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable

from .config import EvalConfig
from .registry import TaskRegistry, default_registry

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


def run_suite(backend: str = "auto", dsls: tuple[str, ...] = ("triton", "tilelang"),
              task_ids: list[str] | None = None, config: EvalConfig | None = None,
              registry: TaskRegistry | None = None, evaluator=None,
              progress: Callable[[int, int, str], None] | None = None) -> list[SuiteRow]:
    from .agent import load_agent
    from .env import KernelEnv
    registry = registry or default_registry()
    tasks = [registry.get(t) for t in task_ids] if task_ids else list(registry)
    agent = load_agent("replay", registry=registry)
    plan = [(t, d) for t in tasks for d in dsls if agent.solutions(t.id, d)]
    total = sum(len(agent.solutions(t.id, d)) for t, d in plan)
    rows: list[SuiteRow] = []
    done = 0
    for task, dsl in plan:
        n = len(agent.solutions(task.id, dsl))
        env = KernelEnv(task_id=task.id, dsl=dsl, backend=backend, max_steps=n, config=config,
                        stop_when_correct=False, registry=registry, evaluator=evaluator)
        obs, info = env.reset(options={"task": task.id, "dsl": dsl})
        agent.reset(obs, info)
        for _ in range(n):
            source = agent.act(obs, info)
            sol = agent.last
            if progress:
                progress(done, total, f"{task.name} {sol.file}")
            t0 = time.perf_counter()
            obs, reward, terminated, truncated, info = env.step(source)
            done += 1
            terms = info["terms"]
            rows.append(SuiteRow(task=task.id, category=task.category, dsl=dsl, solution=sol.file, kind=sol.kind,
                                 defect=sol.defect, status=info["status"], correct=info["correct"],
                                 reward=reward, E=terms.get("E"), U=terms.get("U"),
                                 verdict=(info["diagnosis"] or {}).get("verdict"),
                                 seconds=time.perf_counter() - t0, record=info["record"]))
            if terminated or truncated:
                break
        env.close()
    if progress:
        progress(done, total, "done")
    return rows


def format_table(rows: list[SuiteRow]) -> str:
    def f(x, fmt="{:.3g}"):
        return "-" if x is None else fmt.format(x)
    header = ("task", "dsl", "solution", "kind", "status", "reward", "E", "U", "verdict", "s")
    body = [(r.task.removeprefix("kernelgym_gap/"), r.dsl, r.solution, r.kind + (f" ({r.defect})" if r.defect else ""),
             r.status, f"{r.reward:.3f}", f(r.E), f(r.U), r.verdict or "-", f"{r.seconds:.1f}") for r in rows]
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
