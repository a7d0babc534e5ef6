"""The check's seconds per part (judge/checker.check's `seconds`, the record's check_<part> latency keys)."""
from __future__ import annotations

import time

import torch


class Parts:
    """Seconds per part of the check, summed over its trials (CheckResult.seconds, then the record's latency
    as check_<part>). `enter(part)` closes the part that was running, so a failure in the middle of one still
    counts there. On cuda each switch waits for the device first, so a part's kernels count in that part and
    not in the next one that happens to synchronize."""

    def __init__(self, device: str):
        self.seconds: dict[str, float] = {}
        self._sync = torch.cuda.synchronize if device == "cuda" else None
        self._part, self._t = "other", time.perf_counter()

    def enter(self, part: str) -> None:
        if self._sync is not None:
            self._sync()
        now = time.perf_counter()
        self.seconds[self._part] = round(self.seconds.get(self._part, 0.0) + (now - self._t), 6)
        self._part, self._t = part, now
