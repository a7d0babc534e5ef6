"""The library a user would pick instead of writing a kernel, besides torch eager: `torch.compile` of the
task's reference. Measured in a trusted process (never in the submission's child), once per device,
software, task version, shape, dtype and timed distribution, and cached on disk like the calibration;
the parent reads it to report E_compile = t_compile / t_kernel beside E (which stays eager by default:
RewardConfig.baseline).

`python -m kernelgym_gap.judge.baselines SPEC.json OUT.json` is the measuring process: for each case it
makes the timed inputs, compiles the reference (`torch.compile`, default mode, dynamic=False: one graph
per shape, as a user serving fixed shapes would), and times the compiled and the eager reference with
the harness's own summariser (device/bench.Bench: CUDA events, L2 flush, interleaved repetitions).
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from kernelgym_gap.core.config import EvalConfig
from kernelgym_gap.core.errors import HarnessError
from kernelgym_gap.core.lane import held
from kernelgym_gap.core.placement import Placement
from kernelgym_gap.judge.calibrate import cache_dir, update_cache

COMPILE_TIMEOUT_S = 600.0


def default_cache_path() -> Path:
    return cache_dir() / "baselines.json"


def case_key(device_key: str, task_id: str, shape, dtype: str, distribution: str) -> str:
    return "|".join([device_key, task_id, "x".join(str(int(s)) for s in shape), dtype, distribution])


def _load(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _save(path: Path, entries: dict) -> None:
    update_cache(path, lambda data: data.update(entries), read=_load)


def _complete(entry: dict | None, task) -> bool:
    """A cached case holds every baseline the task declares now (an alternative added since is missing)."""
    return entry is not None and set(task.alternatives) <= set(entry.get("alternatives_ms") or {})


def compile_times(task, cases: list[tuple], device_key: str, config: EvalConfig,
                  placement: Placement | None = None) -> dict[tuple, dict]:
    """{(shape, dtype): {"compile_ms", "eager_ms", "alternatives_ms", ...}} for the timed `cases` [(shape,
    dtype), ...]; missing ones are measured now when config.compile_baseline == "measure". Empty when the
    mode is "off" or the task declares neither torch.compile nor an alternative. compile_ms is None for a
    task without torch.compile, an alternative's time None where it raised. `placement`: the cache's path and
    the GPU (and its lanes) a measurement runs on (default Placement())."""
    placement = placement or Placement()
    if config.compile_baseline == "off" or ("torch.compile" not in task.baselines and not task.alternatives):
        return {}
    path = Path(placement.baselines_path) if placement.baselines_path else default_cache_path()
    cached = _load(path)
    keys = {(tuple(s), d): case_key(device_key, task.id, s, d, task.timed_distribution) for s, d in cases}
    missing = [c for c, k in keys.items() if not _complete(cached.get(k), task)]
    if missing and config.compile_baseline == "measure":
        fresh = _measure(task, missing, placement)
        _save(path, {keys[c]: v for c, v in fresh.items()})
        cached.update({keys[c]: v for c, v in fresh.items()})
    return {c: cached[k] for c, k in keys.items() if _complete(cached.get(k), task)}


def _measure(task, cases: list[tuple], placement: Placement) -> dict[tuple, dict]:
    from kernelgym_gap.sandbox.child_io import backend_env
    from kernelgym_gap.sandbox.process import child_env
    spec = {"task": task.id, "tasks_dir": task.tasks_dir,
            "cases": [{"shape": list(s), "dtype": d} for s, d in cases]}
    with tempfile.TemporaryDirectory(prefix="kgg-baseline-", dir=placement.scratch_root) as d:
        spec_path, out = Path(d) / "spec.json", Path(d) / "out.json"
        spec_path.write_text(json.dumps(spec))
        env = child_env(Path(d), backend_env("cuda") | {"CUDA_VISIBLE_DEVICES": str(placement.gpu_index)})
        try:   # the GPU's lane exclusive: a measurement never shares the GPU (core/lane.py)
            with held(placement.lane_dir, placement.gpu_index, "exclusive"):
                proc = subprocess.run([sys.executable, "-m", "kernelgym_gap.judge.baselines", str(spec_path),
                                       str(out)], env=env, cwd=d, capture_output=True, timeout=COMPILE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise HarnessError(f"the torch.compile baseline of {task.id} ran past {COMPILE_TIMEOUT_S:.0f} s") from None
        if proc.returncode != 0 or not out.is_file():
            raise HarnessError(f"the torch.compile baseline of {task.id} failed: "
                               + proc.stderr.decode(errors="replace")[-1500:])
        rows = json.loads(out.read_text())["cases"]
    return {(tuple(r["shape"]), r["dtype"]): {k: r.get(k) for k in ("compile_ms", "eager_ms", "compile_spread",
                                                                     "compile_s", "alternatives_ms",
                                                                     "alternative_errors")} for r in rows}


# ------------------------------------------------------------------------------------- the measuring process

def _run(spec_path: str, out_path: str) -> int:
    import time

    import torch
    from kernelgym_gap.device.bench import Bench
    from kernelgym_gap.core import inputs
    from kernelgym_gap.core.config import TimingConfig
    from kernelgym_gap.core.record import Trial
    from kernelgym_gap.core.registry import find_task
    spec = json.loads(Path(spec_path).read_text())
    task = find_task(spec["task"], spec.get("tasks_dir"))
    bench = Bench(TimingConfig(n_input_sets=1))
    rows = []
    for k, case in enumerate(spec["cases"]):
        trial = Trial(index=k, shape=tuple(case["shape"]), dtype=case["dtype"], seed=1000 + k,
                      distribution=task.timed_distribution, split="public")
        ins = inputs.make_trial_inputs(task, trial, "cuda")
        row = dict(case, compile_ms=None, compile_spread=None, compile_s=None, alternatives_ms={},
                   alternative_errors={})
        with torch.no_grad():
            if "torch.compile" in task.baselines:
                torch._dynamo.reset()
                compiled = torch.compile(task.reference, dynamic=False)
                t0 = time.perf_counter()
                compiled(*ins)
                torch.cuda.synchronize()
                row["compile_s"] = time.perf_counter() - t0
                comp, eager = bench.measure_interleaved([lambda i: compiled(*ins), lambda i: task.reference(*ins)])
                row.update(compile_ms=comp.median_ms, compile_spread=comp.spread, eager_ms=eager.median_ms)
            for name, fn in task.alternatives.items():
                try:        # its first call compiles (FlexAttention) or finds the op missing: not timed
                    fn(*ins)
                    torch.cuda.synchronize()
                    alt, eager = bench.measure_interleaved([lambda i, fn=fn: fn(*ins), lambda i: task.reference(*ins)])
                    row["alternatives_ms"][name] = alt.median_ms
                    row.setdefault("eager_ms", eager.median_ms)
                except Exception as e:  # noqa: BLE001 - a library that cannot run here is a missing baseline
                    row["alternatives_ms"][name] = None
                    row["alternative_errors"][name] = f"{type(e).__name__}: {str(e)[:300]}"
        rows.append(row)
        del ins
        torch.cuda.empty_cache()
    Path(out_path).write_text(json.dumps({"cases": rows, "torch": torch.__version__}))
    return 0


if __name__ == "__main__":
    sys.exit(_run(sys.argv[1], sys.argv[2]))
