"""TimingConfig.probe_readings_count (issue 35; built off, 2026-12-06): the probe's readings begin the full timing,
over scripted readings on the cpu (no device): the combined sample, the repetitions it saves, the parent's replay of
it and its refusals, the early exit and the switch off unchanged. The device's own check that the probe's readings
and the measurement's read the same kernel alike is test_gpu_* at the end (scripts/device_session.sh probe-fold)."""
import dataclasses
import random

import pytest

from kernelgym_gap.child.timing import Bench, time_shape
from kernelgym_gap.core import timing_stats as stats
from kernelgym_gap.core.config import EvalConfig, TimingConfig
from kernelgym_gap.core.errors import ProtocolError
from kernelgym_gap.core.record import Job, ShapeTiming, Trial
from kernelgym_gap.judge.library_cache import reconcile
from kernelgym_gap.judge.measure import trusted_timings

OFF = TimingConfig(min_reps=20, max_reps=200, budget_ms=80.0, min_time_ms=1.0, target_spread=0.02)
ON = dataclasses.replace(OFF, probe_readings_count=True)
TRIAL = Trial(index=10_000, shape=(64, 256), dtype="float32", seed=1, distribution="normal", split="public")
TIMES = {"kernel": 0.2, "library": 0.3}


class Scripted(Bench):
    """Bench's own probe, measure_interleaved and time_shape over scripted readings: each repetition of a callable
    reads `times[name]` with a seeded jitter; every repetition is logged (name, index, in the probe or not)."""

    def __init__(self, cfg, times=TIMES, jitter=0.005):
        self.cfg, self.times, self.jitter, self.sync_jitter_ms = cfg, times, jitter, 0.001
        self.rnd = random.Random(11)
        self.log: list[tuple[str, int]] = []

    def _warm(self, fn):
        return self.times[fn(0)]

    def _rep(self, fn, i):
        self.log.append((fn(i), i))
        ms = self.times[fn(i)] * (1 + self.rnd.uniform(-self.jitter, self.jitter))
        s = stats.round_ms(ms)
        return s, max(stats.round_ms(ms + self.rnd.uniform(0, 0.002)), s)


def _job(cfg, hint=None):
    return Job(task_id="LayerNorm", dsl="triton", backend="cuda", source_file="s.py", outputs_dir="o",
               report_file="r.json", trials=(), timing=cfg, timing_trials=(TRIAL,),
               library_hint=((TRIAL.shape, TRIAL.dtype, hint),) if hint else ())


def _shape(bench, hint=None):
    k, fields = time_shape(bench, bench.cfg, lambda i: "kernel", lambda i: "library", hint)
    return ShapeTiming(shape=TRIAL.shape, dtype=TRIAL.dtype, split="public", kernel_ms=k.median_ms,
                       kernel_spread=k.spread, kernel_reps=k.reps, launches_per_call=1, programs=64,
                       side_stream=stats.side_stream_suspected(k), stream_ms=k.stream_ms, device_ms=k.device_ms,
                       **fields)


def _parent(cfg, t, hint=None):
    job = _job(cfg, hint)
    return reconcile(job, trusted_timings(job, (t,)))[0]


def _measured_reps(bench, name):
    """The repetitions `name` took after the probe (the probe's are the first library_check_reps of each)."""
    return [i for n, i in bench.log[2 * bench.cfg.library_check_reps:] if n == name]


# ---- the switch --------------------------------------------------------------------------------------------

def test_the_switch_is_off_by_default_and_refused_with_graph_replay():
    assert TimingConfig().probe_readings_count is False
    with pytest.raises(ValueError, match="graph_replay"):
        TimingConfig(probe_readings_count=True, graph_replay=True)


def test_the_variant_sets_it_and_combines_with_the_hopeless_rule():
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parent.parent / "scripts" / "throughput.py"
    spec = importlib.util.spec_from_file_location("throughput_fold", path)
    tp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tp)
    config, _ = tp.apply_variant(EvalConfig(), tp.parse_variant("probe_readings_count=1,probe_hopeless_reps=3"))
    assert config.timing.probe_readings_count and config.timing.probe_hopeless_reps == 3
    assert not tp.apply_variant(EvalConfig(), tp.parse_variant(""))[0].timing.probe_readings_count


# ---- the child: the combined sample ---------------------------------------------------------------------------

@pytest.mark.parametrize("hint", [0.3, None])     # the cached library time confirmed ("agreed"), or none ("measured")
def test_the_full_timing_begins_with_the_probes_readings_and_takes_that_many_fewer(hint):
    off, on = Scripted(OFF), Scripted(ON)
    t_off, t_on = _shape(off, hint), _shape(on, hint)
    r = t_on.readings
    p = len(r.probe.stream_ms)
    assert p == ON.library_check_reps == 10
    assert r.kernel.stream_ms[:p] == r.probe.stream_ms and r.kernel.device_ms[:p] == r.probe.device_ms
    # the spread is met from the first look (n = 20): the measurement takes 20 - 10 of its own, not 20
    assert (t_off.kernel_reps, t_on.kernel_reps) == (20, 20)
    assert (len(_measured_reps(off, "kernel")), len(_measured_reps(on, "kernel"))) == (20, 10)
    # the repetitions go on from the probe's index (the input sets' rotation continues)
    assert _measured_reps(on, "kernel") == list(range(10, 20))
    if hint is None:          # the library timed in full too: its check's readings begin it
        assert t_on.library_source == "measured"
        assert r.library.stream_ms[:10] == r.check.stream_ms
        assert (len(_measured_reps(off, "library")), len(_measured_reps(on, "library"))) == (20, 10)
        # interleaved as the probe was: kernel, library, kernel, ...
        assert on.log[20:24] == [("kernel", 10), ("library", 10), ("kernel", 11), ("library", 11)]
    else:
        assert t_on.library_source == "cached" and r.library is None
        assert _measured_reps(on, "library") == []


def test_readings_that_settle_already_in_the_probe_take_no_repetition_and_the_parent_agrees():
    """With min_reps 5 the probe's 10 readings meet the rule at its first look (n = 10): nothing more is timed,
    and the parent's replay starts at the probe's end, not at 5 (where a timing from nothing would have stopped)."""
    cfg = dataclasses.replace(ON, min_reps=5)
    b = Scripted(cfg)
    t = _shape(b, 0.3)
    assert t.readings.kernel.stream_ms == t.readings.probe.stream_ms and _measured_reps(b, "kernel") == []
    assert _parent(cfg, t, 0.3).kernel_reps == 10
    # the same sample is refused where the switch is off: a timing from nothing stops at 5
    with pytest.raises(ProtocolError, match="ended the timing after 5"):
        _parent(dataclasses.replace(cfg, probe_readings_count=False), t, 0.3)


@pytest.mark.parametrize("rule", ["spread", "interval"])
def test_a_noisy_kernel_goes_on_and_the_stopping_rule_reads_the_combined_sample(rule):
    """Readings whose spread (or interval) is not met at 20: the combined sample goes on to the rule's first stop on
    it (never past it, never before it), and the measurement took all but the probe's 10 of them."""
    cfg = dataclasses.replace(ON, stop_rule=rule, target_spread=0.033, e_halfwidth=0.01)
    b = Scripted(cfg, jitter=0.03)
    t = _shape(b, 0.3)
    k = t.readings.kernel
    n = len(k.stream_ms)
    assert 20 < n < cfg.max_reps and n % 5 == 0
    assert stats.may_stop(k.stream_ms, k.device_ms, cfg.min_reps, cfg)
    assert not any(stats.may_stop(k.stream_ms[:m], k.device_ms[:m], cfg.min_reps, cfg) for m in range(10, n))
    assert len(_measured_reps(b, "kernel")) == n - 10
    assert _parent(cfg, t, 0.3).kernel_reps == n


def test_max_reps_bounds_the_combined_sample():
    cfg = dataclasses.replace(ON, max_reps=25, target_spread=1e-6)
    t = _shape(Scripted(cfg, jitter=0.08), 0.3)
    assert t.kernel_reps == 25
    assert _parent(cfg, t, 0.3).kernel_reps == 25


# ---- the parent: the same numbers from the readings, or a refusal ---------------------------------------------

@pytest.mark.parametrize("hint", [0.3, None])
def test_the_parent_recomputes_the_same_timing_from_the_readings(hint):
    t = _shape(Scripted(ON, jitter=0.03), hint)
    mine = _parent(ON, t, hint)
    for name in ("kernel_ms", "kernel_spread", "kernel_reps", "stream_ms", "device_ms", "library_ms",
                 "library_spread", "library_reps"):
        assert getattr(mine, name) == getattr(t, name), name


def _forged(t, **readings):
    r = dataclasses.replace(t.readings, **readings)
    k = stats.summarise_readings(r.kernel, r.sync_jitter_ms)
    return dataclasses.replace(t, readings=r, kernel_ms=k.median_ms, kernel_spread=k.spread, kernel_reps=k.reps,
                               stream_ms=k.stream_ms, device_ms=k.device_ms)


def test_a_kernel_timing_that_does_not_begin_with_its_probe_is_refused():
    t = _shape(Scripted(ON), 0.3)
    k = t.readings.kernel
    slower = stats.Readings((k.stream_ms[0] * 0.5,) + k.stream_ms[1:], (k.device_ms[0] * 0.5,) + k.device_ms[1:])
    with pytest.raises(ProtocolError, match="do not begin with the probe's 10"):
        _parent(ON, _forged(t, kernel=slower), 0.3)
    # the probe's readings left out and the timing's own reported alone: refused too
    alone = stats.Readings(k.stream_ms[10:] + k.stream_ms[:10], k.device_ms[10:] + k.device_ms[:10])
    with pytest.raises(ProtocolError, match="do not begin"):
        _parent(ON, _forged(t, kernel=alone), 0.3)


def test_a_library_timing_that_does_not_begin_with_its_check_is_refused():
    t = _shape(Scripted(ON))
    lib = t.readings.library
    swapped = stats.Readings(lib.stream_ms[1:] + lib.stream_ms[:1], lib.device_ms[1:] + lib.device_ms[:1])
    with pytest.raises(ProtocolError, match="library readings do not begin with the library check's"):
        _parent(ON, _forged(t, library=swapped))


def test_a_combined_timing_that_runs_on_past_the_rule_is_refused():
    """A child that kept 5 repetitions more than the rule on the combined sample allows (where it liked them)."""
    t = _shape(Scripted(ON), 0.3)
    k = t.readings.kernel
    longer = stats.Readings(k.stream_ms + k.stream_ms[-5:], k.device_ms + k.device_ms[-5:])
    with pytest.raises(ProtocolError, match="ended the timing after 20"):
        _parent(ON, _forged(t, kernel=longer), 0.3)


# ---- unchanged: the early exit, and everything with the switch off ----------------------------------------------

@pytest.mark.parametrize("hint", [0.3, None])
def test_a_hopeless_kernel_exits_early_exactly_as_without_the_switch(hint):
    times = {"kernel": 30.0, "library": 0.3}
    off, on = Scripted(OFF, times), Scripted(ON, times)
    t_off, t_on = _shape(off, hint), _shape(on, hint)
    assert t_on.early_exit and t_on.readings == t_off.readings and on.log == off.log
    assert _parent(ON, t_on, hint).early_exit


def _old_measure_interleaved(bench, fns):
    """Bench.measure_interleaved as it was before the seeds (at c086e59), for the switch-off comparison."""
    cfg = bench.cfg
    per_call = [bench._warm(fn) for fn in fns]
    min_reps = [cfg.min_reps if pc * cfg.min_reps <= cfg.budget_ms else 3 for pc in per_call]
    readings = [([], []) for _ in fns]
    done = [False] * len(fns)
    i = 0
    while not all(done) and i < cfg.max_reps:
        for k, fn in enumerate(fns):
            if done[k]:
                continue
            s, d = bench._rep(fn, i)
            readings[k][0].append(s)
            readings[k][1].append(d)
        i += 1
        for k in range(len(fns)):
            done[k] = done[k] or stats.may_stop(readings[k][0], readings[k][1], min_reps[k], cfg)
    return [bench._summarise(s, d) for s, d in readings]


@pytest.mark.parametrize("cfg,times,jitter", [
    (OFF, TIMES, 0.005),
    (OFF, {"kernel": 0.2, "library": 0.3}, 0.08),                        # the kernel and library stop apart
    (dataclasses.replace(OFF, max_reps=23, target_spread=1e-6), TIMES, 0.08),   # both cut by max_reps
    (OFF, {"kernel": 40.0, "library": 0.3}, 0.01),                       # min_reps 3 for the kernel
])
def test_without_seeds_the_loop_takes_the_old_loops_repetitions_at_its_indices(cfg, times, jitter):
    fns = [lambda i: "kernel", lambda i: "library"]
    new, old = Scripted(cfg, times, jitter), Scripted(cfg, times, jitter)
    assert new.measure_interleaved(fns) == _old_measure_interleaved(old, fns)
    assert new.log == old.log


# ---- on a GPU (scripts/device_session.sh probe-fold) -----------------------------------------------------------

@pytest.mark.gpu
def test_gpu_the_probes_readings_read_the_kernel_as_the_full_timing_does():
    """On the device, the premise of the switch: a vector add's probe readings (interleaved with a library check,
    right after the warm-ups) and its full timing's own readings (alone) have medians within 3% of each other, and
    with the switch on the parent recomputes the child's timing from the combined sample."""
    import torch
    from kernelgym_gap.child.timing import Bench as LoopBench
    x = torch.randn(1 << 24, device="cuda")
    y = torch.randn(1 << 24, device="cuda")
    cfg = TimingConfig(clock_warmup_ms=100.0, probe_readings_count=True)
    b = LoopBench(cfg)
    kernel, library = (lambda i: x + y), (lambda i: torch.add(x, y))
    hint = b.measure(library).median_ms
    k, fields = time_shape(b, cfg, kernel, library, hint)
    r = fields["readings"]
    p = len(r.probe.stream_ms)
    probe_med = stats.summarise(r.kernel.stream_ms[:p], r.kernel.device_ms[:p], r.sync_jitter_ms).median_ms
    rest_med = stats.summarise(r.kernel.stream_ms[p:], r.kernel.device_ms[p:], r.sync_jitter_ms).median_ms
    print(f"probe {p} readings median {probe_med:.5f} ms; the timing's own {len(r.kernel.stream_ms) - p} "
          f"median {rest_med:.5f} ms ({probe_med / rest_med - 1:+.2%})")
    assert probe_med == pytest.approx(rest_med, rel=0.03)
    t = ShapeTiming(shape=TRIAL.shape, dtype=TRIAL.dtype, split="public", kernel_ms=k.median_ms,
                    kernel_spread=k.spread, kernel_reps=k.reps, launches_per_call=1, programs=64,
                    side_stream=stats.side_stream_suspected(k), stream_ms=k.stream_ms, device_ms=k.device_ms,
                    **fields)
    assert _parent(cfg, t, hint).kernel_ms == t.kernel_ms
