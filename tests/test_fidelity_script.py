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
