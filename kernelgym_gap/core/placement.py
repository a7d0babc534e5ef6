"""Where an evaluation runs, apart from what it measures: the GPU it is pinned to, the directory of its GPU's
lanes, where its scratch directories go, the paths of the per-device caches it reads and writes, and how
much output its child may hold until it lets the GPU's lanes go.

`api/service.EvalService` decides a Placement per slot and hands it to the engine beside the EvalConfig
(`engine.evaluate(..., placement=)`); the engine passes it on to the launcher, the checker and the caches.
None of it is on EvalConfig, so the result cache hashes the EvalConfig whole (store/cache_key.py): two
evaluations that differ only in where they ran share a key by construction. This type is the one list of
what is placement (`FIELDS`); core/config.py reads it to refuse these names on an EvalConfig with a typed
error that says where they went.

held_output_bytes is here because it is scheduling, not measurement: it says only whether the child writes
its outputs inside the lane or after it; the same kernel is timed and checked the same way under any value.
The throughput levers that move work across the lane or the checker (compile_outside_lane,
precompute_reference) stay on EvalConfig, hashed, until the H200 shows they do not change a measurement."""
from __future__ import annotations

import dataclasses

from kernelgym_gap.core.errors import KernelGymError

# on the cpu backend a child holds at most this much (its memory limit is SandboxConfig.memory_bytes)
CPU_HELD_OUTPUT_BYTES = 512 << 20
# the largest pinned staging buffer a child may ask for (output_staging_bytes): pinned memory is taken from the
# host's unswappable pages, one buffer per child, four or more children per GPU
MAX_OUTPUT_STAGING_BYTES = 1 << 30
MAX_READ_ARENA_BYTES = 16 << 30      # read_arena_bytes's bound


def check_read_arena_bytes(value) -> int:
    """`value` if it is a valid read_arena_bytes (an int in [0, MAX_READ_ARENA_BYTES]), else ValueError."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_READ_ARENA_BYTES:
        raise ValueError(f"read_arena_bytes must be an int in [0, {MAX_READ_ARENA_BYTES}], not {value!r}")
    return value


@dataclasses.dataclass(frozen=True)
class Placement:
    gpu_index: int = 0                      # which GPU the child (and checker, calibration) is pinned to on cuda
    # the directory of the GPU lanes (core/lane.py): the child holds its GPU's lane shared for the correctness
    # trials (a pre-started one also while it makes its CUDA context) and exclusive for the timing. "auto":
    # one directory per user and host (core.lane.resolve), so every evaluation of this user on a GPU
    # coordinates, one at a time or not: a pre-started child making its CUDA context during another child's
    # timing inflated that timing by up to 3.6x on the H200 (2026-12-04). None: no lanes. A service with
    # several slots per GPU replaces "auto" and None with a directory of its own. On the cpu backend only an
    # explicit directory gives the child lanes.
    lane_dir: str | None = "auto"
    scratch_root: str | None = None         # where per-evaluation scratch directories go (system temp by default)
    keep_scratch: bool = False              # keep them for debugging
    calibration_path: str | None = None     # device ceilings cache (cuda); default under ~/.cache/kernelgym_gap
    baselines_path: str | None = None       # torch.compile times; default ~/.cache/kernelgym_gap/baselines.json
    library_cache_path: str | None = None   # library times; default ~/.cache/kernelgym_gap/library_times.json
    # host memory a child holds its outputs in until it lets the GPU's lanes go, then writes them for the
    # checker (child/outputs.py); on the cpu backend at most CPU_HELD_OUTPUT_BYTES. 0: each output written as
    # it comes, inside the lane.
    held_output_bytes: int = 4 << 30
    # GPU memory a child on cuda may keep its correctness outputs in (a device copy, taken inside the lane in
    # about a millisecond) until its next checkpoint, where they are copied to the host and written with the
    # shared lane let go (child/outputs.py). Issue 35: the host copies were 1.10 s of an evaluation's shared lane
    # on the H100 light batch (2026-12-06, child_correctness_save). Past it, an output is copied to the host at
    # once, as with 0: the same outputs reach the checker either way. 1 GiB by default since the H100 runs of
    # 2026-12-06 (docs/measurement.md items 11-12: child_correctness_save 0.80 -> 0.003 s, the same verdicts).
    # The budget is taken from the submission's own later calls of a shape: a kernel that needs nearly all of
    # the GPU's memory can meet out_of_memory 1 GiB sooner (0 turns it off).
    held_device_bytes: int = 1 << 30
    # the pinned host buffer a child on cuda writes its device-held outputs through (core/tensor_file.py,
    # child/outputs.py): each output is copied to the host a chunk of this size at a time by DMA and written from
    # there, instead of being copied whole into fresh pageable memory (0.79 s/GiB on the H100 host,
    # 2026-12-06: most of the 1.5-2.2 s of writes in an env.step, 2026-12-07). The files' bytes are the same.
    # Where the pinned buffer is refused, the child writes as with 0 and says so (outputs_staging_refused).
    # 0: off. Measured on an H200 (2026-12-07 18:36, docs/measurement.md): the writes 3.03 -> 0.90 s per
    # evaluation, the light batch +9.8% and +2.8%, the warm step -1.6 and -1.8 s, the same statuses. Two
    # submissions' E moved 7% and 12% beside it there (lanes row against lanes row). On an H100 (2026-12-08 00:46,
    # staging_laned) each lanes row's E was within 0.75% of the one-at-a-time path on the six optimized
    # solutions, with and without the buffer, and the light batch +5.7%: 64 MiB by default since, with
    # outputs_copy_laned (issue 35).
    output_staging_bytes: int = 64 << 20
    # each copy of a device-held output off the GPU (the held_device_bytes copies, written at a checkpoint or after
    # the timing with both lanes let go) holds the GPU's shared lane for the copy alone (child/lanes.py
    # ChildLane.copying; with output_staging_bytes, each chunk's copy), and lets it go for the file write. Without
    # it those copies (the copy engine reading the GPU's memory) can run beside another evaluation's exclusive
    # timing, which the lanes are there to prevent ("a measurement never shares the GPU"). Found on the cpu
    # 2026-12-08 while looking for why E moved beside the pinned buffer. On by default since the H100 run of
    # 2026-12-08 00:46 (staging_laned): E within 0.57% of the one-at-a-time path, the light batch 626.2 -> 619.6
    # per GPU-hour beside the buffer alone (-1.1%, inside a row's noise), the same statuses.
    outputs_copy_laned: bool = True
    # how long an evaluation waits for its disk reservation (sandbox/disk_ledger.py: jobs on one scratch root
    # reserve what they may write) before ScratchSpaceError; long enough for a big cuda job ahead of it to end
    disk_wait_s: float = 900.0
    # a service's slot takes its next request from the queue as its submission's child ends, and pre-starts its
    # next child for that request (its DSL, its task's library warm-up: TimingConfig.library_warm_before_lane)
    # instead of for the one just evaluated; a slot that finds the queue empty runs a request another, busy,
    # slot took ahead (api/service.py). Off: the next child is for the evaluation that just ended. Issue 35
    # (sim/prestart_warm.py): in a mixed batch 8 of 16 pre-started children warmed 35.4 s for the wrong task.
    # On by default since the H100 runs of 2026-12-07 15:12-15:29 (the full mix's first 16, twice: +5.8% and
    # +16.1% per GPU-hour, the same statuses, E within 0.94%; docs/measurement.md)
    prestart_for_next: bool = True
    # a warm slot starts its next child's process as its submission's child starts, without a task, and gives it
    # its task (the library's warm-up: TimingConfig.library_warm_before_lane) as that child ends
    # (sandbox/prestart.ChildPool.start_early), instead of starting it then: its imports (5.1-5.9 s from spawn to
    # the runner on the H100 and H200 hosts, 2026-12-07) overlap the running child rather than the check. A child
    # whose settings turn out not to be the next evaluation's (another DSL, a task with larger outputs: its disk
    # limits) is let go and the next one started as without it. Issue 35: SIMULATED +3.5..6.4% per run on the
    # 16-job rows of 2026-12-07 15:12 (sim/prestart_start_table.py, "child_start_bind_at_end"); OFF until measured
    # (E beside a second process importing during a child's timing; docs/measurement.md).
    prestart_early: bool = False
    # the warm checker reads the child's output files into host memory it keeps from one evaluation to the next
    # (judge/read_arena.py), faulted in once, instead of into fresh memory faulted in page by page: the check's
    # prefetch was 1.7-2.2 s of each H200 warm env.step for ~2.1 GiB of outputs (2026-12-07), and reading a cached
    # file into resident memory is 5-9x faster on the CI host (scripts/read_arena_bench.py). The verdicts are the
    # same (the same bytes). Held per warm checker (one per slot) for the pool's life, up to this many bytes; a
    # read it cannot hold gets fresh memory as before. 0: off. OFF until measured on a GPU host (issue 35).
    read_arena_bytes: int = 0

    def __post_init__(self):
        if isinstance(self.gpu_index, bool) or not isinstance(self.gpu_index, int) or self.gpu_index < 0:
            raise ValueError(f"gpu_index must be a non-negative int, not {self.gpu_index!r}")
        if isinstance(self.held_output_bytes, bool) or not isinstance(self.held_output_bytes, int) \
                or self.held_output_bytes < 0:
            raise ValueError("held_output_bytes must be a non-negative int")
        if isinstance(self.held_device_bytes, bool) or not isinstance(self.held_device_bytes, int) \
                or self.held_device_bytes < 0:
            raise ValueError("held_device_bytes must be a non-negative int")
        if isinstance(self.output_staging_bytes, bool) or not isinstance(self.output_staging_bytes, int) \
                or not 0 <= self.output_staging_bytes <= MAX_OUTPUT_STAGING_BYTES:
            raise ValueError(f"output_staging_bytes must be an int in [0, {MAX_OUTPUT_STAGING_BYTES}], not "
                             f"{self.output_staging_bytes!r}")
        check_read_arena_bytes(self.read_arena_bytes)
        for name in ("prestart_for_next", "prestart_early", "outputs_copy_laned"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a bool, not {getattr(self, name)!r}")
        if isinstance(self.disk_wait_s, bool) or not isinstance(self.disk_wait_s, (int, float)) \
                or not self.disk_wait_s >= 0:
            raise ValueError(f"disk_wait_s must be a non-negative number of seconds, not {self.disk_wait_s!r}")

    def replace(self, **changes) -> "Placement":
        return dataclasses.replace(self, **changes)

    def held_output_bytes_for(self, backend: str) -> int:
        """What a child on `backend` may hold (see held_output_bytes)."""
        return self.held_output_bytes if backend == "cuda" else min(self.held_output_bytes, CPU_HELD_OUTPUT_BYTES)

    def held_device_bytes_for(self, backend: str) -> int:
        """The GPU memory a child on `backend` may keep outputs in (see held_device_bytes): none off cuda."""
        return self.held_device_bytes if backend == "cuda" else 0

    def output_staging_bytes_for(self, backend: str) -> int:
        """The pinned staging buffer of a child on `backend` (see output_staging_bytes): none off cuda, where
        no output is on a device."""
        return self.output_staging_bytes if backend == "cuda" else 0

    def outputs_copy_laned_for(self, backend: str) -> bool:
        """Whether a child on `backend` holds the shared lane for its outputs' copies off the GPU (see
        outputs_copy_laned): never off cuda, where no output is on a device."""
        return self.outputs_copy_laned and backend == "cuda"

    def lanes_for(self, backend: str) -> str | None:
        """The lane directory the trusted side (checker, calibration, baselines) takes on `backend`: the GPU's
        lanes on cuda, none on cpu (where only the child takes an explicit one)."""
        return self.lane_dir if backend == "cuda" else None


FIELDS = tuple(f.name for f in dataclasses.fields(Placement))
# the one placement field that lived on EvalConfig.sandbox rather than on EvalConfig itself
SANDBOX_FIELDS = ("lane_dir",)


class PlacementFieldError(KernelGymError, TypeError):
    """A placement field given to EvalConfig or SandboxConfig (a config written before placement left them):
    names the field and where it goes now. A TypeError, as any unknown keyword of a dataclass is."""

    def __init__(self, where: str, names):
        names = sorted(names)
        self.where, self.names = where, names
        calls = ", ".join(f"{n}=..." for n in names)
        super().__init__(f"{where} has no field {', '.join(repr(n) for n in names)} any more: where an "
                         f"evaluation runs is a core.placement.Placement({calls}), passed beside the config "
                         f"(engine.evaluate(..., placement=), EvalService(..., placement=)); "
                         f"core.config.config_from_dict splits an old config dict into both")

    def __reduce__(self):
        return type(self), (self.where, self.names)


def refuse_placement(where: str, names, allowed=FIELDS) -> None:
    """Raises PlacementFieldError when `names` (keywords given to a config) include placement fields."""
    found = [n for n in names if n in allowed]
    if found:
        raise PlacementFieldError(where, found)
