"""scripts/fidelity.py without a GPU: a run split over device calls resumes from the earlier JSON (what it
settled is not evaluated again; what its deadline left out is)."""
import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _script():
    spec = importlib.util.spec_from_file_location("fidelity", ROOT / "scripts" / "fidelity.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_an_earlier_run_settles_its_measured_and_skipped_kernels_not_its_deadline(tmp_path):
    from kernelgym_gap.core.registry import default_registry
    softmax = default_registry().get("Softmax")
    sol = next(s for s in softmax.solutions if s.dsl == "triton" and s.kind == "optimized")
    row = {"task": softmax.id, "kernel": Path(sol.file).stem, "dsl": sol.dsl, "shape": [8192, 4096],
           "dtype": "float16", "ratio": 1.01}
    earlier = tmp_path / "fidelity_h200_part1.json"
    earlier.write_text(json.dumps({"rows": [row], "skipped": [
        "GELU/triton_scalar.py: 120.0 ms per call, over --cap-ms",
        "LayerNorm/triton_two_pass.py: status mismatch",
        "RowSum/triton_loop.py: the independent process failed: exit 1: x",
        "Conv2d/triton_direct.py: deadline"]}))
    rows, skipped, settled = _script().earlier_run(earlier)
    assert rows == [row]
    assert f"Softmax/{sol.file}" in settled
    assert {"GELU/triton_scalar.py", "LayerNorm/triton_two_pass.py", "RowSum/triton_loop.py"} <= settled
    assert "Conv2d/triton_direct.py" not in settled and len(skipped) == 3


class _Pool:
    made: list = []

    def __init__(self):
        self.closed = False
        _Pool.made.append(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.closed = True


def test_jobs_run_every_item_once_each_worker_with_its_own_pool_closed_at_the_end():
    import threading
    _Pool.made = []
    seen, lock = [], threading.Lock()

    def work(item, pool):
        with lock:
            seen.append((item, id(pool), threading.current_thread().name))

    _script().run_jobs(list(range(9)), 3, _Pool, work)
    assert sorted(i for i, _, _ in seen) == list(range(9))
    assert len(_Pool.made) == 3 and all(p.closed for p in _Pool.made)
    # a pool serves one thread only
    by_pool = {}
    for _, pid, name in seen:
        by_pool.setdefault(pid, set()).add(name)
    assert all(len(names) == 1 for names in by_pool.values())


def test_jobs_stop_at_the_first_error_and_raise_it():
    import pytest
    _Pool.made = []
    done = []

    def work(item, pool):
        if item == 0:
            raise RuntimeError("boom")
        done.append(item)

    with pytest.raises(RuntimeError, match="boom"):
        _script().run_jobs(list(range(50)), 1, _Pool, work)
    assert done == [] and all(p.closed for p in _Pool.made)


def test_the_independent_process_is_told_the_environments_lane(monkeypatch):
    """Its do_bench runs hold the lane the environment's timings hold (so --jobs never lets a measurement share
    the GPU): the spec it reads names the resolved lane directory."""
    import subprocess
    from kernelgym_gap.core.placement import Placement
    from kernelgym_gap.core.lane import resolve
    from kernelgym_gap.core.registry import default_registry
    mod = _script()
    task = default_registry().get("Softmax")
    sol = next(s for s in task.solutions if s.kind == "optimized")
    seen = {}

    def fake_run(cmd, **kw):
        seen.update(json.loads(Path(cmd[3]).read_text()))
        Path(cmd[4]).write_text(json.dumps({"results": []}))
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(mod.subprocess, "run", fake_run)
    assert mod.measure_independently(task, sol, [], 10, lane_dir=Placement().lane_dir) == []
    assert seen["lane_dir"] == resolve("auto") and seen["task"] == task.id


def test_main_with_jobs_evaluates_each_kernel_once_and_writes_rows_in_batch_order(monkeypatch, tmp_path):
    """The run's loop without a GPU: the warm pool, the evaluation and the independent process replaced by
    fakes; two workers; every chosen kernel evaluated once, the rows compared and written."""
    import threading
    mod = _script()
    import gap_study
    import kernelgym_gap.api.warm as warm
    calls, lock = [], threading.Lock()

    class FakePool:
        checker = children = None

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

        def close(self):        # the one-slot service stops its pool when it closes
            closed.append(self)

    closed = []

    def fake_evaluate(task, sol, backend, cfg, checker=None, children=None):
        with lock:
            calls.append(f"{task.name}/{sol.file}")
        return {"task": task.id, "kernel": Path(sol.file).stem, "dsl": sol.dsl, "status": "ok", "E": 2.0,
                "seconds": 0.1, "per_shape": [{"shape": [8, 8], "dtype": "float16", "kernel_ms": 0.05,
                                               "library_ms": 0.1}],
                "device": {"name": "NVIDIA H200"}, "versions": {"torch": "x"}}

    monkeypatch.setattr(warm, "WarmPool", lambda **kw: FakePool())
    monkeypatch.setattr(gap_study, "evaluate_one", fake_evaluate)
    monkeypatch.setattr(mod, "timing_cases", lambda study, config: [])
    monkeypatch.setattr(mod, "measure_independently", lambda *a, **kw: [
        {"shape": [8, 8], "dtype": "float16", "distribution": "normal", "kernel_ms": 0.05, "library_ms": 0.1}])
    assert mod.main(["--only", "normalization", "--kinds", "optimized", "--jobs", "2", "--out", str(tmp_path)]) == 0
    out = json.loads(next(tmp_path.glob("fidelity_h200_*.json")).read_text())
    assert len(calls) == len(set(calls)) == len(out["rows"]) >= 7
    assert all(r["ratio"] == 1.0 and r["in_goal"] for r in out["rows"]) and out["skipped"] == []
    assert 1 <= len(closed) <= 2     # a one-slot service per worker (its pool made on first use), each stopped
