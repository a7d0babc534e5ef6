"""The outputs' copies off the GPU under the shared lane (Placement.outputs_copy_laned; child/lanes.ChildLane.copying,
core/tensor_file.write_tensor(guard=); built 2026-12-08, ON by default since the H100 run of 00:46) as a change of
the simulator's jobs. Every figure these give is a PREDICTION, from ESTIMATED copy seconds: no record before
2026-12-08 has the copies' own seconds or bytes (results/h100_2026-12-08_session55/staging_laned has their waits).

What it changes. On cuda the child keeps its correctness outputs on the device (Placement.held_device_bytes, 1 GiB)
and copies them to the host and writes their files at each checkpoint (with the shared lane let go: the Job's
`unlaned`, the records' child_checkpoint_unlaned) and after the timing (both lanes let go: the Job's `write`,
child_outputs_write), and at the checkpoint before the timing, which holds neither lane (child_checkpoint_write
less child_checkpoint_unlaned; the replay has it in the Job's `misc`). As built the copies run beside another
evaluation's exclusive timing. With the switch each copy holds the SHARED lane for itself alone (waiting behind a
running or queued timing: the lane is writer-preferring) and lets it go for the file write: each 64 MiB chunk's copy
with Placement.output_staging_bytes (the pinned buffer), else each tensor's whole pageable `.to("cpu")`.

How the jobs express it (pipeline.py is not changed; its shared holds are the correctness stretch's pieces, cut by
the checkpoints, and the recheck's hold after the timing):
  a let-go checkpoint  its write (unlaned x its share) becomes three checkpoints of the stretch: a let-go of 0 s (the
                       lane let go, then taken back shared: the copy's own wait, behind a running or queued timing, as
                       the pipeline's writer-preferring lane makes it), the copy kept inside the hold that follows
                       (Job.kept_checkpoints), and a let-go for the file write (host, the rest). The correctness between
                       checkpoints is cut evenly over the pieces, so two thirds of each piece run inside the copy's hold
                       rather than before the let-go: the same shared seconds, the cut in another place
  the one before the   its copy is a let-go of 0 s and the copy kept at the stretch's end (its file write stays in
  timing               `misc`, after the outputs' write: a host delay either way)
  the final write      its copy is the Job's `recheck`, a shared hold after the timing with its own wait (the trace
                       names it "recheck"; where the row's rechecks run there already, as in the H200 staging_2
                       rows, the copy joins their hold, without a wait of its own); the rest stays the host `write`
A checkpoint already kept under the lane (a design candidate) is left: its copy runs under the hold already.
`own_acquire=False` is the cruder approximation: each copy kept in the hold before its checkpoint's let-go, with no
wait of its own (the timing that comes waits for it instead). With Setup.compile_outside_lane the extra checkpoints
would cut the compiles into more let-gos than the child makes: `compiles_let_go=True` adds the copies to the
correctness stretch instead (spread over its pieces). A job without checkpoint writes (no let-go write and no write
before the timing: a record whose outputs were not device copies) is left as it is.

The copy's share of a write (ESTIMATED): bytes from the write's seconds at the device's measured write rate
(scripts/staging_bench.py, a device tensor to its file, 1,024 MiB, medians of 5), the copy from those bytes:
  pinned (the row ran output_staging_bytes)  the copy at PINNED_COPY_GB_S (~20 GB/s, H100/H200 pinned D2H; not
      measured here: "about 3 ms a 64 MiB chunk", docs/measurement.md) over the write through the 64 MiB buffer,
      0.261 s/GiB on the H100 (results/h100_2026-12-07_session54/staging_bench), 0.420 s/GiB on the H200
      (results/h200_2026-12-07_session53/staging): share 0.206 (H100), 0.128 (H200)
  pageable (as built)  the copy at 0.79 s/GiB (the H100 host, 2026-12-06; docs/measurement.md) over the pageable
      write, 0.923 s/GiB on the H100, 1.483 s/GiB on the H200: share 0.856 (H100), 0.533 (H200)
  another device: the H100's figures. WHOLE_WRITE (1.0) is the pessimistic end: every second of the writes a copy.
Weak points: the 20 GB/s and the 0.79 s/GiB are not the H200's measured copies (its pageable share would be 0.75 if
its page-cache write, 0.37 s/GiB in 2026-12-04, were the rest); the H100 bench's figures disagree with each other
(0.923 - 0.79 leaves 0.133 s/GiB of file write, the pinned row 0.207; at 0.133 the pinned copy would be 8.4 GB/s,
share 0.49); the bench's writes are one tensor at a time, the child's many; the pinned buffer's making
(child_outputs_staging_alloc, ~0.04 s, in the first checkpoint's write) and each checkpoint's report write are
counted as writes. The pipeline merges a checkpoint's copies (~5 pinned chunks, or its tensors' pageable copies)
into one hold with one wait; in the child a later chunk's copy waits again when a timing came during the
checkpoint's write (tens of ms pinned, a second or more pageable), which the model leaves out. The lane's waits are
the pipeline's own (the replay as calibrated: it overshot these rows' measured rates by 6-10%); the 13-evaluation
replay moves by several % with its order, so the steady state (the row x4 in seeded orders) is the figure to read."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping

from kernelgym_gap.sim.pipeline import Job

GIB = float(2 ** 30)
PINNED_COPY_GB_S = 20.0           # pinned device -> host, GB/s (ESTIMATE)
PAGEABLE_COPY_S_PER_GIB = 0.79    # a pageable .to("cpu"), the H100 host, 2026-12-06 (docs/measurement.md)
# the device tensor to its file (scripts/staging_bench.py, 1,024 MiB): (pinned through 64 MiB, pageable), s/GiB
WRITE_S_PER_GIB = {"H100": (0.261, 0.923), "H200": (0.420, 1.483)}
DEFAULT_DEVICE = "H100"
WHOLE_WRITE = 1.0                 # the pessimistic end: the whole write a copy
STAGING = "output_staging_bytes"  # the row's variant that writes through the pinned buffer
COPY_LANED = "outputs_copy_laned=1"   # scripts/throughput.py's --variant (device_session.sh staging-laned)


def _device_key(device: str) -> str:
    return next((k for k in WRITE_S_PER_GIB if k in (device or "").upper()), DEFAULT_DEVICE)


def pinned(variant: str) -> bool:
    """Whether a row's variant writes through the pinned buffer (output_staging_bytes set, not 0)."""
    fields = dict(f.split("=", 1) for f in (variant or "").split(",") if "=" in f)
    return fields.get(STAGING, "0") not in ("", "0")


def write_s_per_gib(device: str, is_pinned: bool) -> float:
    pin, page = WRITE_S_PER_GIB[_device_key(device)]
    return pin if is_pinned else page


def copy_share(device: str, is_pinned: bool) -> float:
    """The copy's ESTIMATED share of a write's seconds on `device` (see the module's docstring)."""
    copy = GIB / (PINNED_COPY_GB_S * 1e9) if is_pinned else PAGEABLE_COPY_S_PER_GIB
    return min(1.0, copy / write_s_per_gib(device, is_pinned))


def laned_variant(variant: str) -> str:
    return f"{variant},{COPY_LANED}" if variant else COPY_LANED


def pre_timing_writes(records: Iterable[dict], mode: str) -> dict[str, float]:
    """Job name (the submission, else the task) -> the seconds of the checkpoint before the timing (child_checkpoint_
    write less child_checkpoint_unlaned, which holds the let-go checkpoints' writes), for the records of `mode`
    that have child_checkpoint_write. A name met twice with different seconds is left out."""
    out: dict[str, float] = {}
    twice: set[str] = set()
    for r in records:
        lat = r.get("latency") or {}
        if r.get("mode") != mode or "child_checkpoint_write" not in lat:
            continue
        cw = float(lat.get("child_checkpoint_write") or 0.0)
        s = max(0.0, cw - min(cw, float(lat.get("child_checkpoint_unlaned") or 0.0)))
        name = r.get("submission") or r.get("task", "?")
        if name in out and out[name] != s:
            twice.add(name)
        out[name] = s
    return {k: v for k, v in out.items() if k not in twice}


def _writes(j: Job) -> tuple[list[float], list[bool]]:
    """Each let-go checkpoint's write seconds and whether it keeps the lane (empty: no checkpoint writes)."""
    n = j.checkpoints if j.unlaned > 0 else 0
    shares = (j.checkpoint_shares or (1.0 / n,) * n) if n else ()
    kept = j.kept_checkpoints or (False,) * n
    return [j.unlaned * s for s in shares], list(kept)


def _pre(j: Job, pre_timing: Mapping[str, float] | None) -> float:
    return max(0.0, min((pre_timing or {}).get(j.name, 0.0), j.misc))


def has_writes(j: Job, pre_timing: Mapping[str, float] | None = None) -> bool:
    return bool(_writes(j)[0]) or _pre(j, pre_timing) > 0


def copy_s(j: Job, share: float, pre_timing: Mapping[str, float] | None = None) -> float:
    """The seconds the change moves under the shared lane: `share` of the let-go checkpoints' writes (not those
    kept already), of the one before the timing and of the final write; 0 for a job without checkpoint writes."""
    if not has_writes(j, pre_timing):
        return 0.0
    writes, kept = _writes(j)
    return share * (sum(w for w, k in zip(writes, kept) if not k) + _pre(j, pre_timing) + j.write)


def gib_estimate(j: Job, device: str, is_pinned: bool, pre_timing: Mapping[str, float] | None = None) -> float:
    """The outputs' GiB the job's writes imply at the device's write rate (ESTIMATED; the records have no bytes)."""
    return (j.unlaned + _pre(j, pre_timing) + j.write) / write_s_per_gib(device, is_pinned)


def copies_laned(share: float, pre_timing: Mapping[str, float] | None = None, own_acquire: bool = True,
                 compiles_let_go: bool = False) -> Callable[[Job], Job]:
    """The Job -> Job change: `share` of each write's seconds under the shared lane, the rest a host stage (see the
    module's docstring). Never negative; a job without checkpoint writes, or share 0, is left as it is."""
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"share must be within [0, 1], not {share!r}")

    def change(j: Job) -> Job:
        if share == 0.0 or j.copies_laned or not has_writes(j, pre_timing):
            return j
        writes, kept = _writes(j)
        pre_copy = share * _pre(j, pre_timing)
        final = share * j.write
        common = dict(misc=max(0.0, j.misc - pre_copy), recheck=j.recheck + final, write=max(0.0, j.write - final),
                      copies_laned=True)
        if compiles_let_go:          # the copies spread over the stretch's holds; its let-gos as they were
            left = [w if k else (1.0 - share) * w for w, k in zip(writes, kept)]
            total = sum(left)
            moved = sum(writes) - total
            return dataclasses.replace(
                j, correctness=j.correctness + moved + pre_copy, unlaned=total,
                checkpoint_shares=tuple(w / total for w in left) if total > 0 else (),
                kept_checkpoints=j.kept_checkpoints if total > 0 else (),
                checkpoints=j.checkpoints if total > 0 else 0, **common)
        wait = [(0.0, False)] if own_acquire else []     # a let-go of 0 s: the copy takes the lane back itself
        parts: list[tuple[float, bool]] = []
        for w, k in zip(writes, kept):
            parts += [(w, True)] if k else wait + [(share * w, True), ((1.0 - share) * w, False)]
        if pre_copy > 0:
            parts += wait + [(pre_copy, True)]
        total = sum(s for s, _ in parts)
        if total <= 0:
            return j
        return dataclasses.replace(j, unlaned=total, checkpoints=len(parts),
                                   checkpoint_shares=tuple(s / total for s, _ in parts),
                                   kept_checkpoints=tuple(k for _, k in parts), **common)
    return change


def models(device: str, variant: str, pre_timing: Mapping[str, float] | None = None,
           compiles_let_go: bool = False) -> tuple[tuple[str, float, Callable[[Job], Job]], ...]:
    """The table's changes for a row of `variant` on `device`: (name, share, change)."""
    share = copy_share(device, pinned(variant))
    kind = "pinned chunks" if pinned(variant) else "pageable copies"
    return ((f"{kind} laned", share, copies_laned(share, pre_timing, True, compiles_let_go)),
            (f"{kind} laned, in the hold (no own wait)", share, copies_laned(share, pre_timing, False,
                                                                             compiles_let_go)),
            ("whole writes laned (pessimistic)", WHOLE_WRITE, copies_laned(WHOLE_WRITE, pre_timing, True,
                                                                          compiles_let_go)))
