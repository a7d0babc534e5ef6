"""Where an evaluation runs, apart from what it measures: the GPU it is pinned to, the directory of its GPU's
lanes, where its scratch directories go, and the paths of the per-device caches it reads and writes.

`api/service.EvalService` decides a Placement per slot and hands it to the engine with each evaluation
(`Placement.apply`); the result cache hashes what is left (`measured`), so that two evaluations that differ
only in where they ran share a key. The fields still exist on EvalConfig (and its SandboxConfig, lane_dir) so
that configs written before this split keep working; this type is the one list of which fields are placement:
nothing else names them (store/cache_key.py reads it)."""
from __future__ import annotations

import dataclasses
from typing import Any

# the EvalConfig fields that say where, not what (lane_dir lives on EvalConfig.sandbox)
CONFIG_FIELDS = ("gpu_index", "scratch_root", "keep_scratch", "calibration_path", "baselines_path",
                 "library_cache_path")


@dataclasses.dataclass(frozen=True)
class Placement:
    gpu_index: int = 0
    lane_dir: str | None = "auto"
    scratch_root: str | None = None
    keep_scratch: bool = False
    calibration_path: str | None = None
    baselines_path: str | None = None
    library_cache_path: str | None = None

    @classmethod
    def of(cls, config: Any) -> "Placement":
        """The placement a config carries today (its own fields)."""
        return cls(lane_dir=config.sandbox.lane_dir, **{f: getattr(config, f) for f in CONFIG_FIELDS})

    def apply(self, config: Any) -> Any:
        """`config` run here: its placement fields replaced by this placement's."""
        sandbox = dataclasses.replace(config.sandbox, lane_dir=self.lane_dir)
        return dataclasses.replace(config, sandbox=sandbox, **{f: getattr(self, f) for f in CONFIG_FIELDS})

    def replace(self, **changes) -> "Placement":
        return dataclasses.replace(self, **changes)


# the EvalConfig fields that say only when a stage's work happens around other evaluations (held_output_bytes:
# whether the child writes its outputs inside the lane or after it): the same kernel is timed and checked the
# same way under any value, so the cache key leaves them out. The throughput levers that move work across the
# lane or the checker (compile_outside_lane, precompute_reference) stay hashed until the H200 shows they do not
# change a measurement.
SCHEDULING_FIELDS = ("held_output_bytes",)


def measured(config: Any) -> Any:
    """What `config` measures: every field but placement and scheduling, which are set to their defaults. The
    cache key hashes this whole, so a new EvalConfig field is hashed unless it is declared here."""
    defaults = type(config).__dataclass_fields__
    return dataclasses.replace(Placement().apply(config),
                               **{f: defaults[f].default for f in SCHEDULING_FIELDS})
