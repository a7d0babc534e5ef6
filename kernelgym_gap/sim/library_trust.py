"""The probe's library check amortized (TimingConfig.library_check_shapes, judge/library_trust.py; built
2026-12-08, off) and its warm-up shortened (TimingConfig.warmup_ms 25 -> 5) as changes of the simulator's jobs
(issue 35). Every figure these give is a PREDICTION, resting on the estimates below; no GPU run has measured either
lever.

What the probe does per timed shape (device/bench.Bench.probe): the kernel's warm-up, the library's warm-up (each
Bench._warm_calls: 2 calls, then int(warmup_ms / per_call) more, at most MAX_WARM_CALLS, per_call being the 2 calls'
event time / 2), then library_check_reps (10) repetitions of the library interleaved with up to 10 of the kernel.
The records (2026-12-06 on) split each evaluation's child_timing_probe into child_timing_probe_warm_kernel,
_warm_library and _reps (ProbeParts; summed over its SHAPES timed shapes); a Job carries only their sum
(timing_probe, inside the exclusive `timing`), so the transforms read the parts from the records by job name
(probe_parts). A job without them (records before 2026-12-06, e.g. results/h100_2026-12-06_lane_levers/call1) is
left as it is. Both levers only shorten the probe: the cut leaves `timing` and `timing_probe` alike.

1. library_check_amortized (variant LIBRARY_CHECK): a shape whose cached library time the parent trusts skips the
   library's warm-up and its check repetitions; the kernel's warm-up and probe repetitions stay. With
   library_check_shapes = k of SHAPES shapes checked, (SHAPES - k) / SHAPES of each part goes (an UPPER BOUND: it
   takes every other shape's cache entry as confirmed 3 times since its last disagreement, the latest within
   library_trust_s, as after a few evaluations of the task; a task's first evaluations check every shape). The
   library's warm-up cut is its recorded part less the job's library_first_call (its lazily loaded first calls
   where the record made them in the probe, 0 with library_warm_before_lane on): those are per process and the
   checked shape still makes them.
   The library's share of child_timing_probe_reps (ESTIMATED): the reps alternate kernel and library with
   similar per-rep overheads (L2 flush + 0.3 ms spin + 2 synchronizes dominate small calls), so for a job whose
   kernel is comparable it is half. A job whose kernel dominates its reps (no measured part after the probe,
   child_timing_measure 0, or the kernel's probe repetitions at child_timing_first_call / SHAPES each, as
   probe_levers counts them, over 3/4 of the reps) gets PROBE_REPS x SHAPES x the library's per rep: the batch's
   median over the other jobs (library_rep_s: 0.49 ms on the H100 light batch of 2026-12-07, light_warm, 0.51 ms
   on the H200's, staging_2), else LIBRARY_REP_S. Checked on both defaults rows: for the kernel-dominated jobs it
   gives 0.039-0.041 s per evaluation where the reps less the kernel's repetitions at first-call time leave
   0.011-0.078 s (within 0.04 s of it either way; the slowest kernels' own repetitions carry flush and spin too).
2. warmup_shortened (variant WARMUP_SHORT): each warm-up as 2 calls + the rest; the rest's call count goes from
   int(25 / per_call) to int(5 / per_call) (both at most MAX_WARM_CALLS) and its seconds with it. The 2 calls'
   share (ESTIMATED): 2 x per_call per shape, per_call the record's child_timing_first_call / SHAPES for the
   kernel (0.5 ms for the optimized light-batch kernels: 1 ms of their 13-21 ms per-shape warm-ups, ~5-8%) and
   min(that, the library's per rep) for the library, plus the library's first calls (library_first_call), which
   stay. That per-call estimate reproduces the slow kernels' warm-ups (LayerNorm/triton_single_program: 18 ms
   calls, 2 + int(25/18) = 3 calls = 0.43 s recorded 0.42-0.46 s; 31-45 ms calls: 2 calls, nothing to cut; note a
   12.5-25 ms call makes 1 call over the 2 at 25 ms and none at 5). So the kept fraction of the rest is 5/25 for
   the fast calls. Weak point: the bench's per_call is an event time of 2 back-to-back launches, below the
   record's host-timed first call for tiny kernels; where it is under 25 us the 1000-call bound binds at 25 ms and
   the kept fraction is 5 ms / (1000 x per_call) (0.25 at 20 us, 0.5 at 10 us): rest_kept overrides it (the table
   runs REST_KEPT_LOW too). The full timing's warm-up is not moved: with TimingConfig.warm_once (the default) the
   probe's warm-up is the only one, and a trusted shape's kernel is still warmed by its probe."""
from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable, Iterable, Mapping

from kernelgym_gap.sim.pipeline import Job
from kernelgym_gap.sim.probe_levers import EARLY_EXIT_BUDGET_S, PROBE_REPS, SHAPES

LIBRARY_CHECK = "library_check_shapes=1"   # scripts/throughput.py's --variant for lever 1
WARMUP_SHORT = "warmup_ms=5"               # and for lever 2
WARMUP_MS = 25.0            # TimingConfig.warmup_ms as built
SHORT_WARMUP_MS = 5.0       # the lever's
WARM_CALLS = 2              # Bench._warm_calls' calls before the warm-up's loop
MAX_WARM_CALLS = 1000       # and its loop's bound
LIBRARY_REP_S = 0.5e-3      # one library repetition of the probe where no batch gives it (flush + spin + call)
DOMINATED_SHARE = 0.75      # the kernel's repetitions over this share of the reps: the library's is no half
REST_KEPT_LOW = 0.5         # the warm-up's kept rest where the 1000-call bound binds at ~10 us per call (a bound)
PROBE_PARTS = ("child_timing_probe_warm_kernel", "child_timing_probe_warm_library", "child_timing_probe_reps")


@dataclasses.dataclass(frozen=True)
class ProbeParts:
    """One evaluation's probe split as its record has it (seconds, summed over its timed shapes)."""
    warm_kernel: float = 0.0
    warm_library: float = 0.0
    reps: float = 0.0

    @property
    def total(self) -> float:
        return self.warm_kernel + self.warm_library + self.reps


def parts_of_record(r: dict) -> ProbeParts | None:
    """The record's probe parts; None where it has none (a record before 2026-12-06, or no timing)."""
    lat = r.get("latency") or {}
    if not any(k in lat for k in PROBE_PARTS):
        return None
    vals = [max(0.0, float(lat.get(k, 0.0) or 0.0)) for k in PROBE_PARTS]
    return ProbeParts(*vals) if sum(vals) > 0 else None


def probe_parts(records: Iterable[dict], mode: str) -> dict[str, ProbeParts]:
    """Job name (workload.job_from_record's: the submission, else the task) -> its record's probe parts, for the
    records of `mode`. A name met twice with different parts is left out (which job is which is not known)."""
    out: dict[str, ProbeParts] = {}
    twice: set[str] = set()
    for r in records:
        if r.get("mode") != mode:
            continue
        p = parts_of_record(r)
        name = r.get("submission") or r.get("task", "?")
        if p is None:
            continue
        if name in out and out[name] != p:
            twice.add(name)
        out[name] = p
    return {k: v for k, v in out.items() if k not in twice}


def per_call_s(j: Job) -> float:
    """The kernel's seconds per call as probe_levers reads them: child_timing_first_call / SHAPES (0: unknown)."""
    return j.timing_first_call / SHAPES if j.timing_first_call > 0 else 0.0


def kernel_dominated(j: Job, p: ProbeParts) -> bool:
    """Whether the kernel holds most of the probe's repetitions: nothing measured after the probe (every shape
    exited early), or its probe repetitions at per_call_s each (min(PROBE_REPS, the early-exit budget's worth) per
    shape) over DOMINATED_SHARE of the recorded reps (the fast kernels' first call, 0.5 ms with its host overhead,
    counts ~half: about a library repetition's)."""
    if j.timing_measure <= 0:
        return True
    pc = per_call_s(j)
    if pc <= 0:
        return False
    reps = min(PROBE_REPS, max(1, math.ceil(EARLY_EXIT_BUDGET_S / pc)))
    return SHAPES * reps * pc > DOMINATED_SHARE * p.reps


def library_reps_s(j: Job, p: ProbeParts, rep_s: float = LIBRARY_REP_S) -> float:
    """The library's share of the probe's repetitions (the docstring's estimate): half, or where the kernel
    dominates PROBE_REPS x SHAPES x rep_s, at most half."""
    half = p.reps / 2
    return min(half, PROBE_REPS * SHAPES * rep_s) if kernel_dominated(j, p) else half


def library_rep_s(jobs: Iterable[Job], parts: Mapping[str, ProbeParts]) -> float:
    """One library repetition's seconds in a batch: the median over its jobs whose kernel does not dominate of
    half their reps / (PROBE_REPS x SHAPES); LIBRARY_REP_S where there is none."""
    per = [parts[j.name].reps / 2 / (PROBE_REPS * SHAPES) for j in jobs
           if j.name in parts and parts[j.name].reps > 0 and not kernel_dominated(j, parts[j.name])]
    return statistics.median(per) if per else LIBRARY_REP_S


def warm_calls(warmup_ms: float, per_call: float) -> int:
    """Bench._warm_calls' calls after the first 2 for a call of `per_call` seconds."""
    return min(int(warmup_ms / (per_call * 1e3)), MAX_WARM_CALLS)


def rest_kept(per_call: float, warmup_ms: float) -> float:
    """The fraction of a warm-up's rest (past its 2 calls) kept at `warmup_ms`: the calls' ratio, 1 where the 25 ms
    warm-up made none past its 2; warmup_ms / WARMUP_MS where per_call is unknown."""
    if per_call <= 0:
        return min(1.0, warmup_ms / WARMUP_MS)
    before = warm_calls(WARMUP_MS, per_call)
    return 1.0 if before == 0 else min(1.0, warm_calls(warmup_ms, per_call) / before)


def _warm_cut(warm: float, per_call: float, warmup_ms: float, kept: float | None) -> float:
    fixed = min(warm, WARM_CALLS * per_call * SHAPES)
    return (warm - fixed) * (1.0 - (rest_kept(per_call, warmup_ms) if kept is None else kept))


def probe_cut_s(j: Job, p: ProbeParts, shapes_checked: int = 0, warmup_ms: float = WARMUP_MS,
                rep_s: float = LIBRARY_REP_S, kept: float | None = None) -> float:
    """The probe's seconds the levers take from job `j` with record parts `p`: shapes_checked (0: every shape, as
    built) and warmup_ms (WARMUP_MS: as built). Never negative, at most the recorded parts and the job's probe."""
    skipped = (SHAPES - min(shapes_checked, SHAPES)) / SHAPES if shapes_checked > 0 else 0.0
    first = min(j.library_first_call, p.warm_library)
    library_warm = p.warm_library - first          # its first calls stay: the checked shape makes them
    cut = skipped * (library_warm + library_reps_s(j, p, rep_s))
    if warmup_ms != WARMUP_MS:
        pc = per_call_s(j)
        cut += _warm_cut(p.warm_kernel, pc, warmup_ms, kept)
        lib_pc = min(pc, rep_s) if pc > 0 else rep_s
        cut += (1.0 - skipped) * _warm_cut(library_warm, lib_pc, warmup_ms, kept)
    return max(0.0, min(cut, p.total, j.timing_probe, j.timing))


def probe_levers_applied(parts: Mapping[str, ProbeParts], shapes_checked: int = 0, warmup_ms: float = WARMUP_MS,
                         rep_s: float = LIBRARY_REP_S, kept: float | None = None) -> Callable[[Job], Job]:
    """The Job -> Job change of both levers at once (each read from the same record parts, so not cut twice)."""
    def change(j: Job) -> Job:
        p = parts.get(j.name)
        if p is None or j.timing <= 0:
            return j
        cut = probe_cut_s(j, p, shapes_checked, warmup_ms, rep_s, kept)
        if cut <= 0:
            return j
        return dataclasses.replace(j, timing=j.timing - cut, timing_probe=j.timing_probe - cut)
    return change


def library_check_amortized(parts: Mapping[str, ProbeParts], shapes_checked: int = 1,
                            rep_s: float = LIBRARY_REP_S) -> Callable[[Job], Job]:
    """Lever 1 alone: the library's warm-up and check repetitions of all but `shapes_checked` shapes go."""
    return probe_levers_applied(parts, shapes_checked=shapes_checked, rep_s=rep_s)


def warmup_shortened(parts: Mapping[str, ProbeParts], warmup_ms: float = SHORT_WARMUP_MS,
                     rep_s: float = LIBRARY_REP_S, kept: float | None = None) -> Callable[[Job], Job]:
    """Lever 2 alone: the probe's warm-ups past their 2 calls at `warmup_ms` (kept: the rest's fraction kept, None:
    from each job's per call)."""
    return probe_levers_applied(parts, warmup_ms=warmup_ms, rep_s=rep_s, kept=kept)
