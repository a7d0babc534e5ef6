"""The hand-over's model held to a measured row stage by stage (issue 35): where `ipc_outputs_as_built`, applied to a
call's DEFAULTS row, differs from the same call's `hand_over_outputs=1` row, and what the flag's row itself
predicts for the next change when the model's stage costs are the wrong ones.

Why: on the H100 call of 2026-12-07 10:14 the model predicted 684.9 per GPU-hour where the flag's row measured
598.1 (+14.5%), and its lane waits (+1.6 s per evaluation in the child) looked unexplained, though the simulator
replays the flag's own records within 5.7%. So the contention is modelled right and the stage costs are not:
the table below says which stages, and by how much each evaluation's lane holds grew.

`stage_rows`: per stage (the Job's fields, each the mean over the submissions both rows ran) the defaults, the
model applied to them, and the flag's measured; then the lane-held seconds per evaluation (shared: correctness,
the recheck outside the exclusive hold and the check; exclusive: the timing).
`from_flag_row`: the flag's own jobs with their file outputs read before the check's lane (levers.read_outside,
as judge/checker.run_handover's before_lane does since 2026-12-07 10:50), simulated beside the same jobs as
they ran; the measured rate scaled by their ratio. A flag row that already read before its lane (its records
carry check_prefetch) has nothing to predict. Every simulated figure is a PREDICTION. Imports nothing of the
engine's."""
from __future__ import annotations

import dataclasses
import statistics

from kernelgym_gap.sim import ipc_outputs, levers
from kernelgym_gap.sim.pipeline import Job, Setup, simulate, step_p50

FLAG = "hand_over_outputs=1"
# the Job fields the hand-over changes or that moved beside it, in the pipeline's order
STAGES = ("setup", "calls", "correctness", "save", "unlaned", "timing", "recheck", "write", "check",
          "check_read", "check_prefetch")


class StagesError(ValueError):
    """The two rows cannot be held side by side (no submission in common)."""


def _first_by_name(jobs: list[Job]) -> dict[str, Job]:
    out: dict[str, Job] = {}
    for j in jobs:
        out.setdefault(j.name, j)
    return out


def paired(defaults: list[Job], flag: list[Job]) -> tuple[list[Job], list[Job]]:
    """The submissions both rows ran, each row's jobs in the same order (a name run twice in a row: its first)."""
    d, f = _first_by_name(defaults), _first_by_name(flag)
    names = [n for n in d if n in f]
    if not names:
        raise StagesError(f"no submission in both rows ({len(d)} defaults, {len(f)} with the flag)")
    return [d[n] for n in names], [f[n] for n in names]


def read_before_lane(flag: list[Job]) -> bool:
    """Whether the flag's row read its file outputs before the check's lane (a record with check_prefetch)."""
    return any(j.check_prefetch > 0 for j in flag)


def flag_read_before_lane(rows: dict[str, list[Job]], variants: dict[str, str]) -> bool:
    """Whether a call's flag row (variant FLAG) read before its lane; True where the call ran none (the model
    of the code as it is now)."""
    flag = next((rows[m] for m, v in variants.items() if v == FLAG), None)
    return not flag or read_before_lane(flag)


def lane_holds(j: Job) -> tuple[float, float]:
    """(shared, exclusive) lane-held seconds of one evaluation: its correctness stretch, a recheck outside the
    exclusive hold and its check are shared holds; its timing is the exclusive one."""
    return j.correctness + j.recheck + (j.check if j.has_check else 0.0), j.timing


def _mean(jobs: list[Job], f) -> float:
    return statistics.fmean(f(j) for j in jobs)


def stage_rows(defaults: list[Job], flag: list[Job], plans: dict | None = None) -> list[dict]:
    """Per stage: the defaults' mean, the model's (ipc_outputs_as_built on the defaults, reading before the
    lane as the flag's row did, each task's bytes from `plans` where given: ipc_outputs.with_plans), the flag's
    measured mean, and model - measured; then the lane holds."""
    d, f = paired(defaults, flag)
    before = read_before_lane(f)
    attach = ipc_outputs.with_plans(plans)
    m = [ipc_outputs.ipc_outputs_as_built(attach(j), read_before_lane=before) for j in d]
    rows = []
    for k in STAGES:
        a, b, c = (_mean(js, lambda j, k=k: getattr(j, k)) for js in (d, m, f))
        rows.append({"stage": k, "defaults": round(a, 3), "model": round(b, 3), "measured": round(c, 3),
                     "model_minus_measured": round(b - c, 3)})
    for i, name in ((0, "lane held shared"), (1, "lane held exclusive")):
        a, b, c = (_mean(js, lambda j: lane_holds(j)[i]) for js in (d, m, f))
        rows.append({"stage": name, "defaults": round(a, 3), "model": round(b, 3), "measured": round(c, 3),
                     "model_minus_measured": round(b - c, 3)})
    return rows


@dataclasses.dataclass(frozen=True)
class FlagPrediction:
    replayed: float          # the flag's jobs as they ran, simulated (per GPU-hour)
    predicted: float         # the same with the file outputs read before the lane, simulated
    measured: float          # the flag's row as measured
    scaled: float            # measured x predicted / replayed: the prediction on the measured scale
    moved_s: float           # seconds per evaluation moved out of the check's lane hold


def from_flag_row(flag: list[Job], measured: float, setup: Setup = Setup()) -> FlagPrediction | None:
    """The flag's row with its file outputs read before the lane (see the module's docstring); None where the
    row ran that already, or has no job."""
    if not flag or read_before_lane(flag):
        return None
    moved = [levers.read_outside(j) for j in flag]
    replayed = simulate(flag, setup).evals_per_gpu_hour
    predicted = simulate(moved, setup).evals_per_gpu_hour
    return FlagPrediction(round(replayed, 1), round(predicted, 1), measured,
                          round(measured * predicted / replayed, 1) if replayed > 0 else 0.0,
                          round(_mean(flag, lambda j: j.check) - _mean(moved, lambda j: j.check), 3))


def step_from_flag(steps: list[Job], measured_p50: float | None) -> dict | None:
    """The warm env.step run with the flag (throughput.py's --env-steps-variant): its steps replayed as they ran
    and with their file outputs read before the lane, each alone (pipeline.step_p50); None where there are
    none or they read before the lane already."""
    if not steps or read_before_lane(steps):
        return None
    return {"measured_p50_s": measured_p50, "replayed_p50_s": round(step_p50(steps), 2),
            "predicted_p50_s": round(step_p50([levers.read_outside(j) for j in steps]), 2)}


def of_call(rows: dict[str, list[Job]], variants: dict[str, str], measured: dict[str, float],
            defaults_mode: str = "lanes", flag_steps: list[Job] = (), flag_step_p50: float | None = None,
            plans: dict | None = None) -> dict | None:
    """Both tables for one call's light batch (study.LightInputs' rows, variants and measured rates, and its warm
    steps run with the flag): None where the call ran no row with the flag alone beside its defaults."""
    flag_mode = next((m for m, v in variants.items() if v == FLAG), None)
    if flag_mode is None or defaults_mode not in rows:
        return None
    flag = rows[flag_mode]
    pred = from_flag_row(flag, measured[flag_mode])
    return {"row": flag_mode, "read_before_lane": read_before_lane(flag),
            "stages": stage_rows(rows[defaults_mode], flag, plans),
            "from_flag_row": None if pred is None else dataclasses.asdict(pred),
            "step_from_flag": step_from_flag(list(flag_steps), flag_step_p50)}
