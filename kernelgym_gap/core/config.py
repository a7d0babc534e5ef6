"""Evaluation settings: one frozen value (EvalConfig) that owns every sub-config, passed explicitly to whatever
needs it (no global configuration). The sub-configs live here, below every other module, so that the
sandbox, the child, the timing and the reward read their settings without importing each other."""
from __future__ import annotations

import dataclasses

from collections.abc import Mapping
from typing import Any

from kernelgym_gap.core.errors import ConfigConflictError, UnknownChoiceError
from kernelgym_gap.core.placement import FIELDS as PLACEMENT_FIELDS
from kernelgym_gap.core.placement import SANDBOX_FIELDS, Placement, PlacementFieldError, refuse_placement
from kernelgym_gap.core.slowness import too_slow_to_time

REWARD_MODES = ("full", "correctness")
# which library time E is taken against in the reward: "task" (the default) the one the task declares
# (TaskSpec.e_baseline: eager, torch.compile or a named alternative), or eager / torch.compile for all
REWARD_BASELINES = ("task", "eager", "compile")
COMPILE_BASELINE_MODES = ("measure", "cached", "off")
LIBRARY_TIME_MODES = ("cached", "measure")   # the library's time: from the parent's cache (checked), or timed anew


@dataclasses.dataclass(frozen=True)
class SandboxConfig:
    wall_s: float = 300.0
    # the stage deadline of the submission's import (its module's top level and the entry point's
    # construction), from the byte the child writes just before the submission's module runs (its own torch,
    # triton and CUDA start-up come before and do not count): a child that has not reported its import done
    # by then is killed (timeout), instead of holding its slot for the whole wall_s. None: wall_s alone.
    # 30 s where the entry point is a function: every honest import in results/ took at most 0.020 s (726
    # records, H100, H200 and cpu, Triton and TileLang; scripts/import_stage_evidence.py), and the most
    # an honest submission could plausibly do there, compile its TileLang kernels eagerly, is under the
    # slowest reference's whole correctness stage (compiles and runs of every shape: 19.0 s on cuda, 19.7 s
    # on cpu); a hung import cost 60.4 s of a slot on the H100 (docs/journal.md, 2026-12-06).
    import_s: float | None = 30.0
    # the same deadline on a task that takes a module class (an imported KernelBench task's ModelNew:
    # TaskSpec.module_entry_point), whose construction, one instance per (shape, dtype) of the job on the
    # host, is in it, so not shortened: on a loaded 2-core host (scripts/modelnew_construction.py) level2's
    # 8192-wide Gemms took 4-6 s an instance (26-34 s for a cuda job's six), level3's VGG19 8 s (48 s), and
    # level2's 32768-wide Matmuls 68-89 s, over even this (docs/journal.md, 2026-12-06). None: wall_s alone.
    import_module_class_s: float | None = 60.0
    # the stage deadline of each call of the submission (sandbox/deadlines.py): the first call of each
    # shape (compilation, autotuning) gets compile_call_s; a later one call_factor x the library's time
    # for that shape where the parent knows it (Job.library_hint), at least call_floor_s, else
    # call_unknown_s. A timed shape gets its repetitions' worth. compile_call_s None: wall_s alone.
    compile_call_s: float | None = 60.0
    call_floor_s: float = 2.0
    call_factor: float = 200.0
    call_unknown_s: float = 60.0
    # A first call's compile bound covers its compiles; once the child marks them done (child/marks.py) the
    # call's launch may run only launch_calls x the later-call bound (autotuning benchmarks each config
    # after compiling it: a few calls), never past the compile bound. A kernel that hangs on its first
    # launch is then killed seconds after its compile, not at compile_call_s: on the H200's full mix two
    # such calls held the shared lane for their whole 60 s (issue 35). Off until the H200 compares it
    # (a false kill would be a false zero). Needs the library's time for the shape (Job.library_hint).
    launch_bound_after_compile: bool = False
    launch_calls: int = 10
    cpu_s: int = 600
    # largest file the child may write; raised per job to its largest honest output (sandbox/disk.py)
    fsize_bytes: int = 1 << 30
    nofile: int = 1024
    address_space_bytes: int | None = 8 << 30    # RLIMIT_AS; cpu path only (ignored with gpu_devices)
    memory_bytes: int | None = 4 << 30           # cgroup memory limit, cpu path (a child needs ~0.4 GiB)
    gpu_memory_bytes: int | None = 64 << 30      # cgroup memory limit (host RAM) when gpu_devices is set
    pids_max: int = 512                 # processes + threads of one child (cgroup pids, RLIMIT_NPROC)
    uid: int | str | None = "auto"      # "auto": a fresh unprivileged uid per child when root; None: keep
    isolation: str = "auto"             # "auto" (strongest available), "bwrap", "unshare", "none"
    gpu_devices: tuple[int, ...] | None = None   # None: no GPU device nodes in the sandbox
    max_output_bytes: int = 64 * 1024   # tail of stdout/stderr kept each
    kill_output_bytes: int | None = 16 << 20     # a child writing more than this to stdout+stderr is killed
    # the evaluation's disk: its scratch and its compile probes' directories together (a probe's share is
    # 512 MiB). The floor of each job's quota: sandbox/disk.py raises it to what the job's honest outputs
    # need (MoeTokenPermute's cuda job writes 23 GiB), with a margin and the caches' room
    scratch_quota_bytes: int | None = 6 << 30
    scratch_max_entries: int = 20_000
    private_tmp_bytes: int = 256 << 20  # size of the sandbox's own /tmp
    extra_ro_paths: tuple[str, ...] = ()
    # (the lanes' directory, lane_dir, is placement now: core/placement.Placement)

    def __new__(cls, *args, **kwargs):
        refuse_placement("SandboxConfig", kwargs, SANDBOX_FIELDS)     # a config written before the split
        return super().__new__(cls)

    def import_deadline_s(self, module_class: bool) -> float | None:
        """The import's stage deadline of a task whose submission may be a module class (`module_class`:
        TaskSpec.module_entry_point is set) or only a function: the one launch.child_spec puts in the child's
        sandbox and the sandbox stage names in its timeout message."""
        return self.import_module_class_s if module_class else self.import_s


CLOCK_WARMUP_RULES = ("fixed", "steady")


@dataclasses.dataclass(frozen=True)
class TimingConfig:
    warmup_ms: float = 25.0
    clock_warmup_ms: float = 300.0  # the GPU kept busy this long before the first measurement
    min_reps: int = 20
    max_reps: int = 500
    min_time_ms: float = 20.0       # and at least this much GPU time per callable before stopping early
    budget_ms: float = 2000.0       # per shape, kernel and library each
    target_spread: float = 0.02     # stop adding repetitions once (p75-p25)/median is under this
    n_input_sets: int = 3           # inputs rotated among this many sets
    flush_l2: bool = True
    # The library's cached time (judge/library_cache.py) is checked with this many repetitions, interleaved
    # with the kernel's first ones; within library_tolerance (a fraction of it) the cached time stands,
    # else the library is timed in full. A kernel whose first calls (within early_exit_budget_ms of its GPU
    # time; 0: never) take over hopeless_factor x the library's time is not timed further.
    library_check_reps: int = 10
    library_tolerance: float = 0.10
    hopeless_factor: float = 50.0
    early_exit_budget_ms: float = 1000.0
    # issue 35's timing levers, off by default until the H200 runs them side by side (scripts/throughput.py
    # --variant): graph_replay times each callable by replaying a CUDA graph of one call with the L2 flush in
    # it where the call captures (child/graph_timing.py; else the loop, noted in the readings); stop_rule
    # "interval" stops on the median's 95% interval (+-e_halfwidth on E) instead of the spread and min_time_ms
    # (core/timing_stats.settled)
    graph_replay: bool = False
    stop_rule: str = "spread"
    e_halfwidth: float = 0.01
    # each timed shape's recheck (a call after its timing, on inputs it has not seen, whose output the checker
    # judges) runs after the whole exclusive stretch, under the shared lane, instead of inside it: it is a
    # correctness check and needs no GPU to itself. On the H100 light batch (2026-12-06) it was 0.59 s of the
    # 2.82 s exclusive stretch (child/run.py, recheck_calls). On by default since the H100 runs of 2026-12-06
    # (docs/measurement.md items 11-12): +17% evaluations per GPU-hour with the two levers below it, E within
    # 0.5% of the defaults', the same verdicts on the full mix's hostile fixtures.
    recheck_outside_exclusive: bool = True
    # The clock warm-up's end (device/bench.py): "fixed" keeps the GPU busy for clock_warmup_ms; "steady" stops
    # as soon as the SM clock, read from a spin kernel of known cycles every few ms, has held within 1% over
    # three readings (at least 20 ms busy, at most clock_warmup_ms). Under the lanes the GPU is rarely idle when
    # a timing starts (another evaluation's trials ran a moment ago), and the fixed 300 ms was 0.30 s of the
    # 2.82 s exclusive stretch on the H100 light batch (2026-12-06). warm_once: the full timing of a shape does
    # not warm a callable up again that the probe warmed a moment before (its per-call estimate is reused).
    # Both on by default since the H100 runs of 2026-12-06 (docs/measurement.md items 11-12): +7.4% evaluations
    # per GPU-hour, E within 0.31% of the fixed warm-up's on every submission, a steady reading in 22.5 ms.
    clock_warmup_rule: str = "steady"
    warm_once: bool = True
    # The kernel's probe ends once its first probe_hopeless_reps repetitions already show a hopeless kernel (its
    # median over hopeless_factor x the larger of the library check's median so far and the parent's hint),
    # instead of running all library_check_reps (0: off, the default until a GPU run compares it). On the H100
    # light batch (2026-12-06) the probe was 1.07 s of the 1.41 s exclusive stretch per evaluation, and 62% of
    # its seconds were the two hopeless kernels' (30-45 ms calls, 10 probe repetitions each per shape): at 3 the
    # estimate is -4.3 s of exclusive time over the 12 evaluations (docs/measurement.md, "The probe's
    # seconds"). Nothing else moves: the warm-ups, the library check's repetitions and every kernel that is not
    # hopeless are timed as before; the parent replays the rule (core/timing_stats.probe_stops)
    probe_hopeless_reps: int = 0
    # The probe's repetitions counted (issue 35; off until a GPU run compares it): where the probe ends in a full
    # timing, the kernel's probe readings are the first readings of its measurement (and, where the library is
    # timed in full, the library check's are the first of the library's), so the measurement takes that many
    # fewer repetitions to its stopping rule. Sound because both are taken by the same Bench._rep (flush, spin,
    # events) after a warm-up, interleaved as measure_interleaved interleaves; the parent wants the measurement to
    # begin with the probe's readings and replays the stopping rule from there (judge/measure.trusted_timings).
    # Not with graph_replay: graph readings are another procedure (no spin, no launch), which the loop's probe
    # readings would bias (docs/measurement.md, "The probe's readings counted").
    probe_readings_count: bool = False
    # The library's first calls made before the exclusive lane (issue 35): each timed shape's reference called once
    # on its first timing input set at the end of the correctness stretch, under the shared lane (child/timing.
    # warm_library), and by a child pre-started for the task while it waits (ChildSpec.warm). Without it the
    # library's first call in this process is made inside the exclusive timing's warm-up, where the other slots
    # wait for it: on the H100 full mix of 2026-12-07 2.2-13.0 s of an attention task's exclusive stretch. Nothing
    # timed moves: the timing still warms both callables before it measures them. On by default since the H100 run
    # of 2026-12-07 13:00 (docs/measurement.md, "The library's first calls"): the full mix's first 16 +14.2% per
    # GPU-hour (396.8 -> 453.1; SIMULATED beforehand +14.7%), the slowest evaluation 97.5 -> 58.4 s, the same 16
    # statuses, E against do_bench no worse (median |r-1| 6.59% -> 5.43% on the three attention solutions).
    library_warm_before_lane: bool = True
    # The library check amortized (issue 35; off until a GPU run compares it): at most this many timed shapes an
    # evaluation checks the cached library time on (0: every shape, as before). The parent trusts the hint
    # unchecked on the rest only where ok evaluations' checks confirmed it 3 times since a check of it last
    # disagreed, the latest within library_trust_s seconds (judge/library_trust.py); the shapes confirmed longest
    # ago are the ones checked. Such a shape's probe times the kernel alone ("trusted": no library warm-up, no
    # check repetitions) and its E divides the parent's hint, as a confirmed hint's does.
    library_check_shapes: int = 0
    library_trust_s: float = 900.0

    def __post_init__(self):
        if self.stop_rule not in ("spread", "interval"):
            raise UnknownChoiceError("stop rule", self.stop_rule, ("spread", "interval"))
        if self.clock_warmup_rule not in CLOCK_WARMUP_RULES:
            raise UnknownChoiceError("clock warm-up rule", self.clock_warmup_rule, CLOCK_WARMUP_RULES)
        if not 0 < self.e_halfwidth < 1:
            raise ValueError("e_halfwidth must be in (0, 1)")
        if self.library_check_reps < 3:
            raise ValueError("library_check_reps must be at least 3 (a median of fewer is noise)")
        if not 0 < self.library_tolerance < 1:
            raise ValueError("library_tolerance must be in (0, 1)")
        if not self.hopeless_factor > 1:
            raise ValueError("hopeless_factor must be above 1")
        if not self.early_exit_budget_ms >= 0:
            raise ValueError("early_exit_budget_ms must be non-negative")
        if self.probe_hopeless_reps and not 3 <= self.probe_hopeless_reps <= self.library_check_reps:
            raise ValueError(f"probe_hopeless_reps must be 0 (off) or from 3 (a median of fewer is noise) to "
                             f"library_check_reps ({self.library_check_reps}), not {self.probe_hopeless_reps}")
        if self.library_check_shapes < 0:
            raise ValueError(f"library_check_shapes must be 0 (every shape checked) or more, not {self.library_check_shapes}")
        if not 0 < self.library_trust_s <= 86_400:
            raise ValueError(f"library_trust_s must be in (0, 86400] seconds, not {self.library_trust_s}")
        if self.probe_readings_count and self.graph_replay:
            raise ValueError("probe_readings_count with graph_replay: the probe's readings are the loop's (a spin and "
                             "a launch per repetition) and a graph's are not, so one median of both is biased")

    def library_agrees(self, check_ms: float, hint_ms: float) -> bool:
        """Whether a check of the library's time confirms the cached one (the child decides with this, the
        parent re-derives the decision with it)."""
        return hint_ms > 0 and abs(check_ms - hint_ms) <= self.library_tolerance * hint_ms

    def hopeless(self, kernel_ms: float, library_ms: float) -> bool:
        """Whether a kernel this much slower than the library is not worth timing further (the one rule:
        core/slowness.py, which the call deadlines' verdict reads too)."""
        return self.early_exit_budget_ms > 0 and too_slow_to_time(kernel_ms, library_ms, self.hopeless_factor)


@dataclasses.dataclass(frozen=True)
class RewardConfig:
    mode: str = "full"                 # "full" or "correctness" (the gate alone, for side-by-side runs)
    # E in the reward against the library the task declares a user would pick (TaskSpec.e_baseline: torch
    # eager for most; torch.compile or a named alternative where eager is an unfused chain, issue 34), or
    # against eager / torch.compile for every task ("compile": EvalConfig.compile_baseline must not be
    # "off"). terms["E"] always means eager; E_compile and E_alt are reported beside it.
    baseline: str = "task"
    correctness_weight: float = 0.2
    weight_e: float = 0.5
    weight_u: float = 0.5
    e_floor: float = 0.01
    e_ceiling: float = 2.0
    u_floor: float = 0.01
    u_ceiling: float = 1.0
    # a too_slow kernel (correct on every trial it finished, killed past a call's deadline on a larger
    # shape) gets this fraction of the correctness part: judge/reward.too_slow_reward says why
    too_slow_fraction: float = 0.5

    def __post_init__(self):
        if not 0 < self.too_slow_fraction < 1:
            raise ValueError("too_slow_fraction must be in (0, 1): above a wrong kernel, below a finished one")
        if self.mode not in REWARD_MODES:
            raise UnknownChoiceError("reward mode", self.mode, REWARD_MODES)
        if self.baseline not in REWARD_BASELINES:
            raise UnknownChoiceError("reward baseline", self.baseline, REWARD_BASELINES)
        if not 0 <= self.correctness_weight <= 1:
            raise ValueError("correctness_weight must be in [0, 1]")
        if self.weight_e < 0 or self.weight_u < 0 or self.weight_e + self.weight_u <= 0:
            raise ValueError("weight_e and weight_u must be non-negative and not both zero")
        if not (0 < self.e_floor < self.e_ceiling and 0 < self.u_floor < self.u_ceiling):
            raise ValueError("each floor must be positive and below its ceiling")


@dataclasses.dataclass(frozen=True)
class DiagnosisConfig:
    e_threshold: float = 0.5
    u_threshold: float = 0.3
    few_programs_fraction: float = 1.0    # flag a launch with fewer programs than this x the SM count


@dataclasses.dataclass(frozen=True)
class EvalConfig:
    seeds_per_shape: int = 2             # trials per (shape, dtype), each with its own seed and distribution
    # shapes timed on cuda (engine/trials.timed_cases): None, every public and held-out shape in every dtype
    # (8-10 per task, 0.3-0.5 s each in the exclusive timing lane on the H200); n, that many, evenly spread
    # and the same on every evaluation: an RL trainer's throughput knob. E is then the geometric mean over
    # those shapes only, so compare records timed with the same setting (the record lists its shapes).
    timed_shapes: int | None = None
    trial_seed: int | None = None        # None: fresh random seeds every evaluation (hard to cache against)
    max_source_bytes: int = 256 * 1024
    max_child_output_bytes: int = 16 << 20   # a child printing more than this fails (output_too_large)
    sandbox: SandboxConfig = SandboxConfig()
    timing: TimingConfig = TimingConfig()
    reward: RewardConfig = RewardConfig()
    diagnosis: DiagnosisConfig = DiagnosisConfig()   # screening thresholds (judge/diagnosis.py)
    # a kernel measured under this fraction of its floor is a failure (faster_than_floor): 0.8 leaves the
    # best honest kernels of the corpus (U up to 1.03 on the H200) 21% under the bound (judge/floor.py; 0.9 before
    # issue 31 zeroed any kernel whose task overcounted min_bytes by 10%)
    floor_tolerance: float = 0.8
    # where it runs (GPU index, lanes, scratch, cache paths, held_output_bytes) is not here: it is a
    # core/placement.Placement passed beside this config, so that the cache key hashes this config whole
    # while the DSL compiles a kernel in a shape's first correctness call (CPU work: Triton's
    # JITFunction._do_compile, TileLang's JITKernel construction), the child lets the GPU's shared lane go, so
    # that another evaluation's timing can run meanwhile, and takes it again before the launch
    # (child/lanes.py). Only where the child has a lane (cuda; cpu only with an explicit Placement.lane_dir).
    # Off by default until the H200 throughput run compares it side by side.
    compile_outside_lane: bool = False
    # the trusted checker makes its float64 references from the trials' seeds while the child still runs
    # (judge/early_check.py; cpu: a thread of the parent, cuda: the checker's process started early, under the
    # shared lane while it computes); not with a warm checker (the default on cuda: then it does nothing, with a
    # warning). Measured on the H100 (2026-12-06): the references are 9% of the check, most of it is reading
    # the outputs, so it stays off (docs/measurement.md).
    precompute_reference: bool = False
    # the trusted check reads the child's output files into host memory (judge/prefetch.py, up to
    # PREFETCH_BYTES per check) before it takes the GPU's shared lane, and holds the lane only for the copy to
    # the device and the comparison: reading files is host work. On the H100 light batch (2026-12-06) reading
    # was 1.86 s of the check's 2.4 s under the lane. On by default since the H100 runs of 2026-12-06
    # (docs/measurement.md items 11-12): the check's read under the lane 1.64 -> 0.42 s, the same verdicts.
    read_outputs_outside_lane: bool = True
    # with read_outputs_outside_lane: the pre-timing checkpoint's output files are read while the child still
    # times (judge/early_prefetch.py: a request to the warm checker, or a thread of the parent for the cpu
    # check in the parent), so that the check after the child reads only the rechecks' files. The verdict is
    # the same; it shortens the step, not the lane's hold. Off: it has run only with graph replay and the
    # interval stop, whose E moved up to 3.8% on Softmax (2026-12-06 evening), so its own gain is unmeasured.
    read_outputs_while_timing: bool = False
    # issue 35 (docs/measurement.md, "The outputs handed over on the device"): the child keeps its device-held
    # outputs on the GPU and hands them over by CUDA IPC (a trusted per-evaluation opener copies them into the
    # warm checker's arena) instead of writing files; the child is held stopped until the copies, then killed.
    # Applies only on cuda with a warm checker, held_device_bytes > 0, no early check and no early read
    # (engine/handover.applies); elsewhere the files as today. OFF: its false non_finite of 2026-12-07 are mended
    # (the checker's queued kernels wrote its arena after the copies; judge/arena.Arena.export waits now) and
    # such a verdict is checked again by files (engine/handover.RECHECKED), but on the H100 it has not paid yet
    # (light batch -4.7% per GPU-hour, step -0.58 s, one row) and its full-mix row is owed again after the lane
    # cover's deadlock and the held children's memory were mended (docs/measurement.md, "The hand-over on the
    # GPU: the cause found and mended").
    hand_over_outputs: bool = False
    # torch.compile of the reference, timed once per device, software, task version, shape and dtype in a
    # trusted process and cached (judge/baselines.py): "measure" (when missing), "cached" (only what the
    # cache holds), "off". The first evaluation of a task on a device pays its compile (seconds per shape).
    compile_baseline: str = "measure"
    # (that cache's path is Placement.baselines_path)
    # the library's (torch reference's) time per timed shape: "cached" (judge/library_cache.py: the cached
    # time is sent to the child, which checks it briefly and times the library in full only when it
    # drifted) or "measure" (timed in full beside the kernel on every evaluation)
    library_time: str = "cached"
    # (that cache's path is Placement.library_cache_path)

    def __new__(cls, *args, **kwargs):
        # EvalConfig(gpu_index=...) or .replace(gpu_index=...) from code or a config written before the split:
        # a typed error naming the field and where it went, not a bare "unexpected keyword"
        refuse_placement("EvalConfig", kwargs)
        return super().__new__(cls)

    def __post_init__(self):
        if self.timed_shapes is not None and self.timed_shapes < 1:
            raise ValueError("timed_shapes must be None (every shape) or at least 1")
        if self.compile_baseline not in COMPILE_BASELINE_MODES:
            raise UnknownChoiceError("compile baseline mode", self.compile_baseline, COMPILE_BASELINE_MODES)
        if self.library_time not in LIBRARY_TIME_MODES:
            raise UnknownChoiceError("library time mode", self.library_time, LIBRARY_TIME_MODES)
        if self.sandbox.call_factor < self.timing.hopeless_factor:
            # a call killed at its deadline must be too slow to time by the early exit's rule (core/slowness.py)
            raise ValueError("sandbox.call_factor must be at least timing.hopeless_factor")
        if self.read_outputs_while_timing and not self.read_outputs_outside_lane:
            raise ValueError("read_outputs_while_timing reads the outputs for the prefetch of "
                             "read_outputs_outside_lane: turn read_outputs_outside_lane on as well")
        if not isinstance(self.hand_over_outputs, bool):
            raise TypeError(f"hand_over_outputs must be a bool, not {self.hand_over_outputs!r}")
        if self.reward.baseline == "compile" and self.compile_baseline == "off":
            raise ValueError("RewardConfig(baseline='compile') needs compile_baseline 'measure' or 'cached'")

    def replace(self, **changes) -> "EvalConfig":
        return dataclasses.replace(self, **changes)


# The checker's receive arena's cap (judge/ipc_records.ARENA_BYTES, which is judge/prefetch.PREFETCH_BYTES):
# core imports no judge module, so the number is repeated here and tests/test_engine_handover.py holds them equal.
HAND_OVER_ARENA_BYTES = 4 << 30


def check_hand_over(config: EvalConfig, placement: Placement) -> None:
    """EvalConfig.hand_over_outputs with a Placement whose device budget (held_device_bytes) is past the arena's
    cap is refused: every output the child keeps on the device must fit the checker's arena, so that a NeedsFile
    (an output to be written on request) cannot arise in wired use. ConfigConflictError, naming both numbers."""
    if config.hand_over_outputs and placement.held_device_bytes > HAND_OVER_ARENA_BYTES:
        raise ConfigConflictError(
            f"hand_over_outputs needs Placement.held_device_bytes ({placement.held_device_bytes}) at most the "
            f"checker's arena ({HAND_OVER_ARENA_BYTES} B): every device-held output must fit it")


_SUBCONFIGS = {"sandbox": SandboxConfig, "timing": TimingConfig, "reward": RewardConfig,
               "diagnosis": DiagnosisConfig}


def config_from_dict(data: Mapping[str, Any]) -> tuple[EvalConfig, Placement]:
    """An EvalConfig and its Placement from a dict (dataclasses.asdict of an EvalConfig, from JSON), also one
    written before placement left EvalConfig: its placement keys (gpu_index, scratch_root, ..., and
    sandbox.lane_dir) go into the Placement instead of being lost. An unknown key is a TypeError naming it;
    lists where the config has tuples (JSON) are turned back into tuples."""
    if not isinstance(data, Mapping):
        raise TypeError(f"a config dict is a mapping, not a {type(data).__name__}")
    top, where = {}, {}
    for key, value in data.items():
        if key in PLACEMENT_FIELDS:
            where[key] = value
        elif key in _SUBCONFIGS and isinstance(value, Mapping):
            sub = dict(value)
            for name in SANDBOX_FIELDS if key == "sandbox" else ():
                if name in sub:
                    where[name] = sub.pop(name)
            top[key] = _SUBCONFIGS[key](**{k: tuple(v) if isinstance(v, list) else v for k, v in sub.items()})
        else:
            top[key] = value
    try:
        return EvalConfig(**top), Placement(**where)
    except PlacementFieldError:
        raise
    except TypeError as e:
        raise TypeError(f"not an EvalConfig dict: {e}") from e
