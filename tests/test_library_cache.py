"""The library's time cached in the parent (judge/library_cache.py, issue 15), without a GPU: the cache's
keys, the median of its last 8 measurements, concurrent writers, a corrupt file; the child's decision
(child/timing.time_shape, on a bench that returns given readings) and the parent's re-derivation of it
(`reconcile`, the score stage); the settings' validation. The GPU half is in tests/test_gpu.py."""
import dataclasses
import json
import logging
import multiprocessing

import pytest

from kernelgym_gap.child.timing import Measurement, time_shape
from kernelgym_gap.core.backend import backend
from kernelgym_gap.core.config import EvalConfig, TimingConfig
from kernelgym_gap.core.placement import Placement
from kernelgym_gap.core.errors import ProtocolError, UnknownChoiceError
from kernelgym_gap.core.record import CheckResult, ChildReport, Job, ShapeTiming, Trial
from kernelgym_gap.core.status import Status
from kernelgym_gap.engine import stages
from kernelgym_gap.engine.evaluation import Evaluation
from kernelgym_gap.judge import library_cache as lc
from kernelgym_gap.judge.calibrate import Calibration, device_key, save_cached
from kernelgym_gap.judge.measure import floor_ms
from kernelgym_gap.sandbox.launch import ChildResult
from kernelgym_gap.sandbox.process import ChildOutcome

DEVICE = {"name": "Test GPU", "driver": "1.0", "sm_count": 132}
VERSIONS = {"torch": "t", "triton": "x"}
KEY = device_key(DEVICE, VERSIONS)
CAL = Calibration(device_key=KEY, device_name="Test GPU", copy_bytes_per_s=4e12,
                  matmul_flops_per_s={"float32": 50e12, "tf32": 400e12, "float16": 800e12, "bfloat16": 800e12},
                  source="measured")
SHAPE = (8192, 4096)


@pytest.fixture
def config():
    return EvalConfig(compile_baseline="cached")


@pytest.fixture
def where(tmp_path):
    """Where these evaluations run: their device caches under tmp_path, the calibration saved there."""
    save_cached(CAL, tmp_path / "calibration.json")
    return Placement(calibration_path=str(tmp_path / "calibration.json"),
                     baselines_path=str(tmp_path / "baselines.json"),
                     library_cache_path=str(tmp_path / "library_times.json"))


@pytest.fixture
def task(registry):
    return registry.get("LayerNorm")


def trial(shape=SHAPE, dtype="float16", index=10_000):
    return Trial(index=index, shape=shape, dtype=dtype, seed=1, distribution="normal", split="public")


def timing(kernel_ms, library_ms, **kw):
    return ShapeTiming(shape=SHAPE, dtype="float16", split="public", kernel_ms=kernel_ms, kernel_spread=0.01,
                       kernel_reps=100, library_ms=library_ms, library_spread=0.01, library_reps=100,
                       launches_per_call=1, programs=8192, stream_ms=kernel_ms, device_ms=kernel_ms, **kw)


def report(*timings):
    return ChildReport(status=Status.OK, message="", timings=timings, device=DEVICE, versions=VERSIONS)


def job(hint_ms=None, timing_cfg=TimingConfig()):
    hint = ((SHAPE, "float16", hint_ms),) if hint_ms is not None else ()
    return Job(task_id="LayerNorm", dsl="triton", backend="cuda", source_file="s.py", outputs_dir="o",
               report_file="r.json", trials=(), timing=timing_cfg, timing_trials=(trial(),), library_hint=hint)


# ---- the cache ----------------------------------------------------------------------------------------

def test_keys_separate_device_task_version_shape_dtype_and_distribution(task):
    base = lc.time_key(KEY, task, SHAPE, "float16")
    others = {lc.time_key(device_key({**DEVICE, "driver": "2"}, VERSIONS), task, SHAPE, "float16"),
              lc.time_key(device_key(DEVICE, {**VERSIONS, "torch": "t2"}), task, SHAPE, "float16"),
              lc.time_key(KEY, dataclasses.replace(task, version=task.version + 1), SHAPE, "float16"),
              lc.time_key(KEY, task, (4096, 1024), "float16"), lc.time_key(KEY, task, SHAPE, "float32"),
              lc.time_key(KEY, dataclasses.replace(task, timed_distribution="uniform"), SHAPE, "float16")}
    assert base not in others and len(others) == 6


def test_no_hint_before_the_device_is_known_or_when_measuring(task, config, where):
    assert lc.hints(task, (trial(),), config, where) == ()
    lc.store(task, report(timing(1.0, 0.5)), where)
    assert lc.hints(task, (trial(),), config, where) == ((SHAPE, "float16", 0.5),)
    assert lc.hints(task, (trial(),), config.replace(library_time="measure"), where) == ()
    assert lc.hints(task, (trial(),), config, where.replace(gpu_index=1)) == ()       # another GPU: not known
    assert lc.hints(task, (trial((4096, 1024)),), config, where) == ()               # a shape never measured


def test_the_hint_is_the_median_of_the_last_8_measurements(task, config, where):
    for ms in [9.0, 9.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 100.0]:
        lc.store(task, report(timing(10.0, ms)), where)
    data = json.loads(open(where.library_cache_path).read())
    (values,) = data["times"].values()
    assert values == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 100.0]
    assert lc.hints(task, (trial(),), config, where) == ((SHAPE, "float16", 4.5),)


def test_only_fully_measured_library_times_are_added(task, config, where):
    lc.store(task, report(timing(1.0, 0.5)), where)
    lc.store(task, report(timing(1.0, 0.9, library_source="cached", library_hint_ms=0.5, library_check_ms=0.51)),
             where)
    assert lc.hints(task, (trial(),), config, where)[0][2] == 0.5


def _writer(path, task_id, n, k):
    from kernelgym_gap.core.registry import default_registry
    t = default_registry().get(task_id)
    cfg = Placement(library_cache_path=path)
    for i in range(n):
        shared = timing(1.0, 1.0 + k)
        own = dataclasses.replace(shared, shape=(k + 1, i + 1))
        lc.store(t, report(shared, own), cfg)


def test_concurrent_writers_lose_nothing(task, config, where):
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(where.library_cache_path, task.id, 10, k)) for k in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    times = json.loads(open(where.library_cache_path).read())["times"]
    assert len(times) == 1 + 4 * 10           # every writer's own keys survived the others' rewrites
    assert len(times[lc.time_key(KEY, task, SHAPE, "float16")]) == lc.KEEP


def test_a_corrupt_cache_is_ignored_with_a_log_and_rewritten(task, config, caplog, where):
    with open(where.library_cache_path, "w") as f:
        f.write('{"times": {"half')
    with caplog.at_level(logging.WARNING, logger="kernelgym_gap.judge.library_cache"):
        assert lc.hints(task, (trial(),), config, where) == ()
    assert "unreadable" in caplog.text
    lc.store(task, report(timing(1.0, 0.5)), where)
    assert lc.hints(task, (trial(),), config, where) == ((SHAPE, "float16", 0.5),)
    with open(where.library_cache_path, "w") as f:
        json.dump({"times": ["not", "a", "map"]}, f)
    assert lc.hints(task, (trial(),), config, where) == ()


# ---- the child's decision and the parent's re-derivation -----------------------------------------------

class FakeBench:
    """Returns given readings: the probe's (kernel's first calls, library check), then the full ones."""
    sync_jitter_ms = 0.0        # echoed into the report's raw readings (core/timing_stats.TimingReadings)

    def __init__(self, probe_kernel, check, kernel=1.0, library=0.5):
        m = lambda ms: Measurement(median_ms=ms, spread=0.01, reps=20, stream_ms=ms, device_ms=ms)  # noqa: E731
        self.readings = (m(probe_kernel), m(check))
        self.full = {"kernel": m(kernel), "library": m(library)}
        self.calls = []

    def probe(self, kernel, library, reps, budget_ms, hint_ms=None):
        self.calls.append(("probe", reps, budget_ms))
        return self.readings

    def measure(self, fn):
        self.calls.append(("measure", fn()))
        return self.full[fn()]

    def measure_interleaved(self, fns):
        self.calls.append(("interleaved",) + tuple(fn() for fn in fns))
        return [self.full[fn()] for fn in fns]


def child_timing(bench, hint_ms, cfg=TimingConfig()):
    """What time_submission would report for one shape, from `bench`."""
    k, fields = time_shape(bench, cfg, lambda: "kernel", lambda: "library", hint_ms)
    return dataclasses.replace(timing(k.median_ms, 0.0), kernel_reps=k.reps, **fields)


def test_a_confirmed_hint_stands_and_only_the_kernel_is_timed_in_full():
    bench = FakeBench(probe_kernel=1.0, check=0.52)
    t = child_timing(bench, 0.5)
    assert (t.library_source, t.library_ms, t.library_check_ms, t.library_hint_ms) == ("cached", 0.5, 0.52, 0.5)
    assert bench.calls[1:] == [("measure", "kernel")] and not t.early_exit
    assert lc.reconcile(job(0.5), (t,)) == (t,)


def test_a_drifted_hint_makes_the_child_measure_the_library_in_full():
    bench = FakeBench(probe_kernel=1.0, check=0.6, library=0.61)
    t = child_timing(bench, 0.5)
    assert (t.library_source, t.library_ms) == ("measured", 0.61)
    assert bench.calls[1:] == [("interleaved", "kernel", "library")]
    assert lc.reconcile(job(0.5), (t,)) == (t,)


def test_without_a_hint_the_library_is_measured_as_before():
    t = child_timing(FakeBench(probe_kernel=1.0, check=0.5), None)
    assert t.library_source == "measured" and t.library_hint_ms is None
    assert lc.reconcile(job(None), (t,)) == (t,)


def test_a_hopeless_kernel_stops_after_its_first_calls():
    bench = FakeBench(probe_kernel=30.0, check=0.5)
    t = child_timing(bench, 0.5)
    assert t.early_exit and t.kernel_ms == 30.0 and t.library_source == "cached"
    assert bench.calls[1:] == []                        # nothing timed after the probe
    assert lc.reconcile(job(0.5), (t,)) == (t,)
    bench = FakeBench(probe_kernel=30.0, check=0.5)     # no hint: the library is still measured in full
    t = child_timing(bench, None)
    assert t.early_exit and bench.calls[1:] == [("measure", "library")]
    assert not child_timing(FakeBench(probe_kernel=30.0, check=0.5), 0.5,
                            TimingConfig(early_exit_budget_ms=0)).early_exit


def test_a_child_claiming_cached_against_its_own_check_is_a_protocol_error():
    lying = timing(1.0, 0.5, library_source="cached", library_check_ms=0.9, library_hint_ms=0.5)
    with pytest.raises(ProtocolError, match="makes the library time measured"):
        lc.reconcile(job(0.5), (lying,))


@pytest.mark.parametrize("fields,match", [
    (dict(library_source="measured", library_check_ms=0.5, library_hint_ms=0.5), "makes the library time cached"),
    (dict(library_source="cached", library_check_ms=0.5, library_hint_ms=None), "echoed"),
    (dict(library_source="cached", library_check_ms=0.4, library_hint_ms=0.4), "echoed"),
    (dict(library_source="guessed", library_check_ms=0.5, library_hint_ms=0.5), "library_source"),
    (dict(library_source="cached", library_check_ms=0.5, library_hint_ms=0.5, early_exit=True), "stopped timing"),
])
def test_claims_that_do_not_follow_from_the_check_are_protocol_errors(fields, match):
    with pytest.raises(ProtocolError, match=match):
        lc.reconcile(job(0.5), (timing(1.0, 0.5, **fields),))


def test_the_parent_uses_its_own_hint_not_the_childs_number():
    echoed = timing(1.0, 0.001, library_source="cached", library_check_ms=0.52, library_hint_ms=0.5)
    (t,) = lc.reconcile(job(0.5), (echoed,))
    assert t.library_ms == 0.5


# ---- the score stage ------------------------------------------------------------------------------------

def scored(task, config, where, *timings, hint_ms=None, job=None):
    """The score stage on these timings (with the readings they give) and the Job `job`, or one with `hint_ms`."""
    from timing_readings import with_readings       # the raw readings the parent summarises (issue 31)
    ev = Evaluation(task, b"", "triton", backend("cuda"), config, placement=where)
    ev.job = job if job is not None else globals()["job"](hint_ms, config.timing)
    ev.child = ChildResult(outcome=ChildOutcome(returncode=0, signal=None, timed_out=False, wall_s=1.0,
                                                stdout_tail="", stderr_tail="", output_bytes=0, layers=()),
                           report=report(*(with_readings(t, config.timing) for t in timings)))
    ev.check_result = CheckResult(status=Status.OK, message="", trials_checked=1)
    return stages.Score().run(ev)


def test_score_writes_the_cache_only_for_ok_evaluations(task, config, where):
    fl, _ = floor_ms(task, SHAPE, "float16", CAL)
    verdict = scored(task, config, where, timing(0.5 * fl, 2 * fl))            # under the floor: not ok
    assert verdict.status is Status.FASTER_THAN_FLOOR
    lying = timing(2 * fl, 2 * fl, library_source="cached", library_check_ms=9 * fl, library_hint_ms=2 * fl)
    verdict = scored(task, config, where, lying, hint_ms=2 * fl)
    assert verdict.status is Status.PROTOCOL_ERROR and verdict.stage == "score"
    assert lc.load(lc.cache_path(where)) == {"times": {}, "devices": {}}
    verdict = scored(task, config, where, timing(2 * fl, 3 * fl))
    assert verdict.status is Status.OK and verdict.terms["per_shape"][0]["library_source"] == "measured"
    assert lc.hints(task, (trial(),), config, where) == ((SHAPE, "float16", 3 * fl),)


def test_score_reports_the_cached_library_time_and_the_early_exit(task, config, where):
    fl, _ = floor_ms(task, SHAPE, "float16", CAL)
    cached = timing(2 * fl, 123.0, library_source="cached", library_check_ms=3.1 * fl, library_hint_ms=3 * fl)
    verdict = scored(task, config, where, cached, hint_ms=3 * fl)
    assert verdict.status is Status.OK
    (p,) = verdict.terms["per_shape"]
    assert p["library_ms"] == 3 * fl and p["E"] == pytest.approx(1.5) and p["library_source"] == "cached"
    hopeless = timing(200 * fl, 3 * fl, library_check_ms=3 * fl, early_exit=True)
    verdict = scored(task, config, where, hopeless)
    assert verdict.status is Status.OK and verdict.terms["per_shape"][0]["early_exit"]
    assert "timing stopped early" in verdict.message and ">50x slower than the library" in verdict.message


# ---- settings ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("bad", [dict(library_check_reps=2), dict(library_tolerance=0.0),
                                 dict(library_tolerance=1.0), dict(hopeless_factor=1.0),
                                 dict(early_exit_budget_ms=-1.0)])
def test_timing_settings_are_validated(bad):
    with pytest.raises(ValueError):
        TimingConfig(**bad)


def test_library_time_mode_is_validated():
    assert EvalConfig().library_time == "cached"
    with pytest.raises(UnknownChoiceError):
        EvalConfig(library_time="sometimes")


def test_the_hint_and_the_new_fields_cross_the_boundary():
    j = job(0.5)
    assert Job.from_json(j.to_json()) == j
    t = timing(1.0, 0.5, library_source="cached", library_check_ms=0.52, library_hint_ms=0.5, early_exit=True)
    assert ChildReport.from_json(report(t).to_json()).timings == (t,)


def test_the_probe_and_the_full_measurement_are_laps_of_the_phase_clock():
    from kernelgym_gap.child.timing import _PhaseClock
    phases = {}
    clock = _PhaseClock(phases)
    time_shape(FakeBench(probe_kernel=1.0, check=0.6, library=0.61), TimingConfig(), lambda: "kernel",
               lambda: "library", 0.5, clock)
    time_shape(FakeBench(probe_kernel=1.0, check=0.5), TimingConfig(), lambda: "kernel", lambda: "library", 0.5,
               clock)
    assert set(phases) == {"timing_probe", "timing_measure"} and all(v >= 0 for v in phases.values())
    _PhaseClock(None).lap("timing_probe")          # without a dict: nothing kept, nothing raised
