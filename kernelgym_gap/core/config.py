"""Evaluation settings: one frozen value passed explicitly (no global configuration)."""
from __future__ import annotations

import dataclasses

from kernelgym_gap.core.record import TimingConfig
from kernelgym_gap.judge.reward import RewardConfig
from kernelgym_gap.sandbox.process import SandboxConfig


@dataclasses.dataclass(frozen=True)
class EvalConfig:
    seeds_per_shape: int = 2             # trials per (shape, dtype), each with its own seed and distribution
    trial_seed: int | None = None        # None: fresh random seeds every evaluation (hard to cache against)
    max_source_bytes: int = 256 * 1024
    max_child_output_bytes: int = 16 << 20   # a child printing more than this fails (output_too_large)
    sandbox: SandboxConfig = SandboxConfig()
    timing: TimingConfig = TimingConfig()
    reward: RewardConfig = RewardConfig()
    floor_tolerance: float = 0.9         # a kernel measured under this fraction of its floor is a failure
    scratch_root: str | None = None      # where per-evaluation scratch directories go (system temp by default)
    keep_scratch: bool = False           # keep them for debugging
    gpu_index: int = 0                   # which GPU the child is pinned to on the cuda backend
    calibration_path: str | None = None  # device ceilings cache (cuda); default under ~/.cache/kernelgym_gap

    def replace(self, **changes) -> "EvalConfig":
        return dataclasses.replace(self, **changes)
