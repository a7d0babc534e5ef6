"""GPU timing inside the child (cuda backend). Never prints.

One summariser for kernel and library alike, their repetitions interleaved: CUDA events around each call, the L2 flushed before every
repetition with a buffer of at least twice the device's L2, inputs rotated among several sets, warm-up
excluded (compilation and autotuning happened in the correctness trials on the same shapes), repetitions
added until the spread (p75 - p25) / median is small or the time budget is spent, the median reported.

Before each repetition's start event the stream is given a short spin kernel (torch.cuda._sleep), so the
host's launch overhead is hidden behind queued GPU work, as it is in a real pipeline, and not measured as
idle GPU time between the events; the per-repetition synchronize would otherwise expose it.

Each repetition is read two ways: `stream` (start and end events on the current stream) and `device`
(the end event recorded after a device-wide synchronize, minus the measured cost of a bare synchronize).
An honest kernel reads the same both ways, up to the host's jitter in the synchronize round trip, which
the device reading carries and the stream reading does not; work pushed onto a side stream shows up only
in the device reading. The stream reading is reported unless the device reading's median exceeds it by
more than DEVICE_EXCESS of it plus twice the synchronize's own spread: then the device reading is
reported (a side stream cannot make a kernel look faster by more than that margin), and a large
difference is flagged. Until 2026-12-03 the larger median was reported; on kernels of 10-25 us the host's
jitter then gave per-shape spreads of 20-40% on the H200, and the 5-evaluation deviation was 10%. The two
readings are compared at their minimums (core/timing_stats.summarise).

Every reading is reported raw (ShapeTiming.readings, bounded by TimingConfig.max_reps per callable): the
parent recomputes every summary, the stream/device choice and the stopping and early-exit decisions from
them with the same arithmetic (core/timing_stats.py, judge/measure.trusted_timings). The summaries made
here only steer this child's own loop; a submission that patches them changes nothing that is scored.
"""
from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable

import torch

from kernelgym_gap.core import inputs as inputs_mod
from kernelgym_gap.core import timing_stats as stats
from kernelgym_gap.core.record import ShapeTiming, TimingConfig, Trial
from kernelgym_gap.core.tensor_file import output_name
from kernelgym_gap.core.timing_stats import DEVICE_EXCESS, Readings, TimingReadings  # noqa: F401 (re-exported)
# imported with this module, so that the snapshots taken before the submission loads cover it (docs/security.md)
from kernelgym_gap.child.graph_timing import GraphReplay
from kernelgym_gap.child.outputs import HeldOutputs
from kernelgym_gap.child.release import CLOSE as _CLOSE_CALLS, AfterKernel, BenchState, TimedCalls, settle as _settle
from kernelgym_gap.child.release import release_watched as _release_watched
# the bench is a leaf both sides import (device/bench.py); bound here too, where the snapshots watch it
from kernelgym_gap.device.bench import SPIN_MS, Bench, Measurement, side_stream_suspected  # noqa: F401

_HELD_ADD = HeldOutputs.add      # called right after a recheck call, before its verdict (child/instances.py)


_nullcontext = contextlib.nullcontext     # bound before the submission loads, as every name used after it


class GraphBench(GraphReplay, Bench):
    """The Bench with its full timings by CUDA-graph replay where a call captures (TimingConfig.graph_replay;
    child/graph_timing.py), the loop where it does not."""


def time_shape(bench: Bench, cfg: TimingConfig, kernel: Callable[[int], object],
               library: Callable[[int], object], hint_ms: float | None,
               clock: _PhaseClock | None = None, trusted: bool = False) -> tuple[Measurement, dict]:
    """One shape: the kernel's Measurement and the ShapeTiming fields of the library's time.

    A short interleaved probe first (Bench.probe). With a hint (the parent's cached library time) that the
    probe's library check confirms (TimingConfig.library_agrees), the kernel alone is timed in full and the
    hint stands ("cached"); otherwise both are timed in full, interleaved, as without a cache ("measured").
    A kernel whose first calls take over hopeless_factor x the library's time (the confirmed hint, else the
    check) is timed no further: its probe is its measurement (early_exit). The parent re-derives both
    decisions from the numbers reported here (judge/library_cache.reconcile), after recomputing those numbers
    from the raw readings in `fields["readings"]` (judge/measure.trusted_timings).

    `trusted` (the shape is in Job.library_trusted, TimingConfig.library_check_shapes): the hint stands unchecked
    ("trusted"): the probe times the kernel alone, and its early exit is told against the hint."""
    if trusted and hint_ms is None:
        raise ValueError("a trusted library time needs its hint")
    if trusted:
        return _time_shape_trusted(bench, cfg, kernel, hint_ms, clock)
    k_probe, check = bench.probe(kernel, library, cfg.library_check_reps, cfg.early_exit_budget_ms, hint_ms=hint_ms)
    _settle(kernel)     # the probe's outputs let go under watch before anything is captured (child/release.py)
    if clock is not None:
        clock.lap("timing_probe")
        # its parts (Bench.probe's probe_parts), recorded beside it: where the probe's seconds go (issue 35). The
        # library hint does no work of its own in the probe (it only steers the hopeless stop), so it has no part.
        # A bench without them (a scripted one) records none.
        for part, seconds in getattr(bench, "probe_parts", {}).items():
            clock.add(f"timing_probe_{part}", seconds)
    agreed = hint_ms is not None and cfg.library_agrees(check.median_ms, hint_ms)
    early = cfg.hopeless(k_probe.median_ms, hint_ms if agreed else check.median_ms)
    # TimingConfig.probe_readings_count: the probe's readings (the same Bench._rep, interleaved as the full timing
    # interleaves) begin the full timing, which then needs that many fewer repetitions; off: every full timing
    # starts empty, as before
    fold = bool(getattr(cfg, "probe_readings_count", False))
    if early:
        k, lib = k_probe, (None if agreed else bench.measure(library))
    elif agreed:
        k, lib = (bench.measure_interleaved([kernel], seeds=[k_probe.readings])[0] if fold
                  else bench.measure(kernel)), None
    elif fold:
        k, lib = bench.measure_interleaved([kernel, library], seeds=[k_probe.readings, check.readings])
    else:
        k, lib = bench.measure_interleaved([kernel, library])
    _settle(kernel)
    if clock is not None:
        clock.lap("timing_measure")
    fields = dict(library_source="cached" if agreed else "measured", library_check_ms=check.median_ms,
                  library_hint_ms=hint_ms, early_exit=early,
                  readings=TimingReadings(kernel=k.readings, probe=k_probe.readings, check=check.readings,
                                          library=None if lib is None else lib.readings,
                                          sync_jitter_ms=bench.sync_jitter_ms))
    if lib is None:         # the hint stands; the check's spread and repetitions are what was seen of it
        fields.update(library_ms=hint_ms, library_spread=check.spread, library_reps=check.reps)
    else:
        fields.update(library_ms=lib.median_ms, library_spread=lib.spread, library_reps=lib.reps)
    return k, fields


def _time_shape_trusted(bench: Bench, cfg: TimingConfig, kernel: Callable[[int], object], hint_ms: float,
                        clock: _PhaseClock | None) -> tuple[Measurement, dict]:
    """time_shape where the parent's hint stands unchecked: the kernel's probe alone (its hopeless rule and early
    exit against the hint), then the kernel alone in full unless it exited; no library call at all."""
    k_probe, _ = bench.probe(kernel, None, cfg.library_check_reps, cfg.early_exit_budget_ms, hint_ms=hint_ms)
    _settle(kernel)
    if clock is not None:
        clock.lap("timing_probe")
        for part, seconds in getattr(bench, "probe_parts", {}).items():
            clock.add(f"timing_probe_{part}", seconds)
    early = cfg.hopeless(k_probe.median_ms, hint_ms)
    if early:
        k = k_probe
    elif getattr(cfg, "probe_readings_count", False):
        k = bench.measure_interleaved([kernel], seeds=[k_probe.readings])[0]
    else:
        k = bench.measure(kernel)
    _settle(kernel)
    if clock is not None:
        clock.lap("timing_measure")
    readings = TimingReadings(kernel=k.readings, probe=k_probe.readings, check=Readings((), ()), library=None,
                              sync_jitter_ms=bench.sync_jitter_ms)
    return k, dict(library_source="trusted", library_check_ms=None, library_hint_ms=hint_ms, early_exit=early,
                   readings=readings, library_ms=hint_ms, library_spread=0.0, library_reps=0)


def _reference_once(task, trials) -> None:
    """The task's reference called once on each trial's inputs (made on the GPU), each synchronized and freed."""
    for trial in trials:
        ins = inputs_mod.make_trial_inputs(task, trial, "cuda")
        with torch.no_grad():
            task.reference(*ins)
        torch.cuda.synchronize()
        del ins


def warm_library(task, job, phases: dict) -> None:
    """TimingConfig.library_warm_before_lane: the task's reference called once on each timed shape's first timing
    input set (the timing's own set 0: same seed, same shape), synchronized and freed, before the exclusive lane
    is asked for. Its first calls in this process (the library's lazily loaded kernels, its handles and plans)
    then cost the shared lane, not the exclusive one. Only a warm-up: nothing it does is read, and a failure here
    is left to the timing, which calls the same reference on the same inputs and judges what it raises there
    (`library_warm_failed` says one was seen). `library_warm`: its seconds. In a child pre-started with the
    switch on, `warm_prestarted` made these first calls already, and this costs the calls alone."""
    if job.timing is None or not job.timing.library_warm_before_lane or not torch.cuda.is_available():
        return
    t = time.perf_counter()
    try:
        _reference_once(task, job.timing_trials)
    except Exception:                       # noqa: BLE001 - the timing meets it again and judges it there
        phases["library_warm_failed"] = 1.0
    torch.cuda.empty_cache()
    phases["library_warm"] = time.perf_counter() - t


def warm_prestarted(warm: dict) -> dict[str, float]:
    """The same first calls made by a child pre-started for the task (sandbox/prestart.ChildSpec.warm, runner.
    wait_for_job), before its job exists and before any submission code: its task (`task`, `tasks_dir`), the
    timed distribution and the timed shapes' (shape, dtype) `cases`, on inputs of a fixed seed (which kernels the
    library loads depends on the shapes and dtypes, not on the values). Returns the phases it adds to the
    record: `preimport_library_warm` (its seconds), and `preimport_library_warm_failed` where it raised (the
    evaluation then warms and times as without it)."""
    from kernelgym_gap.core.registry import find_task
    t = time.perf_counter()
    out: dict[str, float] = {}
    try:
        task = find_task(warm["task"], warm.get("tasks_dir"))
        trials = tuple(Trial(index=i, shape=tuple(shape), dtype=dtype, seed=1, distribution=warm["distribution"],
                             split="public") for i, (shape, dtype) in enumerate(warm["cases"]))
        _reference_once(task, trials)
    except Exception:                       # noqa: BLE001 - only a warm-up: the job runs as without it
        out["preimport_library_warm_failed"] = 1.0
    torch.cuda.empty_cache()
    out["preimport_library_warm"] = time.perf_counter() - t
    return out


def time_submission(task, job, entry, adapter, held, on_shape=None,
                    phases: dict | None = None) -> tuple[ShapeTiming, ...]:
    """`on_shape(i)` is called as the i-th timed shape starts (run.py's call marks). Each shape's recheck
    output goes to `held` (child/outputs.HeldOutputs): a host copy, written once the exclusive lane is
    released, not while the GPU waits for the disk. `phases` (optional) gets where the exclusive stretch's
    time went, summed over the shapes, in seconds: `timing_setup` (the flush buffer, the clock warm-up, the
    synchronize and spin calibration; `timing_clock_warmup` is the clock warm-up's part of it), `timing_inputs`, `timing_first_call`, `timing_probe` (warm-up and the
    library check; its parts `timing_probe_warm_kernel`, `timing_probe_warm_library` and `timing_probe_reps`,
    Bench.probe's two warm-ups and its interleaved repetitions, are recorded beside it and are inside it),
    `timing_measure`, `timing_recheck` (its inputs, call and the output's host copy).

    With TimingConfig.recheck_outside_exclusive no shape is rechecked here: each ShapeTiming comes back
    without its recheck fields, and child/run.py fills them after the exclusive stage with `recheck_timed`,
    under the shared lane; `timing_release` is then each shape's inputs freed (what followed the recheck)."""
    cfg: TimingConfig = job.timing
    clock = _PhaseClock(phases)
    bench = GraphBench(cfg) if cfg.graph_replay else Bench(cfg)
    state = BenchState(bench)         # taken before any call of the submission could change it (child/release.py)
    bench.watch = adapter.streams     # the capture's stream is the one launches are expected on meanwhile
    clock.lap("timing_setup")
    if phases is not None:            # the clock warm-up's part of timing_setup (TimingConfig.clock_warmup_rule)
        phases["timing_clock_warmup"] = bench.clock_warmup_s
    hints = {(tuple(shape), dtype): ms for shape, dtype, ms in job.library_hint}
    trusted = {(tuple(shape), dtype) for shape, dtype in job.library_trusted}
    results = []
    for index, trial in enumerate(job.timing_trials):
        if on_shape is not None:
            on_shape(index)
        sets = [inputs_mod.make_trial_inputs(task, dataclasses.replace(trial, seed=trial.seed + k), "cuda")
                for k in range(cfg.n_input_sets)]
        torch.cuda.synchronize()
        clock.lap("timing_inputs")
        # every output of the submission's calls on this shape is kept and let go under watch (child/release.py)
        calls = TimedCalls(entry, sets, adapter.log, state)
        adapter.log.reset()
        with torch.no_grad():
            calls(0)
        torch.cuda.synchronize()
        clock.lap("timing_first_call")
        launches, programs, handed = adapter.log.launches, adapter.log.max_programs, adapter.log.handed_bytes
        try:
            with torch.no_grad():
                kernel, library = time_shape(bench, cfg, calls,
                                             AfterKernel(calls, lambda i: task.reference(*sets[i % len(sets)])),
                                             hints.get((tuple(trial.shape), trial.dtype)), clock,
                                             trusted=(tuple(trial.shape), trial.dtype) in trusted)
        finally:
            _CLOSE_CALLS(calls)
        del calls
        recheck: dict = dict(recheck_output_file=None, recheck_trial=None)
        if not cfg.recheck_outside_exclusive:
            # made while this shape's timing inputs are still held, so that the recheck's buffers are never
            # the timing's (a cache keyed by data_ptr sees new pointers)
            ins = recheck_inputs(task, trial)
            del sets
            recheck = recheck_call(entry, trial, ins, held)
            del ins
        else:
            del sets
        results.append(ShapeTiming(
            shape=trial.shape, dtype=trial.dtype, split=trial.split, kernel_ms=kernel.median_ms,
            kernel_spread=kernel.spread, kernel_reps=kernel.reps, launches_per_call=launches,
            programs=programs, side_stream=side_stream_suspected(kernel), stream_ms=kernel.stream_ms,
            device_ms=kernel.device_ms, handed_bytes=handed or None, **recheck, **library))
        torch.cuda.empty_cache()
        clock.lap("timing_release" if cfg.recheck_outside_exclusive else "timing_recheck")
    return tuple(results)


# The recheck (issue 2's post-timing check): the output of a call made after a shape's timing, on inputs it has
# not seen, is checked again by the parent's checker, so a submission that behaves only while it is checked
# before the timing is still caught. One function for both places it runs: inside each shape's exclusive
# timing (the default) and after the whole exclusive stretch (TimingConfig.recheck_outside_exclusive).

def recheck_of(trial):
    """The recheck's own trial: new seeds, an index apart from every correctness and timing trial's."""
    return dataclasses.replace(trial, seed=trial.seed + 7919, index=trial.index + 5000)


def recheck_inputs(task, trial) -> tuple:
    """The recheck's inputs for timed `trial`, on the GPU."""
    return inputs_mod.make_trial_inputs(task, recheck_of(trial), "cuda")


def recheck_call(entry, trial, ins, held, call_mark=None) -> dict:
    """One recheck call on `ins`, synchronized; its output's host copy kept in `held` for the checker. The
    ShapeTiming fields it gives (`recheck_output_file`, `recheck_trial`; both None when the output is not a
    tensor: the checker has nothing to compare then, as for a trial). `call_mark` (a context manager) is
    around the call and its synchronize alone, as a correctness trial's call mark is (child/run.py)."""
    with call_mark if call_mark is not None else _nullcontext():
        with torch.no_grad():
            out = entry(*ins)
        torch.cuda.synchronize()
    name = None
    if type(out) is torch.Tensor:
        name = output_name("recheck", trial.index)
        _HELD_ADD(held, name, out)     # the class's, bound at import: a shadow on the instance never runs
    # the submission's finalizers on its output run here: under the guards and op recorders, so that torch
    # compute that overwrites the copy just kept is seen (finalizer_overwrites_held.py does it to a trial's); the
    # list is its only reference once `out` is deleted, so the finalizers run inside the watched stretch
    kept = [out]
    del out
    _release_watched(kept, "a recheck's output")
    return dict(recheck_output_file=name, recheck_trial=recheck_of(trial) if name else None)


def recheck_timed(task, job, entry, held, timings: tuple[ShapeTiming, ...], call_mark=None,
                  phases: dict | None = None) -> tuple[ShapeTiming, ...]:
    """Every timed shape's recheck, in shape order, after the exclusive stretch (child/run.py, under the shared
    lane): `timings` (time_submission's, without recheck fields) with them filled in, field for field what the
    recheck inside the timing gives. `call_mark(k)` is the k-th recheck's call mark (a context manager);
    `phases` gets `timing_recheck` as the recheck inside the timing does (its inputs, call, host copy and the
    cache emptied).

    What the submission can see change: its calls on one shape no longer end with that shape's recheck before
    the next shape's first call; the rechecks come after every shape's timing, one per shape in the same order,
    each on fresh buffers after a wait for the shared lane. A recheck was already recognisable (new buffers
    after the timing's rotation of n_input_sets): the new order tells it that a call is a recheck no sooner
    than the buffers did, and what it is checked on (new seeds) is unchanged."""
    clock = _PhaseClock(phases)
    out = []
    for k, (trial, timing) in enumerate(zip(job.timing_trials, timings)):
        ins = recheck_inputs(task, trial)
        fields = recheck_call(entry, trial, ins, held, call_mark(k) if call_mark is not None else None)
        del ins
        out.append(dataclasses.replace(timing, **fields))
        torch.cuda.empty_cache()
        clock.lap("timing_recheck")
    return tuple(out)


class _PhaseClock:
    """Adds the time since the last lap to `phases[key]` (nothing without a dict)."""

    def __init__(self, phases: dict | None):
        self.phases, self.t = phases, time.perf_counter()

    def lap(self, key: str) -> None:
        now = time.perf_counter()
        if self.phases is not None:
            self.phases[key] = self.phases.get(key, 0.0) + (now - self.t)
        self.t = now

    def add(self, key: str, seconds: float) -> None:
        """Adds `seconds` to `phases[key]` without a lap: a part of a phase already lapped."""
        if self.phases is not None:
            self.phases[key] = self.phases.get(key, 0.0) + seconds
