"""The results store in front of one evaluation: an evaluation whose key was measured before is answered from
the store without starting a child; every call is stored as a submission. For the leaderboard's `submit`
and for `caching_evaluator` (an `evaluator=` for KernelEnv). A miss is evaluated through a one-slot
api/service.EvalService, as every other front end evaluates (it lived in store/ before issue 33: store/ is SQL
only)."""
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
    from kernelgym_gap.api.service import EvalService
    from kernelgym_gap.core.backend import resolve_backend
    require_nonempty(submitter)            # refused before measuring: a result is never measured, then lost
    backend = resolve_backend(backend)
    key = cache_key_for(task, source, dsl, backend, config)
    if not remeasure:
        hit = store.lookup(key)
        if hit is not None:
            return CachedResult(hit[1], store.add_cache_hit(hit[0], submitter, origin), hit[0], True)
    # one evaluation, one slot, no warm pool (nothing to keep warm for): the service's placement and
    # failure handling, its own cache off (the store above is this call's cache)
    with EvalService(backend, config, slots=1, warm=False) as service:
        record = service.evaluate(task, source, dsl)
    sid = store.add_record(record, source, submitter, key=key, origin=origin)
    return CachedResult(record, sid, None, False)


def cached_evaluate(store, task, source: str | bytes, dsl: str, backend: str, config, submitter: str,
                    remeasure: bool = False) -> EvalRecord:
    """An evaluation with the store in front: a key measured before returns the stored record without
    starting a child; every call is stored as a submission by `submitter`."""
    return cached_evaluate_full(store, task, source, dsl, backend, config, submitter, remeasure).record


def caching_evaluator(store, submitter: str, remeasure: bool = False):
    """An `evaluator=` for KernelEnv: KernelEnv(task_id=..., evaluator=caching_evaluator(store, "my-agent"))."""
    def evaluator(task, source, dsl, backend, config) -> EvalRecord:
        return cached_evaluate_full(store, task, source, dsl, backend, config, submitter, remeasure,
                                    origin="env").record
    return evaluator
