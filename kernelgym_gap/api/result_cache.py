"""The result cache in front of the evaluation service: an identical submission (same source, task version,
dsl, backend, device, measured settings and software: `store.cache_key.cache_key_for`) is evaluated once.

In memory: an LRU of `size` records. With a `store` (a `store.Store` or a database path): the results
database is looked up too, and every new record is kept there as a submission of `submitter`. Records whose
status can come from the machine (timeouts, crashes: store.results.NOT_CACHED_STATUSES) are never served
again. This is the one cache front: api/service.EvalService holds it, and api/cached.cached_evaluate_full (the
leaderboard's `submit`) uses it with strict=True (a store that cannot record is an error there, not a log
line); nothing else looks records up by key."""
from __future__ import annotations

import collections
import dataclasses
import logging
import threading
from typing import Any

from kernelgym_gap.core.record import EvalRecord

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class CacheHit:
    """A record served from the cache: from memory (both ids None) or from the store, where the evaluation
    that measured it is `evaluation_id` and this request was recorded as the cache-hit submission
    `submission_id` (None when the store could not record it and strict was off)."""
    record: EvalRecord
    evaluation_id: int | None = None
    submission_id: int | None = None
    cache_hit: bool = True


class ResultCache:
    def __init__(self, size: int = 4096, store: Any = None, submitter: str = "service", origin: str = "service"):
        if store is not None and not hasattr(store, "lookup"):
            from kernelgym_gap.store.db import Store
            store = Store(store)
        if store is not None:
            from kernelgym_gap.store.names import require_nonempty
            require_nonempty(submitter)     # refused before measuring: a result is never measured, then lost
        self.size, self.store, self.submitter, self.origin = size, store, submitter, origin
        self._memory: collections.OrderedDict = collections.OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0

    @staticmethod
    def key(task, source, dsl: str, backend: str, config, placement=None):
        """The key of an evaluation of `config` (hashed whole); `placement` names the GPU whose name is the
        device part of the key, nothing else of it is hashed."""
        from kernelgym_gap.store.cache_key import cache_key_for
        return cache_key_for(task, source, dsl, backend, config, placement)

    def get(self, key, origin: str | None = None, strict: bool = False) -> CacheHit | None:
        """The CacheHit for a key measured before, else None. A store hit is recorded there as a submission of
        this cache's submitter (strict: a store that cannot record it raises, else it is logged)."""
        with self._lock:
            rec = self._memory.get(key)
            if rec is not None:
                self._memory.move_to_end(key)
                self.hits += 1
                return CacheHit(rec)
        if self.store is None:
            return None
        hit = self.store.lookup(key)
        if hit is None:
            return None
        self._remember(key, hit[1])
        submission = None
        try:
            submission = self.store.add_cache_hit(hit[0], self.submitter, origin or self.origin)
        except Exception:  # noqa: BLE001 - the record still goes back; the store is a cache
            if strict:
                raise
            log.exception("could not record a cache hit in %s", self.store)
        with self._lock:
            self.hits += 1
        return CacheHit(hit[1], evaluation_id=hit[0], submission_id=submission)

    def put(self, key, record: EvalRecord, source, origin: str | None = None, strict: bool = False) -> int | None:
        """Keeps a new record (memory and store); returns its submission id in the store, if any (strict: a
        store that cannot keep it raises, else it is logged and None comes back)."""
        self._remember(key, record)
        if self.store is None:
            return None
        try:
            return self.store.add_record(record, source, self.submitter, key=key, origin=origin or self.origin)
        except Exception:  # noqa: BLE001 - the reward still goes back; the store is a cache
            if strict:
                raise
            log.exception("could not store a record in %s", self.store)
            return None

    def _remember(self, key, record: EvalRecord) -> None:
        from kernelgym_gap.store.results import NOT_CACHED_STATUSES
        if record.status.value in NOT_CACHED_STATUSES or self.size <= 0:
            return
        with self._lock:
            self._memory[key] = record
            self._memory.move_to_end(key)
            while len(self._memory) > self.size:
                self._memory.popitem(last=False)
