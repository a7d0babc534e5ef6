"""The timing probe's parts (issue 35): Bench.probe's kernel warm-up, library warm-up and interleaved repetitions,
recorded by child/timing.time_shape as phases beside their sum `timing_probe` (latency keys
child_timing_probe_warm_kernel, child_timing_probe_warm_library, child_timing_probe_reps), and read by no
simulator stage (they are inside child_timing_probe). No device: the real Bench.probe and time_shape run over a
bench whose warm-ups and repetitions are scripted (the cpu backend times nothing, so no cpu evaluation has these
keys; the GPU run records them)."""
import time
from pathlib import Path

import pytest

from kernelgym_gap.child.timing import Bench, _PhaseClock, time_shape
from kernelgym_gap.core import timing_stats as stats
from kernelgym_gap.core.record import TimingConfig
from kernelgym_gap.sim import workload
from kernelgym_gap.sim.pipeline import Setup, simulate

ROOT = Path(__file__).resolve().parent.parent
FULL_MIX = ROOT / "results" / "h200_2026-12-06c_ipc_defaults" / "call4_defaults_full" / "throughput_records.jsonl"
PARTS = ("timing_probe_warm_kernel", "timing_probe_warm_library", "timing_probe_reps")


class SleepyBench(Bench):
    """Bench's own probe over scripted calls: `_warm` of a callable sleeps warm_s[name] (a first call's host time),
    each repetition sleeps rep_s. No device, no flush buffer."""

    def __init__(self, cfg, warm_s: dict, rep_s: float = 0.0):
        self.cfg, self.warm_s, self.rep_s, self.sync_jitter_ms = cfg, warm_s, rep_s, 0.001

    def _warm(self, fn):
        time.sleep(self.warm_s[fn(0)])
        return 0.1

    def _rep(self, fn, i):
        time.sleep(self.rep_s)
        ms = stats.round_ms(0.1 if fn(i) == "kernel" else 0.2)
        return ms, ms


def _probe_phases(bench, shapes: int = 1, hint_ms=None) -> dict:
    phases: dict = {}
    clock = _PhaseClock(phases)
    for _ in range(shapes):
        time_shape(bench, TimingConfig(), lambda i: "kernel", lambda i: "library", hint_ms, clock)
    return phases


@pytest.mark.parametrize("hint_ms", [None, 0.2])
def test_the_probe_records_its_three_parts_within_its_sum(hint_ms):
    """Each part >= 0, summed over the shapes like the other phases, and together no more than timing_probe."""
    one = _probe_phases(SleepyBench(TimingConfig(), {"kernel": 0.01, "library": 0.01}, rep_s=0.001), 1, hint_ms)
    three = _probe_phases(SleepyBench(TimingConfig(), {"kernel": 0.01, "library": 0.01}, rep_s=0.001), 3, hint_ms)
    for phases in (one, three):
        assert set(PARTS) <= set(phases) and all(phases[k] >= 0 for k in PARTS)
        assert sum(phases[k] for k in PARTS) <= phases["timing_probe"] + 1e-6
    assert three["timing_probe_warm_kernel"] >= 3 * 0.01 and one["timing_probe_warm_kernel"] < 3 * 0.01


def test_a_slow_warm_up_shows_in_its_warm_key_not_in_the_repetitions():
    """The library's warm-up sleeping 0.3 s (a cudnn plan, a first call): the library warm key has it, the kernel's
    warm key and the repetitions' key do not."""
    phases = _probe_phases(SleepyBench(TimingConfig(), {"kernel": 0.0, "library": 0.3}))
    assert phases["timing_probe_warm_library"] >= 0.3
    assert phases["timing_probe_warm_kernel"] < 0.1 and phases["timing_probe_reps"] < 0.1
    assert phases["timing_probe"] >= 0.3


def test_a_bench_without_parts_records_only_the_sum():
    """A bench that reports no parts (tests/test_library_cache.FakeBench's kind) records timing_probe alone, as
    before: nothing is invented."""
    class Bare:
        sync_jitter_ms = 0.0

        def probe(self, kernel, library, reps, budget_ms, hint_ms=None):
            m = Bench._summarise(self, [0.1] * 3, [0.1] * 3)
            return m, m

        def measure_interleaved(self, fns, seeds=None):
            return [Bench._summarise(self, [0.1] * 3, [0.1] * 3) for _ in fns]

    phases = _probe_phases(Bare())
    assert not set(PARTS) & set(phases) and "timing_probe" in phases


def _with_parts(r: dict) -> dict:
    """The record with the probe split into three parts (a third each) added to its latency."""
    lat = dict(r["latency"])
    if "child_timing_probe" in lat:
        lat.update({k: lat["child_timing_probe"] / 3 for k in workload.PROBE_PARTS})
    return {**r, "latency": lat}


def test_a_record_with_the_parts_replays_as_the_same_record_without_them():
    """The H200 full mix's records (20 timed) with the parts added give the same jobs and the same simulated rate:
    the parts are inside child_timing_probe and no lane's time counts them again."""
    records = workload.read_records(FULL_MIX)
    assert sum("child_timing_probe" in r["latency"] for r in records) >= 10
    split = [_with_parts(r) for r in records]
    assert any(set(workload.PROBE_PARTS) <= set(r["latency"]) for r in split)
    for mode in sorted({r["mode"] for r in records}):
        old, new = workload.jobs_of_mode(records, mode), workload.jobs_of_mode(split, mode)
        assert new == old
        setup = Setup(slots_per_gpu=4)
        assert simulate(new, setup).evals_per_gpu_hour == simulate(old, setup).evals_per_gpu_hour


def test_the_parts_are_the_keys_compare_rows_prints():
    """scripts/compare_rows.py's per-submission stages carry the parts (0 for a record from before them)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("compare_rows", ROOT / "scripts" / "compare_rows.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert set(workload.PROBE_PARTS) <= set(mod.STAGE_KEYS)
    assert [f"child_{k}" for k in PARTS] == list(workload.PROBE_PARTS)
