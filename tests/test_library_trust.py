"""The library check amortized (TimingConfig.library_check_shapes, judge/library_trust.py; issue 35), without a GPU:
which shapes' hints the parent trusts unchecked (confirmations, their age, a disagreement, the rotation), the cache's
bookkeeping by `store`, the child's probe of a trusted shape (the kernel alone, on a scripted bench) and the parent's
re-derivation and refusals, end to end through the score stage. The GPU half is test_gpu_* at the end
(scripts/device_session.sh library-trust)."""
import dataclasses

import pytest

from kernelgym_gap.child.timing import time_shape
from kernelgym_gap.core import timing_stats as stats
from kernelgym_gap.core.config import EvalConfig, TimingConfig
from kernelgym_gap.core.errors import ProtocolError
from kernelgym_gap.core.record import Job, ShapeTiming
from kernelgym_gap.core.status import Status
from kernelgym_gap.judge import library_cache as lc
from kernelgym_gap.judge.library_trust import SETTLED_N, confirmations, trusted_keys
from kernelgym_gap.judge.measure import floor_ms, trusted_timings
from test_library_cache import CAL, SHAPE, config, report, task, timing, trial, where  # noqa: F401 (fixtures)
from test_probe_fold import Scripted
from test_gpu import cal_path, cuda_config, cuda_where  # noqa: F401 (fixtures of the gpu test)

CFG = TimingConfig(min_reps=20, max_reps=200, budget_ms=80.0, min_time_ms=1.0, target_spread=0.02,
                   library_check_shapes=1)
SHAPES = [(64 * (i + 1), 256) for i in range(4)]
T0 = 1_000_000.0


# ---- which shapes are trusted --------------------------------------------------------------------------

def _confirmed(n, at=T0):
    return [at + i for i in range(n)]


def test_off_trusts_nothing_and_the_default_is_off():
    assert TimingConfig().library_check_shapes == 0
    assert trusted_keys(["a"], {"a": _confirmed(3)}, {}, 0, 900.0, T0 + 10) == set()


def test_entries_confirmed_enough_are_trusted_but_the_oldest_confirmed_is_checked():
    confirmed = {"a": _confirmed(3, T0 + 5), "b": _confirmed(3, T0), "c": _confirmed(3, T0 + 9)}
    assert trusted_keys(["a", "b", "c"], confirmed, {}, 1, 900.0, T0 + 20) == {"a", "c"}
    assert trusted_keys(["a", "b", "c"], confirmed, {}, 2, 900.0, T0 + 20) == {"c"}
    assert trusted_keys(["a", "b", "c"], confirmed, {}, 3, 900.0, T0 + 20) == set()


def test_an_entry_not_yet_trusted_counts_as_the_checked_one():
    confirmed = {"a": _confirmed(3), "b": _confirmed(SETTLED_N - 1), "c": _confirmed(3)}
    assert trusted_keys(["a", "b", "c"], confirmed, {}, 1, 900.0, T0 + 20) == {"a", "c"}


@pytest.mark.parametrize("confirmed,drift,now", [
    (_confirmed(SETTLED_N - 1), None, T0 + 10),         # too few confirmations
    (_confirmed(3), None, T0 + 2 + 901),                # the latest older than library_trust_s
    (_confirmed(3), T0 + 1, T0 + 10),                   # a disagreement after the first confirmation
    (_confirmed(3), T0 + 5, T0 + 10),                   # ... after all of them
    (_confirmed(3, T0 + 50), None, T0 + 10),            # confirmed "in the future": a clock gone back
    (["x", None, True], None, T0 + 10),                 # not times
    ("T0", None, T0 + 10),
])
def test_entries_not_trusted(confirmed, drift, now):
    drifts = {} if drift is None else {"a": drift}
    assert "a" not in trusted_keys(["a", "b"], {"a": confirmed, "b": _confirmed(3)}, drifts, 1, 900.0, now)
    assert trusted_keys(["a"], {"a": confirmed}, drifts, 1, 900.0, now) == set()


def test_confirmations_after_a_disagreement_count_again():
    assert confirmations([T0, T0 + 1, T0 + 2, T0 + 3], T0 + 1) == [T0 + 2, T0 + 3]
    confirmed = {"a": [T0, T0 + 10, T0 + 11, T0 + 12], "b": _confirmed(3)}
    assert trusted_keys(["a", "b"], confirmed, {"a": T0 + 5}, 1, 900.0, T0 + 20) == {"a"}


def test_timing_settings_are_validated():
    for bad in (dict(library_check_shapes=-1), dict(library_trust_s=0.0), dict(library_trust_s=1e6)):
        with pytest.raises(ValueError):
            TimingConfig(**bad)


# ---- the cache's bookkeeping, and the plan the parent sends ------------------------------------------------

def _trials():
    return tuple(trial(shape=s, index=10_000 + i) for i, s in enumerate(SHAPES))


def _timing(shape, **kw):
    return dataclasses.replace(timing(1.0, kw.pop("library_ms", 0.5), **kw), shape=shape)


def _measure_all(task, where):
    lc.store(task, report(*(_timing(s) for s in SHAPES)), where, now=T0)


def _confirm_all(task, where, now, check_ms=0.51):
    lc.store(task, report(*(_timing(s, library_source="cached", library_check_ms=check_ms, library_hint_ms=0.5)
                            for s in SHAPES)), where, now=now)


def test_the_plan_trusts_after_three_confirmations_and_rotates(task, where):
    cfg = EvalConfig(timing=CFG)
    _measure_all(task, where)
    hints, trusted = lc.plan(task, _trials(), cfg, where, now=T0 + 1)
    assert len(hints) == len(SHAPES) and trusted == ()
    for k in range(SETTLED_N):
        assert lc.plan(task, _trials(), cfg, where, now=T0 + 10 * k + 5)[1] == ()
        _confirm_all(task, where, now=T0 + 10 * (k + 1))
    hints, trusted = lc.plan(task, _trials(), cfg, where, now=T0 + 40)
    assert len(trusted) == len(SHAPES) - 1 and set(trusted) <= {(s, "float16") for s in SHAPES}
    # the one checked is then confirmed again (the newest); the next evaluation checks another
    (checked,) = {(s, "float16") for s in SHAPES} - set(trusted)
    lc.store(task, report(_timing(checked[0], library_source="cached", library_check_ms=0.5, library_hint_ms=0.5)),
             where, now=T0 + 50)
    _, again = lc.plan(task, _trials(), cfg, where, now=T0 + 60)
    assert checked in again and len(again) == len(SHAPES) - 1
    # with the switch off (the default), nothing is trusted on the same cache
    assert lc.plan(task, _trials(), EvalConfig(), where, now=T0 + 60)[1] == ()
    # nor once library_trust_s has passed since the latest confirmation of each
    assert lc.plan(task, _trials(), cfg, where, now=T0 + 60 + CFG.library_trust_s)[1] == ()


def test_a_disagreement_untrusts_its_entry_until_confirmed_again(task, where):
    cfg = EvalConfig(timing=CFG)
    _measure_all(task, where)
    for k in range(SETTLED_N):
        _confirm_all(task, where, now=T0 + 10 * (k + 1))
    drifted = SHAPES[1]
    lc.store(task, report(_timing(drifted, library_ms=0.7, library_check_ms=0.7, library_hint_ms=0.5)), where,
             now=T0 + 45)
    _, trusted = lc.plan(task, _trials(), cfg, where, now=T0 + 50)
    assert (drifted, "float16") not in trusted and len(trusted) == len(SHAPES) - 1   # it is the checked one
    data = lc.load(lc.cache_path(where))
    assert list(data["drift"].values()) == [T0 + 45]
    # a measurement with no hint sent (the first one) is no disagreement
    lc.store(task, report(_timing((1, 1))), where, now=T0 + 46)
    assert list(lc.load(lc.cache_path(where))["drift"].values()) == [T0 + 45]


def test_a_cache_without_the_new_sections_or_with_bad_ones_plans_as_before(task, where):
    import json
    _measure_all(task, where)
    path = lc.cache_path(where)
    data = json.loads(path.read_text())
    data["confirmed"], data["drift"] = "garbage", ["x"]
    path.write_text(json.dumps(data))
    hints, trusted = lc.plan(task, _trials(), EvalConfig(timing=CFG), where, now=T0)
    assert len(hints) == len(SHAPES) and trusted == ()
    _confirm_all(task, where, now=T0 + 1)         # a writer replaces the bad sections
    data = lc.load(path)
    assert all(v == [T0 + 1] for v in data["confirmed"].values()) and "drift" not in data


# ---- the child's probe of a trusted shape, and the parent's replay ----------------------------------------

def _job(cfg=CFG, hint=0.3, trusted=True):
    tr = trial(shape=(64, 256), dtype="float32")
    return Job(task_id="LayerNorm", dsl="triton", backend="cuda", source_file="s.py", outputs_dir="o",
               report_file="r.json", trials=(), timing=cfg, timing_trials=(tr,),
               library_hint=((tr.shape, tr.dtype, hint),), library_trusted=((tr.shape, tr.dtype),) if trusted else ())


def _child(bench, hint=0.3, trusted=True):
    k, fields = time_shape(bench, bench.cfg, lambda i: "kernel", lambda i: "library", hint, trusted=trusted)
    return ShapeTiming(shape=(64, 256), dtype="float32", split="public", kernel_ms=k.median_ms,
                       kernel_spread=k.spread, kernel_reps=k.reps, launches_per_call=1, programs=64,
                       side_stream=stats.side_stream_suspected(k), stream_ms=k.stream_ms, device_ms=k.device_ms,
                       **fields)


def _parent(t, job):
    return lc.reconcile(job, trusted_timings(job, (t,)))[0]


def test_a_trusted_shape_times_the_kernel_alone_and_the_parent_takes_its_hint():
    bench = Scripted(CFG)
    t = _child(bench)
    assert {name for name, _ in bench.log} == {"kernel"}          # no library call at all, probe or measure
    assert (t.library_source, t.library_check_ms, t.library_ms, t.library_reps) == ("trusted", None, 0.3, 0)
    assert t.readings.check.stream_ms == () and t.readings.library is None and not t.early_exit
    mine = _parent(t, _job())
    assert mine.library_ms == 0.3 and mine.kernel_ms == t.kernel_ms


def test_a_trusted_shape_with_the_probe_counted_and_the_hopeless_rule():
    cfg = dataclasses.replace(CFG, probe_readings_count=True, probe_hopeless_reps=3)
    t = _child(Scripted(cfg))
    assert _parent(t, _job(cfg)).library_source == "trusted"
    hopeless = Scripted(cfg, times={"kernel": 30.0, "library": 0.3})
    t = _child(hopeless)
    assert t.early_exit and len(hopeless.log) == 3              # the hint alone shows it hopeless after 3
    assert _parent(t, _job(cfg)).early_exit


def test_the_switch_off_times_as_before_with_the_check():
    bench = Scripted(CFG)
    t = _child(bench, trusted=False)
    assert t.library_source == "cached" and "library" in {name for name, _ in bench.log}
    assert _parent(t, _job(trusted=False)).library_source == "cached"


def test_a_trusted_shape_needs_its_hint():
    with pytest.raises(ValueError, match="hint"):
        _child(Scripted(CFG), hint=None)


def test_claims_against_the_plan_are_protocol_errors():
    trusted, checked = _child(Scripted(CFG)), _child(Scripted(CFG), trusted=False)
    with pytest.raises(ProtocolError, match="unchecked"):
        _parent(checked, _job())                                  # checked where it was to be trusted
    with pytest.raises(ProtocolError, match="library check readings: 0 readings"):
        _parent(trusted, _job(trusted=False))                     # trusted where it was to be checked
    with pytest.raises(ProtocolError, match="makes the library time"):
        lc.reconcile(_job(trusted=False), (trusted,))             # ... past the readings too
    with_check = dataclasses.replace(trusted, readings=dataclasses.replace(trusted.readings,
                                                                           check=checked.readings.check))
    with pytest.raises(ProtocolError, match="library readings"):
        _parent(with_check, _job())
    with pytest.raises(ProtocolError, match="stopped timing early"):
        lc.reconcile(_job(), (dataclasses.replace(trusted, early_exit=True),))


# ---- end to end through the score stage -------------------------------------------------------------------

def test_the_score_stage_scores_a_trusted_shape_on_the_hint_and_records_nothing_for_it(task, where):
    from kernelgym_gap.child.timing import Measurement  # noqa: F401 (the child's module loads as in a child)
    from test_library_cache import scored
    cfg = EvalConfig(compile_baseline="cached", timing=dataclasses.replace(TimingConfig(), library_check_shapes=1))
    fl, _ = floor_ms(task, SHAPE, "float16", CAL)
    ev_job = Job(task_id="LayerNorm", dsl="triton", backend="cuda", source_file="s.py", outputs_dir="o",
                 report_file="r.json", trials=(), timing=cfg.timing, timing_trials=(trial(),),
                 library_hint=((SHAPE, "float16", 3 * fl),), library_trusted=((SHAPE, "float16"),))
    t = timing(2 * fl, 3 * fl, library_source="trusted", library_hint_ms=3 * fl)
    verdict = scored(task, cfg, where, t, job=ev_job)
    assert verdict.status is Status.OK, verdict.message
    (p,) = verdict.terms["per_shape"]
    assert p["library_source"] == "trusted" and p["library_ms"] == 3 * fl and p["E"] == pytest.approx(1.5)
    data = lc.load(lc.cache_path(where))
    assert not any(data["times"].values()) and not data.get("confirmed") and not data.get("drift")


def test_the_plan_crosses_the_boundary_and_the_variant_sets_the_switch():
    j = _job()
    assert Job.from_json(j.to_json()) == j
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parent.parent / "scripts" / "throughput.py"
    spec = importlib.util.spec_from_file_location("throughput_trust", path)
    tp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tp)
    cfg, _ = tp.apply_variant(EvalConfig(), tp.parse_variant("library_check_shapes=1,warmup_ms=5"))
    assert (cfg.timing.library_check_shapes, cfg.timing.warmup_ms) == (1, 5)


# ---- on the GPU ---------------------------------------------------------------------------------------------

@pytest.mark.gpu
def test_gpu_trusted_shapes_skip_the_library_and_keep_e(registry, cuda_config, cuda_where, tmp_path):
    """LayerNorm's optimized solution five times on one fresh cache with library_check_shapes=1: the first measures
    the library, three confirm it, the fifth trusts all shapes but one (or those whose checks drifted). Its E within
    10% of the fourth's (checked), and its probe's library warm-up gone from the trusted shapes."""
    from test_gpu import _eval, _fresh_cache
    cfg = cuda_config.replace(timing=dataclasses.replace(cuda_config.timing, library_check_shapes=1))
    where = _fresh_cache(cuda_where, tmp_path)
    runs = [_eval(registry, "triton_rowwise.py", cfg, where=where) for _ in range(SETTLED_N + 2)]
    for r in runs:
        assert r.status.value == "ok", r.message
        print({p["library_source"] for p in r.terms["per_shape"]}, r.terms["E"],
              r.latency.get("child_timing_probe_warm_library"))
    assert all(p["library_source"] != "trusted" for r in runs[:SETTLED_N + 1] for p in r.terms["per_shape"])
    last = runs[-1].terms["per_shape"]
    trusted = [p for p in last if p["library_source"] == "trusted"]
    assert 1 <= len(trusted) <= len(last) - 1
    assert all(p["library_ms"] == p["library_hint_ms"] for p in trusted)
    assert runs[-1].terms["E"] == pytest.approx(runs[-2].terms["E"], rel=0.10)
    assert runs[-1].latency["child_timing_probe_warm_library"] < runs[-2].latency["child_timing_probe_warm_library"]
