"""The library's first calls made before the exclusive lane (TimingConfig.library_warm_before_lane, issue 35; built
2026-12-07 12:20, on by default since the H100 run of 13:00) as a change of the simulator's jobs. Every figure it
gives is a PREDICTION; that run measured what it predicted from the same defaults row: +14.2% against +14.7%
(docs/measurement.md, "The library's first calls").

What the records show (H100 full mix, 2026-12-07, results/h100_2026-12-07_session49 and _session50/
handover_full16): the probe's library warm-up (child_timing_probe_warm_library, two calls and warmup_ms of GPU time
per timed shape) took 2.2-13.0 s of an attention task's exclusive stretch, against 0.1-0.3 s for every other
family and for the kernel's own warm-up (child_timing_probe_warm_kernel) in the same records. With warmup_ms at
25 ms the difference is the library's first calls in the process (its lazily loaded kernels, handles, plans),
made while every other slot of the GPU waits at the exclusive gate.

The change (`library_warm_before_lane`): the record's `library_first_call` (its library warm-up less its kernel
warm-up, which stands for a warm callable's; workload.job_from_record) leaves the exclusive timing and its probe
and joins the correctness stretch's shared hold, where the child now makes those calls. The one input set per
timed shape the warm-up makes is not added: the timing's inputs, three sets per shape, take 0.02-0.03 s in all
in these records. A record that ran the lever (child_library_warm) has its warm-up in its correctness already
and no first call left to move."""
from __future__ import annotations

import dataclasses

from kernelgym_gap.sim.pipeline import Job

LIBRARY_WARM = "library_warm_before_lane=1"     # scripts/throughput.py's --variant for it


def library_warm_before_lane(j: Job) -> Job:
    """The job with its library's first calls made under the shared lane before its timing (the docstring's)."""
    moved = min(j.library_first_call, j.timing)
    if moved <= 0:
        return j
    return dataclasses.replace(j, timing=j.timing - moved, timing_probe=max(0.0, j.timing_probe - moved),
                               correctness=j.correctness + moved, library_first_call=0.0, library_warm=moved,
                               warms_library=True)


def library_warm_prestarted(j: Job) -> Job:
    """The same first calls made by the child pre-started for the job's task while it waited (ChildSpec.warm),
    off the evaluation's path: they leave the exclusive timing and join no lane of the job's. A BOUND: it takes
    every child pre-started in time and for its own task (an RL group's completions of one task, an env's steps),
    and the pre-start's own shared hold, made while other slots run, is not modelled."""
    moved = min(j.library_first_call, j.timing)
    if moved <= 0:
        return j
    return dataclasses.replace(j, timing=j.timing - moved, timing_probe=max(0.0, j.timing_probe - moved),
                               library_first_call=0.0)


BASIS = ("child_timing_probe_warm_library less child_timing_probe_warm_kernel (the library's first calls) moved "
         "from the exclusive timing to the shared correctness stretch (H100 full mix records, 2026-12-07)")
# the simulator's rows (levers.scenarios): name, transform, basis, the throughput variant that runs it (None: a
# bound no single variant runs)
ROWS = (("library's first calls before the exclusive lane", library_warm_before_lane, BASIS, LIBRARY_WARM),
        ("  ... made by the pre-started child while it waits (a bound)", library_warm_prestarted,
         "the same first calls out of the job's lanes altogether: every child pre-started in time for its own "
         "task (sim/library_warm.library_warm_prestarted)", None))
