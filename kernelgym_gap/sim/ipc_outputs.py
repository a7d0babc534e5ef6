"""The correctness outputs handed over on the device by CUDA IPC (issue 35, the warm env.step's 4 s goal): the
DESIGN (every output by handle: `ipc_outputs`) and the engine AS BUILT behind EvalConfig.hand_over_outputs (by
handle within the device budget: `ipc_outputs_as_built`), both simulated; the costs measured on the H200 and
the H100 (docs/measurement.md, "The outputs handed over on the device" and "the cause found and mended").

Today an output travels child GPU memory -> host copy (child_correctness_save) -> file (the checkpoints' writes
and child_outputs_write) -> the checker's host memory (check_prefetch, or check_read under the lane) -> the
checker's GPU memory (the copy `.to(ref.device)` inside check_read). On the H100's warm steps of 2026-12-06
that was 2.4-3.0 s of a 6.7-8.0 s step. With the design the child keeps each output on the device, exports a
handle to it, and a per-evaluation opener maps the handles and copies the bytes device-to-device into the
checker's memory under the check's shared lane hold. What the simulator changes for it (`ipc_outputs`):
  correctness   the host copies become device copies (DEVICE_COPY_FACTOR of them, as Placement.held_device_bytes
                measured: 0.003 s against 0.984 s on the H100, item 11), and stay in the held stretch
  checkpoints   no files to write: each checkpoint is a message of handle records (CHECKPOINT_MESSAGE_S), and
                the child still lets the shared lane go for it. The let-go is kept on purpose: it is the window a
                timing waiting at the gate takes. Without it (the let-gos dropped with their writes) the model
                gives the lane-time levers + this design 901.0 per GPU-hour against 902.9 without it on the H100
                call of 2026-12-06 (results/h100_2026-12-06_lane_levers/call1), with them 1,070.5
  write         child_outputs_write becomes the handle export of each output (EXPORT_S_PER_OUTPUT)
  check         the reads (check_prefetch, and check_read, which holds the host-to-device copy) become the
                opener's work: OPENER_FIXED_S, OPEN_S_PER_OUTPUT per handle, and the bytes read and written once
                at COPY_BYTES_PER_S (all three measured by the IPC probe on the H200)
Every figure it gives is a PREDICTION. This package imports nothing of kernelgym_gap's."""
from __future__ import annotations

import dataclasses
import statistics

from kernelgym_gap.sim import levers
from kernelgym_gap.sim.pipeline import Job

# The three figures below are MEASURED by scripts/ipc_probe.py (the legacy cudaIpc route) on an NVIDIA H200,
# torch 2.11, driver 580.159.04, 2026-12-06 20:16 UTC: results/h200_2026-12-06c_ipc_defaults/call1_ipc_probes/
# ipc_probe/ipc_probe.json, its "parts" (3 rounds of 24 outputs, 1.34 GiB, each by a fresh opener), reduced by
# measured_figures() below exactly as the probe's last table does (ipc_probe/log.txt, "figure ... measured").
# tests/test_simulate_throughput.py holds each constant to that file, so a newer probe run committed in its place
# changes them knowingly. The jobs the simulator replays are H100 records: the copy rate is the H200's, not
# theirs. Until 2026-12-06 20:16 these were ASSUMED (docs/measurement.md, "The probes, run 2026-12-06").
#
# Device-to-device copy rate, bytes read + written per second: 2 x the 24 outputs' bytes x 3 rounds over the
# sum of "per handle: copy" (72 copies into the checker's arena). A copy of N bytes moves 2N of them.
COPY_BYTES_PER_S = 2.56e12
# cudaIpcOpenMemHandle + cuMemGetAddressRange + cudaIpcCloseMemHandle per output, in the opener: the median of
# "per handle: open + range + close" (n 72; 0.0977 ms, p90 0.125 ms)
OPEN_S_PER_OUTPUT = 0.098e-3
# ASSUMED: the child's cudaIpcGetMemHandle (the docs call it lightweight) and one JSON record per output. The
# probe timed the export call itself at 0.006 ms median ("exporter: range + cudaIpcGetMemHandle", and the same for
# torch's _share_cuda_); the record's writing was not timed, so the 0.5 ms stands as an upper figure.
EXPORT_S_PER_OUTPUT = 0.0005
# ASSUMED: a checkpoint's message of handle records to the parent, with the shared lane let go and taken back
# (an flock release and a pipe write; the waits to take it back are the simulator's own)
CHECKPOINT_MESSAGE_S = 0.001
# The opener's round trip per evaluation less its handles and copies: the median over the 3 rounds of "round
# trip (parent: copy command to reply)" less the median per-handle cost x 24 less that round's share of the
# copies (0.87, 1.63 and 1.54 ms). The opener is pre-started like the children, so its start (295 ms to ready,
# "opener start to ready") is made during the agent's turn, off this path.
OPENER_FIXED_S = 1.54e-3
# What a light-batch evaluation hands over when its job has no checkpoint plan: Softmax-v2 and LayerNorm-v1's
# honest outputs on cuda, 16 correctness trials (1.39 and 1.40 GiB: sandbox/output_sizes.expected_bytes over
# their correctness order, as scripts/simulate_throughput.checkpoint_plans computes them), plus the timed shapes'
# recheck outputs, ASSUMED at half the correctness bytes (one call per timed shape where the correctness order
# calls each shape about twice): 2.1 GiB. At the copy rate above that is 1.8 ms: the bytes do not matter, the
# per-handle costs do.
RECHECK_BYTES_SHARE = 0.5
LIGHT_OUTPUT_BYTES = int(2.1 * (1 << 30))
LIGHT_OUTPUTS = 16 + levers.TIMED_SHAPES


@dataclasses.dataclass(frozen=True)
class MeasuredFigures:
    """The simulator's three hand-over figures as one run of scripts/ipc_probe.py measured them."""
    open_s_per_output: float          # median of "per handle: open + range + close"
    opener_fixed_s: float             # median round trip less the handles and the round's copies
    copy_bytes_per_s: float           # bytes read + written per second over all the copies
    handover_s: float                 # median "round trip (parent: copy command to reply)"


def measured_figures(parts: dict[str, list[float]], nbytes: int) -> MeasuredFigures:
    """The figures from an IPC probe's "parts" (seconds per part, its JSON's key) and the bytes one round hands
    over (the sum of its exports' nbytes). The probe's last table prints these, so the constants above and that
    table cannot drift apart. A probe whose rounds or handles did not run has no figures: ValueError."""
    per = parts.get("per handle: open + range + close") or []
    copies = parts.get("per handle: copy") or []
    trips = parts.get("round trip (parent: copy command to reply)") or []
    if not (per and copies and trips) or nbytes <= 0:
        raise ValueError(f"a probe without timed rounds: {len(per)} handles, {len(copies)} copies, "
                         f"{len(trips)} round trips, {nbytes} bytes")
    rounds = len(trips)
    med_per = statistics.median(per)
    # each round's fixed part: its round trip less the median handle cost x its handles and its share of the
    # copies (the copies are summed, not medianed: their sizes span 4 KiB to 256 MiB)
    fixed = [t - med_per * len(per) / rounds - sum(copies) / rounds for t in trips]
    return MeasuredFigures(open_s_per_output=med_per, opener_fixed_s=statistics.median(fixed),
                           copy_bytes_per_s=2 * nbytes * rounds / sum(copies), handover_s=statistics.median(trips))


def output_bytes(j: Job) -> tuple[int, int]:
    """(bytes, outputs) the job hands over: its task's checkpoint plan where the job carries one (every
    checkpoint's bytes, the last one's included, and RECHECK_BYTES_SHARE more for the timed shapes' rechecks; one
    output per correctness call plus one per timed shape), else the light batch's LIGHT_OUTPUT_BYTES and LIGHT_OUTPUTS."""
    plan = j.checkpoint_plan
    if plan is not None and getattr(plan, "calls", 0) > 0:
        correctness = sum(plan.sizes) + plan.last
        return int(correctness * (1 + RECHECK_BYTES_SHARE)), int(plan.calls) + levers.TIMED_SHAPES
    return LIGHT_OUTPUT_BYTES, LIGHT_OUTPUTS


def with_plans(plans: dict | None):
    """Each job with its task's checkpoint plan (scripts/simulate_throughput.checkpoint_plans) in the field alone,
    so that output_bytes reads the task's own bytes instead of the light batch's LIGHT_OUTPUT_BYTES: AddReLU and
    GELU hand over 3.0-3.3 GiB, RowSum 0.01. Nothing else changes (the let-gos' split is the checkpoint
    transforms'); a job that has a plan already, or whose task has none, is left. Applied before the hand-over's
    transforms only: the checkpoint candidates read the field as their own."""
    def change(j: Job) -> Job:
        plan = (plans or {}).get(j.task)
        return j if plan is None or j.checkpoint_plan is not None else dataclasses.replace(j, checkpoint_plan=plan)
    return change


def handover_s(nbytes: int, outputs: int) -> float:
    """The opener's seconds under the check's shared hold: each handle opened, checked and closed, and the bytes
    copied device-to-device once (read and written: 2 x nbytes at COPY_BYTES_PER_S)."""
    if nbytes < 0 or outputs < 0:
        raise ValueError(f"a hand-over of {nbytes} bytes in {outputs} outputs")
    return OPENER_FIXED_S + OPEN_S_PER_OUTPUT * outputs + 2.0 * nbytes / COPY_BYTES_PER_S


def _no_outputs_moved(j: Job) -> bool:
    """A job that never reached a child, or whose outputs never left the device through files (no save, no
    write, no read): the hand-over changes nothing of it."""
    return not j.child or (j.save <= 0 and j.write <= 0 and j.check_read <= 0 and j.check_prefetch <= 0)


def ipc_outputs(j: Job) -> Job:
    """The job with its outputs handed over on the device (see the module's docstring). A job that never
    reached its check (a gate refusal, a killed call without one) keeps its check as it was; a job whose outputs
    never left the device through files (no save, no write, no read) is left as it is."""
    if _no_outputs_moved(j):
        return j
    nbytes, outputs = output_bytes(j)
    moved = j.save * (1 - levers.DEVICE_COPY_FACTOR)
    change = dict(correctness=max(0.0, j.correctness - moved), save=j.save - moved,
                  unlaned=CHECKPOINT_MESSAGE_S * j.checkpoints if j.unlaned > 0 else 0.0,
                  write=EXPORT_S_PER_OUTPUT * outputs if j.write > 0 else 0.0)
    if j.has_check and j.check > 0:
        read = levers.read_part(j)
        change.update(check=j.check - read + handover_s(nbytes, outputs), check_read=0.0, check_prefetch=0.0)
    return dataclasses.replace(j, **change)


# AS BUILT (engine/handover.py behind EvalConfig.hand_over_outputs; H100 light batch, 2026-12-07 10:14, docs/
# measurement.md "the cause found and mended"): only the outputs kept on the device are handed over, and an
# exported copy stays held to the end, so the device budget (Placement.held_device_bytes) bounds them all
# together: past it, an output is a host copy made in its lane (the correctness calls' save, or the recheck)
# and a file written and read as without the hand-over, but read UNDER the check's lane (until 2026-12-07 10:50,
# when run_handover gained the file path's read before the lane). The design above hands over every output; the
# flag's measured row handed over 13.4 outputs an evaluation of about 25, and moved 1.06 s of reads under the lane.
DEVICE_BUDGET_BYTES = 1 << 30       # Placement.held_device_bytes' default (a test holds them equal)
# The host copy's seconds per byte, MEASURED before the hand-over existed (H100 light batch, 2026-12-06, item
# 11: the host copies took 1.10 s of an evaluation's shared lane for its 1.40 GiB of correctness outputs).
HOST_COPY_S_PER_BYTE = 1.10 / (1.40 * (1 << 30))


def ipc_outputs_as_built(j: Job, budget: int = DEVICE_BUDGET_BYTES, read_before_lane: bool = False) -> Job:
    """The job with its outputs handed over as the engine does it (the constants' comment): the correctness
    outputs, then the rechecks', by handle while `budget` lasts, the rest by file. The file share's host copies
    go into the save (correctness) and the recheck at HOST_COPY_S_PER_BYTE; its writes keep their share of the
    job's own writes, less that copy; its reads keep their share of the job's prefetch and read, all under the
    lane (as run on 2026-12-07 10:14), or as the file path reads them with `read_before_lane` (the engine since
    10:50: judge/checker.run_handover's before_lane). The handed-over
    share costs the design's opener, handles and exports. Every figure it gives is a PREDICTION."""
    if _no_outputs_moved(j):
        return j
    nbytes, outputs = output_bytes(j)
    correctness = nbytes / (1 + RECHECK_BYTES_SHARE)
    rechecks = nbytes - correctness
    kept_c = min(correctness, budget)
    kept_r = min(rechecks, max(0.0, budget - kept_c))
    file_c, file_r = correctness - kept_c, rechecks - kept_r
    share = (file_c + file_r) / nbytes if nbytes else 0.0
    handed = max(0, round(outputs * (1 - share)))
    written = j.unlaned + j.write                # the job's own writes: their host copies included
    write_only = max(0.0, 1 - HOST_COPY_S_PER_BYTE * nbytes / written) if written > 0 else 0.0
    save_more, recheck_more = HOST_COPY_S_PER_BYTE * file_c, HOST_COPY_S_PER_BYTE * file_r
    change = dict(correctness=j.correctness + save_more, save=j.save + save_more,
                  unlaned=(CHECKPOINT_MESSAGE_S * j.checkpoints + j.unlaned * (file_c / correctness) * write_only)
                  if j.unlaned > 0 else 0.0,
                  write=(EXPORT_S_PER_OUTPUT * handed + j.write * share * write_only) if j.write > 0 else 0.0)
    if j.recheck > 0:
        change["recheck"] = j.recheck + recheck_more
    elif j.timing_recheck > 0:
        change.update(timing=j.timing + recheck_more, timing_recheck=j.timing_recheck + recheck_more)
    if j.has_check and j.check > 0:
        read = levers.read_part(j)
        under = share * (read if read_before_lane else read + j.check_prefetch)
        change.update(check=j.check - read + handover_s(int(kept_c + kept_r), handed) + under, check_read=under,
                      check_prefetch=share * j.check_prefetch if read_before_lane else 0.0)
    return dataclasses.replace(j, **change)


# The flag's variant names the engine as it is now: the file outputs read before the lane since 2026-12-07
# 10:50 (judge/checker.run_handover's before_lane). The row the H100 measured at 10:14 ran the code before
# that: its model is the first row, which no variant runs any more.
AS_BUILT = (
    ("outputs handed over on the device, as run 2026-12-07 10:14 (1 GiB budget; the rest by file, read under "
     "the lane)", ipc_outputs_as_built, None),
    ("outputs handed over on the device, as built (the same, the file outputs read before the lane)",
     lambda j: ipc_outputs_as_built(j, read_before_lane=True), "hand_over_outputs=1"),
    ("  as built with a 4 GiB budget (the arena's cap; a candidate)",
     lambda j: ipc_outputs_as_built(j, budget=4 << 30, read_before_lane=True), None),
)


def lane_time_levers_ipc(j: Job) -> Job:
    """The lane-time levers (levers.lane_time_levers) with the outputs handed over on the device in place of
    the reads before and during the lane and the device-held outputs' let-go writes."""
    return ipc_outputs(levers.lane_time_levers(j))


SCENARIOS = (
    ("outputs handed over on the device (CUDA IPC; DESIGN: every output by handle)", ipc_outputs),
    ("the lane-time levers + outputs handed over on the device (DESIGN)", lane_time_levers_ipc),
)


def scenarios(read_before_lane_ran: bool = True) -> list[levers.Scenario]:
    """The design's rows for the simulator's prediction tables (no variant: nothing to run on the GPU yet), and
    the engine's as built. The flag's variant names the model of the code a measured row ran: the read before
    the lane (the default), or with `read_before_lane_ran` False the code as run at 10:14 (a row whose records
    have no check_prefetch: sim/handover_stages.read_before_lane), so that its measured figure sits beside the
    model of the same code."""
    basis = (f"save x {levers.DEVICE_COPY_FACTOR:g} in the held stretch, the checkpoints' let-gos kept with "
             f"{CHECKPOINT_MESSAGE_S * 1e3:g} ms of message each, no output files; "
             f"the check's reads -> {OPENER_FIXED_S * 1e3:g} ms + {OPEN_S_PER_OUTPUT * 1e3:g} ms per handle + "
             f"2 x bytes at {COPY_BYTES_PER_S / 1e12:.2f} TB/s (the IPC probe on the H200, 2026-12-06)")
    built = (f"as the design, but by handle only while {DEVICE_BUDGET_BYTES >> 30} GiB of device budget lasts "
             f"(exported copies held to the end); the rest host-copied in their lane at "
             f"{HOST_COPY_S_PER_BYTE * (1 << 30):.2f} s/GiB (H100, 2026-12-06), written, and read under the lane "
             f"(as run at 10:14) or before it (as built)")
    flag, measured = AS_BUILT[1][2], 1 if read_before_lane_ran else 0     # the one row a measured flag row sits by
    rows = [(name, fn, flag if i == measured else None) for i, (name, fn, _) in enumerate(AS_BUILT)]
    return ([levers.Scenario(name, fn, lambda s: s, built, variant) for name, fn, variant in rows]
            + [levers.Scenario(name, fn, lambda s: s, basis, None) for name, fn in SCENARIOS])
