"""The library's (the task's torch reference's) time per timed shape, cached in the parent so that the child
times the library in full only when the device's library time has moved (docs/measurement.md).

One JSON file under the cache directory (judge/calibrate.cache_dir), two sections:
  "times":   key -> the last KEEP measured times (ms); key = device key (judge/calibrate.device_key: name,
             driver, torch, triton) | task id @ version | shape | dtype | timed distribution. The hint is
             their median, so one stray measurement moves it little.
  "devices": "host:gpu_index" -> the device key the last correct evaluation's child reported there: the
             parent holds no CUDA context, so it looks the device up here before starting a child.
Writers take an exclusive flock on a lock file beside it and replace the file whole; readers need no lock.
A file that does not parse is ignored (logged) and rewritten by the next writer.

The parent trusts none of the child's numbers it can re-derive (`reconcile`): the child's library check
decides between the hint and a fresh measurement by TimingConfig.library_agrees, and the parent recomputes
that decision from the check it was sent back and the hint it sent; where the hint stands, library_ms is the
parent's own hint. A child can still report a false *measured* library time, as it could without the cache;
only correct evaluations write to the cache, and a poisoned entry cannot move an honest evaluation's E by
more than library_tolerance: its check disagrees and it measures the library afresh.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import socket
import statistics
from pathlib import Path

from kernelgym_gap.core.config import EvalConfig
from kernelgym_gap.core.errors import ProtocolError
from kernelgym_gap.core.placement import Placement
from kernelgym_gap.core.record import ChildReport, Job, ShapeTiming, Trial
from kernelgym_gap.core.task import TaskSpec
from kernelgym_gap.judge.calibrate import cache_dir, device_key, update_cache

log = logging.getLogger(__name__)
KEEP = 8                         # measurements kept per key; the hint is their median
SOURCES = ("measured", "cached")


def default_cache_path() -> Path:
    return cache_dir() / "library_times.json"


def cache_path(placement: Placement | None = None) -> Path:
    path = placement.library_cache_path if placement is not None else None
    return Path(path) if path else default_cache_path()


def time_key(device: str, task: TaskSpec, shape, dtype: str) -> str:
    return "|".join([device, f"{task.id}@v{task.version}", "x".join(str(int(s)) for s in shape), dtype,
                     task.timed_distribution])


def slot(gpu_index: int) -> str:
    """Where a device key is remembered: this host's GPU `gpu_index` (a cache dir may be shared by hosts)."""
    return f"{socket.gethostname()}:{int(gpu_index)}"


def load(path: Path) -> dict:
    """{"times": {...}, "devices": {...}}; empty sections when the file is missing or does not parse."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {"times": {}, "devices": {}}
    except (OSError, ValueError) as e:
        log.warning("library time cache %s unreadable, ignored: %s", path, e)
        return {"times": {}, "devices": {}}
    if not (isinstance(data, dict) and isinstance(data.get("times"), dict)
            and isinstance(data.get("devices"), dict)):
        log.warning("library time cache %s is not in the expected form, ignored", path)
        return {"times": {}, "devices": {}}
    return data


def _median(values) -> float | None:
    good = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0]
    return statistics.median(good) if good else None


def hints(task: TaskSpec, timing_trials: tuple[Trial, ...], config: EvalConfig, placement: Placement | None = None):
    """Job.library_hint for these timing trials: (shape, dtype, median ms) for each one the cache (the
    placement's) knows on this host's GPU placement.gpu_index; () when config.library_time is "measure" or
    the device is unknown."""
    placement = placement or Placement()
    if config.library_time != "cached" or not timing_trials:
        return ()
    data = load(cache_path(placement))
    device = data["devices"].get(slot(placement.gpu_index))
    if not isinstance(device, str):
        return ()
    out = []
    for t in timing_trials:
        values = data["times"].get(time_key(device, task, t.shape, t.dtype))
        ms = _median(values) if isinstance(values, list) else None
        if ms is not None:
            out.append((tuple(t.shape), t.dtype, ms))
    return tuple(out)


def store(task: TaskSpec, report: ChildReport, placement: Placement | None = None) -> int:
    """After a correct evaluation: remembers the child's device for placement.gpu_index and adds the library
    times it measured in full (library_source "measured") to the cache. Returns how many were added."""
    placement = placement or Placement()
    device = device_key(report.device, report.versions)
    fresh = [(time_key(device, task, t.shape, t.dtype), t.library_ms) for t in report.timings
             if t.library_source == "measured" and t.library_ms > 0]

    def change(data: dict) -> None:
        data["devices"][slot(placement.gpu_index)] = device
        for key, ms in fresh:
            old = data["times"].get(key)
            data["times"][key] = ((old if isinstance(old, list) else []) + [ms])[-KEEP:]

    update_cache(cache_path(placement), change, read=load)
    return len(fresh)


def reconcile(job: Job, timings: tuple[ShapeTiming, ...]) -> tuple[ShapeTiming, ...]:
    """The child's timings with the library time the parent stands behind: its own hint where the child's
    check confirmed it. Raises ProtocolError where a claim (cached or measured, early exit) does not follow
    from the child's own check and the hint the parent sent."""
    sent = {(tuple(s), d): ms for s, d, ms in job.library_hint}
    cfg = job.timing
    out = []
    for t in timings:
        where = f"shape {list(t.shape)} {t.dtype}"
        hint = sent.get((tuple(t.shape), t.dtype))
        if t.library_source not in SOURCES:
            raise ProtocolError(f"{where}: unknown library_source {t.library_source!r}")
        if t.library_hint_ms != hint:
            raise ProtocolError(f"{where}: the child echoed a library hint of {t.library_hint_ms} ms; "
                                f"it was sent {hint}")
        agreed = hint is not None and t.library_check_ms is not None and cfg.library_agrees(t.library_check_ms, hint)
        expected = "cached" if agreed else "measured"
        if t.library_source != expected:
            raise ProtocolError(f"{where}: the child's library check read {t.library_check_ms} ms against the "
                                f"hint {hint} ms, which makes the library time {expected}; it reported "
                                f"{t.library_source}")
        if agreed:
            t = dataclasses.replace(t, library_ms=hint)
        ref = hint if agreed else t.library_check_ms
        if t.early_exit and (ref is None or not cfg.hopeless(t.kernel_ms, ref)):
            raise ProtocolError(f"{where}: the child stopped timing early, but its kernel time {t.kernel_ms} ms "
                                f"is not over {cfg.hopeless_factor} x the library's {ref} ms")
        out.append(t)
    return tuple(out)
