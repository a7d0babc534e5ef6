"""The shares the lever transforms use (levers.COMPILE_SHARE, REFERENCE_SHARE, MEASURE_SHARE,
GRAPH_INTERVAL_MEASURE_FACTOR, RECHECK_SHARE), computed from one call's records of scripts/throughput.py that
carry the stages' parts (2026-12-06 on); tests/test_simulate_throughput.py checks that the first four constants
are what the committed records give.

A module of its own, apart from the transforms that use the shares (levers.py), since it reads records rather
than changing jobs; levers re-exports its names (levers.refit, levers.Refit, levers.RefitError), which its
callers use."""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Refit:
    """The shares the lever transforms use, computed from records of scripts/throughput.py that carry the
    stages' parts (2026-12-06 on): see levers' constants of the same names for what each divides."""
    compile_share: float | None      # None: no row of these records let its compiles go (COMPILE_SHARE stands)
    compile_records: int
    reference_share: float
    reference_records: int
    early_wait_records: int          # records with check_early_wait: 0 where the early reference never ran
    measure_share: float
    timing_fixed_s: float            # mean child_timing less child_timing_measure in the defaults row
    graph_interval_measure_factor: float | None   # None without a row that ran both
    paired_submissions: int
    recheck_share: float = 0.0       # Σ child_timing_recheck / Σ child_timing, defaults row


class RefitError(ValueError):
    """Records that cannot give a share (named, with what is missing)."""


def _lat(r: dict, k: str) -> float:
    return float(r["latency"].get(k, 0.0) or 0.0)


def refit(records: list[dict], defaults_mode: str = "lanes") -> Refit:
    """The shares from one call's records: its defaults row (`defaults_mode`) and its levers rows."""
    let_go = [r for r in records if _lat(r, "child_compile_unlaned") > 0]
    checked = [r for r in records if "check_reference" in r["latency"]]
    defaults = [r for r in records if r.get("mode") == defaults_mode and _lat(r, "child_timing") > 0]
    if not checked or not defaults:
        raise RefitError(f"the refit needs records with the check's parts ({len(checked)}) and a {defaults_mode!r} "
                         f"row with a timing ({len(defaults)})")
    compile_s = sum(_lat(r, "child_compile_unlaned") for r in let_go)
    calls_s = sum(_lat(r, "child_correctness_calls") - _lat(r, "child_lane_wait_after_compile") for r in let_go)
    ref_s = sum(_lat(r, "check_inputs") + _lat(r, "check_reference") for r in checked)
    check_s = sum(_lat(r, "check") - _lat(r, "check_lane_wait") for r in checked)
    timing_s = sum(_lat(r, "child_timing") for r in defaults)
    measure_s = sum(_lat(r, "child_timing_measure") for r in defaults)
    both = [m for m in {r.get("mode", "") for r in records} if "graph_replay=1" in m and "stop_rule=interval" in m]
    factor, paired = None, 0
    if both:
        levers_row = {r.get("submission"): r for r in records if r.get("mode") == sorted(both)[0]
                      and r.get("status") == "ok"}
        pairs = [(d, levers_row[d.get("submission")]) for d in defaults
                 if d.get("status") == "ok" and d.get("submission") in levers_row]
        if pairs:
            factor = (sum(_lat(lv, "child_timing_measure") for _, lv in pairs)
                      / sum(_lat(d, "child_timing_measure") for d, _ in pairs))
            paired = len(pairs)
    return Refit(compile_share=compile_s / calls_s if let_go else None, compile_records=len(let_go), reference_share=ref_s / check_s,
                 reference_records=len(checked),
                 early_wait_records=sum("check_early_wait" in r["latency"] for r in records),
                 measure_share=measure_s / timing_s, timing_fixed_s=(timing_s - measure_s) / len(defaults),
                 graph_interval_measure_factor=factor, paired_submissions=paired,
                 recheck_share=sum(_lat(r, "child_timing_recheck") for r in defaults) / timing_s)
