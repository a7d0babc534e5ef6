"""The timing's arithmetic, shared by the child that measures and the parent that scores: the raw readings a
child reports per timed shape, and every summary drawn from them (medians, spreads, the choice between the
current-stream and the device-wide reading, when repetitions may stop, whether a kernel is hopeless).

A leaf: no torch, no other kernelgym_gap module, so the trusted parent imports it without the child's code.
The child uses it to decide when to stop timing; the parent (judge/measure.trusted_timings) recomputes every
summary from the raw readings with it and believes none the child wrote itself. A submission that patches
the child's copy of this arithmetic (or the child's summariser) changes nothing the parent uses; one that
changes the readings themselves has to get past the snapshots of the timing's own code first
(child/snapshots.py), and the parent's floor after that.

Why the device-wide reading may be reported instead of the stream's, and why the two are compared at their
minimums: child/timing.py's docstring and `summarise` below.
"""
from __future__ import annotations

import dataclasses
import math
import statistics

DEVICE_EXCESS = 0.05   # device-wide minimum over the stream minimum, as a fraction, above which it is reported
# The synchronize's jitter is measured by the child and so is the child's word. The margin it buys a side
# stream (2 x jitter per repetition) is capped here: the H200's measured jitter is 2-10 us (2026-12-03).
MAX_SYNC_JITTER_MS = 0.05
READING_DIGITS = 7     # readings are rounded to 1e-7 ms (0.1 ns) before anything decides on them
SIDE_STREAM_FACTOR, SIDE_STREAM_SLACK_MS = 1.5, 0.05
# How a callable's repetitions were taken (Readings.method): "loop" calls it from Python once per repetition
# behind a spin kernel (child/timing.Bench._rep); "graph" replays a CUDA graph of one call with the L2 flush
# captured in it (child/graph_timing.py). A method the configuration did not allow is a protocol error.
METHODS = ("loop", "graph")
MAX_NOTE_CHARS = 300   # Readings.fallback: why a graph could not be used (the child's words, bounded)
# TimingConfig.stop_rule: "spread" stops once (p75 - p25) / median is under target_spread with min_time_ms of
# GPU time spent; "interval" once the 95% interval of the median is within +-e_halfwidth / sqrt(2) of it
# (so the ratio E of two such medians is within about +-e_halfwidth), with no minimum GPU time.
STOP_RULES = ("spread", "interval")
Z95 = 1.959964


@dataclasses.dataclass(frozen=True)
class Readings:
    """One callable's raw per-repetition readings in ms, in the order taken: on the current stream, and
    device-wide (after a device synchronize, less its measured cost; never below the stream reading)."""
    stream_ms: tuple[float, ...]
    device_ms: tuple[float, ...]
    method: str = "loop"       # METHODS
    fallback: str = ""         # with "loop" where "graph" was asked for: why the graph was not used


@dataclasses.dataclass(frozen=True)
class TimingReadings:
    """Everything one timed shape measured, raw. `kernel`: the kernel's full timing (its probe again when
    the timing stopped early; with TimingConfig.probe_readings_count beginning with the probe's readings, and
    `library` with the check's); `probe`: the kernel's first calls; `check`: the library's short check,
    interleaved with the probe; `library`: the library's full timing (None where the parent's cached time
    stood and was not measured); `sync_jitter_ms`: the spread of a bare synchronize (capped when used)."""
    kernel: Readings
    probe: Readings
    check: Readings
    library: Readings | None
    sync_jitter_ms: float


@dataclasses.dataclass(frozen=True)
class Summary:
    median_ms: float
    spread: float          # (p75 - p25) / median of the readings reported
    reps: int
    stream_ms: float       # median of the current-stream readings
    device_ms: float       # median of the device-wide readings


def round_ms(x: float) -> float:
    return round(float(x), READING_DIGITS)


def quantiles(xs) -> tuple[float, float, float]:
    xs = list(xs)
    q = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) >= 2 else [xs[0]] * 3
    return q[0], q[1], q[2]


def spread_of(xs) -> float:
    q1, med, q3 = quantiles(xs)
    return (q3 - q1) / med if med > 0 else 0.0


def summarise(stream_ms, device_ms, sync_jitter_ms: float) -> Summary:
    """The stream readings, unless the device-wide ones say that work outlasted the stream's end event
    by more than the synchronize's jitter explains.

    The two are compared at their minimums, not their medians: the host's synchronize jitter only ever
    adds time to a device-wide reading, so its minimum sits at the kernel's own time while its median
    moves with the host's load. Compared at the medians (until 2026-12-03), a loaded host made an honest
    40 us kernel's device-wide reading win in 1-2 of 5 evaluations on the H200, and E's spread over 5
    evaluations reached 5%. Work left on a side stream delays every repetition's device-wide reading,
    its minimum included; and a repetition that hid work reads fast on the stream, which lowers the
    stream's minimum: either way the minimums part."""
    stream_ms, device_ms = list(stream_ms), list(device_ms)
    jitter = min(max(float(sync_jitter_ms), 0.0), MAX_SYNC_JITTER_MS)
    hidden = min(device_ms) > min(stream_ms) * (1 + DEVICE_EXCESS) + 2 * jitter
    samples = device_ms if hidden else stream_ms
    q1, med, q3 = quantiles(samples)
    return Summary(median_ms=med, spread=(q3 - q1) / med if med > 0 else 0.0, reps=len(samples),
                   stream_ms=statistics.median(stream_ms), device_ms=statistics.median(device_ms))


def summarise_readings(r: Readings, sync_jitter_ms: float) -> Summary:
    return summarise(r.stream_ms, r.device_ms, sync_jitter_ms)


def side_stream_suspected(m: Summary) -> bool:
    """Work finished after the current stream's end event: the device-wide reading is far longer."""
    return m.device_ms > SIDE_STREAM_FACTOR * m.stream_ms + SIDE_STREAM_SLACK_MS


def median_interval(xs, z: float = Z95) -> tuple[float, float]:
    """The distribution-free interval of the median (order statistics; the binomial's normal approximation):
    the j-th and k-th smallest of n, j = floor((n - z sqrt n) / 2), k = ceil((n + z sqrt n) / 2), clamped to
    the sample. Assumes nothing about the readings' shape: kernel times are skewed (a slow tail)."""
    xs = sorted(xs)
    n = len(xs)
    half = z * math.sqrt(n) / 2
    j = max(1, math.floor(n / 2 - half))
    k = min(n, math.ceil(n / 2 + half))
    return xs[j - 1], xs[k - 1]


def median_halfwidth(xs) -> float:
    """Half the median's 95% interval, as a fraction of the median (inf for an empty or zero median)."""
    if not xs:
        return math.inf
    lo, hi = median_interval(xs)
    med = statistics.median(xs)
    return (hi - lo) / (2 * med) if med > 0 else math.inf


def settled(stream_ms, spent: float, cfg) -> bool:
    """Whether these readings are settled by the configured rule (STOP_RULES), the budget aside."""
    if getattr(cfg, "stop_rule", "spread") == "interval":
        # E = t_library / t_kernel: two medians each within +-h/sqrt(2) put the ratio within about +-h. Where the
        # library's cached time stands, the kernel alone meets the same bound (the cache carries its own error)
        return median_halfwidth(stream_ms) <= cfg.e_halfwidth / math.sqrt(2)
    return spread_of(stream_ms) <= cfg.target_spread and spent >= cfg.min_time_ms


def may_stop(stream_ms, device_ms, min_reps: int, cfg) -> bool:
    """Whether a full timing (Bench.measure_interleaved) stops after these repetitions: at least `min_reps`,
    looked at every 5th repetition or once the budget is spent, and then settled (`settled`: by default the
    spread under cfg.target_spread with cfg.min_time_ms of GPU time spent; with cfg.stop_rule "interval", the
    median's interval narrow enough for E) or out of budget (cfg.budget_ms). `cfg` is a TimingConfig
    (core/config.py)."""
    n = len(stream_ms)
    spent = math.fsum(device_ms)
    if n < min_reps or not (n % 5 == 0 or spent >= cfg.budget_ms):
        return False
    return settled(stream_ms, spent, cfg) or spent >= cfg.budget_ms


def probe_may_stop(device_ms, budget_ms: float) -> bool:
    """Whether the kernel's probe (Bench.probe) takes no further repetition: one at least, then until
    `budget_ms` of its GPU time is spent."""
    return len(device_ms) >= 1 and math.fsum(device_ms) >= budget_ms


def probe_hopeless(kernel_stream, kernel_device, check_stream, check_device, sync_jitter_ms: float,
                   hint_ms: float | None, cfg) -> bool:
    """TimingConfig.probe_hopeless_reps (0: off): whether the kernel's first n probe readings (n at least that
    many) already show it hopeless against the library check's first n: the kernel's median (`summarise`) over
    hopeless_factor x the library's reference, which is the larger of the check's median so far and the
    parent's hint (where one was sent). The larger, because the decision after the probe (child/timing.time_shape)
    takes the hint or the whole check: a kernel hopeless against the larger is hopeless against either, up to
    the check's own noise; where it is not after all, the kernel is timed in full as without the rule. A shape
    whose hint stands unchecked (Job.library_trusted) has no check readings: the hint alone is the reference."""
    least = getattr(cfg, "probe_hopeless_reps", 0)
    n = len(kernel_stream)
    if not least or n < least:
        return False
    if not check_stream:        # a trusted hint (no check at all; the parent refuses an empty check elsewhere)
        if not hint_ms:
            return False
        return cfg.hopeless(summarise(kernel_stream, kernel_device, sync_jitter_ms).median_ms, hint_ms)
    if len(check_stream) < n:
        return False
    kernel_ms = summarise(kernel_stream, kernel_device, sync_jitter_ms).median_ms
    check_ms = summarise(list(check_stream)[:n], list(check_device)[:n], sync_jitter_ms).median_ms
    return cfg.hopeless(kernel_ms, max(check_ms, hint_ms or 0.0))


def probe_stops(kernel_stream, kernel_device, check_stream, check_device, sync_jitter_ms: float,
                hint_ms: float | None, cfg) -> bool:
    """Whether the kernel's probe (Bench.probe) takes no further repetition after these readings (the kernel's
    so far, the library check's so far: one each per step, the kernel's first): its GPU-time budget spent
    (`probe_may_stop`), or, with TimingConfig.probe_hopeless_reps, a hopeless kernel shown (`probe_hopeless`).
    The child stops at the first step this holds (and stays stopped); the parent replays it
    (`stop_rule_problem`)."""
    return (probe_may_stop(kernel_device, cfg.early_exit_budget_ms)
            or probe_hopeless(kernel_stream, kernel_device, check_stream, check_device, sync_jitter_ms, hint_ms,
                              cfg))


def stop_rule_problem(r: Readings, cfg, full: bool, check: Readings | None = None, sync_jitter_ms: float = 0.0,
                      hint_ms: float | None = None, seeded: int = 0) -> str | None:
    """For the parent: why these readings could not have come from the child's stopping rules, or None.
    `full`: a full timing (may_stop, at least 3 repetitions, at most cfg.max_reps); else the kernel's probe
    (probe_stops, at most cfg.library_check_reps; `check`, `sync_jitter_ms` and `hint_ms` are the library
    check's readings, the synchronize's jitter and the hint the parent sent, which the hopeless rule of
    TimingConfig.probe_hopeless_reps reads). `seeded` (a full timing under TimingConfig.probe_readings_count): how
    many of its first readings are the probe's, taken before the full timing could stop (Bench.measure_interleaved's
    seeds): its first stopping point is there. An honest child uses the same functions on the same rounded
    readings, so it meets them exactly; a child that stopped where its numbers happened to suit it does not."""
    s, d = list(r.stream_ms), list(r.device_ms)
    n = len(s)
    if r.method == "graph" and not (full and getattr(cfg, "graph_replay", False)):
        return ("readings by CUDA-graph replay, where the configuration times "
                + ("by graph only in full timings" if getattr(cfg, "graph_replay", False) else "by the loop"))
    limit = cfg.max_reps if full else cfg.library_check_reps
    if n == 0 or n > limit:
        return f"{n} repetitions (expected 1 to {limit})"
    if full:
        stopped = n >= cfg.max_reps or (n >= 3 and may_stop(s, d, 3, cfg))
        # the child's own minimum is cfg.min_reps, or 3 for a call that alone outlasts the budget's share:
        # a stop it must have made whichever minimum it had
        least = max(cfg.min_reps, 3)
        early = next((k for k in range(max(least, seeded), n) if may_stop(s[:k], d[:k], least, cfg)), None)
        if early is not None:
            return f"{n} repetitions, where the stopping rule ended the timing after {early}"
    else:
        cs, cd = (list(check.stream_ms), list(check.device_ms)) if check is not None else ([], [])

        def stops(k: int) -> bool:
            return probe_stops(s[:k], d[:k], cs[:k], cd[:k], sync_jitter_ms, hint_ms, cfg)
        stopped = n >= cfg.library_check_reps or stops(n)
        if n > 1 and probe_may_stop(d[:-1], cfg.early_exit_budget_ms):
            return f"{n} repetitions, where the probe's budget ended it after {n - 1}"
        # the hopeless rule is not monotone (the check's median moves with each reading): every earlier step
        early = next((k for k in range(1, n) if stops(k)), None)
        if early is not None:
            return f"{n} repetitions, where the probe's hopeless rule ended it after {early}"
    if not stopped:
        return f"{n} repetitions, where the stopping rule had not ended the timing"
    return None


def readings_problem(r: Readings, max_n: int) -> str | None:
    """Why these readings are not readings (lengths, values), or None: each a finite positive number, the
    device-wide reading never below the stream's, at most `max_n` of them."""
    if len(r.stream_ms) != len(r.device_ms):
        return f"{len(r.stream_ms)} stream readings but {len(r.device_ms)} device-wide ones"
    if r.method not in METHODS:
        return f"a timing method {str(r.method)[:40]!r} (expected one of {list(METHODS)})"
    if len(r.fallback) > MAX_NOTE_CHARS or (r.fallback and r.method != "loop"):
        return f"a graph fallback note of {len(r.fallback)} characters with the method {r.method!r}"
    if not 0 < len(r.stream_ms) <= max_n:
        return f"{len(r.stream_ms)} readings (expected 1 to {max_n})"
    for s, d in zip(r.stream_ms, r.device_ms):
        if not (math.isfinite(s) and math.isfinite(d) and s > 0 and d >= s):
            return f"a reading of {s!r} ms on the stream and {d!r} ms device-wide"
    return None
