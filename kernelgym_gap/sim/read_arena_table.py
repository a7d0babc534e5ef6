"""The read arena's table (Setup.read_arena_speedup; sim/read_arena.py) for a light-batch call: each row replayed
with the check's prefetch as recorded and divided by each of read_arena.SPEEDUPS, and the warm env.step's p50 the
same ways (SIMULATED) beside the measured steps less their prefetch's cut (ARITHMETIC). scripts/simulate_throughput.py
--light-only prints it.

A module of its own: it reads study's light-batch inputs and helpers, and study imports levers, which imports
read_arena (its rows are among levers' scenarios)."""
from __future__ import annotations

import json
import statistics
from pathlib import Path

from kernelgym_gap.sim import levers, read_arena
from kernelgym_gap.sim.pipeline import Setup, simulate, step_p50
from kernelgym_gap.sim.study import SUMMARY, LightInputs, replicated


def _x(speedup: float) -> str:
    return f"x{speedup:g}"


def arena_rows(inp: LightInputs, copies: int = 4, seeds: tuple[int, ...] = (1, 2, 3, 4, 5),
               speedups: tuple[float, ...] = read_arena.SPEEDUPS) -> list[dict]:
    """Per row of the call (its own setup: levers.setup_for): the rate per GPU-hour replayed (`x1`: the
    calibration's replay) and with the prefetch divided by each speedup, its gain; the steady state's gain (the
    row `copies` times over in each seed's order, the mean over the seeds); the check's prefetch per evaluation
    (median) and the slowest evaluation. SIMULATED."""
    out = []
    for mode, jobs in inp.rows.items():
        setup = levers.setup_for(inp.variants[mode])
        longer = [replicated(jobs, copies, seed) for seed in seeds]
        base = simulate(jobs, setup)
        steady = [simulate(x, setup).evals_per_gpu_hour for x in longer]
        row = {"row": mode, "evaluations": len(jobs), "measured": inp.measured[mode],
               "prefetch_p50_s": round(statistics.median(j.check_prefetch for j in jobs), 2),
               "x1": round(base.evals_per_gpu_hour, 1), "wall_p50_x1_s": round(base.wall_p50, 2)}
        for s in speedups:
            arena = read_arena.with_arena(s)(setup)
            r = simulate(jobs, arena)
            row[_x(s)] = round(r.evals_per_gpu_hour, 1)
            row[f"{_x(s)}_gain"] = round(r.evals_per_gpu_hour / base.evals_per_gpu_hour - 1, 4)
            row[f"wall_p50_{_x(s)}_s"] = round(r.wall_p50, 2)
            gains = [simulate(x, arena).evals_per_gpu_hour / b - 1 for x, b in zip(longer, steady)]
            row[f"steady_{_x(s)}_gain"] = round(statistics.mean(gains), 4)
        out.append(row)
    return out


def _summary_steps(folder: str) -> dict[str, list[dict]]:
    """The summary's warm steps: {"defaults": [...], "env-step variant": [...]} (those it has)."""
    found = sorted(Path(folder).glob(SUMMARY))
    step = (json.loads(found[-1].read_text()).get("env_step") or {}) if found else {}
    sets = {"defaults": step.get("steps") or [], "env-step variant": (step.get("variant") or {}).get("steps") or []}
    return {k: v for k, v in sets.items() if v}


def step_rows(inp: LightInputs, speedups: tuple[float, ...] = read_arena.SPEEDUPS) -> list[dict]:
    """The warm env.step's p50 per set of the call's steps: measured, replayed (`sim_x1`) and with the prefetch
    divided by each speedup (`sim_x<s>`: SIMULATED, pipeline.step_p50), and the measured steps less their
    prefetch's cut (`arith_x<s>`: ARITHMETIC, read_arena.step_arithmetic). Empty where the call ran no steps."""
    raw = _summary_steps(inp.folder)
    sets = (("defaults", inp.steps, inp.measured_step_p50, ""),
            ("env-step variant", list(inp.variant_steps), inp.measured_variant_step_p50, inp.step_variant))
    out = []
    for label, steps, measured, variant in sets:
        if not steps:
            continue
        row = {"steps": label, "n": len(steps), "variant": variant, "measured_p50_s": measured,
               "prefetch_p50_s": round(statistics.median(s.check_prefetch for s in steps), 2),
               "sim_x1": round(step_p50(steps), 2)}
        for s in speedups:
            row[f"sim_{_x(s)}"] = round(step_p50(steps, Setup(read_arena_speedup=s)), 2)
            arith = read_arena.step_arithmetic(raw.get(label, []), s)
            row[f"arith_{_x(s)}"] = None if arith is None else round(arith, 2)
        out.append(row)
    return out
