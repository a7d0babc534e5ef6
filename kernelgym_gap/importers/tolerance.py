"""An imported task's tolerance (issue 36): the rule written into META and the TaskSpec fields read from it.
The import audit that goes with it is importers/soundness.py.

The tolerance: per dtype, atol = k x the root-mean-square of each trial's own float64 reference output
(Tolerance.atol_per_rms, applied by the checker per trial, so at every shape's own output scale) and rtol as
before. k is the importer's old table: for problems without counted matmul/conv flops a few roundings of
the output (1e-4 float32, 1e-2 float16, 3e-2 bfloat16); with them a dot product's error (float32 may use TF32
on cuda: inputs rounded to 10 bits, ~2^-11 of the output's rms, 8 sigma ~4e-3). One absolute number sized at
the largest cuda shape and applied at the cpu shape let a constant pass before: KernelBench level2
56_Matmul_Sigmoid_Sum had atol 92 against outputs of ~64, and a kernel writing `hidden_size / 2` scored ok.
Beside it: the input guard (TaskSpec.input_guard: no constant output passes any trial, at any shape) and
KernelBench's own allclose as part of the verdict on the problem's own dtype and inputs."""
from __future__ import annotations

from kernelgym_gap.core.task import Tolerance

# (atol per unit of output rms, rtol) per dtype
RULE_POINTWISE = {"float32": (1e-4, 1e-4), "float16": (1e-2, 1e-2), "bfloat16": (3e-2, 3e-2)}
RULE_DOT = {"float32": (4e-3, 4e-3), "float16": (1e-3, 2e-3), "bfloat16": (8e-3, 1.6e-2)}
INPUT_GUARD = 2.0       # every constant output misses by twice the (narrowed) allowance


def rule(dtypes, dot: bool, widened: dict[str, float] | None = None) -> dict[str, list[float]]:
    """META["tolerances"]: dtype -> [atol, rtol, atol_per_rms] (atol 0: the output's own scale sets it).
    `widened`: dtype -> atol_per_rms derived from the problem's own measured error where that is larger than
    the table's (a deep network: importers/conditioning.py)."""
    table = RULE_DOT if dot else RULE_POINTWISE
    widened = widened or {}
    return {d: [0.0, table[d][1], max(table[d][0], float(widened.get(d, 0.0)))] for d in dtypes}


def task_fields(meta: dict) -> dict:
    """The TaskSpec fields an imported task's META sets here: tolerances, the KernelBench check, the guard."""
    return {"tolerances": {d: Tolerance(float(v[0]), float(v[1]), atol_per_rms=float(v[2]) if len(v) > 2 else 0.0)
                           for d, v in meta["tolerances"].items()},
            "kernelbench_check": tuple(meta.get("kernelbench_check", ())),
            "input_guard": float(meta.get("input_guard", 0.0))}
