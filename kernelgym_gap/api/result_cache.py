"""The result cache in front of the evaluation service: an identical submission (same source, task version,
dsl, backend, device, measured settings and software: `store.cache_key.cache_key_for`) is evaluated once.

In memory: an LRU of `size` records. With a `store` (a `store.Store` or a database path): the results
database is looked up too, and every new record is kept there as a submission of `submitter`. Records whose
status can come from the machine (timeouts, crashes: store.results.NOT_CACHED_STATUSES) are never served
again. This is the one cache front: api/service.EvalService holds it; nothing else looks records up by key."""
from __future__ import annotations

import collections
import logging
import threading
from typing import Any

from kernelgym_gap.core.record import EvalRecord

log = logging.getLogger(__name__)


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
    def key(task, source, dsl: str, backend: str, config):
        from kernelgym_gap.store.cache_key import cache_key_for
        return cache_key_for(task, source, dsl, backend, config)

    def get(self, key, origin: str | None = None) -> tuple[EvalRecord, int | None] | None:
        """(record, evaluation id in the store or None) for a key measured before, else None. A store hit is
        recorded there as a submission of this cache's submitter."""
        with self._lock:
            rec = self._memory.get(key)
            if rec is not None:
                self._memory.move_to_end(key)
                self.hits += 1
                return rec, None
        if self.store is None:
            return None
        hit = self.store.lookup(key)
        if hit is None:
            return None
        self._remember(key, hit[1])
        try:
            self.store.add_cache_hit(hit[0], self.submitter, origin or self.origin)
        except Exception:  # noqa: BLE001 - the record still goes back; the store is a cache
            log.exception("could not record a cache hit in %s", self.store)
        with self._lock:
            self.hits += 1
        return hit[1], hit[0]

    def put(self, key, record: EvalRecord, source, origin: str | None = None) -> int | None:
        """Keeps a new record (memory and store); returns its submission id in the store, if any."""
        self._remember(key, record)
        if self.store is None:
            return None
        try:
            return self.store.add_record(record, source, self.submitter, key=key, origin=origin or self.origin)
        except Exception:  # noqa: BLE001 - the reward still goes back; the store is a cache
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
