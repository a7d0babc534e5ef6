"""Which task a pre-started child warms the library for (issue 35; TimingConfig.library_warm_before_lane, on by
default since 2026-12-07 13:00), as settings of the simulator. Every figure these give is a PREDICTION.

What the records show (the H100 full mix's first 16 of 2026-12-07 13:00, results/h100_2026-12-07_session51/
library_warm): a slot's next child is pre-started as its child ends, for the spec of the evaluation that just
ended (sandbox/launch.py), so in a mixed batch it warms the library for the task the slot just evaluated. 8 of
the switch row's pre-started children warmed 35.4 s for tasks other than the one they were handed, under the
shared lane; the job that met such a child then made its own first calls under its shared hold too (Paged-
DecodeAttention 5.44 s after its child had warmed 3.04 s for another task), and a job that met a child still
warming waited for it (LayerNorm's too_slow fixture: 28.2 s of child_preimport behind a 14.3 s warm-up for
AttentionBackward).

The settings (pipeline.Setup.prestart_warm): "recorded" replays each job's warm-up as its record has it and
gives the pre-start none (the calibration); "previous" models the code as built: the pre-start's hold carries the
warm-up of the task just evaluated (its cold cost, workload.with_cold_warm), and a job pays its own cold warm-up
unless its child warmed its task; "next" is Placement.prestart_for_next (built 2026-12-07 14:50, measured on an
H100 at 15:12-15:29: +5.8% and +16.1% on the full mix's first 16, on by default since): as its child ends the
slot takes its next job from the queue and pre-starts the child for that job's spec, so the warm-up is for the
task the child will be handed (and the DSL too: a TileLang job after a Triton one gets a pre-started child
instead of a cold one, which these jobs do not model). A slot that finds the queue empty takes a job another,
busy, slot took ahead, so no slot idles while a job waits for a busy one.

Rows that ran without the switch are first given it (library_warm.library_warm_before_lane), since the pre-start
warms nothing without it."""
from __future__ import annotations

import dataclasses

from kernelgym_gap.sim.library_warm import library_warm_before_lane
from kernelgym_gap.sim.pipeline import Setup

PRESTART_NEXT = "prestart_for_next=1"       # scripts/throughput.py's --variant for the candidate


def previous(s: Setup) -> Setup:
    return dataclasses.replace(s, prestart_warm="previous")


def next_job(s: Setup) -> Setup:
    return dataclasses.replace(s, prestart_warm="next")


BASIS = ("each task's cold library warm-up (its largest child_library_warm, or first calls inside the timing) in "
         "the pre-start's shared hold, and paid again by a job whose child warmed another task "
         "(sim/prestart_warm.py)")
# the simulator's rows (levers.scenarios): name, job transform, setup change, basis, the throughput variant. The
# first models the defaults as built (no variant of its own: the library warm-up's row names the switch's, and
# records of the defaults since 2026-12-07 13:00 are this row's measurement)
ROWS = (("pre-start warms the task just evaluated (as built)", library_warm_before_lane, previous, BASIS, None),
        ("pre-start for the slot's next job (takes it ahead)", library_warm_before_lane, next_job,
         BASIS + "; the slot takes its next job as its child ends, an idle slot takes a busy one's",
         PRESTART_NEXT))
