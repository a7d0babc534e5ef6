"""Raw timing readings for synthetic ShapeTimings (tests only): what an honest child would have read for a
kernel and a library that take exactly their claimed times, stopped where the child's own rules stop, and
the summary fields those readings give (core/timing_stats.py). The parent's score stage believes no summary
without readings (judge/measure.trusted_timings)."""
from __future__ import annotations

import dataclasses

from kernelgym_gap.core import timing_stats as stats
from kernelgym_gap.core.config import TimingConfig
from kernelgym_gap.core.timing_stats import Readings, TimingReadings


def full(ms: float, cfg: TimingConfig) -> Readings:
    """A full timing of constant readings, as long as Bench.measure_interleaved takes."""
    xs: list[float] = []
    while len(xs) < cfg.max_reps:
        xs.append(ms)
        if stats.may_stop(xs, xs, max(cfg.min_reps, 3), cfg):
            break
    return Readings(tuple(xs), tuple(xs))


def probe(ms: float, cfg: TimingConfig) -> Readings:
    xs: list[float] = []
    while len(xs) < cfg.library_check_reps and not stats.probe_may_stop(xs, cfg.early_exit_budget_ms):
        xs.append(ms)
    return Readings(tuple(xs), tuple(xs))


def with_readings(t, cfg: TimingConfig = TimingConfig(), probe_ms: float | None = None):
    """`t` (a ShapeTiming) with readings giving its kernel_ms, library_ms (when measured) and
    library_check_ms (library_ms when None), and the spreads and repetition counts they give."""
    check_ms = t.library_check_ms if t.library_check_ms is not None else t.library_ms
    p = probe(probe_ms if probe_ms is not None else t.kernel_ms, cfg)
    kernel = p if t.early_exit else full(t.kernel_ms, cfg)
    trusted = t.library_source == "trusted"       # the hint stood unchecked: no check readings (Job.library_trusted)
    n = 0 if trusted else cfg.library_check_reps
    c = Readings((check_ms,) * n, (check_ms,) * n)
    lib = None if t.library_source in ("cached", "trusted") else full(t.library_ms, cfg)
    readings = TimingReadings(kernel=kernel, probe=p, check=c, library=lib, sync_jitter_ms=0.0)
    k = stats.summarise_readings(kernel, 0.0)
    fields = dict(kernel_ms=k.median_ms, kernel_spread=k.spread, kernel_reps=k.reps, stream_ms=k.stream_ms,
                  device_ms=k.device_ms, library_check_ms=None if trusted else check_ms, readings=readings,
                  library_spread=0.0, library_reps=len((lib or c).stream_ms))
    if lib is not None:
        fields["library_ms"] = lib.stream_ms[0]
    return dataclasses.replace(t, **fields)
