"""The timing bench: CUDA events around each repetition, the L2 flushed before it, a spin kernel ahead of
its start event, and the two readings of each repetition (stream and device), summarised by
core/timing_stats.py. child/timing.py's docstring says why each piece is there.

A leaf that both sides of the trust boundary import: the child times a submission with it
(child/timing.time_shape), and the trusted side's own subprocesses time the library and the device's
ceilings with the same bench (judge/baselines.py, judge/calibrate.py), so that neither imports the other.
Nothing here imports the child's code or the judge's."""
from __future__ import annotations

import dataclasses
import time
import weakref
from collections.abc import Callable

import torch

from kernelgym_gap.core import timing_stats as stats
from kernelgym_gap.core.record import TimingConfig
from kernelgym_gap.core.timing_stats import Readings


SPIN_MS = 0.3     # longer than the host-side cost of a Triton or TileLang launch from Python
# TimingConfig.clock_warmup_rule "steady": the clock is read every STEADY_READ_MS of busy work, and the warm-up
# ends once STEADY_READINGS readings in a row lie within STEADY_TOLERANCE of their largest, after at least
# STEADY_MIN_MS (a GPU that has not begun to ramp reads steady too, at its idle clock: the minimum gives the
# ramp time to start; boost clocks ramp within a few ms of load on Hopper). CLOCK_READ_CYCLES: ~0.5 ms at 2 GHz,
# long enough that the events' own jitter (about a microsecond) is 0.2% of a reading, under the 1% tolerance
STEADY_READ_MS = 5.0
STEADY_MIN_MS = 20.0
STEADY_READINGS = 3
STEADY_TOLERANCE = 0.01
CLOCK_READ_CYCLES = 1_000_000


def clock_settled(rates: list[float], elapsed_ms: float) -> bool:
    """Whether a "steady" clock warm-up may end: STEADY_MIN_MS spent and the last STEADY_READINGS clock
    readings within STEADY_TOLERANCE of their largest."""
    last = rates[-STEADY_READINGS:]
    return (elapsed_ms >= STEADY_MIN_MS and len(last) == STEADY_READINGS
            and min(last) >= (1 - STEADY_TOLERANCE) * max(last))


@dataclasses.dataclass(frozen=True)
class Measurement:
    """A summary (core/timing_stats.Summary's fields) and the raw readings it came from."""
    median_ms: float
    spread: float
    reps: int
    stream_ms: float
    device_ms: float
    readings: Readings = Readings((), ())


class Bench:
    def __init__(self, cfg: TimingConfig):
        self.cfg = cfg
        l2 = int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or (50 << 20))
        self.flush = torch.empty(max(2 * l2, 64 << 20), dtype=torch.int8, device="cuda")
        self._warmed: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # TimingConfig.warm_once
        self.probe_parts: dict[str, float] = {}     # the last probe's parts in seconds (Bench.probe)
        t0 = time.perf_counter()
        self.clock_rates = self._warm_clocks(cfg.clock_warmup_ms)
        self.clock_warmup_s = time.perf_counter() - t0
        self.sync_overhead_ms, self.sync_jitter_ms = self._sync_overhead()
        self.spin_cycles = self._spin_cycles(SPIN_MS)

    def _warm_clocks(self, ms: float) -> tuple[float, ...]:
        """Keep the GPU busy (memory traffic and a spin) before anything is measured: for `ms`, or with
        TimingConfig.clock_warmup_rule "steady" until the SM clock has settled (`clock_settled`, at most `ms`).
        An idle H200 sits at a low clock; measured on it, the first shape timed had a (p75-p25)/median spread of
        20-55% while later ones had 2% (2026-12-02). Returns the clock readings taken (kHz; none when fixed)."""
        steady = getattr(self.cfg, "clock_warmup_rule", "fixed") == "steady"
        t0 = time.perf_counter()
        rates: list[float] = []
        while (elapsed := (time.perf_counter() - t0) * 1e3) < ms:
            if steady and clock_settled(rates, elapsed):
                break
            self._busy(STEADY_READ_MS if steady else 0.0)
            if steady:
                rates.append(self._clock_khz())
        return tuple(rates)

    def _busy(self, ms: float) -> None:
        """Memory traffic and a spin on the GPU, at least once and for about `ms` of wall time."""
        t0 = time.perf_counter()
        while True:
            for _ in range(8):
                self.flush.zero_()
            torch.cuda._sleep(100_000)
            torch.cuda.synchronize()
            if (time.perf_counter() - t0) * 1e3 >= ms:
                return

    @staticmethod
    def _clock_khz() -> float:
        """The SM clock now, in kHz: cycles of a spin kernel (torch.cuda._sleep counts clock64 cycles) per ms
        of its events' time."""
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(CLOCK_READ_CYCLES // 10)    # queued work ahead: the host's launch gap is not timed
        a.record()
        torch.cuda._sleep(CLOCK_READ_CYCLES)
        b.record()
        torch.cuda.synchronize()
        return CLOCK_READ_CYCLES / max(a.elapsed_time(b), 1e-6)

    def _sync_overhead(self) -> tuple[float, float]:
        """(median, p75 - p25) in ms of an empty event-synchronize-event round trip."""
        times = []
        for _ in range(30):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            torch.cuda.synchronize()
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b))
        q1, med, q3 = stats.quantiles(times)
        return med, q3 - q1

    @staticmethod
    def _spin_cycles(ms: float) -> int:
        """Cycles of torch.cuda._sleep that take about `ms` at the current clock."""
        cycles = 1_000_000
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(cycles)         # wake the clocks first
        a.record()
        torch.cuda._sleep(cycles)
        b.record()
        torch.cuda.synchronize()
        per_ms = cycles / max(a.elapsed_time(b), 1e-3)
        return int(per_ms * ms)

    def _warm(self, fn: Callable[[int], object]) -> float:
        """Warm-up: at least two calls, then until warmup_ms of GPU time has passed; returns ms per call. With
        TimingConfig.warm_once, a callable this bench warmed already (the probe's, a moment before its full
        timing) is not warmed again: its estimate then is returned."""
        if getattr(self.cfg, "warm_once", False):
            try:
                return self._warmed[fn]
            except (KeyError, TypeError):
                pass
        per_call = self._warm_calls(fn)
        if getattr(self.cfg, "warm_once", False):
            try:
                self._warmed[fn] = per_call
            except TypeError:        # not weakly referenceable: warmed each time, as without the switch
                pass
        return per_call

    def _warm_calls(self, fn: Callable[[int], object]) -> float:
        torch.cuda.synchronize()
        w0, w1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        w0.record()
        fn(0)
        fn(1)
        w1.record()
        torch.cuda.synchronize()
        per_call = max(w0.elapsed_time(w1) / 2, 1e-3)
        for i in range(min(int(self.cfg.warmup_ms / per_call), 1000)):
            fn(i)
        torch.cuda.synchronize()
        return per_call

    def _rep(self, fn: Callable[[int], object], i: int) -> tuple[float, float]:
        """One repetition: (stream reading, device-wide reading) in ms."""
        if self.cfg.flush_l2:
            self.flush.zero_()
        torch.cuda._sleep(self.spin_cycles)
        start = torch.cuda.Event(enable_timing=True)
        end_stream = torch.cuda.Event(enable_timing=True)
        end_device = torch.cuda.Event(enable_timing=True)
        start.record()
        fn(i)
        end_stream.record()
        torch.cuda.synchronize()
        end_device.record()
        torch.cuda.synchronize()
        s = stats.round_ms(start.elapsed_time(end_stream))
        return s, max(stats.round_ms(start.elapsed_time(end_device) - self.sync_overhead_ms), s)

    def probe(self, kernel: Callable[[int], object], library: Callable[[int], object] | None, reps: int,
              budget_ms: float, hint_ms: float | None = None) -> tuple[Measurement, Measurement | None]:
        """The short look before a full timing, repetitions interleaved: `reps` of the library (the check of
        its cached time) and of the kernel, the kernel's ending once `budget_ms` of its GPU time is spent
        (after one at least), or with TimingConfig.probe_hopeless_reps once its first readings show it hopeless
        against the check so far and `hint_ms` (core/timing_stats.probe_stops): its first calls, from which a
        hopeless kernel is told. `library` None (a hint trusted unchecked, Job.library_trusted): the kernel's
        repetitions alone, no library warm-up, and no check (None in its place)."""
        # the probe's parts in host seconds (perf_counter, the clock child/timing._PhaseClock's phases use), which
        # time_shape records beside their sum `timing_probe`: no synchronize is added for them. _warm_calls
        # synchronizes before its first call and after its last, so each warm-up's span holds its GPU work (first
        # calls, compilation, autotuning, a library's plan); a callable warm_once already warmed takes ~0 s. Each
        # _rep ends synchronized, so the repetitions' span holds theirs.
        t0 = time.perf_counter()
        self._warm(kernel)
        t1 = time.perf_counter()
        if library is not None:
            self._warm(library)
        t2 = time.perf_counter()
        k_read: tuple[list[float], list[float]] = ([], [])
        l_read: tuple[list[float], list[float]] = ([], [])
        cfg = (self.cfg if budget_ms == self.cfg.early_exit_budget_ms
               else dataclasses.replace(self.cfg, early_exit_budget_ms=budget_ms))
        stopped = False
        for i in range(reps):
            # decided before the kernel's i-th repetition, on i of each (the parent replays it at that point);
            # once stopped it stays stopped: the hopeless rule reads the check's median, which moves
            stopped = stopped or stats.probe_stops(*k_read, *l_read, self.sync_jitter_ms, hint_ms, cfg)
            if not stopped:
                s, d = self._rep(kernel, i)
                k_read[0].append(s)
                k_read[1].append(d)
            elif library is None:
                break
            if library is not None:
                s, d = self._rep(library, i)
                l_read[0].append(s)
                l_read[1].append(d)
        self.probe_parts = {"warm_kernel": t1 - t0, "warm_library": t2 - t1, "reps": time.perf_counter() - t2}
        return self._summarise(*k_read), (self._summarise(*l_read) if library is not None else None)

    def measure(self, fn: Callable[[int], object]) -> Measurement:
        return self.measure_interleaved([fn])[0]

    def measure_interleaved(self, fns: list[Callable[[int], object]],
                            seeds: list[Readings] | None = None) -> list[Measurement]:
        """Time several callables with their repetitions interleaved (a, b, a, b, ...), so that a clock
        or thermal drift during the measurement moves all of them alike and their ratio (E) stays put.
        Each gets repetitions until every spread is under target and min_time_ms of its GPU time has
        passed, or its budget is spent.

        `seeds` (TimingConfig.probe_readings_count): each callable's readings already taken by this bench's
        `_rep` (the probe's), which begin its measurement: the stopping rule reads them with the new ones (a
        callable they already settle takes none), its repetitions go on from their index (the input sets' rotation
        continues) and max_reps bounds them all. Without seeds every callable starts empty, as before."""
        cfg = self.cfg
        per_call = [self._warm(fn) for fn in fns]
        # a call that alone outlasts the budget's share gets the fewest repetitions that still give a median
        min_reps = [cfg.min_reps if pc * cfg.min_reps <= cfg.budget_ms else 3 for pc in per_call]
        seeds = seeds if seeds is not None else [Readings((), ()) for _ in fns]
        if len(seeds) != len(fns):
            raise ValueError(f"{len(seeds)} seeds for {len(fns)} callables")
        readings: list[tuple[list[float], list[float]]] = [(list(r.stream_ms), list(r.device_ms)) for r in seeds]
        # a seed is a stopping point the child reaches before any repetition of its own (the parent replays it there)
        done = [len(r[0]) >= cfg.max_reps or (bool(r[0]) and stats.may_stop(r[0], r[1], least, cfg))
                for r, least in zip(readings, min_reps)]
        while not all(done):
            for k, fn in enumerate(fns):
                if done[k]:
                    continue
                s, d = self._rep(fn, len(readings[k][0]))
                readings[k][0].append(s)
                readings[k][1].append(d)
            for k in range(len(fns)):
                done[k] = (done[k] or len(readings[k][0]) >= cfg.max_reps
                           or stats.may_stop(readings[k][0], readings[k][1], min_reps[k], cfg))
        return [self._summarise(stream_ms, device_ms) for stream_ms, device_ms in readings]

    def _summarise(self, stream_ms: list[float], device_ms: list[float]) -> Measurement:
        """core/timing_stats.summarise, with the raw readings kept for the report (the parent's summary
        is the one scored)."""
        m = stats.summarise(stream_ms, device_ms, self.sync_jitter_ms)
        return Measurement(**dataclasses.asdict(m), readings=Readings(tuple(stream_ms), tuple(device_ms)))


def side_stream_suspected(m) -> bool:
    return stats.side_stream_suspected(m)
