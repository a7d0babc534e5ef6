"""The cache in front of the engine: an evaluation whose key was measured before is answered from the store
without starting a child; every call is stored as a submission."""
from __future__ import annotations

import dataclasses

from kernelgym_gap.core.record import EvalRecord
from kernelgym_gap.store.cache_key import cache_key_for
from kernelgym_gap.store.names import require_nonempty


@dataclasses.dataclass(frozen=True)
class CachedResult:
    record: EvalRecord
    submission_id: int
    evaluation_id: int | None
    cache_hit: bool


def cached_evaluate_full(store, task, source: str | bytes, dsl: str, backend: str, config,
                         submitter: str, remeasure: bool = False, origin: str = "cli") -> CachedResult:
    from kernelgym_gap.engine import pipeline as engine
    require_nonempty(submitter)            # refused before measuring: a result is never measured, then lost
    backend = engine.resolve_backend(backend)
    key = cache_key_for(task, source, dsl, backend, config)
    if not remeasure:
        hit = store.lookup(key)
        if hit is not None:
            return CachedResult(hit[1], store.add_cache_hit(hit[0], submitter, origin), hit[0], True)
    record = engine.evaluate(task, source, dsl, backend, config)
    sid = store.add_record(record, source, submitter, key=key, origin=origin)
    return CachedResult(record, sid, None, False)


def cached_evaluate(store, task, source: str | bytes, dsl: str, backend: str, config, submitter: str,
                    remeasure: bool = False) -> EvalRecord:
    """engine.evaluate with the store in front: a key measured before returns the stored record without
    starting a child; every call is stored as a submission by `submitter`."""
    return cached_evaluate_full(store, task, source, dsl, backend, config, submitter, remeasure).record


def caching_evaluator(store, submitter: str, remeasure: bool = False):
    """An `evaluator=` for KernelEnv: KernelEnv(task_id=..., evaluator=caching_evaluator(store, "my-agent"))."""
    def evaluator(task, source, dsl, backend, config) -> EvalRecord:
        return cached_evaluate_full(store, task, source, dsl, backend, config, submitter, remeasure,
                                    origin="env").record
    return evaluator
