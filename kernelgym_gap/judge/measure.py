"""From the child's timings to the performance terms: roofline floor, E and U per shape, aggregate,
integrity flags and the diagnosis. Runs in the parent, on numbers it re-derives itself: `trusted_timings`
recomputes every timing summary from the child's raw readings (core/timing_stats.py) first."""
from __future__ import annotations

import dataclasses
import importlib.resources
import json
import logging
import math
from pathlib import Path

from kernelgym_gap.judge.calibrate import Calibration, calibrate, datasheet, device_key, load_cached
from kernelgym_gap.core.config import EvalConfig
from kernelgym_gap.judge.diagnosis import causes, diagnose
from kernelgym_gap.judge.floor import floor_ms  # noqa: F401 - measure.floor_ms, as before
from kernelgym_gap.core.errors import HarnessError
from kernelgym_gap.core.errors import ProtocolError
from kernelgym_gap.core.placement import Placement
from kernelgym_gap.core.record import ChildReport, ShapeTiming
from kernelgym_gap.judge.reward import geomean, performance
from kernelgym_gap.core.status import Status
from kernelgym_gap.core.task import TaskSpec
from kernelgym_gap.core.terms import CalibrationTerms, ScoreTerms, ShapeCompile, ShapeTerms
from kernelgym_gap.core import timing_stats as stats

log = logging.getLogger(__name__)
MAX_SPREAD = 0.25          # a median whose quartiles spread wider than this is flagged as unstable
# The best E a reference DSL solution reached per device, task and DSL: package data (an installed package
# has no results/), written by scripts/gap_study.py --update-best-known.
BEST_KNOWN = importlib.resources.files("kernelgym_gap") / "data" / "best_known.json"


class SummaryDisagrees(ProtocolError):
    """The child's summary of its timing is not what its own raw readings give: its timing code was changed
    (an honest child summarises with the same code, core/timing_stats.py). An integrity violation."""


def _readings_checked(where: str, name: str, r, max_n: int, cfg, full: bool | None, **probe) -> None:
    """`probe`: for the kernel's probe, the library check's readings, the synchronize's jitter and the hint
    sent (core/timing_stats.stop_rule_problem's hopeless rule reads them)."""
    problem = stats.readings_problem(r, max_n)
    if problem is None and full is not None:
        problem = stats.stop_rule_problem(r, cfg, full, **probe)
    if problem is not None:
        raise ProtocolError(f"{where}: the {name} readings: {problem}")


def _begins_with(where: str, name: str, r, first_name: str, first) -> None:
    """TimingConfig.probe_readings_count: `r` (a full timing's readings) must begin with `first` (the probe's), reading
    for reading, both ways: a child that replaced or reordered them measured something else than it reports."""
    n = len(first.stream_ms)
    if (tuple(r.stream_ms[:n]) != tuple(first.stream_ms) or tuple(r.device_ms[:n]) != tuple(first.device_ms)):
        raise ProtocolError(f"{where}: the {name} readings do not begin with the {first_name}'s {n} "
                            "(TimingConfig.probe_readings_count)")


def _agree(a, b) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)


def trusted_timings(job, timings) -> tuple[ShapeTiming, ...]:
    """Each shape's timing as the parent summarises the child's raw readings (core/timing_stats.py): the
    kernel's and the library's medians, spreads and repetitions, the stream/device-wide choice, the
    side-stream flag, the library check's median, and the repetitions' stopping points (the child's stopping
    rules, replayed). The child's own figures are only compared with these. Raises ProtocolError where the
    readings are missing, malformed, over TimingConfig's counts, or stop where the rules would not have, and
    SummaryDisagrees where the child's summary differs from its readings'. The library hint and early exit
    are then re-derived from these numbers by judge/library_cache.reconcile."""
    cfg = job.timing
    # the hints this parent sent (never the child's echo of them): the probe's hopeless rule reads them
    sent = {(tuple(s), d): ms for s, d, ms in job.library_hint}
    # the shapes whose hint this parent told the child to trust unchecked (TimingConfig.library_check_shapes)
    unchecked = {(tuple(s), d) for s, d in job.library_trusted}
    out = []
    for t in timings:
        where = f"shape {list(t.shape)} {t.dtype}"
        r = t.readings
        if r is None:
            raise ProtocolError(f"{where}: the child reported no raw timing readings")
        if not (math.isfinite(r.sync_jitter_ms) and r.sync_jitter_ms >= 0):
            raise ProtocolError(f"{where}: a synchronize jitter of {r.sync_jitter_ms!r} ms")
        trusted = (tuple(t.shape), t.dtype) in unchecked
        _readings_checked(where, "kernel probe", r.probe, cfg.library_check_reps, cfg, False, check=r.check,
                          sync_jitter_ms=r.sync_jitter_ms, hint_ms=sent.get((tuple(t.shape), t.dtype)))
        if trusted:         # no check at all, and no library timing: the hint stands (library_cache.reconcile)
            if r.check.stream_ms or r.check.device_ms or r.library is not None:
                raise ProtocolError(f"{where}: library readings for a shape whose cached library time was to "
                                    "stand unchecked")
        else:
            _readings_checked(where, "library check", r.check, cfg.library_check_reps, cfg, None)
            if len(r.check.stream_ms) != cfg.library_check_reps:
                raise ProtocolError(f"{where}: {len(r.check.stream_ms)} library check readings, expected "
                                    f"{cfg.library_check_reps}")
        # TimingConfig.probe_readings_count: a full timing begins with the probe's readings (the kernel's with its
        # probe, the library's with its check), and its stopping rule is replayed from where they end
        fold = bool(getattr(cfg, "probe_readings_count", False))
        if t.early_exit:
            if r.kernel != r.probe:
                raise ProtocolError(f"{where}: an early exit's kernel readings are not its probe's")
        else:
            if fold:
                _begins_with(where, "kernel", r.kernel, "probe", r.probe)
            _readings_checked(where, "kernel", r.kernel, cfg.max_reps, cfg, True,
                              seeded=len(r.probe.stream_ms) if fold else 0)
        if (r.library is None) != (t.library_source in ("cached", "trusted")):
            raise ProtocolError(f"{where}: library readings {'absent' if r.library is None else 'present'} "
                                f"with the library time {t.library_source}")
        if r.library is not None:
            # the library timed in full after an early exit is timed alone, from nothing (child/timing.time_shape)
            seeded = fold and not t.early_exit
            if seeded:
                _begins_with(where, "library", r.library, "library check", r.check)
            _readings_checked(where, "library", r.library, cfg.max_reps, cfg, True,
                              seeded=len(r.check.stream_ms) if seeded else 0)
        k = stats.summarise_readings(r.kernel, r.sync_jitter_ms)
        mine = dict(kernel_ms=k.median_ms, kernel_spread=k.spread, kernel_reps=k.reps, stream_ms=k.stream_ms,
                    device_ms=k.device_ms, side_stream=stats.side_stream_suspected(k))
        if trusted:
            mine.update(library_check_ms=None, library_spread=0.0, library_reps=0)
        else:
            check = stats.summarise_readings(r.check, r.sync_jitter_ms)
            lib = check if r.library is None else stats.summarise_readings(r.library, r.sync_jitter_ms)
            mine.update(library_check_ms=check.median_ms, library_spread=lib.spread, library_reps=lib.reps)
        if r.library is not None:
            mine["library_ms"] = lib.median_ms
        wrong = [f"{name} {getattr(t, name)!r} (its readings give {value!r})" for name, value in mine.items()
                 if not _agree(getattr(t, name), value)]
        if wrong:
            raise SummaryDisagrees(f"{where}: the child's timing summary is not its readings': "
                                   + "; ".join(wrong[:4]))
        out.append(dataclasses.replace(t, **mine))
    return tuple(out)


def get_calibration(report: ChildReport, placement: Placement | None = None) -> Calibration:
    """The device's ceilings: cached (at placement.calibration_path, or the default), else measured now on
    placement.gpu_index under its lanes, else the datasheet's (labelled)."""
    placement = placement or Placement()
    key = device_key(report.device, report.versions)
    path = Path(placement.calibration_path) if placement.calibration_path else None
    cal = load_cached(key, path)
    if cal is not None:     # one cached before the read/write rates were measured: a copy-only floor (sound,
        return cal          # judge/floor.py) until `kernelgym-gap calibrate` measures this device again
    try:
        return calibrate(placement.gpu_index, path, key=key, lane_dir=placement.lane_dir)
    except HarnessError as e:
        fallback = datasheet(report.device, report.versions)
        if fallback is None:
            raise
        log.warning("calibration failed (%s); using datasheet ceilings, labelled as such", e)
        return fallback


def best_known_efficiency(task_id: str, dsl: str, device_name: str) -> float | None:
    """The best E a reference DSL solution reached on this kind of device in the gap study, if recorded."""
    try:
        data = json.loads(BEST_KNOWN.read_text())
    except (OSError, ValueError):
        return None
    return data.get(device_name, {}).get(task_id, {}).get(dsl)


def _compile_terms(task: TaskSpec, report: ChildReport, cal: Calibration, per_shape: list[ShapeTerms],
                   config: EvalConfig, placement: Placement | None) -> tuple[float | None, list[str]]:
    """Gives each shape its compile_ms and E_compile (and E_alt) from the torch.compile baseline
    (judge/baselines.py), in place in `per_shape`; returns their geometric mean (None where the baseline is
    off or missing) and any flag."""
    from kernelgym_gap.judge.baselines import compile_times
    cases = [(p.shape, p.dtype) for p in per_shape]
    try:
        times = compile_times(task, cases, cal.device_key, config, placement)
    except HarnessError as e:
        log.warning("%s: torch.compile baseline unavailable: %s", task.id, e)
        return None, [f"torch.compile baseline unavailable: {str(e).splitlines()[0][:200]}"]
    for i, p in enumerate(per_shape):
        t = times.get((p.shape, p.dtype)) or {}
        alts = t.get("alternatives_ms") or {}
        e_alt = ({name: (alts[name] / p.kernel_ms if alts.get(name) else None) for name in task.alternatives}
                 if task.alternatives else None)
        per_shape[i] = dataclasses.replace(p, compile=ShapeCompile(
            compile_ms=t.get("compile_ms"), E_compile=t["compile_ms"] / p.kernel_ms if t.get("compile_ms") else None,
            E_alt=e_alt))
    values = [p.compile.E_compile for p in per_shape]
    return (geomean(values) if values and all(v is not None for v in values) else None), []


def _reward_baseline(task: TaskSpec, per_shape: list[ShapeTerms], e_compile, config: EvalConfig):
    """(the library the reward's E is taken against, its per-shape E, flags): RewardConfig.baseline, where
    "task" is the task's own declaration (TaskSpec.e_baseline). A baseline that was not measured falls back
    to eager, saying so: the reward never silently changes its reference."""
    wanted = config.reward.baseline
    name = {"eager": "torch", "compile": "torch.compile"}.get(wanted, task.e_baseline)
    if name == "torch":
        return "torch", [p.E for p in per_shape], []
    if name == "torch.compile":
        values = [p.compile.E_compile for p in per_shape] if e_compile else None
    else:
        values = [((p.compile.E_alt if p.compile else None) or {}).get(name) for p in per_shape]
        values = values if values and all(v is not None for v in values) else None
    if values is None:
        return "torch", [p.E for p in per_shape], [
            f"reward baseline {name!r} ({'the task declares it' if wanted == 'task' else 'asked for'}) has no "
            "measured time here: E against torch eager used"]
    return name, values, []


def _shape_row(task: TaskSpec, t, cal: Calibration) -> ShapeTerms:
    """One shape's terms: its times (the library's as judge/library_cache.reconcile left it), floor, E, U."""
    fl, bound = floor_ms(task, t.shape, t.dtype, cal)
    return ShapeTerms(shape=tuple(t.shape), dtype=t.dtype, split=t.split, kernel_ms=t.kernel_ms,
                      kernel_spread=t.kernel_spread, kernel_reps=t.kernel_reps,
                      library_ms=t.library_ms, library_spread=t.library_spread, floor_ms=fl,
                      bound=bound, E=t.library_ms / t.kernel_ms, U=fl / t.kernel_ms, library_U=fl / t.library_ms,
                      launches_per_call=t.launches_per_call, programs=t.programs,
                      stream_ms=t.stream_ms, device_ms=t.device_ms, handed_bytes=t.handed_bytes,
                      min_bytes=task.min_bytes(t.shape, t.dtype), library_source=t.library_source,
                      library_check_ms=t.library_check_ms, library_hint_ms=t.library_hint_ms,
                      early_exit=t.early_exit)


def performance_terms(task: TaskSpec, report: ChildReport, config: EvalConfig, source: str = "",
                      dsl: str = "triton", placement: Placement | None = None):
    """(status, message, terms, diagnosis) for a correct kernel's timings (`placement`: where the device's
    caches are and which GPU a calibration or a baseline runs on)."""
    cal = get_calibration(report, placement)
    per_shape, flags = [], []
    for t in report.timings:
        per_shape.append(_shape_row(task, t, cal))
        fl, bound = per_shape[-1].floor_ms, per_shape[-1].bound
        if t.early_exit:
            flags.append(f"timing stopped early at {list(t.shape)} {t.dtype}: "
                         f">{config.timing.hopeless_factor:g}x slower than the library")
        if t.side_stream:
            return (Status.INTEGRITY_VIOLATION,
                    f"shape {list(t.shape)} {t.dtype}: work finished after the current stream's end event "
                    f"(stream {t.stream_ms:.4g} ms vs device-wide {t.device_ms:.4g} ms): side-stream or "
                    "deferred work", {"per_shape": [p.to_dict() for p in per_shape]}, None)
        if t.kernel_ms < config.floor_tolerance * fl:
            return (Status.FASTER_THAN_FLOOR,
                    f"shape {list(t.shape)} {t.dtype}: measured {t.kernel_ms:.4g} ms, under "
                    f"{config.floor_tolerance} x the {bound} floor of {fl:.4g} ms: a measurement or integrity "
                    "failure, not a speedup", {"per_shape": [p.to_dict() for p in per_shape]}, None)
        if t.kernel_spread > MAX_SPREAD:
            flags.append(f"unstable timing at {list(t.shape)} {t.dtype} (spread {t.kernel_spread:.0%})")
    if not per_shape:
        return Status.PROTOCOL_ERROR, "the child reported no timings", {}, None
    e_compile, compile_flags = _compile_terms(task, report, cal, per_shape, config, placement)
    flags += compile_flags
    reward_baseline, reward_E, baseline_flags = _reward_baseline(task, per_shape, e_compile, config)
    flags += baseline_flags
    agg = performance(reward_E, [p.U for p in per_shape], config.reward)
    e_eager = geomean([p.E for p in per_shape])          # E always means eager; E_compile beside it
    library_U = geomean([p.library_U for p in per_shape])
    biggest = max(per_shape, key=lambda p: p.floor_ms)
    evidence = causes(source, {t.dtype for t in report.timings}, biggest.programs,
                      biggest.launches_per_call, report.device.get("sm_count"), biggest.handed_bytes,
                      biggest.min_bytes, config.diagnosis)
    diagnosis = diagnose(e_eager, agg["U"], library_U, best_known_efficiency(task.id, dsl, cal.device_name),
                         evidence, config.diagnosis)
    score = ScoreTerms(f_E=agg["f_E"], g_U=agg["g_U"], E_compile=e_compile,
                       reward_baseline=reward_baseline,       # what the reward's E was taken against
                       E_reward=geomean(reward_E), library_U=library_U,
                       calibration=CalibrationTerms(
                           source=cal.source, copy_bytes_per_s=cal.copy_bytes_per_s,
                           read_bytes_per_s=cal.read_bytes_per_s, write_bytes_per_s=cal.write_bytes_per_s,
                           matmul_flops_per_s=cal.matmul_flops_per_s, device=cal.device_name))
    # the record's base keys this stage measures (the rest of core.terms.Terms is engine/evaluation.py's)
    terms = {"E": e_eager, "U": agg["U"], "performance": agg["performance"],
             "per_shape": [p.to_dict() for p in per_shape], "flags": flags, **score.to_dict()}
    return Status.OK, "; ".join(flags), terms, diagnosis
