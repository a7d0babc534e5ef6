"""A policy's action space over real kernels: each action token picks a kernel variant or a tunable constant,
and a completion (a few action tokens) decodes into a complete Triton module for the LayerNorm task.

Variants (one token each):
  rowwise          tasks/normalization/layernorm/solutions/triton_rowwise.py: one program per row (fast)
  single_program   .../triton_single_program.py: one program walks every row (correct, slow on a GPU)
  scalar_loop      .../triton_scalar_loop.py: scalar loops over each row (correct, ~0.01x torch on a GPU)
  h_<name>         a hostile submission from tests/fixtures/hostile/<name>.py (mutates its inputs, computes
                   with numpy, hard-codes shapes, ...): the environment must never reward them
Constants (rowwise and single_program; the others have none):
  block_64, block_128          BLOCK fixed at 64 / 128 columns: wrong for rows wider than that (a mismatch)
  block_pow2, block_2pow2      BLOCK = next_power_of_2(N) (the solution's own), or twice that (masked waste)
  warps_1, warps_4, warps_16   num_warps of the rowwise launch (matters on a GPU only)

Decoding is order-free: the completion's first variant token picks the variant, its first block and warps
tokens the constants (absent: block_pow2, warps_4). A completion without a variant token decodes to an
empty reply, which the reward scores as that sample's failure. The sources are the files themselves,
with the constants substituted where the file computes them: if a file changes so that the substitution no
longer applies, `kernel_source` raises instead of silently sending the unmodified kernel.
"""
from __future__ import annotations

import functools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "tasks" / "normalization" / "layernorm" / "solutions"
HOSTILE = ROOT / "tests" / "fixtures" / "hostile"
TASK = "LayerNorm"

REFERENCE_VARIANTS = {"rowwise": "triton_rowwise.py", "single_program": "triton_single_program.py",
                      "scalar_loop": "triton_scalar_loop.py"}
# Hostile fixtures that fail fast on the cpu backend too (no timeouts, fork bombs or memory hogs, which
# would only make the example slow). known_hole_probe_evasion_local_kernel.py is left out on purpose: it
# is the one fixture documented as passing (docs/security.md, "known holes").
HOSTILE_VARIANTS = {"h_zero_inputs": "zero_inputs.py", "h_numpy_compute": "numpy_compute.py",
                    "h_hardcoded_shapes": "hardcoded_shapes.py", "h_lower_precision": "lower_precision.py"}
VARIANTS = {**REFERENCE_VARIANTS, **HOSTILE_VARIANTS}
BLOCKS = {"block_64": "64", "block_128": "128", "block_pow2": "triton.next_power_of_2(n)",
          "block_2pow2": "2 * triton.next_power_of_2(n)"}
WARPS = {"warps_1": "1", "warps_4": "4", "warps_16": "16"}
DEFAULT_BLOCK, DEFAULT_WARPS = "block_pow2", "warps_4"
ALL_TOKENS = (*VARIANTS, *BLOCKS, *WARPS)


class ActionSpaceError(ValueError):
    """An action the space does not have, or a solution file the substitution no longer fits."""


def is_hostile(variant: str | None) -> bool:
    return bool(variant) and variant in HOSTILE_VARIANTS


@functools.lru_cache(maxsize=None)
def _file(variant: str) -> str:
    if variant in REFERENCE_VARIANTS:
        return (SOLUTIONS / REFERENCE_VARIANTS[variant]).read_text()
    if variant in HOSTILE_VARIANTS:
        return (HOSTILE / HOSTILE_VARIANTS[variant]).read_text()
    raise ActionSpaceError(f"unknown variant {variant!r}; expected one of {sorted(VARIANTS)}")


def _sub(text: str, pattern: str, repl: str, what: str) -> str:
    out, n = re.subn(pattern, repl, text, count=1)
    if n != 1:
        raise ActionSpaceError(f"the {what} substitution no longer fits its solution file; update kernel_actions.py")
    return out


def kernel_source(variant: str, block: str = DEFAULT_BLOCK, warps: str = DEFAULT_WARPS) -> str:
    """The Triton module an action (variant, block, warps) stands for."""
    text = _file(variant)
    if block not in BLOCKS or warps not in WARPS:
        raise ActionSpaceError(f"unknown constant {block!r} / {warps!r}; expected {sorted(BLOCKS)} / {sorted(WARPS)}")
    if variant == "rowwise":
        text = _sub(text, r"block = triton\.next_power_of_2\(n\)", f"block = {BLOCKS[block]}", "block")
        text = _sub(text, r"num_warps = min\(max\(block // 256, 1\), 16\)", f"num_warps = {WARPS[warps]}", "warps")
    elif variant == "single_program":
        text = _sub(text, r"BLOCK=triton\.next_power_of_2\(n\)", f"BLOCK={BLOCKS[block]}", "block")
    return text


def parse_action(completion: str, tokens=ALL_TOKENS) -> dict:
    """The action a completion's tokens name: {"variant", "block", "warps"} (variant None: no variant token)."""
    words = [w for w in str(completion or "").split() if w in tokens]
    variant = next((w for w in words if w in VARIANTS), None)
    block = next((w for w in words if w in BLOCKS), DEFAULT_BLOCK)
    warps = next((w for w in words if w in WARPS), DEFAULT_WARPS)
    if variant not in ("rowwise", "single_program"):
        block = warps = None            # the variant has no such constant: the tokens change nothing
    elif variant == "single_program":
        warps = None
    return {"variant": variant, "block": block, "warps": warps}


def action_name(action: dict) -> str:
    if action["variant"] is None:
        return "(no variant)"
    return " ".join(x for x in (action["variant"], action["block"], action["warps"]) if x)


def reply_for(action: dict) -> str:
    """The reply an agent would send for the action: the module in a fenced block (empty: no variant)."""
    if action["variant"] is None:
        return ""
    source = kernel_source(action["variant"], action["block"] or DEFAULT_BLOCK, action["warps"] or DEFAULT_WARPS)
    return f"```python\n{source}```\n"
