"""The warm checker's read arena (Placement.read_arena_bytes, judge/read_arena.py; built 2026-12-07, OFF) as a setting
of the simulator (pipeline.Setup.read_arena_speedup). Every figure these give is a PREDICTION.

What it changes: the check's prefetch (judge/prefetch.py, EvalConfig.read_outputs_outside_lane, on by default) reads
the child's output files into host memory before the check takes the GPU's shared lane. Into fresh memory, each page
is faulted in inside the read; into the arena (one block faulted in once and kept from one evaluation to the next) a
read of a cached file is a plain copy. The simulator's check is a host stage `check_prefetch` (a core of the host,
before the lane: pipeline._Run.check) and the lane-held rest `check`. The arena divides the first by
Setup.read_arena_speedup and leaves the second: with the prefetch on, the check's read under the lane
(check_read, ~0.4 s on the H200) is the copy of the prefetched tensors to the device (judge/checker.py
prefetched_or_load then .to), which the arena does not touch. So it shortens each evaluation's wall and its host
core time, and through the slot's occupancy the rate per GPU-hour; no lane's hold changes.

The factors: HOST_SPEEDUP, the prefetch itself with and without the arena on the 2-core CI host
(scripts/read_arena_bench.py: 768 MiB, 1.329 -> 0.423 s); PLAIN_READ_SPEEDUP, the low end of a plain read into
kept against fresh memory there (5-9x). Neither is a GPU host's figure: the H200 rows of 2026-12-07 spent 1.7-2.2 s
of each check in the prefetch (results/h200_2026-12-07_session53), and device_session.sh read-arena measures it.

Not modelled: the early read (EvalConfig.read_outputs_while_timing, off) with the arena: the prefetch divided after
that transform has taken the child's timing off it (an upper bound on the arena's part there)."""
from __future__ import annotations

import dataclasses
import statistics

from kernelgym_gap.sim.pipeline import Setup
# the rows' job transform: each job as recorded (the arena changes the setup only)
from kernelgym_gap.sim.prestart_start import as_recorded

HOST_SPEEDUP = 3.1          # the prefetch with / without the arena, CI host (scripts/read_arena_bench.py, 768 MiB)
PLAIN_READ_SPEEDUP = 5.0    # a plain read into kept / fresh memory, CI host: 5-9x, the low end
SPEEDUPS = (HOST_SPEEDUP, PLAIN_READ_SPEEDUP)
READ_ARENA = "read_arena_bytes=3072M"     # scripts/throughput.py's --variant (device_session.sh read-arena)


def with_arena(speedup: float):
    """The setup change: every job's prefetch divided by `speedup`."""
    return lambda s: dataclasses.replace(s, read_arena_speedup=speedup)


def step_arithmetic(steps: list[dict], speedup: float) -> float:
    """The warm env.step's p50 by ARITHMETIC, not simulated: each step's measured wall (throughput.py's env_step
    rows: wall_s, else its latency's total) less its check_prefetch x (1 - 1 / speedup); the median. None where
    no step has a wall."""
    cut = 1.0 - 1.0 / speedup
    walls = []
    for s in steps:
        lat = s.get("latency") or {}
        if "wall_s" in s or "total" in lat:
            walls.append(float(s.get("wall_s", lat.get("total", 0.0))) - cut * float(lat.get("check_prefetch", 0.0)))
    return statistics.median(walls) if walls else None


BASIS = ("check_prefetch (a host stage before the check's lane) / {x:g}: the warm checker reads the output files "
         "into memory kept from one evaluation to the next ({why}); the lane-held check unchanged")
# the simulator's rows (levers.scenarios): name, job transform, setup change, basis, the throughput variant
ROWS = (("outputs read into the checker's kept memory (x3.1)", as_recorded, with_arena(HOST_SPEEDUP),
         BASIS.format(x=HOST_SPEEDUP, why="the prefetch's host figure, 2-core CI host"), READ_ARENA),
        ("outputs read into the checker's kept memory (x5)", as_recorded, with_arena(PLAIN_READ_SPEEDUP),
         BASIS.format(x=PLAIN_READ_SPEEDUP, why="a plain read's host figure, the low end"), READ_ARENA))
NAMES = tuple(r[0] for r in ROWS)
