"""The probe's hopeless rule (TimingConfig.probe_hopeless_reps, issue 35; built 2026-12-06 evening, off by default)
as a change of the simulator's jobs, with the estimate it rests on. Every figure it gives is a prediction: the GPU
run that would confirm it is named in docs/measurement.md (item 12's owed list, and "The probe's seconds" in "The
simulator").

The estimate (ESTIMATED from the H100 light batch of 2026-12-06, results/h100_2026-12-06_lane_levers/call1, whose
records carry child_timing_probe and child_timing_first_call): a hopeless kernel's per-call time is its record's
child_timing_first_call / SHAPES (one call per timed shape, its GPU time nearly all of it: 32 and 45 ms there), and
its probe per shape is 2 warm-up calls (device/bench.Bench._warm_calls: a 30-45 ms call is over warmup_ms alone),
the kernel's repetitions, and ~30 ms of the library's warm-up and check; that gives both hopeless records'
child_timing_probe within 1% (3.31 and 4.57 s; tests/test_sim_probe_hopeless.py)."""
from __future__ import annotations

import dataclasses

from kernelgym_gap.sim.pipeline import Job

PROBE_HOPELESS = "probe_hopeless_reps=3"   # scripts/throughput.py's --variant for it
PROBE_HOPELESS_REPS = 3      # the kernel's probe repetitions of a hopeless kernel with the rule
PROBE_REPS = 10              # TimingConfig.library_check_reps: without it
EARLY_EXIT_BUDGET_S = 1.0    # TimingConfig.early_exit_budget_ms: the probe ends sooner on calls this long together
SHAPES = 8                   # the light batch's timed shapes per evaluation (levers.TIMED_SHAPES; a test checks)


def probe_hopeless_stop(j: Job) -> Job:
    """The kernel's probe ends once it shows a hopeless kernel: for a job whose every timed shape exited early
    (its record has a probe and measured nothing after it: child_timing_measure 0, the library's time cached),
    each shape's kernel repetitions go from min(PROBE_REPS, the budget's worth) to PROBE_HOPELESS_REPS at the
    record's per-call time, out of the exclusive stretch; at most the kernel's share of the probe (its repetitions
    over them and the 2 warm-up calls). Jobs with only some shapes early, or whose library was timed after the
    exit, are not told apart by the records and are left as they are: the prediction is a lower bound."""
    if j.timing <= 0 or j.timing_probe <= 0 or j.timing_measure > 0 or j.timing_first_call <= 0:
        return j
    per_call = j.timing_first_call / SHAPES
    before = min(PROBE_REPS, max(1, -(-EARLY_EXIT_BUDGET_S // per_call)))
    if before <= PROBE_HOPELESS_REPS:
        return j
    cut = min(SHAPES * per_call * (before - PROBE_HOPELESS_REPS),
              j.timing_probe * (before - PROBE_HOPELESS_REPS) / (before + 2))
    return dataclasses.replace(j, timing=j.timing - cut, timing_probe=j.timing_probe - cut)
