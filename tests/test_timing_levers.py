"""Issue 35's timing levers on the cpu: the choice between CUDA-graph replay and the loop (and the note the
fallback leaves), the parent's view of the timing method, and the stopping rule on E's interval, over
scripted readings (no device). The graph's real capture and replay run in test_gpu_graph_timing_* below."""
import dataclasses
import math
import random

import pytest

from kernelgym_gap.child import graph_timing
from kernelgym_gap.child.timing import Bench, GraphBench, time_shape
from kernelgym_gap.core import timing_stats as stats
from kernelgym_gap.core.config import TimingConfig
from kernelgym_gap.core.errors import ProtocolError, UnknownChoiceError
from kernelgym_gap.core.record import Job, ShapeTiming, Trial
from kernelgym_gap.judge.library_cache import reconcile
from kernelgym_gap.judge.measure import trusted_timings

import timing_readings

CFG = TimingConfig(min_reps=10, max_reps=200, budget_ms=80.0, min_time_ms=1.0, target_spread=0.02)
GRAPH = dataclasses.replace(CFG, graph_replay=True)
TRIAL = Trial(index=10_000, shape=(64, 256), dtype="float32", seed=1, distribution="normal", split="public")


def _job(cfg):
    return Job(task_id="LayerNorm", dsl="triton", backend="cuda", source_file="s.py", outputs_dir="o",
               report_file="r.json", trials=(), timing=cfg, timing_trials=(TRIAL,), library_hint=())


class Scripted:
    """Each callable's repetition reads `times[name]` with a seeded jitter; the loop and a graph timer read
    alike, but each counts its own repetitions."""

    def __init__(self, cfg, times, jitter=0.03, captures=None):
        self.cfg, self.times, self.jitter, self.sync_jitter_ms = cfg, times, jitter, 0.001
        self.rnd = random.Random(7)
        self.captures = captures or {}        # name -> "ok" or the reason the capture gives, or an exception
        self.loop_reps = self.graph_reps = 0

    def _read(self, name):
        ms = self.times[name] * (1 + self.rnd.uniform(-self.jitter, self.jitter))
        s = stats.round_ms(ms)
        return s, max(stats.round_ms(ms + self.rnd.uniform(0, 0.002)), s)

    def _warm(self, fn):
        return self.times[fn(0)]

    def _rep(self, fn, i):
        self.loop_reps += 1
        return self._read(fn(i))

    def _capture(self, fn):
        what = self.captures.get(fn(0), "ok")
        if isinstance(what, Exception):
            raise what
        if what != "ok":
            return what
        bench, name = self, fn(0)

        class Timer:
            closed = False

            def rep(self, i):
                bench.graph_reps += 1
                return bench._read(name)

            def close(self):
                Timer.closed = True
        return Timer()


class ScriptedLoop(Scripted, Bench):
    pass


class ScriptedGraph(GraphBench):
    """GraphBench's own measure_interleaved and _rep over Scripted's readings and captures."""

    def __init__(self, *a, **kw):
        Scripted.__init__(self, *a, **kw)

    _read, _warm, _capture = Scripted._read, Scripted._warm, Scripted._capture

    def _rep(self, fn, i):
        timer = self._timers.get(id(fn)) if hasattr(self, "_timers") else None
        if timer is not None:
            return timer.rep(i)
        self.loop_reps += 1
        return self._read(fn(i))


def child_shape(bench, cfg):
    k, fields = time_shape(bench, cfg, lambda i: "kernel", lambda i: "library", None)
    return ShapeTiming(shape=TRIAL.shape, dtype=TRIAL.dtype, split="public", kernel_ms=k.median_ms,
                       kernel_spread=k.spread, kernel_reps=k.reps, launches_per_call=1, programs=64,
                       side_stream=stats.side_stream_suspected(k), stream_ms=k.stream_ms, device_ms=k.device_ms,
                       **fields)


# ---- the choice and its fallback ------------------------------------------------------------------------

def test_without_graph_replay_nothing_is_captured():
    called = []
    assert graph_timing.select(CFG, lambda: called.append(1)) == (None, "")
    assert called == []


@pytest.mark.parametrize("capture,note", [
    (lambda: (_ for _ in ()).throw(RuntimeError("operation not permitted when stream is capturing")),
     "the capture failed: RuntimeError: operation not permitted when stream is capturing"),
    (lambda: "the captured call returned tuple, not a tensor", "the captured call returned tuple, not a tensor"),
    (lambda: None, "the capture gave nothing"),
])
def test_a_call_that_does_not_capture_falls_back_to_the_loop_with_its_reason(capture, note):
    assert graph_timing.select(GRAPH, capture) == (None, note)


def test_the_fallback_note_is_bounded():
    timer, note = graph_timing.select(GRAPH, lambda: "x" * 5000)
    assert timer is None and len(note) == stats.MAX_NOTE_CHARS and note.endswith("...")


def test_a_call_that_captures_is_replayed():
    sentinel = object()
    assert graph_timing.select(GRAPH, lambda: sentinel) == (sentinel, "")


def test_graph_timing_replays_the_captured_calls_and_the_parent_believes_it():
    """Both callables capture: every full-timing repetition is a replay (no loop repetition after the probe),
    the readings say "graph", and the parent, recomputing from them, agrees with the child."""
    bench = ScriptedGraph(GRAPH, {"kernel": 0.2, "library": 0.3})
    t = child_shape(bench, GRAPH)
    probe_reps = len(t.readings.probe.stream_ms) + len(t.readings.check.stream_ms)
    assert bench.loop_reps == probe_reps          # the probe and the library check stay the loop
    assert bench.graph_reps == t.kernel_reps + t.library_reps > 0
    assert (t.readings.kernel.method, t.readings.library.method) == ("graph", "graph")
    assert t.readings.probe.method == "loop"
    (mine,) = trusted_timings(_job(GRAPH), (t,))
    assert mine == t


def test_a_call_that_does_not_capture_is_timed_by_the_loop_and_the_reason_reaches_the_parent():
    bench = ScriptedGraph(GRAPH, {"kernel": 0.2, "library": 0.3},
                          captures={"kernel": RuntimeError("cudaErrorStreamCaptureUnsupported")})
    t = child_shape(bench, GRAPH)
    assert t.readings.kernel.method == "loop"
    assert "cudaErrorStreamCaptureUnsupported" in t.readings.kernel.fallback
    assert t.readings.library.method == "graph"
    (mine,) = trusted_timings(_job(GRAPH), (t,))
    assert mine.readings.kernel.fallback == t.readings.kernel.fallback


def test_graph_readings_the_configuration_did_not_ask_for_are_a_protocol_error():
    t = child_shape(ScriptedGraph(GRAPH, {"kernel": 0.2, "library": 0.3}), GRAPH)
    with pytest.raises(ProtocolError, match="CUDA-graph replay"):
        trusted_timings(_job(CFG), (t,))
    # the probe is never a graph's, whatever the configuration
    forged = dataclasses.replace(t.readings, probe=dataclasses.replace(t.readings.probe, method="graph"))
    with pytest.raises(ProtocolError, match="CUDA-graph replay"):
        trusted_timings(_job(GRAPH), (dataclasses.replace(t, readings=forged),))


@pytest.mark.parametrize("change,match", [
    (dict(method="spin"), "timing method"),
    (dict(fallback="y" * (stats.MAX_NOTE_CHARS + 1)), "fallback note"),
    (dict(method="graph", fallback="why"), "fallback note"),
])
def test_a_malformed_method_or_note_is_a_protocol_error(change, match):
    t = child_shape(ScriptedGraph(GRAPH, {"kernel": 0.2, "library": 0.3}), GRAPH)
    forged = dataclasses.replace(t.readings, kernel=dataclasses.replace(t.readings.kernel, **change))
    with pytest.raises(ProtocolError, match=match):
        trusted_timings(_job(GRAPH), (dataclasses.replace(t, readings=forged),))


def test_the_method_round_trips_through_the_report():
    from kernelgym_gap.core.record import ChildReport
    from kernelgym_gap.core.status import Status
    t = child_shape(ScriptedGraph(GRAPH, {"kernel": 0.2, "library": 0.3},
                                  captures={"library": "the captured call returned int, not a tensor"}), GRAPH)
    rep = ChildReport(status=Status.OK, message="", timings=(t,))
    back = ChildReport.from_json(rep.to_json()).timings[0]
    assert back.readings == t.readings and back.readings.library.fallback.startswith("the captured call")


# ---- the stopping rule on E's interval ------------------------------------------------------------------

INTERVAL = dataclasses.replace(CFG, stop_rule="interval", e_halfwidth=0.01)


def test_the_stop_rule_is_a_known_choice():
    with pytest.raises(UnknownChoiceError):
        TimingConfig(stop_rule="fixed")
    with pytest.raises(ValueError):
        TimingConfig(stop_rule="interval", e_halfwidth=0.0)


def test_the_median_interval_holds_the_median_and_narrows_with_more_readings():
    rnd = random.Random(3)
    xs = [0.1 * (1 + rnd.gauss(0, 0.03)) for _ in range(400)]
    lo, hi = stats.median_interval(xs[:40])
    assert lo <= sorted(xs[:40])[20] <= hi
    assert stats.median_halfwidth(xs) < stats.median_halfwidth(xs[:40]) / 2
    assert stats.median_halfwidth([]) == math.inf
    assert stats.median_interval([0.5]) == (0.5, 0.5)


def test_the_interval_rule_covers_the_true_median_about_95_percent_of_the_time():
    rnd = random.Random(11)
    hits = 0
    for _ in range(400):
        lo, hi = stats.median_interval([rnd.expovariate(1.0) for _ in range(60)])
        hits += lo <= math.log(2) <= hi
    assert 0.92 <= hits / 400 <= 0.99


def _reps(cfg, jitter, times=None):
    bench = ScriptedLoop(cfg, times or {"kernel": 0.02, "library": 0.03}, jitter=jitter)
    return child_shape(bench, cfg)


def test_a_steady_kernel_stops_at_the_minimum_and_a_noisy_one_goes_on():
    steady, noisy = _reps(INTERVAL, 0.001), _reps(INTERVAL, 0.05)
    assert steady.kernel_reps == INTERVAL.min_reps
    assert noisy.kernel_reps > 3 * steady.kernel_reps
    # where it stopped, E's interval is within the bound
    k = noisy.readings.kernel.stream_ms
    assert stats.median_halfwidth(k) <= INTERVAL.e_halfwidth / math.sqrt(2)


def test_on_a_small_noisy_kernel_the_interval_rule_takes_fewer_repetitions_than_the_spread_rule():
    """A 20 us kernel with +-3% jitter: its spread never gets under 2%, so the spread rule runs to its budget
    (or max_reps); the interval of the median is within +-0.7% long before."""
    spread, interval = _reps(CFG, 0.03), _reps(INTERVAL, 0.03)
    assert spread.kernel_reps == CFG.max_reps
    assert interval.kernel_reps < spread.kernel_reps / 2


def test_the_parent_replays_the_interval_rule():
    t = _reps(INTERVAL, 0.03)
    (mine,) = trusted_timings(_job(INTERVAL), (t,))
    assert mine == t
    # the same readings under the spread rule stop where that rule would not have
    with pytest.raises(ProtocolError, match="stopping rule"):
        trusted_timings(_job(CFG), (t,))


def test_synthetic_readings_follow_the_interval_rule():
    """tests/timing_readings.full, used by every synthetic ShapeTiming, stops where the configured rule does."""
    r = timing_readings.full(0.05, INTERVAL)
    assert len(r.stream_ms) == INTERVAL.min_reps
    assert stats.stop_rule_problem(r, INTERVAL, True) is None


# ---- the clock warm-up's end and the warm-up done once (issue 35) ----------------------------------------

class ScriptedClock(Bench):
    """Bench._warm_clocks over a scripted clock: each reading is the next of `rates` (kHz), each busy stretch
    advances a fake wall clock by the time asked (no device)."""

    def __init__(self, cfg, rates):
        self.cfg, self.rates, self.now, self.busy = cfg, list(rates), 0.0, 0

    def _busy(self, ms):
        self.busy += 1
        self.now += max(ms, 0.5) / 1e3

    def _clock_khz(self):
        return self.rates.pop(0) if len(self.rates) > 1 else self.rates[0]


@pytest.fixture
def fake_clock(monkeypatch):
    from kernelgym_gap.device import bench as bench_mod

    def install(b):
        monkeypatch.setattr(bench_mod.time, "perf_counter", lambda: b.now)
        return b
    return install


def test_the_clock_warm_up_rule_is_a_known_choice():
    with pytest.raises(UnknownChoiceError, match="steady"):
        TimingConfig(clock_warmup_rule="steadfast")


@pytest.mark.parametrize("rates,least,most", [
    ([1_980_000.0], 20.0, 30.0),                                 # already at its clock: the minimum, then out
    ([345_000.0] * 2 + [1_200_000.0, 1_700_000.0] + [1_980_000.0] * 3, 35.0, 45.0),   # ramps, then settles
    ([345_000.0, 1_980_000.0] * 100, 300.0, 306.0),              # never settles: the fixed bound
])
def test_a_steady_warm_up_ends_once_the_clock_holds_and_never_past_the_fixed_one(fake_clock, rates, least, most):
    """Rule "steady" stops when three readings in a row agree within 1% after 20 ms, never later than
    clock_warmup_ms; the readings it took are kept (the ramp is visible in them)."""
    b = fake_clock(ScriptedClock(TimingConfig(clock_warmup_rule="steady"), rates))
    taken = b._warm_clocks(300.0)
    assert least <= b.now * 1e3 <= most
    assert len(taken) == b.busy                       # one reading after each busy stretch
    assert taken[:len(rates)] == tuple(rates[:len(taken)])


def test_an_idle_clock_that_reads_steady_is_still_warmed_for_the_minimum(fake_clock):
    """A GPU that has not begun to ramp reads the same low clock every time: the 20 ms minimum is spent
    before any three readings may end the warm-up."""
    from kernelgym_gap.device.bench import STEADY_MIN_MS, clock_settled
    assert not clock_settled([345_000.0] * 3, STEADY_MIN_MS - 1)
    assert clock_settled([345_000.0] * 3, STEADY_MIN_MS)
    assert not clock_settled([1_900_000.0, 1_980_000.0, 1_980_000.0], 50.0)     # 4% apart: still ramping
    assert not clock_settled([1_980_000.0] * 2, 50.0)                          # two readings are not three


def test_the_fixed_warm_up_keeps_the_gpu_busy_for_its_whole_time_and_reads_no_clock(fake_clock):
    b = fake_clock(ScriptedClock(TimingConfig(clock_warmup_rule="fixed"), [1_980_000.0]))
    assert b._warm_clocks(300.0) == ()
    assert b.now * 1e3 >= 300.0


class CountingWarm(Scripted, Bench):
    """Scripted readings with Bench's own `_warm` (warm_once), its calls counted per callable name."""

    def __init__(self, cfg, times):
        super().__init__(cfg, times)
        import weakref
        self._warmed, self.warms = weakref.WeakKeyDictionary(), {}

    _warm = Bench._warm

    def _warm_calls(self, fn):
        self.warms[fn(0)] = self.warms.get(fn(0), 0) + 1
        return self.times[fn(0)]


@pytest.mark.parametrize("hint", [None, 0.3])
def test_warm_once_warms_each_callable_once_per_shape_and_the_parent_believes_it(hint):
    """With warm_once the full timing reuses the probe's warm-up (one per callable per shape, not two), and
    the readings still pass the parent's replay of the stopping rules (judge/measure.trusted_timings)."""
    cfg = dataclasses.replace(CFG, warm_once=True)
    for once, expected in ((False, 2), (True, 1)):
        b = CountingWarm(dataclasses.replace(cfg, warm_once=once), {"kernel": 0.2, "library": 0.3})
        k, fields = time_shape(b, b.cfg, lambda i: "kernel", lambda i: "library", hint)
        assert b.warms["kernel"] == expected
        assert b.warms["library"] == (1 if hint is not None else expected)
    t = ShapeTiming(shape=TRIAL.shape, dtype=TRIAL.dtype, split="public", kernel_ms=k.median_ms,
                    kernel_spread=k.spread, kernel_reps=k.reps, launches_per_call=1, programs=64,
                    side_stream=stats.side_stream_suspected(k), stream_ms=k.stream_ms, device_ms=k.device_ms,
                    **fields)
    job = dataclasses.replace(_job(cfg), library_hint=((TRIAL.shape, TRIAL.dtype, hint),) if hint else ())
    assert trusted_timings(job, (t,))[0].kernel_ms == t.kernel_ms


def test_warm_once_does_not_carry_a_warm_up_over_to_another_callable():
    """Each shape's callables are new objects: the next shape is warmed again (the estimate is per callable,
    held weakly, so a gone callable's entry cannot be found by a new one)."""
    b = CountingWarm(dataclasses.replace(CFG, warm_once=True), {"kernel": 0.2, "library": 0.3})
    for _ in range(3):
        time_shape(b, b.cfg, lambda i: "kernel", lambda i: "library", None)
    assert b.warms == {"kernel": 3, "library": 3}


# ---- the probe's hopeless rule (TimingConfig.probe_hopeless_reps) -----------------------------------------

HOPELESS = dataclasses.replace(CFG, probe_hopeless_reps=3)


def _shape(bench, cfg, hint=None):
    """One shape as time_shape reports it, with the hint the parent sent (None: none)."""
    k, fields = time_shape(bench, cfg, lambda i: "kernel", lambda i: "library", hint)
    return ShapeTiming(shape=TRIAL.shape, dtype=TRIAL.dtype, split="public", kernel_ms=k.median_ms,
                       kernel_spread=k.spread, kernel_reps=k.reps, launches_per_call=1, programs=64,
                       side_stream=stats.side_stream_suspected(k), stream_ms=k.stream_ms, device_ms=k.device_ms,
                       **fields)


def _hinted(cfg, hint):
    return dataclasses.replace(_job(cfg), library_hint=((TRIAL.shape, TRIAL.dtype, hint),) if hint else ())


def _parent(cfg, t, hint=None):
    """What the parent makes of one shape: the readings replayed, then the hint and early exit re-derived."""
    job = _hinted(cfg, hint)
    return reconcile(job, trusted_timings(job, (t,)))[0]


def _with_probe(t, probe):
    """`t` with its probe's readings replaced (and its kernel's, where it exited early): a forged report."""
    r = dataclasses.replace(t.readings, probe=probe, kernel=probe if t.early_exit else t.readings.kernel)
    k = stats.summarise_readings(r.kernel, r.sync_jitter_ms)
    return dataclasses.replace(t, readings=r, kernel_ms=k.median_ms, kernel_spread=k.spread, kernel_reps=k.reps,
                               stream_ms=k.stream_ms, device_ms=k.device_ms)


@pytest.mark.parametrize("reps,ok", [(0, True), (3, True), (10, True), (2, False), (11, False)])
def test_the_probe_hopeless_reps_are_off_or_from_3_to_the_check_reps(reps, ok):
    if ok:
        assert TimingConfig(probe_hopeless_reps=reps).probe_hopeless_reps == reps
    else:
        with pytest.raises(ValueError, match="probe_hopeless_reps"):
            TimingConfig(probe_hopeless_reps=reps)


def test_the_rule_is_off_by_default():
    assert TimingConfig().probe_hopeless_reps == 0


@pytest.mark.parametrize("hint", [None, 0.3])
def test_a_hopeless_kernel_stops_its_probe_after_3_and_exits_early_and_the_parent_believes_it(hint):
    """A kernel 100x the library's time: with the rule its probe takes 3 repetitions, not 10 (the library
    check still takes its 10), the timing exits early on them, and the parent's replay and re-derivation agree."""
    times = {"kernel": 30.0, "library": 0.3}
    off, on = ScriptedLoop(CFG, times), ScriptedLoop(HOPELESS, times)
    t_off, t_on = _shape(off, CFG, hint), _shape(on, HOPELESS, hint)
    assert (len(t_off.readings.probe.stream_ms), len(t_on.readings.probe.stream_ms)) == (10, 3)
    assert len(t_on.readings.check.stream_ms) == 10
    assert off.loop_reps - on.loop_reps == 7      # the kernel's 7 probe repetitions saved, nothing else
    assert t_off.early_exit and t_on.early_exit
    assert t_on.readings.kernel == t_on.readings.probe
    mine = _parent(HOPELESS, t_on, hint)
    assert mine.early_exit and mine.kernel_ms == t_on.kernel_ms
    assert mine.kernel_ms == pytest.approx(30.0, rel=0.05)
    assert mine.library_source == ("cached" if hint else "measured")


def test_a_kernel_that_is_not_hopeless_is_probed_and_timed_exactly_as_without_the_rule():
    """The rule never fires on an honest kernel near the library's time: same readings, same repetitions."""
    times = {"kernel": 0.2, "library": 0.3}
    off, on = ScriptedLoop(CFG, times), ScriptedLoop(HOPELESS, times)
    t_off, t_on = _shape(off, CFG), _shape(on, HOPELESS)
    assert t_on.readings == t_off.readings and off.loop_reps == on.loop_reps
    assert not t_on.early_exit
    assert _parent(HOPELESS, t_on).kernel_ms == t_on.kernel_ms


def test_a_kernel_over_the_factor_by_less_than_the_budget_still_exits_early_without_the_rule():
    """The existing early exit (the budget rule) is unchanged: a 600 ms kernel stops its probe at 2 either way."""
    times = {"kernel": 600.0, "library": 0.3}
    for cfg in (CFG, HOPELESS):
        t = _shape(ScriptedLoop(cfg, times), cfg)
        assert t.early_exit and len(t.readings.probe.stream_ms) == 2
        assert _parent(cfg, t).early_exit


def test_the_rule_takes_the_larger_reference_so_a_high_hint_keeps_the_probe_going():
    """Against the check (0.3 ms) the kernel (20 ms, 67x) is hopeless; against the hint (1 ms, 20x) it is not:
    the probe runs all 10, exactly as without the rule, and the decision after it is the old one (the check
    disagrees with the hint, so the check is the reference: an early exit)."""
    times = {"kernel": 20.0, "library": 0.3}
    t = _shape(ScriptedLoop(HOPELESS, times), HOPELESS, hint=1.0)
    assert len(t.readings.probe.stream_ms) == 10
    assert t.readings == _shape(ScriptedLoop(CFG, times), CFG, hint=1.0).readings
    mine = _parent(HOPELESS, t, hint=1.0)
    assert mine.early_exit and mine.library_source == "measured"


def test_a_probe_cut_short_on_a_kernel_that_is_not_hopeless_is_refused():
    times = {"kernel": 0.2, "library": 0.3}
    t = _shape(ScriptedLoop(HOPELESS, times), HOPELESS)
    p = t.readings.probe
    forged = _with_probe(t, stats.Readings(p.stream_ms[:3], p.device_ms[:3]))
    with pytest.raises(ProtocolError, match="had not ended"):
        _parent(HOPELESS, forged)


def test_a_hopeless_probe_that_ran_on_past_the_rule_is_refused():
    """Under the rule a child that took all 10 where the rule stops at 3 stopped where it chose: refused."""
    times = {"kernel": 30.0, "library": 0.3}
    long = _shape(ScriptedLoop(CFG, times), CFG)          # the probe of 10 a child without the rule takes
    with pytest.raises(ProtocolError, match="hopeless rule ended it after 3"):
        _parent(HOPELESS, long)
    assert _parent(CFG, long).early_exit                  # which the configuration without the rule accepts


def test_a_probe_stopped_by_the_rule_is_refused_where_the_configuration_has_no_rule():
    times = {"kernel": 30.0, "library": 0.3}
    short = _shape(ScriptedLoop(HOPELESS, times), HOPELESS)
    with pytest.raises(ProtocolError, match="had not ended"):
        _parent(CFG, short)


def test_the_parent_replays_the_rule_with_the_hint_it_sent_not_one_the_child_used():
    """A child that ignored its hint (1 ms: the 20 ms kernel is then not hopeless) stopped at 3 against its check
    alone: the parent, replaying with the hint it sent, refuses it."""
    times = {"kernel": 20.0, "library": 0.3}
    t = _shape(ScriptedLoop(HOPELESS, times), HOPELESS, hint=None)
    assert len(t.readings.probe.stream_ms) == 3
    forged = dataclasses.replace(t, library_hint_ms=1.0)
    with pytest.raises(ProtocolError, match="had not ended"):
        trusted_timings(_hinted(HOPELESS, 1.0), (forged,))


def test_the_rule_is_decided_on_the_check_so_far_and_a_stop_stays_a_stop():
    """The check's median moves as it reads: hopeless on its first 3 (0.3 ms), not on all 10 (1 ms). The probe
    stops at 3 and stays stopped; the timing is then not an early exit (the whole check says 20x), the kernel is
    timed in full, and the parent replays the stop at 3 on the check's first 3."""
    class Drifting(ScriptedLoop):
        def _rep(self, fn, i):
            if fn(i) == "library":
                self.times = dict(self.times, library=0.3 if i < 3 else 1.0)
            return super()._rep(fn, i)

    b = Drifting(HOPELESS, {"kernel": 20.0, "library": 0.3}, jitter=0.0)
    t = _shape(b, HOPELESS)
    assert len(t.readings.probe.stream_ms) == 3 and not t.early_exit
    assert t.readings.kernel != t.readings.probe and t.readings.library is not None     # timed in full
    mine = _parent(HOPELESS, t)
    assert not mine.early_exit and mine.kernel_ms == t.kernel_ms
    # a probe of 4 (one past the stop) is refused even though the rule, on 4 of the check, would still hold
    fourth = stats.Readings(t.readings.probe.stream_ms + (20.0,), t.readings.probe.device_ms + (20.0,))
    assert "ended it after 3" in stats.stop_rule_problem(fourth, HOPELESS, False, check=t.readings.check,
                                                         sync_jitter_ms=t.readings.sync_jitter_ms)


def test_the_rule_needs_the_check_to_be_replayed():
    """Without the check's readings the parent cannot see the rule hold: a stop by it is not believed."""
    r = stats.Readings((30.0,) * 3, (30.0,) * 3)
    check = stats.Readings((0.3,) * 10, (0.3,) * 10)
    assert stats.stop_rule_problem(r, HOPELESS, False, check=check) is None
    assert "had not ended" in stats.stop_rule_problem(r, HOPELESS, False)


# ---- on a GPU --------------------------------------------------------------------------------------------

@pytest.mark.gpu
def test_gpu_graph_timing_reads_an_honest_kernel_like_the_loop():
    """On the device: a Triton vector add timed by the loop and by graph replay reads the same time within
    10% (the graph's reading has no launch cost in it, so it may be lower, never far higher), the graph
    readings say so, and a call that synchronizes inside (which a capture forbids) falls back to the loop."""
    import torch
    from kernelgym_gap.child.timing import Bench as LoopBench
    x = torch.randn(1 << 24, device="cuda")
    y = torch.randn(1 << 24, device="cuda")
    cfg = TimingConfig(graph_replay=True, min_reps=20, max_reps=200, clock_warmup_ms=100.0)
    fn = lambda i: x + y                                       # noqa: E731
    loop = LoopBench(cfg).measure(fn)
    graph = GraphBench(cfg).measure(fn)
    assert graph.readings.method == "graph" and graph.readings.fallback == ""
    assert loop.readings.method == "loop"
    assert graph.median_ms == pytest.approx(loop.median_ms, rel=0.10)

    def syncs(i):
        out = x + y
        torch.cuda.synchronize()
        return out
    fallback = GraphBench(cfg).measure(syncs)
    assert fallback.readings.method == "loop" and fallback.readings.fallback


@pytest.mark.gpu
def test_gpu_a_call_that_differs_when_captured_is_timed_by_the_loop():
    """A submission that does less while captured (torch.cuda.is_current_stream_capturing) gains nothing:
    the replay's output differs from a call's, so the loop times it."""
    import torch
    x = torch.randn(1 << 20, device="cuda")

    def sly(i):
        return x * 0 if torch.cuda.is_current_stream_capturing() else x * 2
    m = GraphBench(TimingConfig(graph_replay=True, clock_warmup_ms=50.0)).measure(sly)
    assert m.readings.method == "loop" and "same output" in m.readings.fallback


@pytest.mark.gpu
def test_gpu_a_steady_warm_up_on_a_busy_gpu_ends_early_and_reads_the_clock():
    """On the device: right after work (as under the lanes), the "steady" warm-up ends well before the fixed
    300 ms, its clock readings are plausible SM clocks (0.3-3 GHz) and its last three agree within 1%."""
    import torch
    from kernelgym_gap.device.bench import STEADY_READINGS, STEADY_TOLERANCE
    Bench(TimingConfig(clock_warmup_ms=300.0))                   # the GPU busy a moment before
    b = Bench(TimingConfig(clock_warmup_rule="steady"))
    print(f"steady warm-up {b.clock_warmup_s * 1e3:.1f} ms, clock readings (MHz): "
          f"{[round(r / 1e3) for r in b.clock_rates]}")
    assert b.clock_warmup_s < 0.2
    assert all(3e5 < r < 3e6 for r in b.clock_rates)
    last = b.clock_rates[-STEADY_READINGS:]
    assert min(last) >= (1 - STEADY_TOLERANCE) * max(last)
    torch.cuda.synchronize()


@pytest.mark.gpu
def test_gpu_a_hopeless_kernels_probe_ends_at_3_and_the_parent_believes_it():
    """On the device (TimingConfig.probe_hopeless_reps): a kernel of ~20 ms (a spin) against a library of a
    vector add (~0.1 ms) stops its probe after 3 repetitions and exits early; the same without the rule takes 10.
    The parent replays both from the raw readings and re-derives the early exit."""
    import torch
    from kernelgym_gap.child.timing import Bench as LoopBench
    x = torch.randn(1 << 24, device="cuda")
    cycles = int(LoopBench._spin_cycles(20.0))

    def slow(i):
        torch.cuda._sleep(cycles)
        return x + 1

    for cfg, reps in ((TimingConfig(clock_warmup_ms=50.0), 10),
                      (TimingConfig(clock_warmup_ms=50.0, probe_hopeless_reps=3), 3)):
        k, fields = time_shape(LoopBench(cfg), cfg, slow, lambda i: x + 1, None)
        t = ShapeTiming(shape=TRIAL.shape, dtype=TRIAL.dtype, split="public", kernel_ms=k.median_ms,
                        kernel_spread=k.spread, kernel_reps=k.reps, launches_per_call=1, programs=64,
                        side_stream=stats.side_stream_suspected(k), stream_ms=k.stream_ms, device_ms=k.device_ms,
                        **fields)
        assert len(t.readings.probe.stream_ms) == reps and t.early_exit
        job = _job(cfg)
        assert reconcile(job, trusted_timings(job, (t,)))[0].early_exit
