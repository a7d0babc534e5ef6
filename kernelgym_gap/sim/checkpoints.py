"""The checkpoints' lane let-gos (issue 35 / 38) as simulator transforms: each task's real checkpoints
(`CheckpointPlan`, computed on the trusted side by scripts/simulate_throughput.py from child/outputs.
checkpoint_due) and the design candidates (a)-(d) that keep the lane for some writes, make fewer checkpoints or
let go before every call. None is built: the simulator predicted that none gains 5% (docs/measurement.md, "The
checkpoints' lane waits"). Split from sim/levers.py, which keeps the built levers."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable

from kernelgym_gap.sim.levers import Scenario
from kernelgym_gap.sim.pipeline import Job


def _same(x):
    return x

# ---- the checkpoints' lane let-gos (issue 35 / 38): design candidates, chosen on the simulator -------------
# The kinds of checkpoint child/outputs.checkpoint_due makes between correctness calls (the one before the
# timing, between the two stages, holds no lane and is not among them)
SECOND_CALL, REPEATS, LARGER_SHAPE = "second call", "repeats", "larger shape"


@dataclasses.dataclass(frozen=True)
class CheckpointPlan:
    """One task's checkpoints between correctness calls, in order: what each is before (`kinds`: SECOND_CALL,
    REPEATS of a shape after its first seeds, or a LARGER_SHAPE's first seeds) and the bytes of outputs it
    writes (`sizes`); `last` is the bytes the checkpoint before the timing writes. Computed on the trusted side
    (scripts/simulate_throughput.py: checkpoint_due over the task's cuda correctness order, the honest outputs'
    sizes of sandbox/output_sizes.py); this package imports nothing of kernelgym_gap's."""
    kinds: tuple[str, ...]
    sizes: tuple[int, ...]
    last: int
    calls: int = 0          # the correctness calls (trials) of the job: a let-go before each after the first at most

    def __post_init__(self):
        if len(self.kinds) != len(self.sizes) or any(k not in (SECOND_CALL, REPEATS, LARGER_SHAPE) for k in self.kinds):
            raise ValueError(f"a checkpoint plan needs one known kind per size: {self.kinds} / {self.sizes}")


def with_checkpoint_plans(plans: dict[str, CheckpointPlan]) -> Callable[[Job], Job]:
    """Each job with its task's plan, its let-go writes split by their bytes rather than evenly. A job whose
    record has no let-go parts (the H200 runs of 2026-12-05, before the checkpoints) gets them imputed: as many
    let-gos as the plan has, their write the plan's byte share of the record's child_outputs_write (which then
    wrote every correctness output after the lanes), the rest left in the outputs' write (an ASSUMPTION: the
    same write rate, the timing's recheck outputs ignored). Jobs of unknown tasks, and hung ones, unchanged."""
    def change(j: Job) -> Job:
        plan = plans.get(j.task)
        if plan is None or j.hang_s or not plan.sizes:
            return j
        total = sum(plan.sizes)
        shares = tuple(b / total for b in plan.sizes) if total > 0 else ()
        if j.unlaned > 0 and j.checkpoints == len(plan.sizes):
            return dataclasses.replace(j, checkpoint_shares=shares, checkpoint_plan=plan)
        if j.unlaned > 0 or j.write <= 0:
            return j
        moved = j.write * total / (total + plan.last) if total + plan.last > 0 else 0.0
        return dataclasses.replace(j, unlaned=moved, write=j.write - moved, checkpoints=len(plan.sizes),
                                   checkpoint_shares=shares, checkpoint_plan=plan)
    return change


def checkpoints_keep_lane(max_bytes: float) -> Callable[[Job], Job]:
    """Candidate (a): a checkpoint whose outputs are at most `max_bytes` writes with the shared lane kept (no
    let-go, no wait to take it back); larger ones let it go as today. Needs the job's plan (with_checkpoint_plans)."""
    def change(j: Job) -> Job:
        plan = j.checkpoint_plan
        if not isinstance(plan, CheckpointPlan) or j.checkpoints != len(plan.sizes):
            return j
        return dataclasses.replace(j, kept_checkpoints=tuple(b <= max_bytes for b in plan.sizes))
    return change


def fewer_checkpoints(kinds: frozenset[str], smallest_repeats: bool = False) -> Callable[[Job], Job]:
    """Candidate (b): only the checkpoints of `kinds` are made (and, with `smallest_repeats`, the first REPEATS
    one: before the smallest shape's repeats); a dropped one's outputs are written by the next one made, or by
    the one before the timing, which holds no lane. Needs the job's plan."""
    def change(j: Job) -> Job:
        plan = j.checkpoint_plan
        if not isinstance(plan, CheckpointPlan) or j.checkpoints != len(plan.sizes) or j.unlaned <= 0:
            return j
        first_repeats = plan.kinds.index(REPEATS) if smallest_repeats and REPEATS in plan.kinds else -1
        per_byte = j.unlaned / sum(plan.sizes) if sum(plan.sizes) > 0 else 0.0
        new_kinds, new_sizes, carry = [], [], 0
        for n, (kind, size) in enumerate(zip(plan.kinds, plan.sizes)):
            carry += size
            if kind in kinds or n == first_repeats:
                new_kinds.append(kind)
                new_sizes.append(carry)
                carry = 0
        unlaned, total = per_byte * sum(new_sizes), sum(new_sizes)
        return dataclasses.replace(
            j, unlaned=unlaned, write=j.write + (j.unlaned - unlaned), checkpoints=len(new_sizes),
            checkpoint_shares=tuple(b / total for b in new_sizes) if total > 0 else (), kept_checkpoints=(),
            checkpoint_plan=CheckpointPlan(tuple(new_kinds), tuple(new_sizes), plan.last + carry, plan.calls))
    return change


def let_go_every_call() -> Callable[[Job], Job]:
    """Candidate (d), the opposite of (a): the shared lane let go and taken back before every correctness call
    after the first (plan.calls - 1 let-gos), the same writes spread evenly over them. Needs the job's plan."""
    def change(j: Job) -> Job:
        plan = j.checkpoint_plan
        if not isinstance(plan, CheckpointPlan) or plan.calls < 2 or j.unlaned <= 0:
            return j
        return dataclasses.replace(j, checkpoints=plan.calls - 1, checkpoint_shares=(), kept_checkpoints=(),
                                   checkpoint_plan=None)
    return change


MIB = 1 << 20
KEEP_LANE_MIB = (1, 64, 256)    # candidate (a)'s thresholds: RowSum's outputs (<= 3 MiB); each task's smallest
                                # shape (43-57 MiB); the smaller shapes' (<= 192 MiB); on the H100 these write
                                # at ~3.5 GB/s (0.8 s for GELU's 2.8 GiB): 64 MiB is ~20 ms, 256 MiB ~75 ms


def checkpoint_scenarios(plans: dict[str, CheckpointPlan]) -> list[Scenario]:
    """Candidates (a), (b) and (c) for the checkpoints' let-gos, each applied after the plans (whose row with
    nothing else changed is the baseline they compare with). `variant` None: not built."""
    base = with_checkpoint_plans(plans)
    b_strict = frozenset({SECOND_CALL, LARGER_SHAPE})
    rows = [Scenario("checkpoints as today (byte-split writes)", base, _same,
                     "the records' checkpoints, each let-go's write by its outputs' bytes")]
    for mib in KEEP_LANE_MIB:
        keep = checkpoints_keep_lane(mib * MIB)
        rows.append(Scenario(f"(a) keep the lane for writes <= {mib} MiB", lambda j, k=keep: k(base(j)), _same,
                             f"a checkpoint of <= {mib} MiB of outputs writes with the shared lane kept"))
    keep_all = checkpoints_keep_lane(float("inf"))
    rows.append(Scenario("(a) keep the lane for every write", lambda j: keep_all(base(j)), _same,
                         "no checkpoint lets the lane go (as before issue 38's let-go)"))
    strict = fewer_checkpoints(b_strict)
    rows.append(Scenario("(b) no checkpoint before a shape's repeats", lambda j: strict(base(j)), _same,
                         "before the second call and each larger shape only: a serial kernel killed in the "
                         "smallest shape's repeats leaves one dtype (timeout, not too_slow)"))
    smallest = fewer_checkpoints(b_strict, smallest_repeats=True)
    rows.append(Scenario("(b') ... except the smallest shape's repeats", lambda j: smallest(base(j)), _same,
                         "as (b), and the checkpoint before the smallest shape's repeats kept (its first seeds "
                         "in every dtype are then on disk when its second call is killed)"))
    every = let_go_every_call()
    rows.append(Scenario("(d) a let-go before every call", lambda j: every(base(j)), _same,
                         "the opposite direction: the same writes, the lane let go and taken back between every two "
                         "correctness calls"))
    keep64 = checkpoints_keep_lane(64 * MIB)
    rows.append(Scenario("(c) (b') + keep the lane <= 64 MiB", lambda j: keep64(smallest(base(j))), _same,
                         "both"))
    rows.append(Scenario("(c) (b') + keep the lane for every write", lambda j: keep_all(smallest(base(j))), _same,
                         "both"))
    return rows
