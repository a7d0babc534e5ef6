"""The results store in front of one evaluation: an evaluation whose key was measured before is answered from
the store without starting a child; every call is stored as a submission. For the leaderboard's `submit`
and for `caching_evaluator` (an `evaluator=` for KernelEnv). A miss is evaluated through a one-slot
api/service.EvalService, as every other front end evaluates (it lived in store/ before issue 33: store/ is SQL
only)."""
from __future__ import annotations

import dataclasses

from kernelgym_gap.api.result_cache import ResultCache
from kernelgym_gap.core.placement import Placement
from kernelgym_gap.core.record import EvalRecord
from kernelgym_gap.store.names import require_nonempty


@dataclasses.dataclass(frozen=True)
class CachedResult:
    record: EvalRecord
    submission_id: int
    evaluation_id: int | None
    cache_hit: bool


def cached_evaluate_full(store, task, source: str | bytes, dsl: str, backend: str, config,
                         submitter: str, remeasure: bool = False, origin: str = "cli",
                         placement=None) -> CachedResult:
    """One evaluation with the store in front. `placement` (core.placement.Placement, default Placement()):
    where a miss runs (its GPU, scratch and cache paths); the key hashes `config` whole."""
    from kernelgym_gap.api.service import EvalService
    from kernelgym_gap.core.backend import resolve_backend
    require_nonempty(submitter)            # refused before measuring: a result is never measured, then lost
    backend = resolve_backend(backend)
    placement = placement or Placement()
    # the service's own cache front (api/result_cache.py), over the store alone (no memory: each call is one
    # submission) and strict: a store that cannot record the submission is this call's error
    cache = ResultCache(0, store, submitter, origin)
    key = cache.key(task, source, dsl, backend, config, placement)
    if not remeasure:
        hit = cache.get(key, strict=True)
        if hit is not None:
            return CachedResult(hit.record, hit.submission_id, hit.evaluation_id, hit.cache_hit)
    # one evaluation, one slot, no warm pool (nothing to keep warm for): the service's placement and
    # failure handling, its own cache off (the store above is this call's cache)
    with EvalService(backend, config, slots=[placement.gpu_index] if backend == "cuda" else 1, warm=False,
                     placement=placement) as service:
        record = service.evaluate(task, source, dsl)
    return CachedResult(record, cache.put(key, record, source, strict=True), None, False)


def cached_evaluate(store, task, source: str | bytes, dsl: str, backend: str, config, submitter: str,
                    remeasure: bool = False) -> EvalRecord:
    """An evaluation with the store in front: a key measured before returns the stored record without
    starting a child; every call is stored as a submission by `submitter`."""
    return cached_evaluate_full(store, task, source, dsl, backend, config, submitter, remeasure).record


def caching_evaluator(store, submitter: str, remeasure: bool = False):
    """An `evaluator=` for KernelEnv: KernelEnv(task_id=..., evaluator=caching_evaluator(store, "my-agent"))."""
    def evaluator(task, source, dsl, backend, config, placement=None, **_warm) -> EvalRecord:
        # the env's service passes its slot's placement (and warm parts, which a one-off evaluation ignores)
        return cached_evaluate_full(store, task, source, dsl, backend, config, submitter, remeasure,
                                    origin="env", placement=placement).record
    return evaluator
