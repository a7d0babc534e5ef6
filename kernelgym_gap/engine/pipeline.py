"""One evaluation, end to end: the stages of engine/stages.py run in order until one decides. The parent never
imports the submission: it writes the source into a fresh scratch directory and runs it in a sandboxed child
(sandbox/launch.py), whose outputs the trusted checker judges (judge/)."""
from __future__ import annotations

import time

from kernelgym_gap.core.backend import backend as backend_info
from kernelgym_gap.core.backend import resolve_backend
from kernelgym_gap.core.config import EvalConfig
from kernelgym_gap.core.errors import UnknownChoiceError
from kernelgym_gap.core.placement import Placement
from kernelgym_gap.core.record import EvalRecord
from kernelgym_gap.core.task import DSLS, TaskSpec
from kernelgym_gap.engine.evaluation import Evaluation
from kernelgym_gap.engine.stages import STAGES
from kernelgym_gap.judge.trusted import ensure_matches

__all__ = ["evaluate", "resolve_backend"]


def evaluate(task: TaskSpec | str, source: str | bytes, dsl: str = "triton", backend: str = "auto",
             config: EvalConfig = EvalConfig(), checker=None, children=None,
             placement: Placement | None = None) -> EvalRecord:
    """Evaluate one submission. Never raises for anything the submission does; raises only for misuse
    (unknown task, dsl or backend, a checker for another device) or a machine that cannot run the backend.

    task: a TaskSpec, or a task id or name (`"LayerNorm"`) looked up in the default registry.
    checker: None (a fresh trusted checker process per evaluation on cuda, the parent itself on cpu) or an
    api.warm.WarmChecker for this backend (and, on cuda, for placement.gpu_index): its persistent process
    checks instead.
    placement: where it runs (core.placement.Placement: GPU index, lane directory, scratch root, cache paths,
    held outputs); None is Placement()'s defaults. What it measures is `config` alone (the cache key's).
    children: None, or a sandbox.prestart.ChildPool: the submission's child is then one the pool
    pre-started (its imports done) when one fits, and the pool starts the next one once this child ended.
    The submission's child is a fresh, single-use process either way."""
    if isinstance(task, str):
        from kernelgym_gap.core.registry import get_task
        task = get_task(task)
    if dsl not in DSLS:
        raise UnknownChoiceError("dsl", dsl, DSLS)
    name = resolve_backend(backend)
    placement = placement or Placement()
    ensure_matches(checker, name, placement)
    t_start = time.perf_counter()
    raw = source.encode("utf-8", "surrogatepass") if isinstance(source, str) else source
    ev = Evaluation(task, raw, dsl, backend_info(name), config, checker=checker, children=children,
                    placement=placement)
    try:
        for stage in STAGES:
            t = time.perf_counter()
            verdict = stage.run(ev)
            if stage.name == "gate":
                ev.latency["gate"] = time.perf_counter() - t
            if verdict is not None:
                return ev.record(verdict)
        raise AssertionError("the score stage always decides")
    finally:
        ev.close()
        ev.latency["total"] = time.perf_counter() - t_start
