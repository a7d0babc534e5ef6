"""The probe's readings counted (TimingConfig.probe_readings_count, issue 35; built 2026-12-06, off by default) as a
change of the simulator's jobs, with the estimate it rests on, and its predictions on the H100 light batch's
records. Every figure here is a prediction: the GPU run that would confirm it is device_session.sh's probe-fold
step (docs/measurement.md, item 12, "The probe's readings counted").

What the lever removes: not the probe (its warm-ups, the library check and the kernel's first repetitions all
stay), but as many of the full timing's own repetitions as the probe took of the kernel (library_check_reps, 10),
since those 10 begin the full timing's sample and its stopping rule is read on the whole. So the cut is out of the
measured part (child_timing_measure), per timed shape min(10, n) repetitions of n, each a flush, a spin and the
call: REP_OVERHEAD_S + c.

The estimate (ESTIMATED, from the code's arithmetic with the H100's figures of docs/measurement.md, "The probe's
seconds"): a shape's measured part m is n x (REP_OVERHEAD_S + c) for the call time c. Which n depends on what ends
the timing: for c under min_time_ms / min_reps (1 ms) it is the 20 ms of GPU time (n c = MIN_TIME_S), above it
min_reps (n = 20); both with the spread met at the first look, which the light batch's honest kernels do. The
records do not give c, and m alone has a root in each regime; the record's first call per shape
(child_timing_first_call / SHAPES: a call with its launch, 0.5 ms for the optimized kernels, 2-4.5 ms for the
scalar loops) tells the regime. The library's full timing (the measured path: its check's readings begin it too)
is not counted: the light batch's library times are cached, so this is a lower bound there."""
from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable

from kernelgym_gap.sim import levers, workload
from kernelgym_gap.sim.pipeline import Job, Setup, simulate
from kernelgym_gap.sim.probe_levers import PROBE_HOPELESS, probe_hopeless_stop

PROBE_FOLD = "probe_readings_count=1"   # scripts/throughput.py's --variant for it
PROBE_REPS = 10            # TimingConfig.library_check_reps: the kernel's probe readings that begin the full timing
MIN_REPS = 20              # TimingConfig.min_reps
MIN_TIME_S = 0.020         # TimingConfig.min_time_ms
REP_OVERHEAD_S = 0.4e-3    # ESTIMATED: a repetition's flush (~35 us), spin (SPIN_MS 0.3 ms) and two synchronizes
SHAPES = levers.TIMED_SHAPES


def shape_reps(measure_s: float, first_call_s: float) -> tuple[float, float]:
    """(n, c): a timed shape's repetitions and call time (s) that make its measured part `measure_s`, in the regime
    its first call (`first_call_s`, per shape) tells: over min_time / min_reps, min_reps repetitions; under it, as
    many as min_time of GPU time takes (never fewer than min_reps)."""
    if first_call_s < MIN_TIME_S / MIN_REPS and measure_s > MIN_TIME_S + MIN_REPS * REP_OVERHEAD_S:
        c = MIN_TIME_S * REP_OVERHEAD_S / (measure_s - MIN_TIME_S)
        n = MIN_TIME_S / c
        if n >= MIN_REPS:
            return n, c
    return MIN_REPS, max(measure_s / MIN_REPS - REP_OVERHEAD_S, 0.0)


def probe_fold(j: Job) -> Job:
    """The full timings begin with the probe's readings: each timed shape's measured part loses min(PROBE_REPS, n)
    of its n repetitions (`shape_reps`), out of the exclusive stretch. A job that measured nothing after its
    probes (every shape exited early: child_timing_measure 0) or has no timing parts is left as it is. Apply it
    after the transforms that change the measured part (levers.warm_once takes the full timing's warm-up out)."""
    if j.timing <= 0 or j.timing_probe <= 0 or j.timing_measure <= 0 or j.timing_first_call <= 0:
        return j
    n, c = shape_reps(j.timing_measure / SHAPES, j.timing_first_call / SHAPES)
    cut = min(j.timing_measure, SHAPES * min(PROBE_REPS, n) * (REP_OVERHEAD_S + c))
    return dataclasses.replace(j, timing=j.timing - cut, timing_measure=j.timing_measure - cut)


def todays_defaults(j: Job) -> Job:
    """Today's defaults from the old defaults row's records (the transforms composed, as "The probe's seconds" did):
    the steady clock warm-up, the warm-up once, the rechecks after the exclusive lane, the reads before the check's
    lane begun while the child times, the outputs held on the device. No graph replay: the fold is refused with it."""
    return levers.device_held_outputs(levers.read_while_timing(levers.recheck_outside(
        levers.warm_once(levers.steady_clock(j)))))


def cases() -> list[tuple[str, Callable[[Job], Job], str]]:
    """(row, transform of an old-defaults record's job, the throughput variant beside today's defaults). The
    hopeless rule first: it reads the record's own child_timing_measure (0 for a job early everywhere)."""
    return [("today's defaults", todays_defaults, ""),
            ("+ the probe's readings counted", lambda j: probe_fold(todays_defaults(j)), PROBE_FOLD),
            ("+ the hopeless probe ends at 3", lambda j: todays_defaults(probe_hopeless_stop(j)), PROBE_HOPELESS),
            ("+ both", lambda j: probe_fold(todays_defaults(probe_hopeless_stop(j))), f"{PROBE_FOLD},{PROBE_HOPELESS}")]


def predictions(jobs: list[Job], slots: int = 4) -> list[dict]:
    """Each case's SIMULATED rate (evaluations per GPU-hour, one GPU, `slots` slots), wall p50 and exclusive
    timing per evaluation, on the old defaults row's `jobs`."""
    out = []
    for name, f, variant in cases():
        moved = [f(j) for j in jobs]
        r = simulate(moved, Setup(slots_per_gpu=slots))
        out.append({"row": name, "variant": variant, "evals_per_gpu_hour": round(r.evals_per_gpu_hour, 1),
                    "wall_p50_s": round(r.wall_p50, 2),
                    "timing_per_eval_s": round(sum(j.timing for j in moved) / len(moved), 3),
                    "measure_per_eval_s": round(sum(j.timing_measure for j in moved) / len(moved), 3)})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="SIMULATED: the probe's readings counted, on a light batch's records")
    # required: the package reads no file of the checkout (tests/test_package_data.py); the docs' run used
    # results/h100_2026-12-06_lane_levers/call1/throughput_records.jsonl
    ap.add_argument("--records", required=True, help="a throughput_records.jsonl of scripts/throughput.py")
    ap.add_argument("--mode", default="lanes", help="the old defaults row's records mode")
    ap.add_argument("--slots", type=int, default=4)
    a = ap.parse_args(argv)
    jobs = workload.jobs_of_mode(workload.read_records(a.records), a.mode)
    print(f"SIMULATED (predictions, not measurements): {len(jobs)} evaluations of {a.records} [{a.mode}], "
          f"{a.slots} slots, one GPU")
    print(f"{'row':34} {'variant':52} {'evals/GPU-h':>11} {'wall p50':>9} {'timing/eval':>11} {'measure/eval':>12}")
    for r in predictions(jobs, a.slots):
        print(f"{r['row']:34} {r['variant'] or '(defaults)':52} {r['evals_per_gpu_hour']:11.1f} {r['wall_p50_s']:8.2f}s "
              f"{r['timing_per_eval_s']:10.3f}s {r['measure_per_eval_s']:11.3f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
