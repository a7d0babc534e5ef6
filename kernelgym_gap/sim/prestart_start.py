"""When a slot's next child is pre-started (issue 35): as the slot's child ends (as built, the default) or as it
starts (candidates; the second BUILT on 2026-12-07 21:20 as Placement.prestart_early, off), as settings of the simulator (pipeline.Setup.prestart_at). Every figure these give is a
PREDICTION.

What the records show (the H100 rows of 2026-12-07: results/h100_2026-12-07_session52/prestart_next_1, _2 and
results/h100_2026-12-07_session51/library_warm; docs/measurement.md, "The simulator's replays of the 15:12
rows"): sandbox/launch.py's Launcher.run refills the pool (pool.refill_after) as the slot's child ends, so the
slot's next child starts then, and with Placement.prestart_for_next the service takes the queue's next request as
the slot's next and the child is pre-started for its task. Its process's start (the interpreter and the package's
imports: 4.5-5.6 s per row on that host under 4 slots, workload.startup_estimate), its imports, its CUDA context
and its library warm-up are often not done when the slot's next job begins, since only the check (1-3 s) lies
between: the job waits for its child.

The candidate ("child_start"): the slot's next child is started as the slot's job is handed its pre-started child
(or as its cold child is launched), so it has the whole evaluation to get ready. With prestart_for_next the slot
takes the queue's first live request ahead at that moment; an idle slot that finds the queue empty takes a request
a busy slot took ahead, whose pre-started child is then for another task and warms its task again in the job's
own shared hold (pipeline.met_child, as a mismatched pre-start is treated today). Its costs, modelled: the
pre-started child's start and imports hold a host core each beside the running children (pipeline.host;
Setup.laned_cores also puts the running children's laned stages on cores), its context and warm-up take the
shared lane as today (a timing asking for the exclusive lane waits for that hold to drain), and a request taken
ahead waits for the slot's whole evaluation instead of its check while later requests go to other slots (the
queue's order is no longer kept). Not modelled: a second process per slot (its host memory and a second CUDA
context on the GPU).

A second candidate ("child_start_bind_at_end", BUILT as Placement.prestart_early, off): the process is started,
imports and makes its CUDA context as the child starts, and is given its task (the next request, taken ahead then,
as built) as the child ends, when its warm-up begins; the startup, which does not depend on the task, is hidden without holding a request for a whole
evaluation, and the warm-up is not.

Assumptions, each from the records: the pre-started child's figures are the ones its record shows
(workload.prestarts: its startup, imports, warm-up), started earlier; a startup does not lengthen when it runs
beside a running child rather than beside a check: the first four children of each of these six rows, started
together at 0 on an otherwise idle host, took 3.8-6.2 s (median 5.3 s) to be ready (child - child_total: their
start, imports and context), as long as the pre-starts' startups (row medians 4.5-5.6 s) and imports, and the
host's one-minute load stayed at 2.3-4.0 on its 16 cores through these rows (throughput_host.jsonl), so 4 more
processes starting bind no core (prestart_start_table.prestart_at_rows also runs the candidate with its laned
stages on 16, 8 and 4 cores)."""
from __future__ import annotations

import dataclasses

from kernelgym_gap.sim.library_warm import library_warm_before_lane
from kernelgym_gap.sim.pipeline import Setup


def at_child_start(s: Setup) -> Setup:
    """The slot's next child started as its job's child starts (the records' pre-starts, started earlier)."""
    return dataclasses.replace(s, prestart_at="child_start")


def next_at_child_start(s: Setup) -> Setup:
    """The same with the slot's next job taken ahead at that moment (Placement.prestart_for_next)."""
    return dataclasses.replace(s, prestart_warm="next", prestart_at="child_start")


def bind_at_end(s: Setup) -> Setup:
    """The process started and imported as the child starts, given its task as the child ends."""
    return dataclasses.replace(s, prestart_at="child_start_bind_at_end")


def next_bind_at_end(s: Setup) -> Setup:
    """The same with the slot's next job taken ahead as the child ends (as built) and the child warming its task."""
    return dataclasses.replace(s, prestart_warm="next", prestart_at="child_start_bind_at_end")


def as_recorded(j):
    """A row's jobs as its records have them (its own variant's changes are in them already)."""
    return j


BASIS_RECORDED = ("the records' pre-started children (their startup, imports, warm-up: workload.prestarts) started "
                  "as the slot's child starts, not as it ends; their start and imports on host cores beside the "
                  "running children, their context and warm-up under the shared lane (sim/prestart_start.py)")
BASIS_NEXT = ("the slot's next job taken ahead as its child starts and its child pre-started then, warmed for that "
              "job's task (each task's cold warm-up, as 'pre-start for the slot's next job'); an idle slot takes a "
              "busy one's job and warms its task again (sim/prestart_start.py)")
BASIS_BIND = ("the slot's next child's process started and imported as its child starts, given its task as the "
              "child ends (the next job taken ahead then, as built), when its context and warm-up begin "
              "(sim/prestart_start.py)")
# the simulator's rows (levers.scenarios): name, job transform, setup change, basis, the throughput variant (None:
# not built). The first is beside "as measured (4 slots)", the others beside prestart_warm's "pre-start for the
# slot's next job (takes it ahead)", today's defaults
ROWS = (("pre-start at the child's start (the records' pre-starts)", as_recorded, at_child_start, BASIS_RECORDED, None),
        ("pre-start at the child's start, for the slot's next job (takes it ahead)", library_warm_before_lane,
         next_at_child_start, BASIS_NEXT, None),
        ("pre-start at the child's start, its task at the child's end (takes it ahead then)",
         library_warm_before_lane, next_bind_at_end, BASIS_BIND, None))
NAMES = tuple(r[0] for r in ROWS)
