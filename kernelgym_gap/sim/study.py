"""The simulator's three tables: its calibration against the measured runs, its predictions per design
change, and the scaling to hosts of 8 GPUs and to a cluster of hosts (scripts/simulate_throughput.py prints
them).

The measured runs (results/h200_2026-12-05/, docs/measurement.md), replayed workload by workload:
  full mix      throughput_full_records.jsonl, mode "lanes": 50 evaluations of 64 (the run stopped at 500 s)
  light batch   throughput_records.jsonl, mode "lanes": 12 evaluations of 6 tasks' optimized solutions
  timed_shapes  the same file, mode "lanes [timed_shapes=2]"
  held outputs  the same file, mode "lanes [held_output_bytes=0]" (a fourth check, not one of the issue's)
  env.step      throughput_h200_2026-12-05.json's env_step rows (4 warm steps; p50 8.25 s)

Cluster: every GPU's evaluations pass one reward server (its queue: parsing, dispatch) and one store (SQLite,
one writer) before and after. Their service times are assumptions (SERVER_S, STORE_S), not measurements."""
from __future__ import annotations

import dataclasses
import json
import random
import statistics
from pathlib import Path

from kernelgym_gap.sim import checkpoints, handover_stages, ipc_outputs, levers, prestart_start, workload
from kernelgym_gap.sim.pipeline import Job, Setup, simulate, step_p50

CALIBRATION_RUNS = (   # (label, records file, mode, the summary's row: its reported rate; None: from the records)
    ("full mix", "throughput_full_records.jsonl", "lanes", None),
    ("light batch", "throughput_records.jsonl", "lanes", "lanes x4"),
    ("light batch, timed_shapes=2", "throughput_records.jsonl", "lanes [timed_shapes=2]", "lanes x4 [timed_shapes=2]"),
    ("light batch, held_output_bytes=0", "throughput_records.jsonl", "lanes [held_output_bytes=0]",
     "lanes x4 [held_output_bytes=0]"),
)
SUMMARY = "throughput_*_*-*-*.json"     # throughput.py's summary, throughput_<device>_<date>.json
# an earlier run of the light batch (older code: no pre-started children, outputs written in the lane), beside
# the records folder: replayed as an out-of-sample check, reported and not gated (its folder, records, mode,
# the summary beside the folder and its row)
EARLIER = ("light batch, 2026-12-04 (out of sample)", "h200_2026-12-04b", "throughput_records.jsonl", "lanes",
           "throughput_h200_2026-12-04.json", "lanes x4")
SERVER_S = 0.005     # the reward server's time per request: an HTTP request's parse, its queueing, a dispatch
STORE_S = 0.002      # one record's INSERT into SQLite (WAL, synchronous=NORMAL: no fsync per commit)


class StudyError(ValueError):
    """The records the study needs are missing or unreadable."""


@dataclasses.dataclass
class Inputs:
    workloads: dict[str, list[Job]]             # label -> the replayed jobs
    measured: dict[str, float]                  # label -> measured evaluations per GPU-hour
    measured_wall_p50: dict[str, float]
    steps: list[Job]
    measured_step_p50: float
    fit: levers.TimingFit
    gated: tuple[str, ...] = ()                 # the labels the 15% bound applies to


def load(records_dir: str | Path, corpus_json: str | Path) -> Inputs:
    d = Path(records_dir)
    missing = sorted({name for _, name, _, _ in CALIBRATION_RUNS if not (d / name).is_file()})
    if missing:
        light = " (a light-batch-only folder: --light-only)" if (d / LIGHT_RECORDS).is_file() else ""
        raise StudyError(f"{d}: missing {', '.join(missing)}, which the full calibration needs{light}")
    workloads, measured, walls = {}, {}, {}
    try:
        found = sorted(d.glob(SUMMARY))
        if not found:
            raise OSError(f"no summary {SUMMARY} beside the records")
        summary = json.loads(found[-1].read_text())
        reported = {m["mode"]: m["evals_per_gpu_hour"] for m in summary["modes"]}
        for label, name, mode, row in CALIBRATION_RUNS:
            rows = workload.read_records(d / name)
            workloads[label] = workload.jobs_of_mode(rows, mode)
            # the summary's rate is over the mode's whole wall time; the full mix (cut at 500 s) has no
            # summary, its rate is over the last record's end, as throughput.py --from-records gives it
            measured[label] = reported[row] if row else workload.measured_rate(rows, mode)
            walls[label] = statistics.median(r["latency"].get("total", 0.0) for r in rows if r.get("mode") == mode)
        steps = [workload.step_job(s) for s in summary["env_step"]["steps"]]
        step_p50 = float(summary["env_step"]["p50_s"])
    except (OSError, KeyError, TypeError, json.JSONDecodeError, workload.RecordError) as e:
        raise StudyError(f"{d}: {e}") from None
    gated = tuple(workloads)
    label, folder, name, mode, summary_name, row = EARLIER
    try:        # optional: a records folder without it still calibrates
        rows = workload.read_records(d.parent / folder / name)
        modes = json.loads((d.parent / summary_name).read_text())["modes"]
        earlier = {m["mode"]: m["evals_per_gpu_hour"] for m in modes}
        workloads[label], measured[label] = workload.jobs_of_mode(rows, mode), earlier[row]
        walls[label] = statistics.median(r["latency"].get("total", 0.0) for r in rows if r.get("mode") == mode)
    except (OSError, KeyError, TypeError, json.JSONDecodeError, workload.RecordError):
        pass
    return Inputs(workloads, measured, walls, steps, step_p50, levers.fit_timing(corpus_json), gated)


def calibration(inp: Inputs, seed: int = 1, gate_seeds: int = 10) -> list[dict]:
    """Measured against simulated per workload, the lane's gate in arrival order (`simulated`, `error`); and
    the error's mean and range over `gate_seeds` runs with the gate's waiters taken in a random order
    (seeds seed .. seed + gate_seeds - 1): how much the order flock(2) leaves open moves a run this short."""
    rows = []
    for label, jobs in inp.workloads.items():
        r = simulate(jobs)
        m = inp.measured[label]
        randomised = [simulate(jobs, Setup(gate_seed=seed + k)).evals_per_gpu_hour / m - 1 for k in range(gate_seeds)]
        rows.append({"workload": label, "gated": label in inp.gated, "evaluations": len(jobs), "measured": round(m, 1),
                     "simulated": round(r.evals_per_gpu_hour, 1), "error": round(r.evals_per_gpu_hour / m - 1, 4),
                     "random_gate_error": f"{statistics.mean(randomised):+.1%} ({min(randomised):+.1%}.."
                                          f"{max(randomised):+.1%})",
                     "measured_wall_p50_s": round(inp.measured_wall_p50[label], 2),
                     "simulated_wall_p50_s": round(r.wall_p50, 2)})
    sim = step_p50(inp.steps)
    rows.append({"workload": "warm env.step p50 (s)", "gated": True, "evaluations": len(inp.steps),
                 "measured": inp.measured_step_p50, "simulated": round(sim, 2),
                 "error": round(sim / inp.measured_step_p50 - 1, 4)})
    return rows


def predictions(inp: Inputs, seed: int = 1) -> list[dict]:
    """Per scenario: the replayed full mix and light batch (the runs the GPU would repeat: short, so their
    last evaluations' tail moves the rate), the full mix four times over on one GPU (`full_mix_x4`: the steady
    state, each copy in a seeded order), and the warm env.step's p50."""
    rows = []
    longer = replicated(inp.workloads["full mix"], 4, seed)
    # the designs not built (no variant) after the levers: the outputs handed over on the device
    for sc in levers.scenarios(inp.fit) + ipc_outputs.scenarios():
        setup = sc.setup(Setup())
        full = simulate([sc.job(j) for j in inp.workloads["full mix"]], setup)
        light = simulate([sc.job(j) for j in inp.workloads["light batch"]], setup)
        x4 = simulate([sc.job(j) for j in longer], setup)
        rows.append({"scenario": sc.name, "variant": sc.variant, "full_mix": round(full.evals_per_gpu_hour),
                     "full_mix_x4": round(x4.evals_per_gpu_hour), "light_batch": round(light.evals_per_gpu_hour),
                     "step_p50_s": round(step_p50([sc.job(s) for s in inp.steps], setup), 2),
                     "full_mix_wall_p50_s": round(full.wall_p50, 1), "basis": sc.basis})
    return rows


def sensitivity(inp: Inputs, seed: int = 1) -> list[dict]:
    """What 1,000 per GPU-hour takes: the last scenario (every lever, hung calls letting the lane go) on the
    full mix four times over, with the timing and the shared stretches (correctness, check) scaled down."""
    last = levers.scenarios(inp.fit)[-1]
    base = [last.job(j) for j in replicated(inp.workloads["full mix"], 4, seed)]
    rows = []
    for kt in (1.0, 0.5, 0.25):
        for ks in (1.0, 0.5, 0.25):
            jobs = [j.scaled(timing=kt, correctness=ks, compile=ks, check=ks, check_ref=ks) for j in base]
            row = {"timing_x": kt, "shared_x": ks}
            for slots in (6, 8):
                setup = dataclasses.replace(last.setup(Setup()), slots_per_gpu=slots)
                row[f"slots_{slots}"] = round(simulate(jobs, setup).evals_per_gpu_hour)
            rows.append(row)
    return rows


def replicated(jobs: list[Job], gpus: int, seed: int) -> list[Job]:
    """The mix once per GPU, each copy in its own seeded order, interleaved: every GPU's share of the queue is
    the same mix (hung submissions included, 2 of 50), so rates per GPU compare across host sizes."""
    rng = random.Random(seed)
    copies = [rng.sample(jobs, len(jobs)) for _ in range(gpus)]
    return [copy[i] for i in range(len(jobs)) for copy in copies]


def scaling(inp: Inputs, seed: int, slots_rule=None) -> list[dict]:
    """Hosts of 8 GPUs with every lever (6 slots), by simulation; then a cluster of such hosts, bounded by the
    reward server's and the store's capacity. `slots_rule(cores, gpus)`: slots per GPU by a rule
    (core/slots.slots_per_gpu, which scripts/simulate_throughput.py passes: this package imports nothing of
    kernelgym_gap's); its rows are left out without one."""
    all6 = next(s for s in levers.scenarios(inp.fit) if s.name == "all levers, 6 slots")
    base = [all6.job(j) for j in inp.workloads["full mix"]]
    rows = []
    # (label, GPUs, cores, servers modelled, slots per GPU: 6, or None for core/slots.slots_per_gpu's rule)
    # and whether the laned stages hold a host core too (Setup.laned_cores: what a core-bound host shows)
    cases = (("1 GPU, 16 cores (the H200 host)", 1, 16, False, 6, False), ("8 GPUs, 128 cores", 8, 128, True, 6, False),
             ("8 GPUs, 16 cores", 8, 16, True, 6, False), ("8 GPUs, 16 cores", 8, 16, True, 6, True),
             ("1 GPU, 16 cores (the H200 host)", 1, 16, False, None, True),
             ("8 GPUs, 128 cores", 8, 128, True, None, True), ("8 GPUs, 16 cores", 8, 16, True, None, True))
    per_gpu = None
    for label, gpus, cores, servers, slots, laned_cores in cases:
        if slots is None and slots_rule is None:
            continue
        n = slots or slots_rule(cores, gpus)
        setup = all6.setup(Setup(gpus_per_host=gpus, cores_per_host=cores, laned_cores=laned_cores,
                                 server_s=SERVER_S if servers else 0.0, store_s=STORE_S if servers else 0.0))
        setup = dataclasses.replace(setup, slots_per_gpu=n)
        r = simulate(replicated(base, gpus, seed), setup)
        name = (f"{n} slots" if slots else f"slots by the rule ({n})") + (", laned stages on cores" if laned_cores
                                                                           else "")
        rows.append({"scenario": f"all levers, {name}: {label}", "gpus": gpus,
                     "evals_per_gpu_hour": round(r.evals_per_gpu_hour),
                     "wall_p50_s": round(r.wall_p50, 1),
                     "server_utilisation": round(r.server_busy_s / r.makespan, 4) if servers else None,
                     "store_utilisation": round(r.store_busy_s / r.makespan, 4) if servers else None})
        if gpus == 8 and cores == 128 and slots and not laned_cores:
            per_gpu = r.evals_per_gpu_hour
    for hosts in (16, 64, 256):
        gpus = 8 * hosts
        demand = per_gpu * gpus / 3600.0                     # requests per second the GPUs could serve
        cap = min(1 / SERVER_S, 1 / STORE_S)
        bound = per_gpu if demand <= cap else cap * 3600.0 / gpus
        rows.append({"scenario": f"cluster of {hosts} hosts x 8 GPUs (bound)", "gpus": gpus,
                     "evals_per_gpu_hour": round(bound), "wall_p50_s": None,
                     "server_utilisation": round(demand * SERVER_S, 3),
                     "store_utilisation": round(demand * STORE_S, 3)})
    return rows


# ---- a light-batch-only records folder (the H100 lever runs of 2026-12-06: no full mix there) ----
LIGHT_RECORDS = "throughput_records.jsonl"
DEFAULTS_MODE = "lanes"


@dataclasses.dataclass
class LightInputs:
    """One call's light batch: its defaults row and each variant's row, as jobs and as measured."""
    folder: str
    device: str
    rows: dict[str, list[Job]]                  # records mode -> the replayed jobs ("lanes" first)
    variants: dict[str, str]                    # records mode -> its variant ("" for the defaults)
    measured: dict[str, float]                  # records mode -> the summary's evaluations per GPU-hour
    measured_wall_p50: dict[str, float]
    steps: list[Job]
    measured_step_p50: float | None
    refit: levers.Refit
    fit: levers.TimingFit
    # the warm steps run with the summary's env-step variant (env_step.variant: throughput.py's
    # --env-steps-variant), and their measured p50; empty where the call ran none
    variant_steps: tuple[Job, ...] = ()
    measured_variant_step_p50: float | None = None
    step_variant: str = ""


def variant_of(mode: str) -> str:
    """A records mode's variant: "lanes [a=1,b=2]" -> "a=1,b=2"; "lanes" -> ""."""
    return mode[mode.index("[") + 1:mode.rindex("]")] if "[" in mode and mode.endswith("]") else ""


def _summary(d: Path) -> dict:
    found = sorted(d.glob(SUMMARY))
    if not found:
        raise StudyError(f"{d}: no summary {SUMMARY} beside the records (throughput.py writes it)")
    try:
        return json.loads(found[-1].read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise StudyError(f"{found[-1]}: {e}") from None


def load_light(records_dir: str | Path, corpus_json: str | Path) -> LightInputs:
    """A folder of throughput.py's light batch alone: throughput_records.jsonl with a defaults row ("lanes")
    and the summary beside it. Each row's rate is the summary's (over the row's whole wall time)."""
    d = Path(records_dir)
    if not (d / LIGHT_RECORDS).is_file():
        raise StudyError(f"{d}: no {LIGHT_RECORDS} (the light batch's records) in this folder")
    summary = _summary(d)
    try:
        records = workload.read_records(d / LIGHT_RECORDS)
        reported = {m["mode"]: m["evals_per_gpu_hour"] for m in summary["modes"]}
        modes = sorted({r.get("mode", "") for r in records if r.get("mode", "").startswith(DEFAULTS_MODE)},
                       key=lambda m: (m != DEFAULTS_MODE, m))
        if DEFAULTS_MODE not in modes:
            raise StudyError(f"{d / LIGHT_RECORDS}: no defaults row (mode {DEFAULTS_MODE!r}); modes: {modes}")
        rows, measured, walls, variants = {}, {}, {}, {}
        for mode in modes:
            v = variant_of(mode)
            # the summary names a row "lanes x<per_gpu> [variant]": matched by its variant
            row = next((k for k in reported if k.startswith("lanes x") and variant_of(k) == v), None)
            if row is None:
                raise StudyError(f"{d}: the summary has no row for records mode {mode!r}")
            rows[mode] = workload.jobs_of_mode(records, mode)
            variants[mode], measured[mode] = v, float(reported[row])
            walls[mode] = statistics.median(r["latency"].get("total", 0.0) for r in records if r.get("mode") == mode)
        step = summary.get("env_step") or {}
        startup = workload.startup_of_mode(records, DEFAULTS_MODE)   # a step's pre-started child's, if unrecorded
        steps = [workload.step_job(s, startup) for s in step.get("steps", [])]
        step_p50 = float(step["p50_s"]) if steps else None
        other = step.get("variant") or {}
        variant_steps = tuple(workload.step_job(s, startup) for s in other.get("steps", []))
        variant_step_p50 = float(other["p50_s"]) if variant_steps else None
    except (KeyError, TypeError, ValueError) as e:
        if isinstance(e, StudyError):
            raise
        raise StudyError(f"{d}: {e}") from None
    return LightInputs(str(d), str(summary.get("device", "?")), rows, variants, measured, walls, steps, step_p50,
                       levers.refit(records), levers.fit_timing(corpus_json), variant_steps, variant_step_p50,
                       str(other.get("fields", "")) if variant_steps else "")


def light_calibration(inp: LightInputs) -> list[dict]:
    """Each row of the call replayed from its own records, against the summary's rate; and the warm step."""
    out = []
    for mode, jobs in inp.rows.items():
        r = simulate(jobs, levers.setup_for(inp.variants[mode]))
        m = inp.measured[mode]
        out.append({"row": mode, "evaluations": len(jobs), "measured": m, "simulated": round(r.evals_per_gpu_hour, 1),
                    "error": round(r.evals_per_gpu_hour / m - 1, 4),
                    "measured_wall_p50_s": round(inp.measured_wall_p50[mode], 2),
                    "simulated_wall_p50_s": round(r.wall_p50, 2)})
    if inp.steps:
        sim = step_p50(inp.steps)
        out.append({"row": "warm env.step p50 (s)", "evaluations": len(inp.steps), "measured": inp.measured_step_p50,
                    "simulated": round(sim, 2), "error": round(sim / inp.measured_step_p50 - 1, 4)})
    return out


def light_predictions(inp: LightInputs, plans: dict | None = None) -> list[dict]:
    """Each scenario's transforms applied to the DEFAULTS row's jobs, beside the row of the call that ran that
    variant where there is one (the 'levers' row ran the launch bound too: it changes only hung jobs, and the
    light batch has none). The first row is the 2026-12-05 prediction's transforms (H200 assumptions)."""
    base = inp.rows[DEFAULTS_MODE]
    ran = {frozenset(v.split(",")) - {levers.LAUNCH}: mode for mode, v in inp.variants.items() if v}
    h200 = levers.all_levers_h200(inp.fit)
    cases = [("all levers, 4 slots, H200 transforms (2026-12-05)", h200,
              lambda s: dataclasses.replace(s, compile_outside_lane=True, precompute_reference=True), levers.ALL)]
    # (and the pre-start at the child's start, not built: beside the rows it is read against)
    cases += [(sc.name, sc.job, sc.setup, sc.variant) for sc in levers.scenarios(inp.fit)
              if (sc.variant is not None and "--per-gpu" not in sc.variant) or sc.name in prestart_start.NAMES]
    # the levers as they ran in the throughput script's lanes rows: a warm checker, so no early reference
    # (judge/early_check.start returns None beside one; no record of those rows has check_early_wait)
    cases.append(("all levers as run: no early reference (warm checker)",
                  lambda j: levers.compile_share(levers.graph_interval_measured(j)),
                  lambda s: dataclasses.replace(s, compile_outside_lane=True), levers.ALL))
    # the hand-over as built beside the flag's row where the call ran it; its candidates and the design, never run
    # (variant None), have no measured figure beside them
    # (each job with its task's bytes where `plans` has them), the flag's measured figure beside its code's model
    attach, read = ipc_outputs.with_plans(plans), handover_stages.flag_read_before_lane(inp.rows, inp.variants)
    cases += [(sc.name, lambda j, f=sc.job: f(attach(j)), sc.setup, sc.variant) for sc in ipc_outputs.scenarios(read)]
    out = []
    for name, job, setup, variant in cases:
        r = simulate([job(j) for j in base], setup(Setup()))
        mode = (None if variant is None else ran.get(frozenset(variant.split(",")) - {levers.LAUNCH}) if variant
                else DEFAULTS_MODE)
        m = inp.measured.get(mode) if mode else None
        out.append({"scenario": name, "variant": variant, "simulated": round(r.evals_per_gpu_hour, 1),
                    "measured": m, "error": round(r.evals_per_gpu_hour / m - 1, 4) if m else None,
                    "simulated_wall_p50_s": round(r.wall_p50, 2),
                    "step_p50_s": round(step_p50([job(s) for s in inp.steps], setup(Setup())), 2) if inp.steps else None})
    return out


def ipc_steps(inp: LightInputs, plans: dict | None = None) -> list[dict]:
    """The warm env.step with the outputs handed over on the device: each set of the call's measured steps (the
    defaults', and the env-step variant's where it ran) replayed as measured, with the DESIGN (ipc_outputs: every
    output by handle) and AS BUILT (ipc_outputs_as_built), beside its measured p50. Replaying the variant's own steps needs no lever transform:
    what they ran is in their records. `plans`: each task's bytes (ipc_outputs.with_plans)."""
    attach = ipc_outputs.with_plans(plans)
    sets = (("defaults", inp.steps, inp.measured_step_p50, ""),
            ("env-step variant", list(inp.variant_steps), inp.measured_variant_step_p50, inp.step_variant))
    return [{"steps": label, "n": len(steps), "measured_p50_s": measured, "replayed_p50_s": round(step_p50(steps), 2),
             "ipc_p50_s": round(step_p50([ipc_outputs.ipc_outputs(attach(s)) for s in steps]), 2),
             "as_built_p50_s": round(step_p50([ipc_outputs.ipc_outputs_as_built(attach(s)) for s in steps]), 2),
             "variant": variant}
            for label, steps, measured, variant in sets if steps]


def light_sensitivity(inp: LightInputs, seed: int = 1, copies: int = 4) -> list[dict]:
    """What 1,000 per GPU-hour takes on the light batch: the defaults row `copies` times over (each copy in a
    seeded order: a steady state rather than one 12-evaluation tail) with every lever (refit), the timing and
    the shared stretches (correctness, checkpoints' writes, check) scaled, at 4 and 6 slots."""
    base = [levers.all_levers(j) for j in replicated(inp.rows[DEFAULTS_MODE], copies, seed)]
    rows = []
    for kt in (1.0, 0.5, 0.25):
        for ks in (1.0, 0.5, 0.25):
            jobs = [j.scaled(timing=kt, timing_measure=kt, correctness=ks, compile=ks, unlaned=ks, check=ks,
                             check_ref=ks) for j in base]
            row = {"timing_x": kt, "shared_x": ks}
            for slots in (4, 6):
                setup = Setup(slots_per_gpu=slots, compile_outside_lane=True, precompute_reference=True)
                row[f"slots_{slots}"] = round(simulate(jobs, setup).evals_per_gpu_hour)
            rows.append(row)
    return rows


def light_steady(inp: LightInputs, copies: int = 4, seeds: tuple[int, ...] = (1, 2, 3)) -> list[dict]:
    """The lane-time levers (levers.lane_time_levers) against the defaults in the steady state: the defaults row
    `copies` times over in each seed's order (a 12-evaluation row moves by several per cent with its tail), at 4
    and 6 slots; the mean over the seeds and its range. Predictions only."""
    rows = []
    for name, job in (("defaults", lambda j: j), ("the lane-time levers together", levers.lane_time_levers)):
        for slots in (4, 6):
            rates = [simulate([job(j) for j in replicated(inp.rows[DEFAULTS_MODE], copies, seed)],
                              Setup(slots_per_gpu=slots)).evals_per_gpu_hour for seed in seeds]
            rows.append({"scenario": name, "slots": slots, "steady": round(sum(rates) / len(rates), 1),
                         "range": f"{min(rates):.0f}..{max(rates):.0f}"})
    return rows


# ---- the checkpoints' lane let-gos (issue 35): candidates (a), (b), (c) of checkpoints.checkpoint_scenarios ----
def lane_waits(r, n: int) -> tuple[float, float]:
    """(shared, exclusive) seconds per evaluation its own stages waited for the lane in a simulated run (the
    pre-started children's and the early checker's waits apart)."""
    shared = sum(iv.end - iv.start for iv in r.trace if iv.wait and iv.row == "slot" and iv.stage == "wait shared")
    excl = sum(iv.end - iv.start for iv in r.trace if iv.wait and iv.row == "slot" and iv.stage == "wait exclusive")
    return shared / max(n, 1), excl / max(n, 1)


# a 12-evaluation replay's rate moves by several % with the order its tail takes: the candidates are also run on
# the light batch x4 in STEADY_ORDERS seeded orders, each with the gate's waiters in arrival order and in two
# random orders (flock(2) promises none), and the mean is what a >= 5% gain is judged on
STEADY_ORDERS = 5
STEADY_GATES = (None, 1, 2)


def checkpoint_predictions(light: LightInputs, plans: dict, full: list[Job] | None = None, seed: int = 1,
                           copies: int = 4) -> list[dict]:
    """Each checkpoint candidate (checkpoints.checkpoint_scenarios) on the light batch's DEFAULTS row (as it ran, and
    `copies` times over in seeded orders), on that row with the levers as they ran (compiles let go, graph replay
    and the interval stop: levers.compile_share + graph_interval_measured), and on the full mix `full` (the H200
    records of 2026-12-05, whose checkpoints are imputed: checkpoints.with_checkpoint_plans), with the light batch's
    lane waits per evaluation, the steady state's mean and range (STEADY_ORDERS x STEADY_GATES runs of the batch x4)
    and the gain over the first row (the checkpoints as today). SIMULATED."""
    base = light.rows[DEFAULTS_MODE]
    longer = replicated(base, copies, seed)
    as_run = lambda j: levers.compile_share(levers.graph_interval_measured(j))      # noqa: E731
    lev_setup = Setup(compile_outside_lane=True)
    full_x4 = replicated(full, copies, seed) if full else None
    rows, ref = [], None
    for sc in checkpoints.checkpoint_scenarios(plans):
        r = simulate([sc.job(j) for j in base], sc.setup(Setup()))
        shared, excl = lane_waits(r, len(base))
        x4 = simulate([sc.job(j) for j in longer], sc.setup(Setup()))
        steady = [simulate([sc.job(j) for j in replicated(base, copies, seed + k)], sc.setup(Setup(gate_seed=g)))
                  .evals_per_gpu_hour for k in range(STEADY_ORDERS) for g in STEADY_GATES]
        lev = simulate([sc.job(as_run(j)) for j in base], sc.setup(lev_setup))
        steady_lev = [simulate([sc.job(as_run(j)) for j in replicated(base, copies, seed + k)],
                               sc.setup(dataclasses.replace(lev_setup, gate_seed=g))).evals_per_gpu_hour
                      for k in range(STEADY_ORDERS) for g in STEADY_GATES]
        row = {"scenario": sc.name, "light": round(r.evals_per_gpu_hour, 1),
               "light_x4": round(x4.evals_per_gpu_hour, 1),
               "steady": round(statistics.mean(steady), 1),
               "steady_range": f"{min(steady):.0f}..{max(steady):.0f}",
               "light_levers": round(lev.evals_per_gpu_hour, 1), "steady_levers": round(statistics.mean(steady_lev), 1),
               "steady_levers_range": f"{min(steady_lev):.0f}..{max(steady_lev):.0f}",
               "shared_wait_s": round(shared, 2),
               "exclusive_wait_s": round(excl, 2), "light_wall_p50_s": round(r.wall_p50, 2)}
        if full:
            row["full_mix"] = round(simulate([sc.job(j) for j in full], sc.setup(Setup())).evals_per_gpu_hour, 1)
            row["full_mix_x4"] = round(simulate([sc.job(j) for j in full_x4], sc.setup(Setup())).evals_per_gpu_hour, 1)
        ref = ref or row
        for k in ("light", "light_x4", "steady", "light_levers", "steady_levers", "full_mix", "full_mix_x4"):
            if k in row:
                row[f"{k}_gain"] = round(row[k] / ref[k] - 1, 4)
        row["basis"] = sc.basis
        rows.append(row)
    return rows
