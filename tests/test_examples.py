"""examples/: the GRPO run of examples/grpo_trl.py in a short form (2 steps, one group of 8 completions, three
actions: the fast reference solution and two hostile fixtures), through TRL's real GRPOTrainer and the
documented reward adapter. It checks the metrics file the example writes, that every hostile completion
scored 0 and every rowwise one 1.0 (cpu: correctness), and that the example's own per-step mean is the reward
TRL logged. The whole run (30 steps, every action) is the example's default (docs/training.md); on a GPU the
cuda test checks the policy moves to the fast variant and E rises."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
sys.path.insert(0, str(EXAMPLES))
import kernel_actions as ka  # noqa: E402


def test_every_action_decodes_into_a_module_the_gate_accepts():
    from kernelgym_gap.core.registry import default_registry
    from kernelgym_gap.engine.gate import check_source
    task = default_registry().get(ka.TASK)
    seen = set()
    for v in ka.VARIANTS:
        for b in ka.BLOCKS:
            for w in ka.WARPS:
                src = ka.kernel_source(v, b, w)
                assert check_source(src, task.entry_point, "triton").passed, (v, b, w)
                seen.add(src)
    assert len(seen) == 3 * 4 + 4 + 1 + len(ka.HOSTILE_VARIANTS)   # rowwise: block x warps; single: block
    assert "block = 64" in ka.kernel_source("rowwise", "block_64") and "num_warps = 16" in ka.kernel_source(
        "rowwise", warps="warps_16")
    assert ka.parse_action("warps_1 block_128 rowwise") == {"variant": "rowwise", "block": "block_128",
                                                            "warps": "warps_1"}
    assert ka.parse_action("block_64 block_64 warps_1") == {"variant": None, "block": None, "warps": None}
    assert ka.reply_for(ka.parse_action("block_64")) == ""
    assert ka.parse_action("h_zero_inputs block_64")["block"] is None     # no constants: one source
    with pytest.raises(ka.ActionSpaceError):
        ka.kernel_source("nope")


def _run(args, tmp_path, timeout):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    p = subprocess.run([sys.executable, str(EXAMPLES / "grpo_trl.py"), *args, "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p, json.loads((tmp_path / "metrics.json").read_text())


@pytest.mark.timeout(400)
def test_grpo_example_short_form_on_cpu(tmp_path):
    pytest.importorskip("trl")
    pytest.importorskip("datasets")
    p, m = _run(["--steps", "2", "--generations", "8", "--variants", "rowwise,h_zero_inputs,h_numpy_compute",
                 "--blocks", "block_pow2", "--warps", "warps_4"], tmp_path, 380)
    assert m["backend"] == "cpu" and m["steps"] == 2 and len(m["steps_metrics"]) == 2
    assert m["hostile_rewarded"] == 0
    actions: dict = {}
    for row in m["steps_metrics"]:
        assert row["completions"] == 8 and row["hostile_rewarded"] == 0
        for name, a in row["actions"].items():
            actions.setdefault(name, []).extend(a["rewards"])
    hostile = {n: r for n, r in actions.items() if n.startswith("h_")}
    assert hostile and all(x == 0.0 for r in hostile.values() for x in r), actions
    assert actions.get("rowwise block_pow2 warps_4") and all(x == 1.0 for x in actions["rowwise block_pow2 warps_4"])
    assert all(x == 0.0 for x in actions.get("(no variant)", []))        # an empty reply: that sample's failure
    # the example's per-step mean is the reward TRL itself logged for the step
    logged = [h["reward"] for h in m["trainer_log"]]
    assert logged == pytest.approx([row["mean_reward"] for row in m["steps_metrics"]])
    assert "2 steps in" in p.stdout
    png = tmp_path / "curves.png"
    assert png.is_file() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" or "matplotlib is not installed" in p.stdout


@pytest.mark.gpu
@pytest.mark.timeout(900)
def test_grpo_example_on_cuda_moves_to_fast_variants(tmp_path):
    """On a GPU the reward sees speed: over 30 steps the rowwise variant's share and the mean E of the
    correct completions rise, and no hostile completion is ever rewarded."""
    pytest.importorskip("trl")
    import torch
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    _, m = _run(["--backend", "cuda", "--steps", "30"], tmp_path, 880)
    rows = m["steps_metrics"]
    assert m["hostile_rewarded"] == 0
    first, last = rows[:5], rows[-5:]

    def mean(rs, k):
        vals = [r[k] for r in rs if r[k] is not None]
        return sum(vals) / len(vals) if vals else 0.0
    assert mean(last, "mean_reward") > mean(first, "mean_reward")
    assert mean(last, "rowwise_share") > mean(first, "rowwise_share")
    assert mean(last, "mean_E") > mean(first, "mean_E")


def test_examples_stay_out_of_the_package():
    """examples/ is a folder of scripts beside the package: the package list setup.py gives setuptools (an
    explicit include, plus the built-in tasks and agents mapped under kernelgym_gap) must not pick it up, or a
    wheel would ship a top-level `examples` package (and setuptools' automatic discovery would refuse a flat
    layout with two top-level folders)."""
    import os
    import runpy
    from unittest import mock
    seen = {}
    cwd = os.getcwd()
    try:
        os.chdir(ROOT)           # setup.py finds packages relative to the working directory
        with mock.patch("setuptools.setup", lambda **kw: seen.update(kw)):
            runpy.run_path(str(ROOT / "setup.py"), run_name="__main__")
    finally:
        os.chdir(cwd)
    found = seen["packages"]
    assert found and all(p.split(".")[0] == "kernelgym_gap" for p in found), found
    assert "kernelgym_gap.builtin_tasks" in found and not any(p.startswith("examples") for p in found)
    assert not (EXAMPLES / "__init__.py").exists()
