"""The table of when the slot's next child is pre-started (Setup.prestart_at; the candidates are in
sim/prestart_start.py; "child_start_bind_at_end" built as Placement.prestart_early, off): each row of a light-batch call replayed with its next child pre-started as the
child ends (as built), as it starts, and started then but given its task as the child ends. Every figure is
SIMULATED (scripts/simulate_throughput.py --light-only prints it).

A module of its own: it reads study's light-batch inputs and helpers, and study imports prestart_start (its
rows are among the light predictions, and levers' scenarios), so the table can be a part of neither without an
import cycle."""
from __future__ import annotations

import dataclasses
import statistics

from kernelgym_gap.sim import levers, prestart_start
from kernelgym_gap.sim.pipeline import Setup, simulate
from kernelgym_gap.sim.study import DEFAULTS_MODE, LightInputs, replicated

PRESTART_CORES = (16, 8, 4)      # host cores the candidate is also run with (the H100 host has 16: throughput's cpus)
# the ways beside `end` (as built, the replay): each one's columns' key and its change of the setup
PRESTART_WHEN = (("start", prestart_start.at_child_start), ("bind", prestart_start.bind_at_end))


def _child_waits(r, n: int) -> float:
    """Seconds per evaluation its own stages waited for the slot's pre-started child in a simulated run."""
    return sum(iv.end - iv.start for iv in r.trace if iv.row == "slot" and iv.stage == "wait child") / max(n, 1)


def prestart_at_rows(inp: LightInputs, copies: int = 4, seeds: tuple[int, ...] = (1, 2, 3, 4, 5)) -> list[dict]:
    """Each row of the call replayed with the slot's next child pre-started as the child ends (`end`: the
    calibration's replay), as it starts (`start`: Setup.prestart_at "child_start") and started then but given its
    task as the child ends (`bind`: "child_start_bind_at_end"), each from the row's own records; then the
    defaults row with the next job taken ahead (prestart_warm "next", the switch applied where the row ran
    without it: today's defaults as the simulator models them) the three ways. Per row and way: the rate, its gain
    over `end`, the slowest evaluation, the seconds per evaluation the jobs waited for their child, and the steady
    state's gain (the row `copies` times over in each seed's order, each way in the same orders: the mean of the
    seeds' gains and their range; a 16-evaluation row's rate moves with its tail); and `start`'s gain with the
    running children's laned stages on the host's cores too (Setup.laned_cores) at PRESTART_CORES cores.
    SIMULATED."""
    cases = [(mode, mode, prestart_start.as_recorded, levers.setup_for(v)) for mode, v in inp.variants.items()]
    cases.append((f"{DEFAULTS_MODE}, modelled: takes its next job ahead", DEFAULTS_MODE,
                  prestart_start.ROWS[1][1], Setup(prestart_warm="next")))
    out = []
    for label, mode, job, setup in cases:
        jobs = [job(j) for j in inp.rows[mode]]
        longer = [[job(j) for j in replicated(inp.rows[mode], copies, seed)] for seed in seeds]
        row = {"row": label, "evaluations": len(jobs), "measured": inp.measured[mode] if label == mode else None}
        steady = {}
        for key, change in (("end", lambda s: s),) + PRESTART_WHEN:
            r = simulate(jobs, change(setup))
            row[key] = round(r.evals_per_gpu_hour, 1)
            row[f"slowest_{key}_s"] = round(max(d.wall for d in r.done), 2)
            row[f"wait_child_{key}_s"] = round(_child_waits(r, len(jobs)), 2)
            steady[key] = [simulate(x, change(setup)).evals_per_gpu_hour for x in longer]
            if key != "end":
                row[f"{key}_gain"] = round(row[key] / row["end"] - 1, 4)
                gains = [b / a - 1 for a, b in zip(steady["end"], steady[key])]
                row[f"steady_{key}_gain"] = round(statistics.mean(gains), 4)
                row[f"steady_{key}_range"] = f"{min(gains):+.1%}..{max(gains):+.1%}"
        row["steady_end"] = round(statistics.mean(steady["end"]), 1)
        for cores in PRESTART_CORES:
            tight = dataclasses.replace(setup, cores_per_host=cores, laned_cores=True)
            a = simulate(jobs, tight).evals_per_gpu_hour
            b = simulate(jobs, prestart_start.at_child_start(tight)).evals_per_gpu_hour
            row[f"start_cores_{cores}_gain"] = round(b / a - 1, 4)
        out.append(row)
    return out
