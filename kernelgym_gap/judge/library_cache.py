"""The library's (the task's torch reference's) time per timed shape, cached in the parent so that the child
times the library in full only when the device's library time has moved (docs/measurement.md).

One JSON file under the cache directory (judge/calibrate.cache_dir), two sections, and two more that only
TimingConfig.library_check_shapes reads (judge/library_trust.py):
  "times":     key -> the last KEEP measured times (ms); key = device key (judge/calibrate.device_key: name,
               driver, torch, triton) | task id @ version | shape | dtype | timed distribution. The hint is
               their median, so one stray measurement moves it little.
  "devices":   "host:gpu_index" -> the device key the last correct evaluation's child reported there: the
               parent holds no CUDA context, so it looks the device up here before starting a child.
  "confirmed": key -> when (the parent's time.time) ok evaluations' checks last agreed with its hint, the last
               library_trust.SETTLED_N of them.
  "drift":     key -> when a check of its hint last disagreed (the library measured afresh).
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
import time
from pathlib import Path

from kernelgym_gap.core.config import EvalConfig
from kernelgym_gap.core.errors import ProtocolError
from kernelgym_gap.core.placement import Placement
from kernelgym_gap.core.record import ChildReport, Job, ShapeTiming, Trial
from kernelgym_gap.core.task import TaskSpec
from kernelgym_gap.judge.calibrate import cache_dir, device_key, update_cache
from kernelgym_gap.judge.library_trust import SETTLED_N, trusted_keys

log = logging.getLogger(__name__)
KEEP = 8                         # measurements kept per key; the hint is their median
SOURCES = ("measured", "cached", "trusted")


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
    for name in ("confirmed", "drift"):     # the trust's sections (judge/library_trust.py): dropped when malformed
        if name in data and not isinstance(data[name], dict):
            log.warning("library time cache %s: its %r section is not a mapping, ignored", path, name)
            del data[name]
    return data


def _median(values) -> float | None:
    good = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0]
    return statistics.median(good) if good else None


def hints(task: TaskSpec, timing_trials: tuple[Trial, ...], config: EvalConfig, placement: Placement | None = None):
    """Job.library_hint for these timing trials: (shape, dtype, median ms) for each one the cache (the
    placement's) knows on this host's GPU placement.gpu_index; () when config.library_time is "measure" or
    the device is unknown."""
    return plan(task, timing_trials, config, placement)[0]


def plan(task: TaskSpec, timing_trials: tuple[Trial, ...], config: EvalConfig, placement: Placement | None = None,
         now: float | None = None):
    """(Job.library_hint, Job.library_trusted) for these timing trials: the hints as `hints` gives them, and the
    (shape, dtype) of those whose hint stands unchecked under config.timing.library_check_shapes
    (judge/library_trust.trusted_keys; none when it is 0). `now`: the parent's clock (time.time by default)."""
    placement = placement or Placement()
    if config.library_time != "cached" or not timing_trials:
        return (), ()
    data = load(cache_path(placement))
    device = data["devices"].get(slot(placement.gpu_index))
    if not isinstance(device, str):
        return (), ()
    out, keys = [], {}
    for t in timing_trials:
        key = time_key(device, task, t.shape, t.dtype)
        values = data["times"].get(key)
        ms = _median(values) if isinstance(values, list) else None
        if ms is not None:
            out.append((tuple(t.shape), t.dtype, ms))
            keys.setdefault(key, (tuple(t.shape), t.dtype))
    cfg = config.timing
    if cfg is None or not cfg.library_check_shapes or not keys:
        return tuple(out), ()
    trusted = trusted_keys(list(keys), data.get("confirmed", {}), data.get("drift", {}),
                           cfg.library_check_shapes, cfg.library_trust_s, time.time() if now is None else now)
    return tuple(out), tuple(keys[k] for k in keys if k in trusted)


def store(task: TaskSpec, report: ChildReport, placement: Placement | None = None, now: float | None = None) -> int:
    """After a correct evaluation (its timings reconciled): remembers the child's device for placement.gpu_index
    and adds the library times it measured in full (library_source "measured") to the cache. A check that
    confirmed its hint ("cached") is remembered as the entry's confirmation, and one that disagreed (measured
    where a hint was sent) as the entry's drift (judge/library_trust.py reads both). Returns how many times
    were added."""
    placement = placement or Placement()
    now = time.time() if now is None else now
    device = device_key(report.device, report.versions)
    fresh = [(time_key(device, task, t.shape, t.dtype), t.library_ms) for t in report.timings
             if t.library_source == "measured" and t.library_ms > 0]
    confirmed = [time_key(device, task, t.shape, t.dtype) for t in report.timings if t.library_source == "cached"]
    disagreed = [time_key(device, task, t.shape, t.dtype) for t in report.timings
                 if t.library_source == "measured" and t.library_hint_ms is not None]

    def change(data: dict) -> None:
        data["devices"][slot(placement.gpu_index)] = device
        for key, ms in fresh:
            old = data["times"].get(key)
            data["times"][key] = ((old if isinstance(old, list) else []) + [ms])[-KEEP:]
        if confirmed:
            seen = data.setdefault("confirmed", {})      # `load` dropped a malformed one
            for key in confirmed:
                old = seen.get(key)
                seen[key] = ((old if isinstance(old, list) else []) + [now])[-SETTLED_N:]
        if disagreed:
            data.setdefault("drift", {}).update({key: now for key in disagreed})

    update_cache(cache_path(placement), change, read=load)
    return len(fresh)


def reconcile(job: Job, timings: tuple[ShapeTiming, ...]) -> tuple[ShapeTiming, ...]:
    """The child's timings with the library time the parent stands behind: its own hint where the child's
    check confirmed it. Raises ProtocolError where a claim (cached or measured, early exit) does not follow
    from the child's own check and the hint the parent sent."""
    sent = {(tuple(s), d): ms for s, d, ms in job.library_hint}
    unchecked = {(tuple(s), d) for s, d in job.library_trusted}
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
        if hint is not None and (tuple(t.shape), t.dtype) in unchecked:
            # the parent's hint stands unchecked (TimingConfig.library_check_shapes): nothing to re-derive but
            # the early exit, against the hint
            if t.library_source != "trusted":
                raise ProtocolError(f"{where}: the library time was to stand unchecked (trusted); the child "
                                    f"reported {t.library_source}")
            t = dataclasses.replace(t, library_ms=hint)
            if t.early_exit and not cfg.hopeless(t.kernel_ms, hint):
                raise ProtocolError(f"{where}: the child stopped timing early, but its kernel time {t.kernel_ms} ms "
                                    f"is not over {cfg.hopeless_factor} x the library's {hint} ms")
            out.append(t)
            continue
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
