"""The evaluation pipeline simulated (issue 35): calibrated against the measured H200 runs, then predicting
each design change and the scaling to hosts of 8 GPUs and clusters of hosts. No GPU is used: every figure
past the calibration table is a prediction.

    python3 scripts/simulate_throughput.py                      # the three tables, predictions last
    python3 scripts/simulate_throughput.py --seed 2 --json results/simulate_throughput/simulate_throughput.json
    python3 scripts/simulate_throughput.py --trace-out results/simulate_throughput   # trace JSON + PNG per run
    python3 scripts/simulate_throughput.py --light-only --records results/h100_2026-12-06_levers/call3/light
        # a light batch alone: each row replayed, the levers predicted from the defaults row beside the rows
        # that ran them, the refit shares, and what 1,000 per GPU-hour takes on that batch
    python3 scripts/simulate_throughput.py --light-only --records results/h100_2026-12-06_lane_levers/call1 \
        --goals --goals-full results/h100_2026-12-06b_full_levers/call1_full
        # and last, the gap to issue 35's goals after the lane-time levers and the hand-over (sim/goals.py)
    python3 scripts/simulate_throughput.py --light-only --library-trust-only \
        --records results/h200_2026-12-07_session53/staging_2   # the probe's library check and warm-up levers alone
    python3 scripts/simulate_throughput.py --light-only --copy-laned-only \
        --records results/h200_2026-12-07_session53/staging_2   # the outputs' copies under the shared lane alone

The model (kernelgym_gap/sim/): each measured evaluation's stages replayed with its own recorded durations,
less the waits the lanes made, through 4 slots per GPU and the GPU's lane (writer-preferring reader/writer, as
core/lane.py); the simulator makes the waits again. It is trusted only where the calibration table's errors
are within 15%. The levers' numbers and their sources are in kernelgym_gap/sim/levers.py."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RECORDS = ROOT / "results" / "h200_2026-12-05"
CORPUS = ROOT / "results" / "h200_2026-12-04_corpus" / "gap_study_cuda.json"
TOLERANCE = 0.15


def table(rows: list[dict], cols: tuple[str, ...]) -> str:
    cells = [["" if r.get(c) is None else (f"{r[c]:+.1%}" if c == "error" or c.endswith("_gain") else str(r[c]))
              for c in cols]
             for r in rows]
    widths = [max(len(c), *(len(x[i]) for x in cells)) for i, c in enumerate(cols)]
    out = ["  ".join(c.ljust(w) for c, w in zip(cols, widths)), "  ".join("-" * w for w in widths)]
    return "\n".join(out + ["  ".join(x.ljust(w) for x, w in zip(row, widths)) for row in cells])


def checkpoint_plans(task_ids) -> dict:
    """Each task's checkpoints as its child makes them on cuda (child/outputs.checkpoint_due over the correctness
    order with the default EvalConfig, trial seed 0: the shapes and dtypes do not depend on it), with the honest
    outputs' bytes each writes (sandbox/output_sizes.expected_bytes); the simulator's package imports nothing of
    kernelgym_gap's, so they are computed here. A task that cannot be loaded or sized is left out (its jobs
    keep the records' even split)."""
    import random

    from kernelgym_gap.child.outputs import checkpoint_due
    from kernelgym_gap.core.config import EvalConfig
    from kernelgym_gap.core.record import first_of_their_shape
    from kernelgym_gap.core.registry import get_task
    from kernelgym_gap.engine.correctness_order import order_for_correctness
    from kernelgym_gap.engine.trials import make_trials
    from kernelgym_gap.sandbox.output_sizes import expected_bytes
    from kernelgym_gap.sim import checkpoints
    plans = {}
    for task_id in sorted(set(task_ids)):
        try:
            task = get_task(task_id)
            trials = order_for_correctness(task, make_trials(task, "cuda", EvalConfig(), random.Random(0)))
            sizes = [expected_bytes(task, tuple(t.shape), t.dtype) for t in trials]
        except (KeyError, ValueError, TypeError, RuntimeError) as e:
            print(f"simulate_throughput: no checkpoint plan for {task_id}: {str(e)[:120]}", file=sys.stderr)
            continue
        if any(x is None for x in sizes):
            continue
        compiling, covered, kinds, chunks = first_of_their_shape(trials), 0, [], []
        for finished in range(len(trials)):
            if checkpoint_due(trials, finished, covered, compiling):
                kinds.append(checkpoints.SECOND_CALL if covered == 0 else checkpoints.REPEATS
                             if trials[finished].index not in compiling else checkpoints.LARGER_SHAPE)
                chunks.append(sum(b for b, _ in sizes[covered:finished]))
                covered = finished
        plans[task_id] = checkpoints.CheckpointPlan(tuple(kinds), tuple(chunks), sum(b for b, _ in sizes[covered:]),
                                               len(trials))
    return plans


def write_traces(inp, out: Path) -> list[Path]:
    """The simulated full mix as measured and with every lever (6 slots): trace JSON and PNG each."""
    from kernelgym_gap.sim import levers, trace
    from kernelgym_gap.sim.pipeline import Setup, simulate
    written = []
    for sc in levers.scenarios(inp.fit):
        if sc.name not in ("as measured (4 slots)", "all levers, 6 slots"):
            continue
        r = simulate([sc.job(j) for j in inp.workloads["full mix"]], sc.setup(Setup()))
        slug = "measured" if sc.name.startswith("as measured") else "all_levers_6_slots"
        title = (f"simulated full mix, {sc.name}: {r.evals_per_gpu_hour:.0f} evaluations/GPU-hour "
                 f"(a simulation, not a measurement)")
        written.append(trace.write_trace(r.trace, out / f"sim_full_mix_{slug}.trace.json", title))
        png = trace.write_png(r.trace, out / f"sim_full_mix_{slug}.png", title)
        if png:
            written.append(png)
    return written


def light_checkpoints(inp, args) -> tuple[list[dict], dict]:
    """The checkpoint candidates' table (study.checkpoint_predictions) for a light-batch folder, with the full mix
    of --full-records where that folder has it (without it, the light batch's columns alone); and the tasks'
    checkpoint plans it used (the hand-over's tables read each task's bytes from them)."""
    from kernelgym_gap.sim import study, workload
    full = None
    path = Path(args.full_records) / "throughput_full_records.jsonl"
    if path.is_file():
        full = workload.jobs_of_mode(workload.read_records(path), "lanes")
    tasks = {j.task for j in inp.rows[study.DEFAULTS_MODE]} | {j.task for j in full or ()}
    plans = checkpoint_plans(tasks)
    return study.checkpoint_predictions(inp, plans, full, args.seed), plans


def goals_full_jobs(folder: str | None):
    """The full mix the goals study replays (--goals-full): a folder's throughput_full_records.jsonl (the H200 runs)
    or, for a light-only folder that ran the full mix (the H100 call1_full of 2026-12-06), its
    throughput_records.jsonl; the defaults row ("lanes") either way. None without a folder."""
    from kernelgym_gap.sim import study, workload
    if not folder:
        return None
    d = Path(folder)
    for name in ("throughput_full_records.jsonl", study.LIGHT_RECORDS):
        if (d / name).is_file():
            return workload.jobs_of_mode(workload.read_records(d / name), study.DEFAULTS_MODE)
    raise study.StudyError(f"{d}: no throughput_full_records.jsonl or {study.LIGHT_RECORDS} (--goals-full)")


def print_goals(result: dict) -> None:
    """The goals study's tables (kernelgym_gap/sim/goals.py), printed last."""
    labels = [k for k in ("light", "full") if k in result["lane_shares"]]
    g = result["goals"]
    print(f"\n== the gap to the goals (SIMULATED, PREDICTIONS: kernelgym_gap/sim/goals.py): the defaults row with the "
          f"lane-time levers + the outputs handed over on the device (a DESIGN); goals light >= {g['light']:g}, "
          f"full mix >= {g['full']:g} per GPU-hour, step p50 <= {g['step_p50_s']:g} s; rates are the steady state "
          f"(the row x{result['copies']} in seeded orders {result['seeds']}, mean); full mix: {result['full_mix']}")
    print("baseline: " + ", ".join(f"{k} {v}" for k, v in result["baseline"].items()))
    print("\n-- each stage family alone scaled by x (4 slots; _gain against the first row)")
    cols = ("family", "x") + tuple(c for lb in labels for c in (lb, f"{lb}_gain")) + ("step_p50_s", "keys")
    print(table(result["sensitivity"], cols))
    print("\n-- a combination that reaches each goal (GREEDY: one family one step down, 1 -> 0.5 -> 0, the best step "
          "first; not proven the smallest; 6 and 8 slots add no GPU-sharing slowdown: upper bounds)")
    print(table(result["combinations"], ("goal", "slots", "reached", "value", "steps", "combination")))
    for lb in labels:
        print(f"\n-- the share of the lane-held seconds each family holds after the levers + the hand-over ({lb}; "
              "seconds per evaluation; own_share: of the evaluation's own seconds)")
        print(table(result["lane_shares"][lb], ("family", "lane", "seconds", "lane_seconds", "lane_share",
                                                "own_share")))


def print_handover_stages(stages: dict, device: str) -> None:
    """sim/handover_stages.of_call's tables: the as-built model against the flag's row, stage by stage, and the
    flag's own row read before its lane."""
    print(f"\n== the hand-over AS BUILT applied to the defaults row (model) against the {stages['row']!r} row "
          f"(measured, {device}), stage by stage: seconds per evaluation, mean over the submissions both ran; "
          f"the flag's row {'read' if stages['read_before_lane'] else 'did not read'} its file outputs before "
          "the lane")
    print(table(stages["stages"], ("stage", "defaults", "model", "measured", "model_minus_measured")))
    pred = stages["from_flag_row"]
    if pred:
        print(f"\n== the flag's own row with its file outputs read before the check's lane (PREDICTION, "
              f"{pred['moved_s']} s per evaluation out of the lane): replayed {pred['replayed']}, predicted "
              f"{pred['predicted']} per GPU-hour simulated; on the measured scale {pred['measured']} -> "
              f"{pred['scaled']}")
    step = stages.get("step_from_flag")
    if step:
        print(f"   its warm env.step p50: measured {step['measured_p50_s']} s, replayed {step['replayed_p50_s']} s, "
              f"predicted {step['predicted_p50_s']} s")


def print_prestart_at(rows: list[dict]) -> None:
    """prestart_start_table.prestart_at_rows: when the slot's next child is pre-started (sim/prestart_start.py;
    bind is built as Placement.prestart_early, off)."""
    print("\n== when the slot's next child is pre-started (SIMULATED; candidates: sim/prestart_start.py; bind is "
          "built as Placement.prestart_early, off): "
          "end, as the child ends (as built: the replay); start, as the child starts (the next job taken ahead then, "
          "in the modelled row); bind, started then and given its task as the child ends; per GPU-hour, the slowest "
          "evaluation and the seconds per evaluation a job waited for its child; steady: the row x4 in 5 seeded "
          "orders, the mean gain and its range; cores_N: start's gain with the laned stages on N host cores too")
    print(table(rows, ("row", "measured", "end", "start", "start_gain", "bind", "bind_gain", "slowest_end_s",
                       "slowest_start_s", "slowest_bind_s", "wait_child_end_s", "wait_child_start_s",
                       "wait_child_bind_s", "steady_start_gain", "steady_start_range", "steady_bind_gain",
                       "steady_bind_range", "start_cores_16_gain", "start_cores_8_gain", "start_cores_4_gain")))


def print_read_arena(rows: list[dict], steps: list[dict]) -> None:
    """read_arena_table's tables: the read arena (Placement.read_arena_bytes, OFF) as Setup.read_arena_speedup."""
    from kernelgym_gap.sim import read_arena
    xs = [f"x{s:g}" for s in read_arena.SPEEDUPS]
    print("\n== the checker's read arena (SIMULATED: Setup.read_arena_speedup, sim/read_arena.py; built as "
          "Placement.read_arena_bytes, OFF): each row replayed with its check_prefetch (host, before the lane) as "
          f"recorded (x1) and divided by {', '.join(xs)} (host figures, not a GPU host's); per GPU-hour, gain, wall "
          "p50; steady: the row x4 in 5 seeded orders, the mean gain")
    print(table(rows, ("row", "evaluations", "measured", "prefetch_p50_s", "x1") + tuple(
        c for x in xs for c in (x, f"{x}_gain", f"steady_{x}_gain")) + ("wall_p50_x1_s",) + tuple(
        f"wall_p50_{x}_s" for x in xs)))
    if steps:
        print("\n-- its warm env.step p50 (s): sim_ SIMULATED (pipeline.step_p50), arith_ ARITHMETIC (each measured "
              "step's wall less check_prefetch x (1 - 1/x), the median)")
        print(table(steps, ("steps", "n", "measured_p50_s", "prefetch_p50_s", "sim_x1") + tuple(
            f"sim_{x}" for x in xs) + tuple(f"arith_{x}" for x in xs) + ("variant",)))


def print_library_trust(rows: list[dict]) -> None:
    """library_trust_table.trust_rows: the probe's library check amortized and its warm-up shortened (sim/
    library_trust.py; TimingConfig.library_check_shapes and warmup_ms, off/25 as built)."""
    from kernelgym_gap.sim import library_trust_table
    print("\n== the probe's library check on 1 of 8 shapes and its warm-up at 5 ms (SIMULATED, PREDICTIONS: "
          "sim/library_trust.py, from each record's probe parts; with_parts: the jobs that have them): per row, the "
          "exclusive seconds cut per evaluation and the probe left (means), per GPU-hour and gain over the row as "
          "recorded; steady: the row x4 in 5 seeded orders, the mean rate, gain and range")
    print(table(rows, library_trust_table.COLUMNS))


def print_copy_laned(rows: list[dict]) -> None:
    """copy_laned_table.copy_rows: the outputs' copies off the GPU under the shared lane (sim/copy_laned.py;
    Placement.outputs_copy_laned, off as built)."""
    from kernelgym_gap.sim import copy_laned_table
    print("\n== the outputs' copies off the GPU under the shared lane (SIMULATED, PREDICTIONS from ESTIMATED copy "
          "seconds: sim/copy_laned.py; Placement.outputs_copy_laned, OFF): share, the copy's share of each write "
          "(bytes from the write's seconds at the device's bench rate); copy_s, the seconds moved under the lane per "
          "evaluation; per GPU-hour and gain over the row as recorded; steady: the row x4 in 5 seeded orders, the "
          "mean rate, gain and range; the lane waits per evaluation of the replay")
    print(table(rows, copy_laned_table.COLUMNS))


def _one_table(args, inp, key: str, rows, show, note: str) -> int:
    """One lever's table alone (--library-trust-only, --copy-laned-only): printed, and with --json written under
    `key` beside the records folder, the device and `note`."""
    print(f"records {inp.folder} ({inp.device})")
    show(rows)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"records": inp.folder, "device": inp.device, key: rows, "note": note},
                                              indent=1) + "\n")
        print(f"wrote {args.json}")
    return 0


def light_only(args) -> int:
    """The tables of a light-batch-only folder (see study.load_light)."""
    from kernelgym_gap.sim import copy_laned_table, library_trust_table, prestart_start_table, read_arena_table, study
    try:
        inp = study.load_light(args.records, args.corpus)
    except (study.StudyError, OSError, ValueError) as e:
        print(f"simulate_throughput: {e}", file=sys.stderr)
        return 2
    if args.library_trust_only:
        return _one_table(args, inp, "library_trust", library_trust_table.trust_rows(inp), print_library_trust,
                          "simulated figures are predictions; measured ones are the summary's, on the device named")
    if args.copy_laned_only:
        return _one_table(args, inp, "copy_laned", copy_laned_table.copy_rows(inp), print_copy_laned,
                          "simulated figures are predictions from estimated copy seconds; measured ones are the "
                          "summary's, on the device named")
    calib = study.light_calibration(inp)
    ckpt, plans = light_checkpoints(inp, args)
    preds = study.light_predictions(inp, plans)
    sens = study.light_sensitivity(inp, args.seed)
    rf = inp.refit
    from kernelgym_gap.sim import levers as levers_mod
    print(f"records {inp.folder} ({inp.device})")
    compile_text = (f"{rf.compile_share:.3f} of the correctness calls ({rf.compile_records} records letting compiles "
                    f"go)" if rf.compile_share is not None else f"none (no row let its compiles go: {levers_mod.COMPILE_SHARE} stands)")
    print(f"refit from these records: compile share {compile_text}; reference share {rf.reference_share:.3f} of the "
          f"check ({rf.reference_records} records; {rf.early_wait_records} with check_early_wait); measured "
          f"repetitions {rf.measure_share:.3f} of the timing (the rest {rf.timing_fixed_s:.2f} s per evaluation); "
          f"graph replay + interval stop keep "
          + (f"{rf.graph_interval_measure_factor:.3f} of the measured part ({rf.paired_submissions} submissions)"
             if rf.graph_interval_measure_factor is not None else "(no row ran both)"))
    print(f"\n== calibration: each row replayed from its own records; measured ({inp.device}) against simulated")
    print(table(calib, ("row", "evaluations", "measured", "simulated", "error", "measured_wall_p50_s",
                        "simulated_wall_p50_s")))
    worst = max(abs(r["error"]) for r in calib)
    print(f"worst error {worst:.1%} ({'within' if worst <= TOLERANCE else 'OUTSIDE'} the {TOLERANCE:.0%} bound)")
    print("\n== what 1,000 per GPU-hour takes (PREDICTIONS: the defaults row x4 with every lever, the timing and the "
          "shared stretches scaled)")
    print(table(sens, ("timing_x", "shared_x", "slots_4", "slots_6")))
    steady = study.light_steady(inp)
    prestart_at = prestart_start_table.prestart_at_rows(inp)
    arena_rows, arena_steps = read_arena_table.arena_rows(inp), read_arena_table.step_rows(inp)
    trust = library_trust_table.trust_rows(inp)
    copies = copy_laned_table.copy_rows(inp)
    ipc_steps = study.ipc_steps(inp, plans)
    from kernelgym_gap.sim import handover_stages
    flag_steps = list(inp.variant_steps) if inp.step_variant == handover_stages.FLAG else []
    stages = handover_stages.of_call(inp.rows, inp.variants, inp.measured, study.DEFAULTS_MODE, flag_steps,
                                     inp.measured_variant_step_p50 if flag_steps else None, plans)
    goals_result = None
    if args.goals:
        from kernelgym_gap.sim import goals
        try:
            goals_result = goals.study(inp.rows[study.DEFAULTS_MODE], goals_full_jobs(args.goals_full), inp.steps)
        except (study.StudyError, goals.GoalsError, OSError, ValueError) as e:
            print(f"simulate_throughput: {e}", file=sys.stderr)
            return 2
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"records": inp.folder, "device": inp.device, "seed": args.seed,
                                               "refit": inp.refit.__dict__, "calibration": calib,
                                               "predictions": preds, "sensitivity": sens, "checkpoints": ckpt,
                                               "steady_lane_time_levers": steady, "ipc_steps": ipc_steps,
                                               "prestart_at": prestart_at,
                                               "read_arena": {"rows": arena_rows, "steps": arena_steps},
                                               "library_trust": trust, "copy_laned": copies,
                                               "handover_stages": stages,
                                               **({"goals": goals_result} if goals_result else {}),
                                               "note": "simulated figures are predictions; measured ones are the "
                                                       "summary's, on the device named"}, indent=1) + "\n")
        print(f"wrote {args.json}")
    print("\n== the levers predicted from the DEFAULTS row (SIMULATED), beside the row of this call that ran them "
          f"(measured, {inp.device})")
    print(table(preds, ("scenario", "simulated", "measured", "error", "simulated_wall_p50_s", "step_p50_s",
                        "variant")))
    if ipc_steps:    # a folder without warm steps (the full mix) has no such table
        print("\n== the warm env.step with the outputs handed over on the device (SIMULATED: ipc the DESIGN, every "
              "output by handle; as_built the engine's, by handle within the device budget: docs/measurement.md, "
              "\"The outputs handed over on the device\"): the call's measured steps replayed as they ran and with "
              "the hand-over")
        print(table(ipc_steps, ("steps", "n", "measured_p50_s", "replayed_p50_s", "ipc_p50_s", "as_built_p50_s",
                                "variant")))
    if stages:
        print_handover_stages(stages, inp.device)
    print_prestart_at(prestart_at)
    print_read_arena(arena_rows, arena_steps)
    print_library_trust(trust)
    print_copy_laned(copies)
    print("\n== the lane-time levers in the steady state (SIMULATED): the defaults row x4 in 3 seeded orders, mean and "
          "range; the 6-slot rows add no GPU-sharing slowdown (an upper bound)")
    print(table(steady, ("scenario", "slots", "steady", "range")))
    print("\n== the checkpoints' lane let-gos (SIMULATED, not measured; none built): the light batch's defaults row, "
          "x4, "
          "with the levers as run, its lane waits per evaluation (s); the H200 full mix with its checkpoints imputed;\n"
          "steady: the light batch x4, mean of 5 seeded orders x 3 gate orders (arrival, random 1, 2), and its range;\n"
          "_levers: with the levers as they ran (compiles let go, graph replay + interval stop)")
    print(table(ckpt, ("scenario", "light", "light_gain", "light_x4", "light_x4_gain", "steady", "steady_gain",
                       "steady_range", "light_levers", "light_levers_gain", "steady_levers", "steady_levers_gain",
                       "steady_levers_range", "shared_wait_s", "exclusive_wait_s", "full_mix", "full_mix_gain",
                       "full_mix_x4", "full_mix_x4_gain")))
    if goals_result:
        print_goals(goals_result)
    return 0 if worst <= TOLERANCE else 1


def main(argv: list[str] | None = None) -> int:
    from kernelgym_gap.sim import study
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", default=str(RECORDS), help="the folder of the measured run's records")
    ap.add_argument("--corpus", default=str(CORPUS), help="a gap study's JSON (per-shape repetitions) for the "
                                                        "timing fit")
    ap.add_argument("--seed", type=int, default=1, help="the random gate orders of the calibration and the order "
                                                        "of each GPU's copy of the mix in the scaling")
    ap.add_argument("--light-only", action="store_true",
                    help="the records folder holds a light batch alone (throughput_records.jsonl with a defaults row "
                         "'lanes' and any variants' rows, and its summary): no full mix")
    ap.add_argument("--full-records", default=str(RECORDS),
                    help="with --light-only: the folder of a full mix's records (throughput_full_records.jsonl) the "
                         "checkpoint candidates are also predicted on (default: the H200 run of 2026-12-05)")
    ap.add_argument("--library-trust-only", action="store_true",
                    help="with --light-only: only the table of the probe's library check amortized and its warm-up "
                         "shortened (kernelgym_gap/sim/library_trust.py, PREDICTIONS)")
    ap.add_argument("--copy-laned-only", action="store_true",
                    help="with --light-only: only the table of the outputs' copies off the GPU under the shared lane "
                         "(kernelgym_gap/sim/copy_laned.py, PREDICTIONS)")
    ap.add_argument("--json", help="also write every table here")
    ap.add_argument("--goals", action="store_true",
                    help="also the gap to issue 35's goals (kernelgym_gap/sim/goals.py), printed last: each stage "
                         "family scaled by 0.5 and 0 after the lane-time levers and the hand-over, a greedy "
                         "combination per goal at 4, 6 and 8 slots, the families' lane shares (PREDICTIONS)")
    ap.add_argument("--goals-full",
                    help="with --goals --light-only: the folder of the full mix whose defaults row the goals study "
                         "replays (throughput_full_records.jsonl, or a light-only folder's throughput_records.jsonl); "
                         "without it the full mix's goal is not studied (without --light-only: the records' full mix)")
    ap.add_argument("--trace-out", help="write the simulated full mix's trace JSON and PNG to this folder")
    args = ap.parse_args(argv)
    if args.light_only:
        return light_only(args)
    try:
        inp = study.load(args.records, args.corpus)
    except (study.StudyError, OSError, ValueError) as e:
        print(f"simulate_throughput: {e}", file=sys.stderr)
        return 2
    calib = study.calibration(inp, args.seed)
    preds = study.predictions(inp, args.seed)
    sens = study.sensitivity(inp, args.seed)
    from kernelgym_gap.core.slots import slots_per_gpu
    scale = study.scaling(inp, args.seed, slots_per_gpu)
    goals_result = None
    if args.goals:
        from kernelgym_gap.sim import goals
        try:
            full = goals_full_jobs(args.goals_full) if args.goals_full else inp.workloads["full mix"]
            goals_result = goals.study(inp.workloads["light batch"], full, inp.steps)
        except (study.StudyError, goals.GoalsError, OSError, ValueError) as e:
            print(f"simulate_throughput: {e}", file=sys.stderr)
            return 2
    fit = inp.fit
    print(f"timing fit over {fit.rows} corpus evaluations: {fit.fixed:.2f} s + {fit.per_shape:.3f} s/shape + "
          f"{fit.per_rep_s * 1e3:.3f} ms/repetition + {fit.gpu_factor:.2f} x GPU time; launch share "
          f"{fit.launch_share:.1%}, repetition share {fit.repetition_share:.1%}")
    print("\n== calibration: measured (H200, 2026-12-05) against simulated, evaluations per GPU-hour")
    print(table(calib, ("workload", "gated", "evaluations", "measured", "simulated", "error", "random_gate_error",
                        "measured_wall_p50_s", "simulated_wall_p50_s")))
    print("(random_gate_error: the mean and range over 10 runs whose lane admits its waiters in a random order, "
          "seeds from --seed; the gated bound applies to `error`, the arrival order)")
    worst = max(abs(r["error"]) for r in calib if r["gated"])
    print(f"worst error of the gated rows {worst:.1%} ({'within' if worst <= TOLERANCE else 'OUTSIDE'} the "
          f"{TOLERANCE:.0%} bound)")
    print("\n== scaling (PREDICTIONS: simulated, all levers, 6 slots per GPU or core/slots.py's rule; reward server "
          f"{study.SERVER_S * 1e3:g} ms/request and store {study.STORE_S * 1e3:g} ms/record assumed)")
    print(table(scale, ("scenario", "gpus", "evals_per_gpu_hour", "wall_p50_s", "server_utilisation",
                        "store_utilisation")))
    print("\n== what 1,000 per GPU-hour takes (PREDICTIONS: the last scenario below on the full mix x4, with the "
          "timing and the shared stretches scaled)")
    print(table(sens, ("timing_x", "shared_x", "slots_6", "slots_8")))
    if args.trace_out:
        for p in write_traces(inp, Path(args.trace_out)):
            print(f"wrote {p}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"seed": args.seed, "timing_fit": fit.__dict__, "calibration": calib,
                                               "predictions": preds, "scaling": scale, "sensitivity": sens,
                                               **({"goals": goals_result} if goals_result else {}),
                                               "note": "predictions are simulated, not measured"}, indent=1) + "\n")
        print(f"wrote {args.json}")
    print("\n== predictions per design change (SIMULATED, not measured): evaluations per GPU-hour on the replayed "
          "workloads, warm env.step p50")
    print("(variant: how scripts/throughput.py runs the lever on the GPU, --variant and --per-gpu; none: not built)")
    print(table(preds, ("scenario", "full_mix", "full_mix_x4", "light_batch", "step_p50_s", "full_mix_wall_p50_s",
                        "variant", "basis")))
    if goals_result:
        print_goals(goals_result)
    return 0 if worst <= TOLERANCE else 1


if __name__ == "__main__":
    sys.exit(main())
