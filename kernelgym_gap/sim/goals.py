"""The gap to issue 35's goals (>= 1,500 evaluations per GPU-hour on the light batch, >= 1,000 on the full mix, a
warm env.step p50 <= 4 s) as the simulator sees it: what would have to shrink, and by how much, once the lane-time
levers (levers.lane_time_levers) and the outputs handed over on the device (ipc_outputs.lane_time_levers_ipc, a
DESIGN) are applied. Every figure here is a PREDICTION of the model, never a measurement.

The lane time is cut into stage families, each a part of the simulator's Job that the records name (FAMILIES: the
exclusive timing's measured repetitions, its probe, the timed shapes' first calls, the clock warm-up, the rest of
the timing's set-up; the rechecks; the correctness calls' compiles and their run, the correctness stretch's inputs,
the host copies; the check's hand-over and the rest of the check; the checkpoints' let-go messages, the outputs'
export; the child's set-up, its start and hand-off; the killed calls; the record's rest). `study` scales each
alone by 0.5 and by 0 (a sensitivity table), finds a combination that reaches each goal by GREEDY search (one
family one step down, 1 -> 0.5 -> 0, the step that gains most first; greedy, so not proven the smallest), at 4, 6
and 8 slots per GPU, and gives each family's share of the lane-held seconds. The model has no GPU-sharing slowdown
beyond what the records measured, so its 6- and 8-slot rates are upper bounds (docs/measurement.md item 11: the
defaults at 6 slots measured below 4).

Rates are the steady state: the workload `copies` times over, each copy in a seeded order, the mean over `seeds`
(a 12-evaluation row moves by several per cent with its tail); the as-run replay of the row is reported beside it.
This module changes no Job it is given and nothing of the other tables (tests/test_sim_goals.py checks)."""
from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable, Sequence

from kernelgym_gap.sim import ipc_outputs, levers
from kernelgym_gap.sim.pipeline import Job, Setup, simulate

LIGHT_GOAL = 1500.0       # evaluations per GPU-hour, the light batch (issue 35)
FULL_GOAL = 1000.0        # evaluations per GPU-hour, the full mix (issue 35)
STEP_GOAL_S = 4.0         # warm env.step p50 (issue 35)
FACTORS = (0.5, 0.0)      # the sensitivity table's scalings of one family at a time
LEVELS = (1.0, 0.5, 0.0)  # the greedy search's steps for a family
SLOTS = (4, 6, 8)
COPIES = 4                # the steady state: the row this many times over, each copy in a seeded order ...
SEEDS = (1, 2, 3, 4, 5)   # ... in each of these seeds' orders, the mean (the 16-evaluation full mix with its two
                          # 30-60 s hangs moves by a few per cent from one order to the next)


class GoalsError(ValueError):
    """The study was asked for something it cannot give (named)."""


@dataclasses.dataclass(frozen=True)
class Staged:
    """A job with the lane-time levers and the hand-over applied, and the two parts of its blobs the Job has no
    field for: the opener's hand-over inside `check` and the clock warm-up inside `timing`."""
    job: Job
    handover: float = 0.0
    warmup: float = 0.0


def stage(j: Job) -> Staged:
    """The job as the study starts from it: levers.lane_time_levers then ipc_outputs.ipc_outputs (the transform
    the prediction tables' last row uses), its compiles set apart (levers.compile_share where the record has none:
    `compile` is read by the simulator only with compile_outside_lane, which the study leaves off, so the rate is
    unchanged) and the hand-over and warm-up seconds it holds."""
    lv = levers.lane_time_levers(j)
    out = ipc_outputs.ipc_outputs(lv)
    handover = 0.0
    # ipc_outputs replaces the check's reads with the hand-over only where the job reached a check with outputs
    if out is not lv and lv.has_check and lv.check > 0:
        handover = min(out.check, ipc_outputs.handover_s(*ipc_outputs.output_bytes(lv)))
    if out.compile <= 0 and out.calls > 0:
        out = levers.compile_share(out)
    warmup = min(levers.STEADY_CLOCK_WARMUP_S, out.timing) if out.timing > 0 else 0.0
    return Staged(out, handover, warmup)


# ---- the stage families: each a part of the Job, its seconds, whether it holds the lane, and its scaling ----
def _timing_part(seconds: Callable[[Staged], float], field: str | None = None, warmup: bool = False):
    """A part of the exclusive `timing` (and of its own record field where it has one)."""
    def scale(s: Staged, k: float) -> Staged:
        cut = (1 - k) * seconds(s)
        j = dataclasses.replace(s.job, timing=max(0.0, s.job.timing - cut))
        if field:
            j = dataclasses.replace(j, **{field: max(0.0, getattr(j, field) - cut)})
        return dataclasses.replace(s, job=j, warmup=s.warmup - cut if warmup else s.warmup)
    return scale


def _measure(s: Staged) -> float:
    """The Job's timing_measure, which levers.graph_interval_measured sets for every timed job (from the record's
    part, else MEASURE_SHARE of the timing). Not levers.measured_part: on a record without the timing's parts (the
    H200 runs) that reads a measure scaled to 0 as unrecorded and gives MEASURE_SHARE of the timing back."""
    return min(s.job.timing, s.job.timing_measure) if s.job.timing > 0 else 0.0


def _probe(s: Staged) -> float:
    return min(s.job.timing, s.job.timing_probe) if s.job.timing > 0 else 0.0


def _first_call(s: Staged) -> float:
    return min(s.job.timing, s.job.timing_first_call) if s.job.timing > 0 else 0.0


def _recheck_inside(s: Staged) -> float:
    """The rechecks still inside the exclusive stretch (a job the recheck lever left: no timing_recheck moved)."""
    return s.job.timing_recheck if s.job.recheck <= 0 and s.job.timing > 0 else 0.0


def _timing_rest(s: Staged) -> float:
    return max(0.0, s.job.timing - _measure(s) - _probe(s) - _first_call(s) - s.warmup - _recheck_inside(s))


def _recheck(s: Staged) -> float:
    return s.job.recheck if s.job.recheck > 0 else _recheck_inside(s)


def _scale_recheck(s: Staged, k: float) -> Staged:
    j = s.job
    if j.recheck > 0:
        return dataclasses.replace(s, job=dataclasses.replace(j, recheck=j.recheck * k, timing_recheck=j.timing_recheck * k))
    cut = (1 - k) * _recheck_inside(s)
    return dataclasses.replace(s, job=dataclasses.replace(j, timing=j.timing - cut, timing_recheck=j.timing_recheck - cut))


def _correctness_part(seconds: Callable[[Staged], float], *fields: str):
    """A part of the held correctness stretch (and of the named fields that count it)."""
    def scale(s: Staged, k: float) -> Staged:
        cut = (1 - k) * seconds(s)
        change = {f: max(0.0, getattr(s.job, f) - cut) for f in ("correctness", *fields)}
        return dataclasses.replace(s, job=dataclasses.replace(s.job, **change))
    return scale


def _compiles(s: Staged) -> float:
    return min(s.job.compile, s.job.correctness)


def _calls_run(s: Staged) -> float:
    return max(0.0, min(s.job.calls, s.job.correctness) - _compiles(s))


def _save(s: Staged) -> float:
    return min(s.job.save, s.job.correctness)


def _correctness_rest(s: Staged) -> float:
    return max(0.0, s.job.correctness - _compiles(s) - _calls_run(s) - _save(s))


def _check_rest(s: Staged) -> float:
    return max(0.0, s.job.check - s.handover) if s.job.has_check else 0.0


def _scale_handover(s: Staged, k: float) -> Staged:
    cut = (1 - k) * s.handover
    return Staged(dataclasses.replace(s.job, check=max(0.0, s.job.check - cut)), s.handover - cut, s.warmup)


def _field(*names: str) -> tuple[Callable[[Staged], float], Callable[[Staged, float], Staged]]:
    """A family that is whole Job fields (scaled together)."""
    return (lambda s: sum(getattr(s.job, n) for n in names),
            lambda s, k: dataclasses.replace(s, job=s.job.scaled(**{n: k for n in names})))


def _hung_laned(s: Staged) -> float:
    return min(s.job.hang_s, s.job.hang_lane_s) if s.job.hang_s and s.job.hang_lane else 0.0


@dataclasses.dataclass(frozen=True)
class Family:
    """A stage family: `keys` names the records' latency keys (or the model's constants) it is; `lane` the lane
    its seconds hold ("exclusive", "shared", or "" for host stages; `laned` overrides it per job)."""
    name: str
    keys: str
    lane: str
    seconds: Callable[[Staged], float]
    scale: Callable[[Staged, float], Staged]
    laned: Callable[[Staged], float] | None = None

    def lane_seconds(self, s: Staged) -> float:
        if self.laned is not None:
            return self.laned(s)
        return self.seconds(s) if self.lane else 0.0


_handoff = _field("handoff", "pre_startup", "pre_host", "pre_context", "pre_warm")
_setup = _field("setup")
# a checkpoint's let-go with nothing left to write still lets the lane go: the simulator drops the let-gos of a job
# whose `unlaned` is 0 (pipeline.correctness_stretch), which is the opposite design (the correctness stretch held in
# one piece, 22% fewer evaluations on the H100 light batch; ipc_outputs' docstring), so the scaling keeps LET_GO_FLOOR_S
LET_GO_FLOOR_S = 1e-9


def _scale_unlaned(s: Staged, k: float) -> Staged:
    j = s.job
    floor = LET_GO_FLOOR_S if j.unlaned > 0 and j.checkpoints > 0 else 0.0
    return dataclasses.replace(s, job=dataclasses.replace(j, unlaned=max(floor, j.unlaned * k)))


_unlaned = (lambda s: s.job.unlaned, _scale_unlaned)
_write = _field("write")
_rest = _field("gate", "misc", "rest")
_hang = _field("hang_s")

FAMILIES: tuple[Family, ...] = (
    Family("timing: measured repetitions", "child_timing_measure", "exclusive", _measure,
           _timing_part(_measure, "timing_measure")),
    Family("timing: the probe", "child_timing_probe", "exclusive", _probe, _timing_part(_probe, "timing_probe")),
    Family("timing: the timed shapes' first calls", "child_timing_first_call", "exclusive", _first_call,
           _timing_part(_first_call, "timing_first_call")),
    Family("timing: the clock warm-up", f"child_timing_clock_warmup (steady: {levers.STEADY_CLOCK_WARMUP_S:g} s, "
           "assumed)", "exclusive", lambda s: s.warmup, _timing_part(lambda s: s.warmup, warmup=True)),
    Family("timing: its set-up and inputs", "child_timing - the parts above (child_timing_setup, _inputs)",
           "exclusive", _timing_rest, _timing_part(_timing_rest)),
    Family("the rechecks", "child_recheck / child_timing_recheck", "shared", _recheck, _scale_recheck,
           laned=_recheck),
    Family("correctness: the calls' compiles", f"child_compile_unlaned (else {levers.COMPILE_SHARE} x the calls)",
           "shared", _compiles, _correctness_part(_compiles, "calls", "compile")),
    Family("correctness: the calls' run", "child_correctness_calls less the compiles", "shared", _calls_run,
           _correctness_part(_calls_run, "calls")),
    Family("correctness: inputs and the rest",
           "child_correctness + child_library_warm less calls, copies and let-gos", "shared",
           _correctness_rest, _correctness_part(_correctness_rest)),
    Family("correctness: host copies (device copies with the hand-over)", "child_correctness_save", "shared", _save,
           _correctness_part(_save, "save")),
    Family("check: the hand-over (opener)", "check_read + check_prefetch -> ipc_outputs.handover_s", "shared",
           lambda s: s.handover if s.job.has_check else 0.0, _scale_handover),
    Family("check: inputs, reference, compare", "check less check_lane_wait and the reads", "shared", _check_rest,
           lambda s, k: dataclasses.replace(s, job=dataclasses.replace(s.job, check=s.handover + _check_rest(s) * k))
           if s.job.has_check else s),
    Family("checkpoints' let-gos (messages)", "child_checkpoint_unlaned", "", *_unlaned),
    Family("outputs' export", "child_outputs_write", "", *_write),
    Family("child set-up and import", "child_setup + child_import", "", *_setup),
    Family("child start and hand-off", "hand-off, pre-start startup, imports, CUDA context and library warm-up",
           "host; context and warm-up shared", *_handoff, laned=lambda s: s.job.pre_context + s.job.pre_warm),
    Family("killed calls (to their deadline)", "the hung call's seconds (hang_s)", "shared (a call); host (import)",
           *_hang, laned=_hung_laned),
    Family("gate and the record's rest", "gate, the child's unaccounted rest, the record's assembly", "", *_rest),
)
FAMILY_NAMES = tuple(f.name for f in FAMILIES)


def family(name: str) -> Family:
    for f in FAMILIES:
        if f.name == name:
            return f
    raise GoalsError(f"no stage family {name!r}; families: {', '.join(FAMILY_NAMES)}")


def apply(staged: Sequence[Staged], factors: dict[str, float]) -> list[Job]:
    """The jobs with each named family scaled by its factor (0 <= factor <= 1)."""
    for name, k in factors.items():
        if not 0.0 <= k <= 1.0:
            raise GoalsError(f"family {name!r}: a factor must be within 0..1, not {k}")
    fams = [(family(n), k) for n, k in factors.items() if k != 1.0]
    out = []
    for s in staged:
        for f, k in fams:
            s = f.scale(s, k)
        out.append(s.job)
    return out


# ---- the measures: the steady rate of a workload and the warm step ----
@dataclasses.dataclass(frozen=True)
class Workload:
    """One workload of the study: its jobs as they ran (in dispatch order), staged, and how it is measured."""
    label: str
    staged: tuple[Staged, ...]
    copies: int = COPIES
    seeds: tuple[int, ...] = SEEDS

    def orders(self) -> list[list[int]]:
        """Each seed's order of the workload `copies` times over (study.replicated's rule, on indices)."""
        import random
        n = len(self.staged)
        out = []
        for seed in self.seeds:
            rng = random.Random(seed)
            copies = [rng.sample(range(n), n) for _ in range(self.copies)]
            out.append([copy[i] for i in range(n) for copy in copies])
        return out

    def rate(self, factors: dict[str, float], slots: int = 4) -> float:
        jobs = apply(self.staged, factors)
        return statistics.mean(simulate([jobs[i] for i in order], Setup(slots_per_gpu=slots)).evals_per_gpu_hour
                               for order in self.orders())

    def as_run(self, factors: dict[str, float], slots: int = 4) -> float:
        return simulate(apply(self.staged, factors), Setup(slots_per_gpu=slots)).evals_per_gpu_hour


def step_p50(steps: Sequence[Staged], factors: dict[str, float]) -> float:
    """The warm env.step p50 (pipeline.step_p50's rule: each step alone, its child pre-started)."""
    return statistics.median(simulate([j], Setup(), warm_first=True).makespan for j in apply(steps, factors))


# ---- the study ----
def sensitivity(workloads: Sequence[Workload], steps: Sequence[Staged]) -> list[dict]:
    """Each family alone at each of FACTORS: the workloads' steady rates (4 slots) and the step p50."""
    base = {w.label: w.rate({}) for w in workloads}
    rows = [{"family": "(levers + hand-over, nothing scaled)", "x": 1.0, "keys": "",
             **{w.label: round(base[w.label], 1) for w in workloads},
             "step_p50_s": round(step_p50(steps, {}), 2) if steps else None}]
    for f in FAMILIES:
        for k in FACTORS:
            row = {"family": f.name, "x": k, "keys": f.keys}
            for w in workloads:
                r = w.rate({f.name: k})
                row[w.label] = round(r, 1)
                row[f"{w.label}_gain"] = round(r / base[w.label] - 1, 4) if base[w.label] else None
            row["step_p50_s"] = round(step_p50(steps, {f.name: k}), 2) if steps else None
            rows.append(row)
    return rows


@dataclasses.dataclass
class Combination:
    """A greedy search's answer: the factors it took, the value they give, and whether the goal is met."""
    goal: str
    target: float
    slots: int | None
    factors: dict[str, float]
    value: float
    reached: bool
    path: list[tuple[str, float, float]]      # (family, its new factor, the value after the step)

    def as_row(self) -> dict:
        cut = ", ".join(f"{n} x{k:g}" for n, k in self.factors.items() if k < 1.0)
        if not self.reached:
            text = f"UNREACHABLE: every family at 0 gives {self.value:.2f}"
        else:
            text = cut or "(none: met with the levers and the hand-over)"
        return {"goal": self.goal, "target": self.target, "slots": self.slots, "reached": self.reached,
                "value": round(self.value, 2), "steps": len(self.path), "combination": text,
                "factors": {n: k for n, k in self.factors.items() if k < 1.0},
                "path": [{"family": n, "x": k, "value": round(v, 2)} for n, k, v in self.path]}


def greedy(goal: str, target: float, measure: Callable[[dict[str, float]], float], higher_is_better: bool = True,
           slots: int | None = None, families: Sequence[str] = FAMILY_NAMES) -> Combination:
    """From every family at 1, one family one level down (LEVELS) at a time, the step whose measure is best first,
    until `measure` meets `target`. GREEDY: the first combination found, not proven the smallest. Where every
    family is at 0 and the target is still missed the answer says unreachable (`reached` False) and keeps the
    all-zero factors, so no combination is claimed."""
    factors = {n: 1.0 for n in families}
    met = (lambda v: v >= target) if higher_is_better else (lambda v: v <= target)
    better = (lambda a, b: a > b) if higher_is_better else (lambda a, b: a < b)
    value, path = measure(factors), []
    while not met(value):
        moves = []
        for n, k in factors.items():
            lower = [x for x in LEVELS if x < k]
            if lower:
                trial = dict(factors, **{n: max(lower)})
                moves.append((measure(trial), n, max(lower)))
        if not moves:
            return Combination(goal, target, slots, factors, value, False, path)
        best = moves[0]
        for m in moves[1:]:
            if better(m[0], best[0]):
                best = m
        value, factors[best[1]] = best[0], best[2]
        path.append((best[1], best[2], value))
    return Combination(goal, target, slots, factors, value, True, path)


def lane_shares(staged: Sequence[Staged]) -> list[dict]:
    """Each family's seconds per evaluation after the levers and the hand-over, its lane-held seconds and their
    share of all lane-held seconds (shared holds of several slots overlap on the GPU; the exclusive ones set the
    pace), and its share of the evaluation's own seconds."""
    n = max(len(staged), 1)
    per = [(f, sum(f.seconds(s) for s in staged) / n, sum(f.lane_seconds(s) for s in staged) / n) for f in FAMILIES]
    total = sum(x for _, x, _ in per) or 1.0
    held = sum(x for _, _, x in per) or 1.0
    return [{"family": f.name, "lane": f.lane or "host", "seconds": round(sec, 3), "lane_seconds": round(lane, 3),
             "lane_share": round(lane / held, 4), "own_share": round(sec / total, 4)} for f, sec, lane in per]


def study(light: Sequence[Job], full: Sequence[Job] | None, steps: Sequence[Job], slots: Sequence[int] = SLOTS,
          light_goal: float = LIGHT_GOAL, full_goal: float = FULL_GOAL, step_goal: float = STEP_GOAL_S,
          copies: int = COPIES, seeds: tuple[int, ...] = SEEDS) -> dict:
    """The whole study: the baselines, the sensitivity table, the greedy combinations per goal and slots per GPU,
    and the lane shares. `full` None: no full mix given (its goal is reported as not studied)."""
    if not light:
        raise GoalsError("the study needs the light batch's jobs (the defaults row)")
    wl = [Workload("light", tuple(stage(j) for j in light), copies, seeds)]
    if full:
        wl.append(Workload("full", tuple(stage(j) for j in full), copies, seeds))
    st = [stage(j) for j in steps]
    goals = {"light": light_goal, "full": full_goal}
    combos = []
    for w in wl:
        for n in slots:
            combos.append(greedy(f"{w.label} >= {goals[w.label]:g}/GPU-hour", goals[w.label],
                                 lambda f, w=w, n=n: w.rate(f, n), slots=n).as_row())
    if st:
        combos.append(greedy(f"step p50 <= {step_goal:g} s", step_goal, lambda f: step_p50(st, f),
                             higher_is_better=False).as_row())
    baseline = {f"{w.label}_as_run": round(w.as_run({}), 1) for w in wl}
    baseline.update({f"{w.label}_steady_{n}_slots": round(w.rate({}, n), 1) for w in wl for n in slots})
    if st:
        baseline["step_p50_s"] = round(step_p50(st, {}), 2)
    return {"baseline": baseline, "goals": {**goals, "step_p50_s": step_goal}, "copies": copies, "seeds": list(seeds),
            "sensitivity": sensitivity(wl, st), "combinations": combos,
            "lane_shares": {w.label: lane_shares(w.staged) for w in wl},
            "full_mix": "studied" if full else "not given (--goals-full): its goal is not studied",
            "note": "SIMULATED predictions of the model (kernelgym_gap/sim/goals.py), not measurements; the search "
                    "is greedy; 6 and 8 slots add no GPU-sharing slowdown (upper bounds)"}
