"""The table of the outputs' copies off the GPU under the shared lane (sim/copy_laned.py; Placement.outputs_copy_laned,
OFF as built) for a light-batch call: each row of the call replayed from its own records (its own setup:
levers.setup_for) as recorded and with its copies laned (the row's own path: pinned chunks where it ran
output_staging_bytes, pageable copies otherwise), with the cruder in-the-hold approximation, and with the whole
writes laned (the pessimistic end). Every figure but `measured` is SIMULATED: PREDICTIONS from ESTIMATED copy
seconds. scripts/simulate_throughput.py --light-only prints it (--copy-laned-only: it alone).

A module of its own beside library_trust_table: it reads study's light-batch inputs and helpers, and study imports
levers, so a table of the levers' kind can be a part of neither."""
from __future__ import annotations

import statistics
from pathlib import Path

from kernelgym_gap.sim import copy_laned as cl
from kernelgym_gap.sim import levers, workload
from kernelgym_gap.sim.pipeline import simulate
from kernelgym_gap.sim.study import LIGHT_RECORDS, LightInputs, lane_waits, replicated

COLUMNS = ("row", "model", "variant", "evaluations", "with_writes", "measured", "share", "copy_s", "gib_est", "rate",
           "rate_gain", "steady", "steady_gain", "steady_range", "shared_wait_s", "exclusive_wait_s", "wall_p50_s")


def copy_rows(inp: LightInputs, copies: int = 4, seeds: tuple[int, ...] = (1, 2, 3, 4, 5)) -> list[dict]:
    """Per row of the call and per model: the copy's share of the writes, the seconds moved under the shared lane
    per evaluation (mean) and the outputs' GiB the writes imply (mean, ESTIMATED), the rate per GPU-hour replayed
    and its gain over the row replayed as recorded ("as recorded", the calibration's replay), the steady state (the
    row `copies` times over in each seed's order: the mean rate, the mean of the seeds' gains and their range), the
    lane waits per evaluation of the replay (its own stages', seconds) and the evaluations' wall p50. `with_writes`:
    the row's jobs with checkpoint writes (the others are left as they are). SIMULATED."""
    records = workload.read_records(Path(inp.folder) / LIGHT_RECORDS)
    out = []
    for mode, jobs in inp.rows.items():
        variant = inp.variants[mode]
        setup = levers.setup_for(variant)
        pre = cl.pre_timing_writes(records, mode)
        is_pinned = cl.pinned(variant)
        longer = [replicated(jobs, copies, seed) for seed in seeds]
        base = simulate(jobs, setup)
        steady = [simulate(x, setup).evals_per_gpu_hour for x in longer]
        shared, excl = lane_waits(base, len(jobs))
        common = {"row": mode, "evaluations": len(jobs), "with_writes": sum(cl.has_writes(j, pre) for j in jobs),
                  "gib_est": round(statistics.mean(cl.gib_estimate(j, inp.device, is_pinned, pre) for j in jobs), 2)}
        out.append({**common, "model": "as recorded", "variant": variant, "measured": inp.measured[mode],
                    "share": 0.0, "copy_s": 0.0, "rate": round(base.evals_per_gpu_hour, 1),
                    "steady": round(statistics.mean(steady), 1), "shared_wait_s": round(shared, 2),
                    "exclusive_wait_s": round(excl, 2), "wall_p50_s": round(base.wall_p50, 2)})
        for name, share, change in cl.models(inp.device, variant, pre, setup.compile_outside_lane):
            r = simulate([change(j) for j in jobs], setup)
            rates = [simulate([change(j) for j in x], setup).evals_per_gpu_hour for x in longer]
            gains = [b / a - 1 for a, b in zip(steady, rates)]
            shared, excl = lane_waits(r, len(jobs))
            out.append({**common, "model": name, "variant": cl.laned_variant(variant), "measured": None,
                        "share": round(share, 3),
                        "copy_s": round(statistics.mean(cl.copy_s(j, share, pre) for j in jobs), 3),
                        "rate": round(r.evals_per_gpu_hour, 1),
                        "rate_gain": round(r.evals_per_gpu_hour / base.evals_per_gpu_hour - 1, 4),
                        "steady": round(statistics.mean(rates), 1), "steady_gain": round(statistics.mean(gains), 4),
                        "steady_range": f"{min(gains):+.1%}..{max(gains):+.1%}", "shared_wait_s": round(shared, 2),
                        "exclusive_wait_s": round(excl, 2), "wall_p50_s": round(r.wall_p50, 2)})
    return out
