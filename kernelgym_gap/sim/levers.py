"""The design changes of issue 35 as parameter changes of the simulator's jobs and setup, with the numbers each rests
on. Every figure these produce is a prediction; the GPU run that would confirm it is in docs/measurement.md.

The shares the lever transforms use (COMPILE_SHARE, REFERENCE_SHARE, MEASURE_SHARE,
GRAPH_INTERVAL_MEASURE_FACTOR) are refit from the H100 light batch of 2026-12-06, whose records carry the
stages' parts (child_compile_unlaned, child_timing_*, check_*); `refit` (sim/lever_refit.py) computes them from any
such records.
Graph replay and the interval stop were only ever run together, so each alone still rests on the H200 fit of the
gap-study corpus (results/h200_2026-12-04_corpus/gap_study_cuda.json: 60 evaluations with each timed shape's
repetitions): child_timing = a + b x shapes + c x repetitions + d x GPU seconds of the repetitions (`fit_timing`);
the records have no repetition counts to replace it."""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

from kernelgym_gap.sim.pipeline import Job, Setup
# the probe's hopeless rule: its transform and estimate are a module of their own
from kernelgym_gap.sim import library_warm, prestart_start, prestart_warm, read_arena
from kernelgym_gap.sim.probe_levers import PROBE_HOPELESS, PROBE_HOPELESS_REPS, PROBE_REPS, probe_hopeless_stop
# the shares refit from a call's records: a module of its own, its names kept here for their callers
from kernelgym_gap.sim.lever_refit import Refit, RefitError, refit  # noqa: F401

# Refit on the H100 light batch of 2026-12-06 (results/h100_2026-12-06_levers/call3/light/
# throughput_records.jsonl, the call after the library warm-up: defaults and all five levers, 12 evaluations
# each); `refit` recomputes each from those records and tests/test_simulate_throughput.py checks they agree.
COMPILE_SHARE = 0.41     # of child_correctness_calls: the compiles, where they were let go (the levers row):
                         # sum child_compile_unlaned / sum (child_correctness_calls - child_lane_wait_after_compile)
                         # over its 12 records (calls 1 and 2 of that day: 0.455 and 0.465). H200 assumption: 0.6
REFERENCE_SHARE = 0.09   # of the check (less check_lane_wait): its inputs and float64 references, check_inputs +
                         # check_reference, over both rows' 24 records (calls 1 and 2: 0.073, 0.074); most of the
                         # check is reading the outputs (check_read, 1.5 s median). H200 assumption: 0.5. No record
                         # has check_early_wait: the early reference never ran there (a warm checker, see refit)
MEASURE_SHARE = 0.27     # of child_timing: the repetitions measured (child_timing_measure) in the defaults row;
                         # the rest is the set-up (0.30 s), probe (~1.1 s: it calibrates the repetitions) and recheck
GRAPH_INTERVAL_MEASURE_FACTOR = 0.54   # the measured part with graph replay and the interval stop together, over
                         # the defaults' on the same 12 submissions (calls 1 and 2: 0.27, 0.33, whose defaults
                         # measured the library in full on a cold cache). The two were only ever run together, so
                         # each alone still rests on the H200 corpus fit below
READ_SHARE = 0.78        # of the check (less check_lane_wait): reading the outputs and copying them to the GPU,
                         # check_read, over both rows' 24 records (1.86 s of 2.41 s in the defaults row); for a
                         # record without the part
H2D_SHARE_OF_READ = 0.25  # of check_read: the host-to-device copy, which stays under the lane with
                         # EvalConfig.read_outputs_outside_lane (judge/prefetch.py). ASSUMED, not measured (no
                         # record splits check_read): the rest is tensor_file.read_tensor (a memset of the host
                         # buffer and a read from the page cache, ~3.5 GB/s as the H100 wrote the outputs) and the
                         # copy is from pageable memory over PCIe Gen5 (~10-15 GB/s), about a quarter of the two
RECHECK_SHARE = 0.21     # of child_timing: the timed shapes' rechecks (child_timing_recheck: inputs, the call, the
                         # host copy) in the defaults row, 0.59 s of 2.82 s; for a record without the part
# The H200 assumptions these replace (2026-12-05; the predictions made with them are in docs/measurement.md)
H200_COMPILE_SHARE = 0.6
H200_REFERENCE_SHARE = 0.5
# Still the H200 assumptions (the 2026-12-06 records do not say: they carry no repetition counts)
CI_REPS_FACTOR = 0.3     # repetitions a stopping rule on E's 95% interval (+-1%) keeps of today's (20-500 per
                         # shape, ~200-400 for kernels under 50 us, where the 2% spread rule rarely settles)
GRAPH_CAPTURE_S = 0.02   # per timed shape: capturing and instantiating the graph of its repetitions
CLOCK_WARMUP_S = 0.3     # TimingConfig.clock_warmup_ms: stays in the exclusive stretch (it is why it is there)
STEADY_CLOCK_WARMUP_S = 0.025   # TimingConfig.clock_warmup_rule "steady" under the lanes (ASSUMED): the GPU ran another
                         # evaluation's trials a moment before, so the rule's 20 ms minimum and a reading end it
                         # (device/bench.clock_settled); records with child_timing_clock_warmup replace it
WARM_S_PER_SHAPE = 0.03  # TimingConfig.warm_once (ASSUMED): the full timing's own warm-up of the kernel, per timed
                         # shape (warmup_ms = 25 ms of GPU time, or up to 1,000 host-bound launches of a ~10 us
                         # kernel), which the probe's warm-up a moment before makes redundant; at most half the
                         # measured part (the records do not split the warm-up from the repetitions)
DEVICE_COPY_FACTOR = 0.01   # Placement.held_device_bytes (ASSUMED): a copy on the device over the host copy it
                         # replaces inside the lane (HBM at ~1.5 TB/s each way against a pageable host copy at a few GB/s)
TIMED_SHAPES = 8         # the light batch's timed shapes per evaluation (every public and held-out shape)
HUNG_LANE_S = 5.0        # a call past this keeps running, but with the lane let go (a design candidate)
# SandboxConfig.launch_bound_after_compile (built): a call that hangs in its first launch is killed once its
# compiles are done plus launch_calls (10) x the later-call bound (max(2 s, 200 x the library's time)): ~5 s of
# compile (assumed) + 20 s for the corpus's sub-10 ms library times, instead of the 60 s compile bound
LAUNCH_KILL_S = 25.0


@dataclasses.dataclass(frozen=True)
class TimingFit:
    """child_timing = fixed + per_shape x shapes + per_rep_s x repetitions + gpu_factor x GPU seconds."""
    fixed: float
    per_shape: float
    per_rep_s: float
    gpu_factor: float
    rows: int
    mean_timing: float
    mean_reps: float
    mean_gpu_s: float
    mean_shapes: float

    @property
    def launch_share(self) -> float:
        """The share of the timing stretch spent on each repetition's launch, spin and synchronizes: what
        a CUDA-graph replay removes."""
        return self.per_rep_s * self.mean_reps / self.mean_timing

    @property
    def repetition_share(self) -> float:
        """The share that scales with the repetitions (their launches and their GPU time)."""
        return (self.per_rep_s * self.mean_reps + self.gpu_factor * self.mean_gpu_s) / self.mean_timing


def _solve(a: list[list[float]], b: list[float]) -> list[float]:
    """Gaussian elimination with partial pivoting (the 4x4 normal equations)."""
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for col in range(n):
        piv = max(range(col, n), key=lambda r: abs(m[r][col]))
        m[col], m[piv] = m[piv], m[col]
        if abs(m[col][col]) < 1e-12:
            raise ValueError("the timing fit is singular (too few distinct evaluations)")
        for r in range(n):
            if r != col:
                f = m[r][col] / m[col][col]
                m[r] = [x - f * y for x, y in zip(m[r], m[col])]
    return [m[i][n] / m[i][i] for i in range(n)]


def fit_timing(corpus_json: str | Path) -> TimingFit:
    rows = json.loads(Path(corpus_json).read_text())["rows"]
    xs, ys = [], []
    for r in rows:
        t = (r.get("latency") or {}).get("child_timing")
        shapes = r.get("per_shape") or []
        if r.get("status") != "ok" or not t or not shapes:
            continue
        # the library was timed in full beside the kernel in these runs: as many repetitions as the kernel's
        reps = sum(p["kernel_reps"] + p.get("library_reps", p["kernel_reps"]) for p in shapes)
        gpu = sum(p["kernel_reps"] * p["kernel_ms"] + p.get("library_reps", p["kernel_reps"]) * p["library_ms"]
                  for p in shapes) / 1000.0
        xs.append([1.0, float(len(shapes)), float(reps), gpu])
        ys.append(float(t))
    if len(xs) < 8:
        raise ValueError(f"{corpus_json}: {len(xs)} usable rows, too few for the timing fit")
    ata = [[sum(x[i] * x[j] for x in xs) for j in range(4)] for i in range(4)]
    aty = [sum(x[i] * y for x, y in zip(xs, ys)) for i in range(4)]
    c = _solve(ata, aty)
    n = len(xs)
    return TimingFit(*c, rows=n, mean_timing=sum(ys) / n, mean_reps=sum(x[2] for x in xs) / n,
                     mean_gpu_s=sum(x[3] for x in xs) / n, mean_shapes=sum(x[1] for x in xs) / n)


@dataclasses.dataclass(frozen=True)
class Scenario:
    """A named change: a function of each job and a function of the setup."""
    name: str
    job: Callable[[Job], Job]
    setup: Callable[[Setup], Setup]
    basis: str
    # how the GPU run sets this lever: scripts/throughput.py's --variant ("" for the defaults), or its
    # --per-gpu N; None where it is not built (a candidate the trace shows)
    variant: str | None = None


# the variants of the levers as built (scripts/throughput.py LEVERS)
GRAPH, INTERVAL, PRECOMPUTE, COMPILE = ("graph_replay=1", "stop_rule=interval", "precompute_reference=1",
                                        "compile_outside_lane=1")
ALL = ",".join((COMPILE, GRAPH, INTERVAL, PRECOMPUTE))
LAUNCH = "launch_bound_after_compile=1"
READ = "read_outputs_outside_lane=1"
READ_EARLY = "read_outputs_outside_lane=1,read_outputs_while_timing=1"
RECHECK = "recheck_outside_exclusive=1"
STEADY, ONCE = "clock_warmup_rule=steady", "warm_once=1"
DEVICE_HELD = "held_device_bytes=1024M"
NEW_ALL = ",".join((STEADY, ONCE, RECHECK, READ_EARLY, DEVICE_HELD, GRAPH, INTERVAL))
RULE_SLOTS = 6     # core/slots.slots_per_gpu(16 cores, 1 GPU): the H200 host's slots by the cores' rule (this
                  # package imports nothing of kernelgym_gap's; tests/test_slots.py checks the two agree)


def setup_for(variant: str) -> Setup:
    """The simulator's setup for a row that ran `variant`: the levers that are the setup's, not the jobs'
    (the records already carry the jobs' own: shorter timings, compiles let go)."""
    fields = set(variant.split(",")) if variant else set()
    return Setup(compile_outside_lane=COMPILE in fields, precompute_reference=PRECOMPUTE in fields)


def _same(x):
    return x


def graph_timing(fit: TimingFit, shapes: float = 9.0) -> Callable[[Job], Job]:
    """Timing by CUDA-graph replay: the launch share goes, a capture per timed shape comes."""
    def change(j: Job) -> Job:
        if j.timing <= 0:
            return j
        return dataclasses.replace(j, timing=j.timing * (1 - fit.launch_share) + GRAPH_CAPTURE_S * shapes)
    return change


def ci_stop(fit: TimingFit) -> Callable[[Job], Job]:
    """Fewer repetitions: the repetition-dependent share of the timing shrinks to CI_REPS_FACTOR of itself."""
    return lambda j: j.scaled(timing=1 - fit.repetition_share * (1 - CI_REPS_FACTOR))


def compile_share(j: Job, share: float | None = None) -> Job:
    """The compiles a defaults record's calls hold (`share` of them; COMPILE_SHARE by default)."""
    return dataclasses.replace(j, compile=min(j.correctness, (COMPILE_SHARE if share is None else share) * j.calls))


def reference_share(j: Job, share: float | None = None) -> Job:
    """The check's part the early reference takes off it (`share`; REFERENCE_SHARE by default)."""
    return dataclasses.replace(j, check_ref=(REFERENCE_SHARE if share is None else share) * j.check)


def read_part(j: Job) -> float:
    """The lane-held check's reading of the outputs (and their copy to the GPU): the record's check_read, else
    READ_SHARE of the check, never more than the check."""
    return min(j.check, j.check_read if j.check_read > 0 else READ_SHARE * j.check)


def read_outside(j: Job, h2d: float = H2D_SHARE_OF_READ) -> Job:
    """The outputs read before the check's lane (EvalConfig.read_outputs_outside_lane): the record's check_read
    (else READ_SHARE of the check) leaves the lane-held check, less its host-to-device copy (`h2d` of it, which
    stays), and becomes the host stage check_prefetch before the lane. A record that ran it already is left."""
    if j.check_prefetch > 0 or j.check <= 0:
        return j
    read = read_part(j)
    moved = read * (1 - h2d)
    return dataclasses.replace(j, check=j.check - moved, check_read=read - moved, check_prefetch=moved)


def read_while_timing(j: Job) -> Job:
    """EvalConfig.read_outputs_while_timing (judge/early_prefetch.py): the outputs read before the check's lane
    (read_outside), and that host stage read while the child times instead of after it, up to the child's
    timing (assumed: the correctness trials' files are nearly all of it, the rechecks' few read after). The
    lane's hold is unchanged; only the evaluation's own wall (its step) shortens, and with it the slot's."""
    j = read_outside(j)
    return dataclasses.replace(j, check_prefetch=max(0.0, j.check_prefetch - j.timing))


def measured_part(j: Job) -> float:
    """The timing's measured repetitions: the record's child_timing_measure, else MEASURE_SHARE of its timing. A
    record with the timing's parts (a probe) that measured 0 s exited early on every shape: its 0 stands (until
    2026-12-06 evening it read as unrecorded, and the levers cut a share that was never there: 0.86 s of exclusive
    time each from the H100 light batch's two hopeless jobs, the levers' prediction 868.1 -> 902.9)."""
    return j.timing_measure if j.timing_measure > 0 or j.timing_probe > 0 else MEASURE_SHARE * j.timing


def graph_interval_measured(j: Job) -> Job:
    """Graph replay and the interval stop together, as the H100 records measured them: only the measured
    repetitions change (to GRAPH_INTERVAL_MEASURE_FACTOR of themselves); the set-up, probe and recheck stay.
    The job's own child_timing_measure where its record has it, else MEASURE_SHARE of its timing."""
    if j.timing <= 0:
        return j
    measure = measured_part(j)
    return dataclasses.replace(j, timing=j.timing - measure * (1 - GRAPH_INTERVAL_MEASURE_FACTOR),
                               timing_measure=measure * GRAPH_INTERVAL_MEASURE_FACTOR)


def recheck_outside(j: Job) -> Job:
    """The rechecks after the exclusive lane (TimingConfig.recheck_outside_exclusive, child/run.py): the
    record's child_timing_recheck (else RECHECK_SHARE of its timing) leaves the exclusive stretch and becomes a
    shared hold after it, with its own wait for the lane. A record that ran it already is left as it is."""
    if j.recheck > 0 or j.timing <= 0:
        return j
    part = min(j.timing, j.timing_recheck if j.timing_recheck > 0 else RECHECK_SHARE * j.timing)
    return dataclasses.replace(j, timing=j.timing - part, recheck=part, timing_recheck=part)


def steady_clock(j: Job) -> Job:
    """The clock warm-up ends once the clock holds (TimingConfig.clock_warmup_rule "steady"): the fixed
    CLOCK_WARMUP_S of the exclusive stretch becomes STEADY_CLOCK_WARMUP_S."""
    if j.timing <= 0:
        return j
    return dataclasses.replace(j, timing=max(0.0, j.timing - (CLOCK_WARMUP_S - STEADY_CLOCK_WARMUP_S)))


def warm_once(j: Job) -> Job:
    """The full timing reuses the probe's warm-up (TimingConfig.warm_once): WARM_S_PER_SHAPE per timed shape
    leaves the measured part (at most half of it)."""
    if j.timing <= 0:
        return j
    measure = measured_part(j)
    cut = min(WARM_S_PER_SHAPE * TIMED_SHAPES, 0.5 * measure)
    return dataclasses.replace(j, timing=j.timing - cut, timing_measure=measure - cut)


def device_held_outputs(j: Job) -> Job:
    """The correctness outputs kept on the device until the next checkpoint (Placement.held_device_bytes): the
    host copies (the record's child_correctness_save) leave the shared hold but for DEVICE_COPY_FACTOR of
    them, and join the checkpoints' let-go writes, which copy them to the host. A job without checkpoints (no
    let-go in its record) is left as it is: its outputs would reach the host inside the lane anyway."""
    if j.save <= 0 or j.checkpoints <= 0:
        return j
    moved = j.save * (1 - DEVICE_COPY_FACTOR)
    return dataclasses.replace(j, correctness=max(0.0, j.correctness - moved), unlaned=j.unlaned + moved,
                               save=j.save - moved)


def lane_time_levers(j: Job) -> Job:
    """The levers that take seconds off the lanes' held time (device_session.sh throughput-new's last row):
    graph replay with the interval stop, the steady clock warm-up, the warm-up once, the rechecks after the
    exclusive lane, the reads before the check's lane (begun while the child times: the step's part) and the
    outputs held on the device."""
    return device_held_outputs(read_while_timing(recheck_outside(warm_once(steady_clock(graph_interval_measured(j))))))


def all_levers(j: Job) -> Job:
    """The four job changes of the levers together, refit (the launch bound changes only hung jobs)."""
    return reference_share(compile_share(graph_interval_measured(j)))


def all_levers_h200(fit: TimingFit) -> Callable[[Job], Job]:
    """The same with the H200 assumptions and the corpus fit: what the simulator predicted on 2026-12-05."""
    graph, ci = graph_timing(fit), ci_stop(fit)
    return lambda j: reference_share(compile_share(ci(graph(j)), H200_COMPILE_SHARE), H200_REFERENCE_SHARE)


def setup_before_lane(fit: TimingFit) -> Callable[[Job], Job]:
    """The timing's fixed part (the flush buffer, the synchronize and spin calibration: the fit's intercept less
    the clock warm-up) done under the shared lane before the exclusive one is taken."""
    moved = max(0.0, fit.fixed - CLOCK_WARMUP_S)

    def change(j: Job) -> Job:
        if j.timing <= moved:
            return j
        return dataclasses.replace(j, timing=j.timing - moved, correctness=j.correctness + moved)
    return change


def hung_lets_go(j: Job) -> Job:
    return dataclasses.replace(j, hang_lane_s=HUNG_LANE_S) if j.hang_s else j


def hung_launch_killed(j: Job) -> Job:
    """A call that hung (on the lane: in a call, not at the import) ends at LAUNCH_KILL_S, lane and all."""
    return dataclasses.replace(j, hang_s=min(j.hang_s, LAUNCH_KILL_S)) if j.hang_s and j.hang_lane else j


def scenarios(fit: TimingFit) -> list[Scenario]:
    """Each lever alone, then together, then the hosts and the cluster."""
    graph, ci = graph_timing(fit), ci_stop(fit)
    compile_out = lambda s: dataclasses.replace(s, compile_outside_lane=True)        # noqa: E731
    precompute = lambda s: dataclasses.replace(s, precompute_reference=True)         # noqa: E731
    both = all_levers
    all_setup = lambda s: dataclasses.replace(s, compile_outside_lane=True, precompute_reference=True)  # noqa: E731
    rule = RULE_SLOTS
    return [
        Scenario("as measured (4 slots)", _same, _same, "the records replayed", ""),
        Scenario("CUDA-graph timing", graph, _same,
                 f"timing x (1 - {fit.launch_share:.2f}) + {GRAPH_CAPTURE_S} s x 9 shapes (corpus fit)", GRAPH),
        Scenario("stop on E's interval", ci, _same,
                 f"timing x (1 - {fit.repetition_share:.2f} x (1 - {CI_REPS_FACTOR})) (fit; reps factor assumed)",
                 INTERVAL),
        Scenario("graph + interval stop", graph_interval_measured, _same,
                 f"the measured repetitions x {GRAPH_INTERVAL_MEASURE_FACTOR} (H100 records, 2026-12-06)",
                 f"{GRAPH},{INTERVAL}"),
        Scenario("reference while child runs", reference_share, precompute,
                 f"{REFERENCE_SHARE:.0%} of the check (H100 check parts) runs from the child's start", PRECOMPUTE),
        Scenario("compiles outside the lane", compile_share, compile_out,
                 f"{COMPILE_SHARE:.0%} of the correctness calls (H100 child_compile_unlaned) off the lane", COMPILE),
        Scenario("outputs read before the check's lane", read_outside, _same,
                 f"check_read (else {READ_SHARE:.0%} of the check) x (1 - {H2D_SHARE_OF_READ}) to a host stage "
                 f"before the lane; the host-to-device copy ({H2D_SHARE_OF_READ:.0%}, assumed) stays", READ),
        Scenario("outputs read while the child times", read_while_timing, _same,
                 "the above, and its host read overlapping the child's timing (up to the timing's seconds); "
                 "the lane's hold unchanged, the step shorter", READ_EARLY),
        *(Scenario(name, fn, setup, basis, variant) for name, fn, setup, basis, variant in read_arena.ROWS),
        Scenario("rechecks after the exclusive lane", recheck_outside, _same,
                 f"child_timing_recheck (else {RECHECK_SHARE:.0%} of the timing, H100 defaults row) moved from the "
                 "exclusive stretch to a shared hold after it", RECHECK),
        Scenario("clock warm-up until steady", steady_clock, _same,
                 f"the exclusive stretch's {CLOCK_WARMUP_S:g} s warm-up ends at {STEADY_CLOCK_WARMUP_S:g} s (assumed: "
                 "the GPU is at its clock under the lanes)", STEADY),
        Scenario("warm-up once per shape", warm_once, _same,
                 f"{WARM_S_PER_SHAPE:g} s x {TIMED_SHAPES} shapes of the measured part (assumed)", ONCE),
        Scenario("hopeless kernels' probe ends at 3", probe_hopeless_stop, _same,
                 f"a job whose every shape exited early: its kernel's probe repetitions {PROBE_REPS} -> "
                 f"{PROBE_HOPELESS_REPS} per shape at child_timing_first_call / {TIMED_SHAPES} each (estimated)",
                 PROBE_HOPELESS),
        *(Scenario(name, fn, _same, basis, variant) for name, fn, basis, variant in library_warm.ROWS),
        *(Scenario(name, fn, setup, basis, variant) for name, fn, setup, basis, variant in prestart_warm.ROWS),
        *(Scenario(name, fn, setup, basis, variant) for name, fn, setup, basis, variant in prestart_start.ROWS),
        Scenario("outputs held on the device", device_held_outputs, _same,
                 f"child_correctness_save leaves the shared hold (device copies at {DEVICE_COPY_FACTOR:g} of it, "
                 "assumed) and joins the checkpoints' let-go writes", DEVICE_HELD),
        Scenario("hung first launches killed", hung_launch_killed, _same,
                 f"a call hung in its launch ends {LAUNCH_KILL_S:g} s in (compile assumed 5 s + 10 x 2 s), not 60 s",
                 LAUNCH),
        Scenario(f"{rule} slots per GPU (the cores' rule)", _same, lambda s: dataclasses.replace(s, slots_per_gpu=rule),
                 f"core/slots.slots_per_gpu(16 cores, 1 GPU) = {rule}; no GPU-sharing slowdown beyond the measured",
                 f"--per-gpu {rule}"),
        Scenario("all levers, 4 slots", both, all_setup, "the five changes above", ALL),
        Scenario("the lane-time levers together, 4 slots", lane_time_levers, _same,
                 "steady clock, warm-up once, rechecks after, reads before the check's lane (begun while the child "
                 "times), outputs held on the device, graph + interval stop (the compiles and the early reference left as they are)", NEW_ALL),
        # the probe's cut first: it reads the record's own child_timing_measure (0 for a job that exited early
        # everywhere), which the other transforms replace with a share of the timing
        Scenario("the lane-time levers + the hopeless probe, 4 slots",
                 lambda j: lane_time_levers(probe_hopeless_stop(j)), _same, "the row above and the hopeless kernels' probe ending at 3", f"{NEW_ALL},{PROBE_HOPELESS}"),
        Scenario("all levers, 6 slots", both, lambda s: dataclasses.replace(all_setup(s), slots_per_gpu=6),
                 "the five changes, 6 slots (the cores' rule on this host)", f"{ALL} --per-gpu 6"),
        Scenario("all levers, 8 slots", both, lambda s: dataclasses.replace(all_setup(s), slots_per_gpu=8),
                 "the five changes, 8 slots", f"{ALL} --per-gpu 8"),
        # two candidates the trace shows (not in the list)
        Scenario("+ timing set-up before the lane", lambda j: setup_before_lane(fit)(both(j)),
                 lambda s: dataclasses.replace(all_setup(s), slots_per_gpu=6),
                 f"all levers, 6 slots; {max(0.0, fit.fixed - CLOCK_WARMUP_S):.2f} s of the timing's fixed part "
                 "(fit) moved to the shared stretch"),
        Scenario("all levers + launch bound, 6 slots", lambda j: hung_launch_killed(both(j)),
                 lambda s: dataclasses.replace(all_setup(s), slots_per_gpu=6),
                 "the five changes and the launch bound, 6 slots", f"{ALL},{LAUNCH} --per-gpu 6"),
        Scenario("+ hung calls let the lane go", lambda j: hung_lets_go(setup_before_lane(fit)(both(j))),
                 lambda s: dataclasses.replace(all_setup(s), slots_per_gpu=6),
                 f"the above; a call past {HUNG_LANE_S:g} s runs on without the shared lane"),
    ]
