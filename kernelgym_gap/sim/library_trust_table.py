"""The table of the probe's library check amortized and its warm-up shortened (sim/library_trust.py; the levers
TimingConfig.library_check_shapes and warmup_ms, off/25 as built) for a light-batch call: each row of the call
replayed from its own records (its own setup: levers.setup_for) as recorded, with each lever alone, with both, and
with both and the probe's hopeless rule (probe_levers.probe_hopeless_stop). Every figure but `measured` is
SIMULATED: PREDICTIONS. scripts/simulate_throughput.py --light-only prints it (--library-trust-only: it alone).

A module of its own beside read_arena_table: it reads study's light-batch inputs and helpers, and study imports
levers, so a table of the levers' kind can be a part of neither."""
from __future__ import annotations

import statistics
from pathlib import Path

from kernelgym_gap.sim import library_trust as lt
from kernelgym_gap.sim import levers, workload
from kernelgym_gap.sim.pipeline import simulate
from kernelgym_gap.sim.probe_levers import PROBE_HOPELESS, probe_hopeless_stop
from kernelgym_gap.sim.study import LIGHT_RECORDS, LightInputs, replicated

COLUMNS = ("row", "lever", "variant", "evaluations", "with_parts", "measured", "cut_s", "probe_s", "rate", "rate_gain",
           "steady", "steady_gain", "steady_range", "wall_p50_s")


def _levers(parts: dict, rep_s: float) -> tuple:
    """(name, the throughput variant that runs it, its job change): each lever, both, both + the hopeless rule."""
    both = lt.probe_levers_applied(parts, shapes_checked=1, warmup_ms=lt.SHORT_WARMUP_MS, rep_s=rep_s)
    return (("library checked on 1 of 8 shapes", lt.LIBRARY_CHECK, lt.library_check_amortized(parts, 1, rep_s)),
            ("warm-up 5 ms", lt.WARMUP_SHORT, lt.warmup_shortened(parts, lt.SHORT_WARMUP_MS, rep_s)),
            (f"warm-up 5 ms, rest kept x{lt.REST_KEPT_LOW:g} (low)", lt.WARMUP_SHORT,
             lt.warmup_shortened(parts, lt.SHORT_WARMUP_MS, rep_s, kept=lt.REST_KEPT_LOW)),
            ("both", f"{lt.LIBRARY_CHECK},{lt.WARMUP_SHORT}", both),
            ("both + hopeless probe ends at 3", f"{lt.LIBRARY_CHECK},{lt.WARMUP_SHORT},{PROBE_HOPELESS}",
             lambda j: both(probe_hopeless_stop(j))))


def trust_rows(inp: LightInputs, copies: int = 4, seeds: tuple[int, ...] = (1, 2, 3, 4, 5)) -> list[dict]:
    """Per row of the call and per lever: the exclusive seconds the lever cuts per evaluation (mean) and the probe
    left (mean), the rate per GPU-hour replayed and its gain over the row replayed as recorded ("as recorded", the
    calibration's replay), the steady state (the row `copies` times over in each seed's order: the mean rate, the
    mean of the seeds' gains and their range) and the evaluations' wall p50. `with_parts`: the row's jobs whose
    records split their probe (the others are left as they are). SIMULATED."""
    records = workload.read_records(Path(inp.folder) / LIGHT_RECORDS)
    out = []
    for mode, jobs in inp.rows.items():
        setup = levers.setup_for(inp.variants[mode])
        parts = lt.probe_parts(records, mode)
        rep_s = lt.library_rep_s(jobs, parts)
        longer = [replicated(jobs, copies, seed) for seed in seeds]
        base = simulate(jobs, setup)
        steady = [simulate(x, setup).evals_per_gpu_hour for x in longer]
        common = {"row": mode, "evaluations": len(jobs), "with_parts": sum(j.name in parts for j in jobs)}
        out.append({**common, "lever": "as recorded", "variant": inp.variants[mode], "measured": inp.measured[mode],
                    "cut_s": 0.0, "probe_s": round(statistics.mean(j.timing_probe for j in jobs), 3),
                    "rate": round(base.evals_per_gpu_hour, 1), "steady": round(statistics.mean(steady), 1),
                    "wall_p50_s": round(base.wall_p50, 2), "library_rep_ms": round(rep_s * 1e3, 3)})
        for name, variant, change in _levers(parts, rep_s):
            changed = [change(j) for j in jobs]
            r = simulate(changed, setup)
            rates = [simulate([change(j) for j in x], setup).evals_per_gpu_hour for x in longer]
            gains = [b / a - 1 for a, b in zip(steady, rates)]
            out.append({**common, "lever": name, "variant": variant, "measured": None,
                        "cut_s": round(statistics.mean(a.timing - b.timing for a, b in zip(jobs, changed)), 3),
                        "probe_s": round(statistics.mean(j.timing_probe for j in changed), 3),
                        "rate": round(r.evals_per_gpu_hour, 1),
                        "rate_gain": round(r.evals_per_gpu_hour / base.evals_per_gpu_hour - 1, 4),
                        "steady": round(statistics.mean(rates), 1), "steady_gain": round(statistics.mean(gains), 4),
                        "steady_range": f"{min(gains):+.1%}..{max(gains):+.1%}", "wall_p50_s": round(r.wall_p50, 2)})
    return out
