"""The cuda backend on a real GPU (skipped on a CPU machine; scripts/gpu_check.py --sections tests runs
these on the device). Few evaluations: each takes ~10 s there."""
import pytest

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cal_path(tmp_path_factory):
    return str(tmp_path_factory.mktemp("cal") / "calibration.json")


@pytest.fixture(scope="module")
def cuda_config():
    from kernelgym_gap.core.config import EvalConfig
    return EvalConfig(trial_seed=7)


@pytest.fixture(scope="module")
def cuda_where(cal_path, tmp_path_factory):
    """Where these evaluations run: GPU 0, their calibration and library caches in temporary files."""
    from kernelgym_gap.core.placement import Placement
    return Placement(calibration_path=cal_path,
                     library_cache_path=str(tmp_path_factory.mktemp("lib") / "library_times.json"))


def test_calibration_measures_and_caches_per_device(cal_path):
    from kernelgym_gap.judge.calibrate import calibrate, device_identity, device_key, load_cached
    from pathlib import Path
    cal = calibrate(0, Path(cal_path), force=True)
    assert cal.source == "measured"
    assert 0.5e12 < cal.copy_bytes_per_s < 20e12
    for dtype in ("float32", "tf32", "float16", "bfloat16"):
        assert cal.matmul_flops_per_s[dtype] > 1e12
    assert cal.matmul_flops_per_s["float16"] > cal.matmul_flops_per_s["tf32"] > cal.matmul_flops_per_s["float32"]
    device, versions = device_identity()
    assert load_cached(device_key(device, versions), Path(cal_path)) == cal


def test_l2_flush_buffer_is_at_least_twice_l2():
    import torch
    from kernelgym_gap.core.record import TimingConfig
    from kernelgym_gap.child.timing import Bench
    bench = Bench(TimingConfig())
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    assert bench.flush.numel() >= 2 * l2


def _eval(registry, file, config, mode="full", where=None):
    from kernelgym_gap.engine.pipeline import evaluate
    from kernelgym_gap.judge.reward import RewardConfig
    task = registry.get("LayerNorm")
    sol = next(s for s in task.solutions if s.file == file)
    return evaluate(task, task.solution_path(sol).read_text(), sol.dsl, "cuda",
                    config.replace(reward=RewardConfig(mode=mode)), placement=where)


def test_optimized_layernorm_is_measured_and_efficient(registry, cuda_config, cuda_where):
    from kernelgym_gap.judge.measure import MAX_SPREAD
    r = _eval(registry, "triton_rowwise.py", cuda_config, where=cuda_where)
    assert r.status.value == "ok", r.message
    t = r.terms
    for p in t["per_shape"]:       # shown with -s (scripts/gpu_check.py quotes it)
        print(f"{p['shape']} {p['dtype']}: kernel {p['kernel_ms']:.4f} ms spread {p['kernel_spread']:.3f} "
              f"reps {p['kernel_reps']}; torch {p['library_ms']:.4f} ms; E {p['E']:.2f} U {p['U']:.2f}")
    assert t["E"] > 0.5 and 0.1 < t["U"] <= 1.0 / 0.9
    for p in t["per_shape"]:
        assert p["kernel_ms"] > 0 and p["library_ms"] > 0 and p["floor_ms"] > 0 and p["kernel_reps"] >= 10
        assert p["kernel_spread"] >= 0
        # kernels of 40 us and more settle (H200, 2026-12-03: spreads 1.6-2.5% alone, 6% beside other work);
        # those of 9-25 us were bimodal in some evaluations (spreads 18-47%): reported and flagged, not hidden
        if p["kernel_ms"] >= 0.04:
            assert p["kernel_spread"] < 0.1, p
        if p["kernel_spread"] > MAX_SPREAD:
            assert any(f.startswith(f"unstable timing at {p['shape']}") for f in t["flags"]), t["flags"]
    assert 0.2 < r.reward <= 1.0
    assert r.diagnosis["verdict"] == "efficient"
    assert r.device.get("name")


def test_an_honest_kernel_runs_through_tight_call_deadlines(registry, cuda_config, cuda_where):
    """Issue 15's call deadlines on cuda (sandbox/deadlines.py): every later correctness call bounded at 2 s,
    each timed shape at its repetitions' worth of 2 s calls (one call mark per shape, not per repetition)."""
    from kernelgym_gap.core.config import SandboxConfig
    r = _eval(registry, "triton_rowwise.py", cuda_config.replace(sandbox=SandboxConfig(call_unknown_s=2.0)), where=cuda_where)
    assert r.status.value == "ok", r.message


def test_slow_layernorm_is_seen_and_diagnosed(registry, cuda_config, cuda_where):
    fast = _eval(registry, "triton_rowwise.py", cuda_config, where=cuda_where)
    slow = _eval(registry, "triton_scalar_loop.py", cuda_config, where=cuda_where)
    gate = _eval(registry, "triton_scalar_loop.py", cuda_config, mode="correctness", where=cuda_where)
    assert slow.status.value == "ok" and gate.status.value == "ok"
    assert gate.reward == 1.0                      # correctness alone cannot see it
    assert slow.reward < fast.reward
    assert slow.terms["E"] < 0.1
    assert slow.diagnosis["verdict"] == "repairable_defect"


def _fresh_cache(cuda_where, tmp_path):
    return cuda_where.replace(library_cache_path=str(tmp_path / "library_times.json"))


def test_library_time_cached_on_the_next_evaluation(registry, cuda_config, tmp_path, cuda_where):
    """The first evaluation measures the library in full and caches it; the next one checks the cached time
    with a few repetitions and, where the check agrees, reports the hint (library_source "cached")."""
    from kernelgym_gap.judge import library_cache
    config, where = cuda_config, _fresh_cache(cuda_where, tmp_path)
    first = _eval(registry, "triton_rowwise.py", config, where=where)
    assert first.status.value == "ok", first.message
    assert {p["library_source"] for p in first.terms["per_shape"]} == {"measured"}
    assert all(p["library_hint_ms"] is None and p["library_check_ms"] > 0 for p in first.terms["per_shape"])
    second = _eval(registry, "triton_rowwise.py", config, where=where)
    assert second.status.value == "ok", second.message
    tol = config.timing.library_tolerance
    for p in second.terms["per_shape"]:
        print(f"{p['shape']} {p['dtype']}: {p['library_source']} hint {p['library_hint_ms']:.4f} "
              f"check {p['library_check_ms']:.4f} library {p['library_ms']:.4f} E {p['E']:.2f}")
        assert p["library_hint_ms"] > 0
        if p["library_source"] == "cached":
            assert p["library_ms"] == p["library_hint_ms"]
            assert abs(p["library_check_ms"] - p["library_hint_ms"]) <= tol * p["library_hint_ms"]
    cached = [p for p in second.terms["per_shape"] if p["library_source"] == "cached"]
    assert len(cached) >= len(second.terms["per_shape"]) // 2      # short kernels may drift past 10%
    assert second.terms["E"] == pytest.approx(first.terms["E"], rel=0.25)
    data = library_cache.load(library_cache.cache_path(where))
    assert len(data["devices"]) == 1 and data["times"]


def test_library_time_cached_but_drifted_is_measured_again(registry, cuda_config, tmp_path, cuda_where):
    """A cached time 3x off (a poisoned or stale cache): the check disagrees, the library is timed in full,
    the record carries the fresh time, and the fresh time joins the cache."""
    import json
    from kernelgym_gap.judge import library_cache
    config, where = cuda_config, _fresh_cache(cuda_where, tmp_path)
    assert _eval(registry, "triton_rowwise.py", config, where=where).status.value == "ok"
    path = library_cache.cache_path(where)
    data = json.loads(path.read_text())
    data["times"] = {k: [v[-1] * 3] for k, v in data["times"].items()}
    path.write_text(json.dumps(data))
    r = _eval(registry, "triton_rowwise.py", config, where=where)
    assert r.status.value == "ok", r.message
    for p in r.terms["per_shape"]:
        assert p["library_source"] == "measured", p
        assert p["library_ms"] < 0.6 * p["library_hint_ms"]
    assert all(len(v) == 2 for v in json.loads(path.read_text())["times"].values())


def test_hopeless_kernel_exits_early(registry, cuda_config, tmp_path, cuda_where):
    """LayerNorm with one program (~150x slower than torch at 8192x4096 fp16 on the H200): its timing stops
    after its first calls, it stays ok with E from those calls, and the feedback says why."""
    config, where = cuda_config, _fresh_cache(cuda_where, tmp_path)
    r = _eval(registry, "triton_single_program.py", config, where=where)
    assert r.status.value == "ok", r.message
    for p in r.terms["per_shape"]:
        print(f"{p['shape']} {p['dtype']}: kernel {p['kernel_ms']:.3f} ms reps {p['kernel_reps']} "
              f"library {p['library_ms']:.4f} early_exit {p['early_exit']}")
    big = next(p for p in r.terms["per_shape"] if p["shape"] == [8192, 4096])
    assert big["early_exit"] and big["kernel_reps"] < config.timing.min_reps and big["E"] < 0.02
    assert "timing stopped early" in r.message and ">50x slower than the library" in r.message
    print("child timing phase:", r.latency.get("child_timing"))
    assert r.latency["child_timing"] < 60          # all 8 shapes; without the early exit each took its budget


def test_lanes_share_one_gpu_and_time_alone(registry, cuda_config, cuda_where):
    """per_gpu=4 on GPU 0: four evaluations at once, each child's timing held exclusive (its wait recorded),
    the trials and the check shared; none gave up waiting."""
    from kernelgym_gap.api.batch import EvalRequest, evaluate_many
    from kernelgym_gap.core.status import Status
    task = registry.get("AddReLU")
    source = task.solution_path(task.solutions[0]).read_text()
    reqs = [EvalRequest("AddReLU", source + f"\n# copy {i}\n", backend="cuda") for i in range(4)]
    recs = evaluate_many(reqs, gpus=[0], per_gpu=4, config=cuda_config, placement=cuda_where)
    for rec in recs:
        assert rec.status is Status.OK, rec.message
        for key in ("child_lane_wait_shared", "child_lane_wait_exclusive", "check_lane_wait"):
            assert key in rec.latency, (key, rec.latency)
        assert not any(k.startswith("child_lane_timeout") for k in rec.latency), rec.latency
        # where the exclusive stretch went: its parts add up to (nearly all of) it
        parts = sum(v for k, v in rec.latency.items() if k.startswith("child_timing_"))
        assert 0.9 * rec.latency["child_timing"] <= parts <= rec.latency["child_timing"] + 1e-6, rec.latency
        # the checker's own account (judge/checker._Parts) fits inside the check less its lane wait
        check_parts = sum(rec.latency.get(f"check_{k}", 0.0)
                          for k in ("inputs", "reference", "read", "compare", "allclose", "other"))
        assert "check_reference" in rec.latency, rec.latency
        assert check_parts <= rec.latency["check"] - rec.latency["check_lane_wait"] + 1e-6, rec.latency
    # at least one waited for another's timing
    assert sum(r.latency["child_lane_wait_exclusive"] > 0.05 for r in recs) >= 1


def test_lanes_with_compiles_outside_the_lane(registry, cuda_config, cuda_where):
    """compile_outside_lane: four evaluations at once, each child's first calls compiled with the shared lane
    let go (its compile time and the waits to take it back recorded), none gave up waiting, all ok; the
    JITFunction._do_compile this triton has is the one the adapter wraps."""
    from kernelgym_gap.api.batch import EvalRequest, evaluate_many
    from kernelgym_gap.core.status import Status
    task = registry.get("AddReLU")
    source = task.solution_path(task.solutions[0]).read_text()
    config = cuda_config.replace(compile_outside_lane=True)
    reqs = [EvalRequest("AddReLU", source + f"\n# copy {i}\n", backend="cuda") for i in range(4)]
    recs = evaluate_many(reqs, gpus=[0], per_gpu=4, config=config, placement=cuda_where)
    for rec in recs:
        assert rec.status is Status.OK, rec.message
        assert rec.latency.get("child_compile_unlaned", 0) > 0, rec.latency
        assert "child_lane_wait_after_compile" in rec.latency
        assert not any(k.startswith("child_lane_timeout") for k in rec.latency), rec.latency


def test_outputs_held_on_the_device_reach_the_checker_the_same(registry, cuda_config, cuda_where):
    """Placement.held_device_bytes (issue 35): the correctness outputs kept as device copies until the next
    checkpoint give the same verdicts as host copies: the optimized LayerNorm ok (its E close to the host
    copies' run), the bias-less fixture a mismatch; the host copies leave the shared lane (child_correctness_save
    falls)."""
    from pathlib import Path
    from kernelgym_gap.engine.pipeline import evaluate
    device = cuda_where.replace(held_device_bytes=1 << 30)
    host = _eval(registry, "triton_rowwise.py", cuda_config, where=cuda_where)
    held = _eval(registry, "triton_rowwise.py", cuda_config, where=device)
    assert host.status.value == held.status.value == "ok", held.message
    assert abs(held.terms["E"] / host.terms["E"] - 1) < 0.1
    print(f"correctness_save: host copies {host.latency.get('child_correctness_save', 0):.3f} s, device copies "
          f"{held.latency.get('child_correctness_save', 0):.3f} s")
    assert held.latency.get("child_correctness_save", 0) < host.latency.get("child_correctness_save", 0)
    wrong = (Path(__file__).parent / "fixtures" / "failures" / "mismatch.py").read_text()
    r = evaluate(registry.get("LayerNorm"), wrong, "triton", "cuda", cuda_config, placement=device)
    assert r.status.value == "mismatch", r.message
