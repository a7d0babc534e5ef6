"""The evaluation pipeline's simulator (kernelgym_gap/sim/, scripts/simulate_throughput.py): its calibration
against the committed H200 records, the lane's semantics in its traces, where more slots help, its levers,
determinism and bad input. cpu only; every run here is a replay of committed records, no GPU."""
import dataclasses
import importlib.util
import json
import random
import time
from pathlib import Path

import pytest

from kernelgym_gap.sim import checkpoints, levers, study, workload
from kernelgym_gap.sim.engine import Acquire, Delay, Lane, Sim
from kernelgym_gap.sim.pipeline import Job, Setup, simulate

ROOT = Path(__file__).resolve().parent.parent
RECORDS = ROOT / "results" / "h200_2026-12-05"
CORPUS = ROOT / "results" / "h200_2026-12-04_corpus" / "gap_study_cuda.json"
BOUND = 0.15


@pytest.fixture(scope="module")
def inputs():
    return study.load(RECORDS, CORPUS)


def _script():
    spec = importlib.util.spec_from_file_location("simulate_throughput", ROOT / "scripts" / "simulate_throughput.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_calibration_within_15_percent_of_the_measured_runs(inputs):
    rows = {r["workload"]: r for r in study.calibration(inputs)}
    # the measured figures, read from the committed files (docs/measurement.md quotes them)
    assert rows["full mix"]["measured"] == pytest.approx(364.5, abs=0.5)
    assert rows["light batch"]["measured"] == pytest.approx(507.0)
    assert rows["light batch, timed_shapes=2"]["measured"] == pytest.approx(688.6)
    assert rows["warm env.step p50 (s)"]["measured"] == pytest.approx(8.25)
    for name in ("full mix", "light batch", "light batch, timed_shapes=2", "light batch, held_output_bytes=0",
                 "warm env.step p50 (s)"):
        r = rows[name]
        assert r["gated"]
        assert abs(r["simulated"] / r["measured"] - 1) <= BOUND, r
    # the earlier run (older code) is reported beside them, not gated: its error is what it is
    earlier = rows["light batch, 2026-12-04 (out of sample)"]
    assert not earlier["gated"] and earlier["measured"] == pytest.approx(383.3)


def test_an_exclusive_holder_never_overlaps_a_shared_one(inputs):
    for jobs, setup in ((inputs.workloads["full mix"], Setup()),
                        ([levers.reference_share(levers.compile_share(j)) for j in inputs.workloads["light batch"]],
                         Setup(slots_per_gpu=8, compile_outside_lane=True, precompute_reference=True)),
                        (study.replicated(inputs.workloads["light batch"], 2, seed=3), Setup(gpus_per_host=2)),
                        (inputs.workloads["full mix"], Setup(gate_seed=7))):
        r = simulate(jobs, setup)
        held = [iv for iv in r.trace if iv.lane in ("shared", "exclusive")]
        assert any(iv.lane == "exclusive" for iv in held) and any(iv.lane == "shared" for iv in held)
        for a in held:
            if a.lane != "exclusive":
                continue
            for b in held:
                if b is not a and b.gpu == a.gpu and b.start < a.end - 1e-9 and a.start < b.end - 1e-9:
                    pytest.fail(f"{a} overlaps {b}")
        # on different GPUs they may overlap: the lane is per GPU
        if setup.gpus_per_host == 2:
            ex = [iv for iv in held if iv.lane == "exclusive"]
            assert any(a.gpu != b.gpu and a.start < b.end and b.start < a.end for a in ex for b in ex)


@pytest.mark.parametrize("rng", [None, random.Random(4)])
def test_a_waiting_writer_holds_back_later_readers(rng):
    """core/lane.py's writer preference: a reader that comes after a waiting writer waits for it, whatever
    order the gate's waiters are taken in."""
    sim, lane, log = Sim(), Lane(rng=rng), []

    def proc(name, at, mode, hold):
        yield Delay(at)
        waited = yield Acquire(lane, mode)
        log.append((name, sim.now, waited))
        yield Delay(hold)
        lane.release(sim, mode)

    sim.start(proc("reader 1", 0.0, "shared", 5.0))
    sim.start(proc("writer", 1.0, "exclusive", 2.0))
    sim.start(proc("reader 2", 2.0, "shared", 1.0))
    sim.run()
    got = {name: t for name, t, _ in log}
    assert got == {"reader 1": 0.0, "writer": 5.0, "reader 2": 7.0}
    with pytest.raises(ValueError):
        lane.request(sim, "both", lambda: None)
    with pytest.raises(RuntimeError):
        lane.release(sim, "exclusive")


def test_more_slots_raise_throughput_until_the_lane_is_full():
    """Identical evaluations: 1 -> 2 -> 3 slots each raise the rate (the lane has room); past the lane's
    saturation more slots add only waits, so the rate stays put (within 2%) rather than rising. It is not
    monotone in general: on the 12-evaluation light batch 8 slots predict less than 6 (the batch's tail)."""
    jobs = [Job(name=f"e{i}", correctness=3.0, timing=2.5, check=2.0, write=0.5, setup=0.4) for i in range(96)]
    rates = [simulate(jobs, Setup(slots_per_gpu=k)).evals_per_gpu_hour for k in range(1, 9)]
    assert rates[0] < rates[1] < rates[2]
    # the exclusive timing alone caps the GPU at 3600 / 2.5 = 1440 per hour
    assert max(rates) <= 3600 / 2.5 + 1e-6
    for a, b in zip(rates[3:], rates[4:]):
        assert b >= a * 0.98


def test_levers_change_what_they_say(inputs):
    fit = inputs.fit
    assert 0 < fit.launch_share < fit.repetition_share < 1
    job = inputs.workloads["light batch"][0]
    assert levers.graph_timing(fit)(job).timing < job.timing
    assert levers.ci_stop(fit)(job).timing < job.timing
    # the reference computed while the child runs takes its part off a lone step's wall
    step = inputs.steps[1]
    alone = simulate([step], warm_first=True).makespan
    early = simulate([levers.reference_share(step)], Setup(precompute_reference=True), warm_first=True).makespan
    assert early == pytest.approx(alone - levers.REFERENCE_SHARE * step.check, abs=1e-6)
    # a hung call that lets its lane go: others' timings no longer wait behind it
    hung = Job(name="hung", hang_s=60.0, hang_lane="shared")
    others = [Job(name=f"e{i}") for i in range(3)]
    held = simulate([hung] + others, Setup(slots_per_gpu=2))
    let_go = simulate([levers.hung_lets_go(hung)] + others, Setup(slots_per_gpu=2))
    assert max(d.end for d in let_go.done if d.name != "hung") < max(d.end for d in held.done if d.name != "hung")


def test_predictions_and_scaling_are_deterministic_per_seed(inputs):
    a, b = study.scaling(inputs, seed=5), study.scaling(inputs, seed=5)
    assert a == b
    light = inputs.workloads["light batch"]
    rates = [simulate(light, Setup(gate_seed=s)).evals_per_gpu_hour for s in (3, 3, 4, 5, 6)]
    assert rates[0] == rates[1] and len(set(rates[1:])) > 1         # a seed fixes the gate's order
    assert study.replicated(inputs.workloads["full mix"], 3, 5) == study.replicated(inputs.workloads["full mix"], 3, 5)
    assert study.replicated(inputs.workloads["full mix"], 3, 5) != study.replicated(inputs.workloads["full mix"], 3, 6)
    preds = study.predictions(inputs)
    assert preds[0]["scenario"].startswith("as measured")
    assert all(p["full_mix"] > 0 and p["step_p50_s"] > 0 for p in preds)
    cluster = [r for r in a if r["scenario"].startswith("cluster")]
    # past the reward server's capacity the bound falls with the GPU count
    assert cluster[-1]["server_utilisation"] > 1
    assert cluster[-1]["evals_per_gpu_hour"] < cluster[0]["evals_per_gpu_hour"]


def test_the_script_runs_quickly_and_writes_its_tables(tmp_path, capsys):
    # CPU time, not wall: this 2-core machine is shared, and its load says nothing about the simulator
    t = time.process_time()
    rc = _script().main(["--json", str(tmp_path / "sim.json")])
    assert time.process_time() - t < 20
    assert rc == 0
    out = capsys.readouterr().out
    # the predictions table is last, and its last rows are the designs not built (the outputs handed over on the
    # device, sim/ipc_outputs.py) after the trace's candidates
    assert out.rstrip().splitlines()[-1].startswith("the lane-time levers + outputs handed over on the device")
    assert any(line.startswith("+ hung calls") for line in out.splitlines())
    assert "SIMULATED, not measured" in out
    data = json.loads((tmp_path / "sim.json").read_text())
    assert {r["workload"] for r in data["calibration"]} >= {"full mix", "light batch", "warm env.step p50 (s)"}
    # what 1,000 per GPU-hour takes: smaller lane stretches never predict less
    sens = {(r["timing_x"], r["shared_x"]): r["slots_6"] for r in data["sensitivity"]}
    assert sens[(0.5, 0.5)] > sens[(1.0, 1.0)] and sens[(0.25, 0.25)] > sens[(0.5, 0.5)]


def test_every_built_lever_names_the_variant_the_gpu_run_takes(inputs):
    """Each prediction of a built lever says how scripts/throughput.py runs it, and that variant parses there
    (one GPU call runs them side by side); the candidates not built say so (None)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("throughput", ROOT / "scripts" / "throughput.py")
    tp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tp)
    rows = {r["scenario"]: r for r in study.predictions(inputs)}
    built = {r["variant"] for r in rows.values() if r["variant"]}
    for variant in built:
        fields = variant.split(" --per-gpu ")[0]
        assert fields.startswith("--per-gpu") or tp.parse_variant(fields)
    assert set(tp.LEVERS) <= {v.split(" --per-gpu ")[0] for v in built}
    assert rows["+ hung calls let the lane go"]["variant"] is None


def test_laned_stages_on_cores_slow_a_core_bound_host_and_not_a_roomy_one(inputs):
    jobs = inputs.workloads["light batch"]
    roomy = [simulate(jobs, Setup(slots_per_gpu=4, cores_per_host=16, laned_cores=k)).evals_per_gpu_hour
             for k in (False, True)]
    assert roomy[0] == pytest.approx(roomy[1], rel=0.02)        # 16 cores never bind 4 slots: the calibration holds
    tight = [simulate(jobs, Setup(slots_per_gpu=4, cores_per_host=2, laned_cores=k)).evals_per_gpu_hour
             for k in (False, True)]
    assert tight[1] < 0.9 * tight[0]
    from kernelgym_gap.core.slots import slots_per_gpu
    rows = {r["scenario"]: r for r in study.scaling(inputs, 1, slots_per_gpu)}
    rule = [r for name, r in rows.items() if "by the rule" in name]
    assert len(rule) == 3 and all(r["evals_per_gpu_hour"] > 0 for r in rule)
    assert not any("by the rule" in r["scenario"] for r in study.scaling(inputs, 1))


def test_bad_records_are_refused_with_their_line(tmp_path):
    bad = tmp_path / "throughput_records.jsonl"
    bad.write_text('{"mode": "lanes", "at_s": 1, "latency": {}}\nnot json\n')
    with pytest.raises(workload.RecordError, match=":2: not JSON"):
        workload.read_records(bad)
    bad.write_text('{"mode": "lanes"}\n')
    with pytest.raises(workload.RecordError, match="latency"):
        workload.read_records(bad)
    good = tmp_path / "good.jsonl"
    good.write_text('{"mode": "lanes", "at_s": 1, "latency": {"total": 1}}\n')
    with pytest.raises(workload.RecordError, match="no record of mode"):
        workload.jobs_of_mode(workload.read_records(good), "serial")
    assert _script().main(["--records", str(tmp_path / "missing")]) == 2


def test_a_job_from_a_record_keeps_its_own_durations():
    r = {"mode": "lanes", "task": "T", "status": "ok", "at_s": 20.0,
         "latency": {"gate": 0.01, "child": 12.0, "child_setup": 0.5, "child_import": 0.0,
                     "child_lane_wait_shared": 1.0,
                     "child_correctness": 3.0, "child_correctness_calls": 2.0, "child_lane_wait_exclusive": 2.0,
                     "child_timing": 2.5, "child_outputs_write": 0.4, "child_total": 9.5, "check_lane_wait": 1.0,
                     "check": 3.0, "total": 15.2}}
    j = workload.job_from_record(r)
    assert (j.correctness, j.timing, j.check, j.write, j.calls) == (3.0, 2.5, 2.0, 0.4, 2.0)
    assert j.cold_start == pytest.approx(2.5)            # no child_preimport: a cold child, child - child_total
    assert j.misc == pytest.approx(0.1) and j.rest == pytest.approx(0.19)
    hung = workload.job_from_record({"status": "timeout", "at_s": 60, "message": "call 18 ran past 60.0 s",
                                     "latency": {"gate": 0.0, "child": 60.0, "total": 60.1}})
    assert hung.hang_s == 60.0 and hung.hang_lane == "shared"
    assert dataclasses.replace(hung, hang_lane="").hang_lane == ""


def test_a_slow_reward_server_bounds_every_gpu_as_the_cluster_bound_says():
    """The single-server queue in the simulation against the bound study.scaling states for a cluster:
    4 GPUs whose evaluations each take the server 2 s cannot exceed 3600 / 2 per hour in all."""
    jobs = [Job(name=f"e{i}", correctness=1.0, timing=1.0, check=1.0) for i in range(120)]
    fast = simulate(jobs, Setup(gpus_per_host=4))
    slow = simulate(jobs, Setup(gpus_per_host=4, server_s=2.0))
    assert fast.evals_per_gpu_hour * 4 > 3600 / 2.0            # without the server the GPUs would do more
    assert slow.evals_per_gpu_hour * 4 == pytest.approx(3600 / 2.0, rel=0.08)
    assert slow.server_busy_s / slow.makespan > 0.9


# ---- the H100 light batch of 2026-12-06 (a light-batch-only folder) and the refit from its records ----
H100_CALL3 = ROOT / "results" / "h100_2026-12-06_levers" / "call3" / "light"


@pytest.fixture(scope="module")
def light():
    return study.load_light(H100_CALL3, CORPUS)


def test_a_light_only_folder_replays_through_the_cli(tmp_path, capsys):
    """call3's folder has no full mix: --light-only replays each row and predicts the levers from the defaults
    row, beside the row that ran them; every row's measured figure is the summary's."""
    rc = _script().main(["--light-only", "--records", str(H100_CALL3), "--json", str(tmp_path / "light.json")])
    assert rc == 0
    out = capsys.readouterr().out
    assert "H100" in out and "SIMULATED" in out
    data = json.loads((tmp_path / "light.json").read_text())
    calib = {r["row"]: r for r in data["calibration"]}
    summary = json.loads((H100_CALL3 / "throughput_hbm3_2026-12-06.json").read_text())
    assert calib["lanes"]["measured"] == summary["evals_per_gpu_hour"]["lanes x4"]
    assert len(calib) == 3 and all(abs(r["error"]) <= BOUND for r in calib.values())
    preds = {r["scenario"]: r for r in data["predictions"]}
    levers_row = next(v for k, v in summary["evals_per_gpu_hour"].items() if "graph_replay=1" in k)
    assert preds["all levers, 4 slots"]["measured"] == levers_row
    steady = {(r["scenario"], r["slots"]): r["steady"] for r in data["steady_lane_time_levers"]}
    for slots in (4, 6):         # the lane-time levers, in the steady state, beat the defaults at either slot count
        assert steady[("the lane-time levers together", slots)] > steady[("defaults", slots)]
    # the prediction is made from the defaults row, not from the row it is compared with
    assert preds["all levers, 4 slots"]["simulated"] != calib[next(k for k in calib if "graph_replay" in k)]["simulated"]
    assert preds["as measured (4 slots)"]["simulated"] == calib["lanes"]["simulated"]


def test_a_folder_without_what_it_needs_is_a_clear_error(tmp_path, capsys):
    # the full calibration on a light-only folder names the missing file and the flag
    with pytest.raises(study.StudyError, match=r"missing throughput_full_records\.jsonl.*--light-only"):
        study.load(H100_CALL3, CORPUS)
    assert _script().main(["--records", str(H100_CALL3)]) == 2
    assert "--light-only" in capsys.readouterr().err
    # a light-only folder without its records, or without its summary
    with pytest.raises(study.StudyError, match="no throughput_records.jsonl"):
        study.load_light(tmp_path, CORPUS)
    (tmp_path / "throughput_records.jsonl").write_text((H100_CALL3 / "throughput_records.jsonl").read_text())
    with pytest.raises(study.StudyError, match="no summary"):
        study.load_light(tmp_path, CORPUS)
    # records with no defaults row
    rows = [json.loads(x) for x in (H100_CALL3 / "throughput_records.jsonl").read_text().splitlines()]
    (tmp_path / "throughput_records.jsonl").write_text(
        "\n".join(json.dumps(r) for r in rows if r["mode"] != "lanes") + "\n")
    (tmp_path / "throughput_hbm3_2026-12-06.json").write_text((H100_CALL3 / "throughput_hbm3_2026-12-06.json").read_text())
    with pytest.raises(study.StudyError, match="no defaults row"):
        study.load_light(tmp_path, CORPUS)


def test_the_refit_constants_are_what_the_committed_records_give():
    rf = levers.refit(workload.read_records(H100_CALL3 / "throughput_records.jsonl"))
    assert levers.COMPILE_SHARE == round(rf.compile_share, 2)
    assert levers.REFERENCE_SHARE == round(rf.reference_share, 2)
    assert levers.MEASURE_SHARE == round(rf.measure_share, 2)
    assert levers.GRAPH_INTERVAL_MEASURE_FACTOR == round(rf.graph_interval_measure_factor, 2)
    assert rf.compile_records == 12 and rf.paired_submissions == 12
    # the early reference never ran in these rows (a warm checker): no record says how long it was waited for
    assert rf.early_wait_records == 0
    # without a row that let its compiles go, that share is not refit (COMPILE_SHARE stands) and the rest still is
    alone = levers.refit([r for r in workload.read_records(H100_CALL3 / "throughput_records.jsonl")
                          if r["mode"] == "lanes"])
    assert alone.compile_share is None and alone.compile_records == 0 and alone.measure_share == rf.measure_share
    with pytest.raises(levers.RefitError, match="check's parts"):
        levers.refit([dict(r, latency={k: v for k, v in r["latency"].items() if not k.startswith("check_")})
                      for r in workload.read_records(H100_CALL3 / "throughput_records.jsonl")])


def test_the_lane_time_levers_call_replays_without_a_compile_row(tmp_path):
    """The H100 call of 2026-12-06 afternoon ran no row letting its compiles go: --light-only still replays
    every row within the bound (COMPILE_SHARE stands), and its lane-time levers row is the one compared."""
    folder = ROOT / "results" / "h100_2026-12-06_lane_levers" / "call1"
    rc = _script().main(["--light-only", "--records", str(folder), "--json", str(tmp_path / "l.json")])
    data = json.loads((tmp_path / "l.json").read_text())
    assert rc == 0 and all(abs(r["error"]) <= BOUND for r in data["calibration"])
    preds = {r["scenario"]: r for r in data["predictions"]}
    assert preds["the lane-time levers together, 4 slots"]["measured"] == 814.3


def test_the_checkpoint_let_gos_are_what_the_light_batch_tasks_make():
    """workload.CHECKPOINT_LET_GOS against child/outputs.checkpoint_due over each light-batch task's correctness
    order on cuda (the records give the checkpoints' summed write, not their number)."""
    from kernelgym_gap.child.outputs import checkpoint_due
    from kernelgym_gap.core.config import EvalConfig
    from kernelgym_gap.core.record import first_of_their_shape
    from kernelgym_gap.core.registry import get_task
    from kernelgym_gap.engine.correctness_order import order_for_correctness
    from kernelgym_gap.engine.trials import make_trials
    for task_id in ("GELU", "LayerNorm", "Softmax", "RMSNorm", "AddReLU", "RowSum"):
        task = get_task(task_id)
        trials = order_for_correctness(task, make_trials(task, "cuda", EvalConfig(), random.Random(0)))
        compiling, covered, n = first_of_their_shape(trials), 0, 0
        for finished in range(len(trials)):
            if checkpoint_due(trials, finished, covered, compiling):
                n, covered = n + 1, finished
        assert n == workload.CHECKPOINT_LET_GOS, task_id


def test_a_checkpoint_let_go_waits_behind_a_timing_that_came_meanwhile():
    """The correctness stretch is cut by its checkpoints: while one evaluation writes with the lane let go, a
    waiting timing goes first, so its correctness ends later than without the let-go (the records'
    child_lane_wait_after_checkpoint); the lane is never held shared and exclusive at once."""
    # the reader holds the lane shared from 0.1 s for 2 s; the timing comes at 0.5 s and waits at the gate
    reader = Job(name="reader", cold_start=0.0, setup=0.1, correctness=2.0, timing=0.1, check=0.0, write=0.0)
    writer = Job(name="timing", cold_start=0.0, setup=0.5, correctness=0.0, timing=3.0, check=0.0, write=0.0)
    cut = dataclasses.replace(reader, unlaned=0.2, checkpoints=1)
    plain = simulate([reader, writer], Setup(slots_per_gpu=2))
    let_go = simulate([cut, writer], Setup(slots_per_gpu=2))

    def held(r, name, stage):
        return [iv for iv in r.trace if iv.name == name and iv.stage == stage and iv.job >= 0]

    # without the let-go the timing waits for the whole stretch; with it, it gets in at the checkpoint (1.1 s)
    assert held(plain, "timing", "timing")[0].start == pytest.approx(2.1)
    assert held(let_go, "timing", "timing")[0].start == pytest.approx(1.1)
    # and the reader's second half waits behind the 3 s timing (the records' lane_wait_after_checkpoint)
    halves = held(let_go, "reader", "correctness")
    assert len(halves) == 2 and halves[1].start == pytest.approx(4.1)
    assert any(iv.stage == "checkpoint (unlaned)" for iv in let_go.trace)


def test_a_record_with_let_go_parts_is_held_only_for_its_own_stretch():
    r = {"mode": "lanes", "task": "T", "status": "ok", "at_s": 20.0,
         "latency": {"child": 14.0, "child_correctness": 9.0, "child_correctness_calls": 3.0,
                     "child_compile_unlaned": 1.0, "child_lane_wait_after_compile": 0.5,
                     "child_checkpoint_unlaned": 0.4, "child_lane_wait_after_checkpoint": 4.0,
                     "child_timing": 2.0, "child_timing_measure": 0.6, "child_total": 13.0, "check": 2.0,
                     "total": 16.5}}
    j = workload.job_from_record(r)
    assert j.correctness == pytest.approx(9.0 - 0.4 - 4.0 - 0.5)    # the compile stays inside, as `compile`
    assert (j.compile, j.unlaned, j.checkpoints, j.timing_measure) == (1.0, 0.4, workload.CHECKPOINT_LET_GOS, 0.6)
    faster = levers.graph_interval_measured(j)
    assert faster.timing == pytest.approx(2.0 - 0.6 * (1 - levers.GRAPH_INTERVAL_MEASURE_FACTOR))


# ---- the checkpoints' lane let-gos (issue 35): candidates (a) keep the lane, (b) fewer, (d) more ----
def _plan(kinds=("second call", "repeats", "larger shape", "repeats"), sizes=(1, 1, 2, 2), last=2, calls=6):
    return checkpoints.CheckpointPlan(tuple(kinds), tuple(sizes), last, calls)


def test_a_kept_checkpoint_writes_inside_the_hold_and_a_waiting_timing_waits_for_it():
    """Candidate (a): a checkpoint that keeps the shared lane lets nothing in during its write, takes nothing
    back, and the timing that came at 0.5 s waits for the whole stretch and the write (against 1.1 s when it is
    let go: test_a_checkpoint_let_go_waits_behind_a_timing_that_came_meanwhile)."""
    reader = Job(name="reader", cold_start=0.0, setup=0.1, correctness=2.0, timing=0.1, check=0.0, write=0.0,
                 unlaned=0.2, checkpoints=1)
    writer = Job(name="timing", cold_start=0.0, setup=0.5, correctness=0.0, timing=3.0, check=0.0, write=0.0)
    kept = simulate([dataclasses.replace(reader, kept_checkpoints=(True,)), writer], Setup(slots_per_gpu=2))
    let_go = simulate([reader, writer], Setup(slots_per_gpu=2))

    def held(r, name, stage):
        return [iv for iv in r.trace if iv.name == name and iv.stage == stage and iv.job >= 0]

    assert held(kept, "timing", "timing")[0].start == pytest.approx(2.3)
    assert held(let_go, "timing", "timing")[0].start == pytest.approx(1.1)
    stretch = held(kept, "reader", "correctness")
    assert len(stretch) == 1 and stretch[0].end - stretch[0].start == pytest.approx(2.2)
    assert not any(iv.stage == "checkpoint (unlaned)" for iv in kept.trace)


def test_uneven_checkpoint_shares_split_the_writes_as_given():
    job = Job(name="j", cold_start=0.0, setup=0.0, correctness=3.0, timing=0.0, check=0.0, write=0.0, unlaned=1.0,
              checkpoints=2, checkpoint_shares=(0.25, 0.75))
    writes = [iv.end - iv.start for iv in simulate([job]).trace if iv.stage == "checkpoint (unlaned)"]
    assert writes == [pytest.approx(0.25), pytest.approx(0.75)]


def test_the_keep_lane_rule_keeps_the_checkpoints_at_or_under_its_bytes():
    job = checkpoints.with_checkpoint_plans({"T": _plan(sizes=(1, 1, 5, 5))})(
        Job(name="j", task="T", unlaned=1.2, checkpoints=4))
    assert job.checkpoint_shares == pytest.approx((1 / 12, 1 / 12, 5 / 12, 5 / 12))
    assert checkpoints.checkpoints_keep_lane(1)(job).kept_checkpoints == (True, True, False, False)
    assert checkpoints.checkpoints_keep_lane(float("inf"))(job).kept_checkpoints == (True,) * 4
    # a job without its task's plan, or whose checkpoints are not the plan's, is left as it is
    other = Job(name="k", task="U", unlaned=1.2, checkpoints=4)
    assert checkpoints.checkpoints_keep_lane(1)(checkpoints.with_checkpoint_plans({"T": _plan()})(other)) == other


def test_fewer_checkpoints_leave_their_outputs_to_the_next_one_made():
    """Candidate (b): a dropped checkpoint's bytes (and write seconds) go to the next one made, or to the one
    before the timing (no lane: the outputs' write); (b') keeps the smallest shape's repeats too."""
    job = checkpoints.with_checkpoint_plans({"T": _plan()})(Job(name="j", task="T", unlaned=0.6, checkpoints=4, write=0.1))
    strict = checkpoints.fewer_checkpoints(frozenset({checkpoints.SECOND_CALL, checkpoints.LARGER_SHAPE}))(job)
    assert strict.checkpoint_plan == checkpoints.CheckpointPlan(("second call", "larger shape"), (1, 3), 4, 6)
    assert (strict.checkpoints, strict.unlaned, strict.write) == (2, pytest.approx(0.4), pytest.approx(0.3))
    assert strict.checkpoint_shares == pytest.approx((0.25, 0.75))
    b2 = checkpoints.fewer_checkpoints(frozenset({checkpoints.SECOND_CALL, checkpoints.LARGER_SHAPE}), smallest_repeats=True)(job)
    assert b2.checkpoint_plan.kinds == ("second call", "repeats", "larger shape")
    assert b2.checkpoint_plan.sizes == (1, 1, 2) and b2.checkpoint_plan.last == 4
    every = checkpoints.let_go_every_call()(job)
    assert (every.checkpoints, every.unlaned, every.checkpoint_shares) == (5, 0.6, ())


def test_a_record_without_let_gos_gets_its_checkpoints_imputed_from_its_outputs_write():
    """The H200 full mix of 2026-12-05 predates the checkpoints: its outputs' write is split by the plan's bytes
    between the let-go checkpoints and the one before the timing (an assumption the table says)."""
    job = checkpoints.with_checkpoint_plans({"T": _plan(sizes=(1, 1, 2), kinds=("second call", "repeats", "larger shape"),
                                                   last=4)})(Job(name="j", task="T", write=1.0))
    assert (job.checkpoints, job.unlaned, job.write) == (3, pytest.approx(0.5), pytest.approx(0.5))
    with pytest.raises(ValueError, match="kind"):
        checkpoints.CheckpointPlan(("before lunch",), (1,), 0)


def test_the_checkpoint_plans_are_what_the_light_batch_tasks_make():
    plans = _script().checkpoint_plans({"GELU", "LayerNorm", "Softmax", "RMSNorm", "AddReLU", "RowSum"})
    assert len(plans) == 6
    for task_id, plan in plans.items():
        assert len(plan.sizes) == workload.CHECKPOINT_LET_GOS and plan.calls == 16, task_id
        # before the second call (the smallest shape's first seed in one dtype), then its other dtype's and
        # its repeats
        assert plan.kinds[:3] == ("second call", "repeats", "larger shape"), task_id
    assert max(plans["RowSum"].sizes) < 4 << 20 <= min(plans["GELU"].sizes)


def test_no_checkpoint_candidate_gains_five_percent_in_the_steady_state():
    """The finding of 2026-12-06 (docs/measurement.md, "The checkpoints' lane waits"): on call 3's light batch
    none of the candidates is predicted to gain 5% in the steady state, with or without the levers, and keeping
    the lane through every write costs more than 5%: the let-gos are where a waiting timing gets in, and
    without them it waits for every reader's whole stretch."""
    script = _script()
    inp = study.load_light(H100_CALL3, CORPUS)
    rows = {r["scenario"]: r for r in study.checkpoint_predictions(
        inp, script.checkpoint_plans({j.task for j in inp.rows["lanes"]}))}
    assert len(rows) == 10
    assert all(r["steady_gain"] < 0.05 and r["steady_levers_gain"] < 0.05 for r in rows.values())
    keep_all = rows["(a) keep the lane for every write"]
    assert keep_all["steady_gain"] < -0.05
    assert keep_all["exclusive_wait_s"] > 2 * rows["checkpoints as today (byte-split writes)"]["exclusive_wait_s"]


# ---- the check's outputs read before its lane (EvalConfig.read_outputs_outside_lane, issue 35) -------------

def _checked_record(**lat):
    base = {"child": 10.0, "child_correctness": 3.0, "child_timing": 2.0, "child_total": 9.0, "check_lane_wait": 0.5,
            "check": 3.0, "total": 13.5}
    return {"mode": "lanes", "task": "T", "status": "ok", "at_s": 20.0, "latency": {**base, **lat}}


def test_a_record_that_read_before_the_lane_holds_it_only_for_the_rest():
    """check_prefetch is neither the lane's wait nor its hold: the job's lane-held check and the trace's shared
    check interval leave it out, and it is a host stage of its own."""
    from kernelgym_gap.sim import trace
    r = _checked_record(check_prefetch=1.2, check_read=0.3)
    j = workload.job_from_record(r)
    assert (j.check, j.check_prefetch, j.check_read) == pytest.approx((3.0 - 0.5 - 1.2, 1.2, 0.3))
    iv = {x.stage: x for x in trace.intervals_from_records([r])}
    assert iv["check"].end - iv["check"].start == pytest.approx(1.3) and iv["check"].lane == "shared"
    assert iv["check prefetch"].end - iv["check prefetch"].start == pytest.approx(1.2)
    assert iv["check prefetch"].lane == "" and iv["check prefetch"].end <= iv["check"].start
    assert levers.read_outside(j) == j                      # it ran the lever already


def test_the_read_lever_moves_the_read_less_its_copy_off_the_lane():
    j = workload.job_from_record(_checked_record(check_read=2.0))
    moved = levers.read_outside(j)
    off = 2.0 * (1 - levers.H2D_SHARE_OF_READ)
    assert moved.check == pytest.approx(2.5 - off) and moved.check_prefetch == pytest.approx(off)
    assert moved.check_read == pytest.approx(2.0 * levers.H2D_SHARE_OF_READ)
    # a record without the part: READ_SHARE of the lane-held check
    bare = workload.job_from_record(_checked_record())
    assert levers.read_outside(bare).check_prefetch == pytest.approx(2.5 * levers.READ_SHARE * (1 - levers.H2D_SHARE_OF_READ))
    # in the pipeline the prefetch is a host stage before the check's wait, never on the lane
    run = simulate([moved] * 8, Setup(slots_per_gpu=4))
    stages = [s for s in run.trace if s.stage == "check prefetch"]
    assert len(stages) == 8 and all(s.lane == "" for s in stages)
    assert run.makespan < simulate([j] * 8, Setup(slots_per_gpu=4)).makespan
    sc = next(s for s in levers.scenarios(levers.fit_timing(CORPUS)) if s.variant == levers.READ)
    assert sc.job is levers.read_outside
    assert levers.READ in _script_throughput_levers()


def _script_throughput_levers():
    spec = importlib.util.spec_from_file_location("throughput", ROOT / "scripts" / "throughput.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.LEVERS


def test_the_read_share_is_what_the_light_batch_records_give():
    records = workload.read_records(H100_CALL3 / "throughput_records.jsonl")
    held = sum(r["latency"]["check"] - r["latency"].get("check_lane_wait", 0.0) for r in records
               if "check_read" in r["latency"])
    read = sum(r["latency"]["check_read"] for r in records if "check_read" in r["latency"])
    assert read / held == pytest.approx(levers.READ_SHARE, abs=0.005)


# ---- the rechecks after the exclusive lane (TimingConfig.recheck_outside_exclusive, issue 35) ----
_TIMED = {"child": 14.0, "child_correctness": 5.0, "child_lane_wait_exclusive": 1.0, "child_timing": 2.8,
          "child_timing_measure": 0.8, "child_timing_recheck": 0.6, "child_total": 13.0, "check": 2.0,
          "total": 16.5}


def test_the_recheck_lever_moves_the_recheck_from_the_exclusive_stretch_to_a_shared_one():
    j = workload.job_from_record({"mode": "lanes", "task": "T", "status": "ok", "at_s": 20.0, "latency": _TIMED})
    assert (j.timing, j.timing_recheck, j.recheck) == (2.8, 0.6, 0.0)        # by default inside the timing
    moved = levers.recheck_outside(j)
    assert moved.timing == pytest.approx(2.2) and moved.recheck == pytest.approx(0.6)
    assert levers.recheck_outside(moved) == moved                            # a record that ran it: as it is
    # a record without the part (the H200 runs): RECHECK_SHARE of its timing
    old = dataclasses.replace(j, timing_recheck=0.0)
    assert levers.recheck_outside(old).recheck == pytest.approx(levers.RECHECK_SHARE * 2.8)
    # alone on the GPU: the timing holds the lane exclusive, then the recheck holds it shared, nothing between
    run = simulate([moved], Setup(slots_per_gpu=1))
    held = [iv for iv in run.trace if iv.lane]
    timing = next(iv for iv in held if iv.stage == "timing")
    recheck = next(iv for iv in held if iv.stage == "recheck")
    assert (timing.lane, recheck.lane) == ("exclusive", "shared") and recheck.start == pytest.approx(timing.end)
    assert recheck.end - recheck.start == pytest.approx(0.6)
    assert run.done[0].wall == pytest.approx(simulate([j], Setup(slots_per_gpu=1)).done[0].wall)


def test_a_record_whose_rechecks_ran_after_the_timing_is_read_with_them_shared():
    lat = {**_TIMED, "child_timing": 2.2, "child_lane_wait_recheck": 0.3, "child_recheck": 0.6}
    r = {"mode": "lanes [recheck_outside_exclusive=1]", "task": "T", "status": "ok", "at_s": 20.0, "latency": lat}
    j = workload.job_from_record(r)
    assert (j.timing, j.recheck) == (2.2, 0.6)
    # the recheck and its wait are stages of the child, not its unaccounted rest
    assert j.misc == pytest.approx(13.0 - 5.0 - 1.0 - 2.2 - 0.3 - 0.6)
    from kernelgym_gap.sim.trace import intervals_from_records
    stages = {iv.stage: iv for iv in intervals_from_records([r])}
    assert stages["recheck"].lane == "shared" and stages["timing"].lane == "exclusive"
    assert stages["wait shared (recheck)"].wait and stages["recheck"].start == pytest.approx(
        stages["wait shared (recheck)"].end)


def test_the_recheck_lever_is_a_prediction_of_its_gpu_variant():
    sc = next(s for s in levers.scenarios(levers.fit_timing(CORPUS)) if s.variant == levers.RECHECK)
    assert sc.name == "rechecks after the exclusive lane"
    rf = levers.refit(workload.read_records(H100_CALL3 / "throughput_records.jsonl"))
    assert levers.RECHECK_SHARE == round(rf.recheck_share, 2)


# ---- records that stopped early: the H100 full mix of 2026-12-06 (its hostile fixtures), issue 35 ----
H100_FULL = ROOT / "results" / "h100_2026-12-06b_full_levers" / "call1_full"


def _lane_holds(run, job: int) -> list:
    return [iv for iv in run.trace if iv.job == job and iv.lane]


def test_a_record_refused_at_the_gate_takes_no_child_and_no_lane():
    """A syntax error stops at the static gate: no child, no lane. Replayed as a child with empty stages it waited
    for the lane like any evaluation (behind the other slot's 30 s timing here: 2.5 + 30 s)."""
    refused = workload.job_from_record({"mode": "lanes", "task": "T", "status": "syntax_error", "stage": "gate",
                                        "at_s": 0.0, "latency": {"gate": 0.001, "total": 0.002}})
    assert not refused.child
    long_timing = Job(name="long", setup=0.0, correctness=2.5, timing=30.0, check=0.0)
    run = simulate([long_timing, refused], Setup(slots_per_gpu=2))
    assert run.done[1].end == pytest.approx(0.002) and not _lane_holds(run, 1)
    assert not [iv for iv in run.trace if iv.job == 1 and iv.wait]
    # the slot's pre-started child is kept for its next evaluation: it does not wait for another one
    after = Job(name="after", setup=0.0, correctness=1.0, timing=1.0, check=0.0)
    one = simulate([Job(name="first", correctness=1.0, timing=1.0, check=1.0), refused, after], Setup(slots_per_gpu=1))
    prestarts = [iv for iv in one.trace if iv.row == "pre-start" and iv.stage == "preimport"]
    assert len(prestarts) == 2                 # after "first" and after "after": none for the refused one


def test_a_gate_refused_record_is_never_the_slots_previous_evaluation():
    """The hand-off's wait for the pre-started child is rebuilt from the evaluation that ended as this one started;
    a gate-refused one ends as it starts beside it (no child: it never refilled the slot's pre-start)."""
    prev = {"mode": "lanes", "task": "T", "status": "ok", "at_s": 9.95,
            "latency": {"child": 8.0, "child_total": 6.0, "check": 1.0, "total": 9.95}}
    refused = {"mode": "lanes", "task": "T", "status": "syntax_error", "at_s": 10.0, "latency": {"gate": 0.0,
                                                                                                "total": 0.0}}
    this = {"mode": "lanes", "task": "T", "status": "ok", "at_s": 30.0,
            "latency": {"child": 12.0, "child_preimport": 5.0, "child_total": 6.0, "check": 2.0, "total": 20.0}}
    # its child ended at 9.95 - 1.0 (the check) - 0.95 (the rest): child_preimport had it ready 5 s later, at 13.0;
    # this one began at 10.0 and waited 12 - 6 - AFTER_REPORT_S (no child_after_report in the record) - the 0.1 s
    # hand-off: the pre-started child's startup is what child_preimport leaves of that wait, and it belongs to the
    # child pre-started as `prev` ended (never the refused record's)
    records = [prev, refused, this]
    startup = 12.0 - 6.0 - workload.AFTER_REPORT_S - 3.0
    pre = workload.prestarts(records)
    assert pre[0]["pre_startup"] == pytest.approx(startup)
    assert pre[1] == pre[2] == dict(pre_startup=pytest.approx(startup), pre_host=workload.PRE_HOST_S,
                                    pre_context=workload.PRE_CONTEXT_S, pre_warm=0.0)   # the row's median: none met
    # the wait rebuilt (3.0 + the startup), what is left is the child's exit after its report
    assert workload.handoffs(records)[2] == pytest.approx(workload.AFTER_REPORT_S)


def test_a_runtime_error_in_a_call_is_its_own_stages_not_a_hang_on_the_lane():
    """crash.py on the H100 (runtime_error from the child, no timing): the child's 25.7 s were 19.9 s of waiting
    for its pre-started child (whose CUDA context waited for the lane) and 1.55 s of its own stages. It was
    replayed as a hang holding the shared lane for all 25.7 s (its CUDA message says "API call")."""
    r = next(x for x in workload.read_records(H100_FULL / "throughput_records.jsonl")
             if x["mode"] == "lanes" and x["submission"] == "fixture/failures/crash.py")
    lat = r["latency"]
    j = workload.job_from_record(r, handoff=4.2)
    assert j.hang_s == 0 and not j.timed and not j.has_check and j.handoff == 4.2
    assert j.setup == pytest.approx(lat["child_setup"] + lat["child_import"])
    assert j.correctness == pytest.approx(lat["child_total"] - j.setup)
    run = simulate([j], Setup(slots_per_gpu=1))
    held = _lane_holds(run, 0)
    assert [iv.stage for iv in held] == ["correctness"] and held[0].lane == "shared"
    assert run.done[0].wall == pytest.approx(j.cold_start + j.setup + j.correctness + j.rest, abs=0.01)


def test_a_call_killed_at_its_deadline_holds_the_lane_for_its_call_then_is_checked():
    """call_hang_after_first.py (too_slow, 72.6 s of child): its first call and checkpoint, then 60.1 s in the
    hung call under the shared lane (the message's "60.1 s into the call"), then the check of the trials it
    finished. It was replayed as 72.6 s on the lane (its wait for the pre-started child included) and no check."""
    rec = next(x for x in workload.read_records(H100_FULL / "throughput_records.jsonl")
               if x["mode"] == "lanes" and x["submission"] == "fixture/hostile/call_hang_after_first.py")
    lat = rec["latency"]
    j = workload.job_from_record(rec, handoff=3.4)
    assert j.hang_s == pytest.approx(60.1) and j.hang_lane == "shared" and not j.timed and j.has_check
    assert j.check == pytest.approx(lat["check"] - lat["check_lane_wait"])
    assert j.unlaned == lat["child_checkpoint_unlaned"] and j.checkpoints == 1
    run = simulate([j], Setup(slots_per_gpu=1))
    held = _lane_holds(run, 0)
    assert [iv.stage for iv in held] == ["correctness", "hung", "check"]
    assert all(iv.lane == "shared" for iv in held)
    assert held[1].end - held[1].start == pytest.approx(60.1 + j.correctness / 2)
    # the rebuilt hand-off: the child's time less its own stages (the hung call's 60.1 s among them) and the wait
    assert workload.child_own_s(rec) == pytest.approx(
        lat["child_setup"] + lat["child_import"] + sum(lat.get(k, 0.0) for k in workload.CORRECTNESS_PARTS) + 60.1)
    # a message without the call's seconds: the child's time less its recorded stages is the hung call
    bare = dict(rec, message="call 2 ran past 60.0 s")
    assert workload.hung_call_s(bare) == pytest.approx(lat["child"] - lat["child_setup"] - lat["child_import"]
                                                       - sum(lat.get(k, 0.0) for k in workload.CORRECTNESS_PARTS))


def test_the_full_mix_with_its_fixtures_replays_within_the_bound(tmp_path):
    """The H100 full mix's first 16 (attention, backward and the hostile fixtures), each row from its own records:
    the defaults row was -18.6% before the fixtures' records were read for how far they went (gate, stopped,
    killed); the levers row predicted from it is quoted beside the measured row, whatever it comes to."""
    rc = _script().main(["--light-only", "--records", str(H100_FULL), "--json", str(tmp_path / "f.json")])
    data = json.loads((tmp_path / "f.json").read_text())
    calib = {r["row"]: r for r in data["calibration"]}
    assert rc == 0 and calib["lanes"]["measured"] == 321.5
    assert all(abs(r["error"]) <= BOUND for r in data["calibration"])
    preds = {r["scenario"]: r for r in data["predictions"]}
    assert preds["the lane-time levers together, 4 slots"]["measured"] == 456.6


# ---- the outputs handed over on the device by CUDA IPC (a DESIGN, simulated; issue 35's 4 s step) ----
from kernelgym_gap.sim import ipc_outputs  # noqa: E402

# a warm step's record as the H100 gave it with the levers of 2026-12-06 (the outputs' stages rounded)
_STEP_LAT = {"child": 5.4, "child_preimport": 0.3, "child_setup": 0.35, "child_correctness": 3.2,
             "child_correctness_calls": 1.5, "child_correctness_save": 1.0, "child_checkpoint_write": 0.46,
             "child_checkpoint_unlaned": 0.4, "child_timing": 0.5, "child_recheck": 0.5, "child_timing_recheck": 0.5,
             "child_outputs_write": 0.2, "child_total": 5.1, "check": 1.2, "check_prefetch": 0.5, "check_read": 0.3,
             "check_compare": 0.1, "total": 6.75}


def _ipc_step(**lat):
    return workload.step_job({"task": "T", "status": "ok", "latency": {**_STEP_LAT, **lat}})


def test_the_ipc_design_replaces_the_outputs_stages_with_a_device_copy():
    """Host copies -> device copies in the held stretch, no checkpoint let-gos, no output files, and the check's
    reads (prefetch and read under the lane) -> the opener's hand-over; everything else as recorded."""
    j = _ipc_step()
    moved = ipc_outputs.ipc_outputs(j)
    nbytes, outputs = ipc_outputs.output_bytes(j)
    assert (nbytes, outputs) == (ipc_outputs.LIGHT_OUTPUT_BYTES, 24)
    hand = ipc_outputs.handover_s(nbytes, outputs)
    assert moved.save == pytest.approx(1.0 * levers.DEVICE_COPY_FACTOR)
    assert moved.correctness == pytest.approx(j.correctness - 1.0 * (1 - levers.DEVICE_COPY_FACTOR))
    # the checkpoints still let the lane go (the window a waiting timing takes), with nothing to write
    assert moved.checkpoints == j.checkpoints == workload.CHECKPOINT_LET_GOS
    assert moved.unlaned == pytest.approx(ipc_outputs.CHECKPOINT_MESSAGE_S * j.checkpoints)
    assert (moved.check_prefetch, moved.check_read) == (0.0, 0.0)
    assert moved.write == pytest.approx(ipc_outputs.EXPORT_S_PER_OUTPUT * 24)
    assert moved.check == pytest.approx(j.check - 0.3 + hand)
    assert (moved.timing, moved.recheck, moved.setup, moved.calls) == (j.timing, j.recheck, j.setup, j.calls)
    # alone on the GPU the step is the sum of its stages: it shortens by exactly the stages moved
    gone = (1.0 * (1 - levers.DEVICE_COPY_FACTOR) + (0.4 - moved.unlaned) + (0.2 - moved.write) + 0.5 + 0.3 - hand)
    assert study.step_p50([j]) - study.step_p50([moved]) == pytest.approx(gone, abs=1e-6)


def test_the_hand_over_costs_its_opener_its_handles_and_the_bytes_at_the_measured_copy_rate():
    assert ipc_outputs.COPY_BYTES_PER_S == pytest.approx(2.56e12)    # the IPC probe on the H200, 2026-12-06
    one_gib = ipc_outputs.handover_s(1 << 30, 0) - ipc_outputs.OPENER_FIXED_S
    assert one_gib == pytest.approx(2 * (1 << 30) / 2.56e12) and one_gib < 0.001   # ~0.84 ms: read + written
    assert ipc_outputs.handover_s(0, 10) == pytest.approx(ipc_outputs.OPENER_FIXED_S + 10 * ipc_outputs.OPEN_S_PER_OUTPUT)
    with pytest.raises(ValueError):
        ipc_outputs.handover_s(-1, 3)


# the legacy-route IPC probe's committed run whose figures the simulator's constants are (H200, 2026-12-06 20:16)
IPC_PROBE_JSON = ROOT / "results/h200_2026-12-06c_ipc_defaults/call1_ipc_probes/ipc_probe/ipc_probe.json"


def test_the_hand_over_constants_are_the_committed_ipc_probes_figures():
    """Each constant is the committed probe's figure to the digits it is written with, so a new probe run
    committed in that file's place fails here until the constants (and their comments) are updated knowingly."""
    report = json.loads(IPC_PROBE_JSON.read_text())
    assert report["device"] == "NVIDIA H200" and not report["errors"]
    got = ipc_outputs.measured_figures(report["parts"], sum(e["nbytes"] for e in report["exports"]))
    assert ipc_outputs.OPEN_S_PER_OUTPUT == pytest.approx(got.open_s_per_output, abs=0.5e-6)       # 0.098 ms
    assert ipc_outputs.OPENER_FIXED_S == pytest.approx(got.opener_fixed_s, abs=5e-6)               # 1.54 ms
    assert ipc_outputs.COPY_BYTES_PER_S == pytest.approx(got.copy_bytes_per_s, abs=0.005e12)       # 2.56 TB/s
    # the model with these constants gives the probe's own whole hand-over (24 outputs, 1.34 GiB) within 1%
    nbytes, outputs = sum(e["nbytes"] for e in report["exports"]), len(report["exports"])
    assert ipc_outputs.handover_s(nbytes, outputs) == pytest.approx(got.handover_s, rel=0.01)


def test_measured_figures_reduce_a_probes_parts_and_refuse_a_probe_without_rounds():
    parts = {"per handle: open + range + close": [1e-4, 2e-4, 3e-4, 4e-4],          # 2 rounds of 2 handles
             "per handle: copy": [1e-3, 1e-3, 2e-3, 2e-3],
             "round trip (parent: copy command to reply)": [0.01, 0.02]}
    got = ipc_outputs.measured_figures(parts, 1 << 30)
    assert got.open_s_per_output == pytest.approx(2.5e-4)
    # each round: its trip - 2.5e-4 x 2 handles - 3 ms of copies (6 ms over 2 rounds); the median of 6.5 and 16.5 ms
    assert got.opener_fixed_s == pytest.approx((0.0065 + 0.0165) / 2)
    assert got.copy_bytes_per_s == pytest.approx(2 * (1 << 30) * 2 / 0.006)
    assert got.handover_s == pytest.approx(0.015)
    with pytest.raises(ValueError, match="without timed rounds"):
        ipc_outputs.measured_figures({**parts, "round trip (parent: copy command to reply)": []}, 1 << 30)


def test_the_hand_over_takes_the_bytes_of_the_jobs_checkpoint_plan_where_it_has_one():
    plan = checkpoints.CheckpointPlan(("second call", "repeats"), (1 << 20, 3 << 20), 4 << 20, calls=6)
    j = dataclasses.replace(_ipc_step(), checkpoint_plan=plan)
    assert ipc_outputs.output_bytes(j) == (int((8 << 20) * (1 + ipc_outputs.RECHECK_BYTES_SHARE)),
                                           6 + levers.TIMED_SHAPES)


def test_the_ipc_design_leaves_a_gate_refusal_and_an_unchecked_job_their_own_stages():
    gate_only = workload.job_from_record({"mode": "lanes", "task": "T", "status": "syntax_error", "at_s": 0.0,
                                          "latency": {"gate": 0.01, "total": 0.02}})
    assert not gate_only.child and ipc_outputs.ipc_outputs(gate_only) == gate_only
    unchecked = dataclasses.replace(_ipc_step(), checked=False)
    moved = ipc_outputs.ipc_outputs(unchecked)
    assert moved.check == unchecked.check and moved.check_read == unchecked.check_read
    assert moved.unlaned < unchecked.unlaned       # its child still handed over nothing through files
    bare = dataclasses.replace(_ipc_step(), save=0.0, write=0.0, check_read=0.0, check_prefetch=0.0)
    assert ipc_outputs.ipc_outputs(bare) == bare


def test_the_ipc_rows_are_in_the_predictions_without_a_measured_figure(tmp_path):
    """The light batch's prediction table has the design's rows (no variant, nothing measured beside them),
    and ipc_steps replays a call's defaults and env-step variant steps with and without the hand-over."""
    rec = _checked_record(child_timing_measure=0.5, check_reference=0.1, check_inputs=0.1, check_read=1.5,
                          child_correctness_save=0.9)
    folder = tmp_path / "call"
    folder.mkdir()
    (folder / "throughput_records.jsonl").write_text("\n".join(json.dumps({**rec, "submission": f"s{i}",
                                                                           "at_s": 5.0 * i}) for i in range(4)) + "\n")
    step = {"task": "T", "status": "ok", "wall_s": 7.0, "latency": _STEP_LAT}
    summary = {"device": "synthetic", "modes": [{"mode": "lanes x4", "evals_per_gpu_hour": 500.0}],
               "env_step": {"steps": [step, step], "p50_s": 7.9,
                            "variant": {"fields": "held_device_bytes=1024M", "steps": [step], "p50_s": 6.6}}}
    (folder / "throughput_synthetic_2026-12-06.json").write_text(json.dumps(summary))
    inp = study.load_light(folder, CORPUS)
    assert len(inp.variant_steps) == 1 and inp.measured_variant_step_p50 == 6.6
    rows = {r["scenario"]: r for r in study.light_predictions(inp)}
    for name, _ in ipc_outputs.SCENARIOS:
        assert rows[name]["variant"] is None and rows[name]["measured"] is None
        assert rows[name]["step_p50_s"] < rows["as measured (4 slots)"]["step_p50_s"]
    steps = {r["steps"]: r for r in study.ipc_steps(inp)}
    assert steps["defaults"]["measured_p50_s"] == 7.9 and steps["env-step variant"]["measured_p50_s"] == 6.6
    assert steps["env-step variant"]["variant"] == "held_device_bytes=1024M"
    for r in steps.values():
        assert r["ipc_p50_s"] < r["replayed_p50_s"]


def test_the_ipc_design_keeps_the_checkpoints_let_gos_because_a_waiting_timing_needs_them():
    """On the H100 lane-levers call (committed records), the lane-time levers with the hand-over: its checkpoints'
    let-gos kept (nothing to write) against the correctness stretch held in one piece, where a timing at the gate
    waits for every other slot's whole stretch. The model: 1,070.5 against 901.0 (docs/measurement.md); with the
    pre-started children's startup read from the records (workload.prestarts), 961.8 against 801.2, and 878.7 for
    the lane-time levers without the hand-over (+9.5%; +8.9% to +13.8% over five seeded gate orders)."""
    inp = study.load_light(ROOT / "results" / "h100_2026-12-06_lane_levers" / "call1", CORPUS)
    base = inp.rows[study.DEFAULTS_MODE]
    kept = [ipc_outputs.lane_time_levers_ipc(j) for j in base]
    assert all(j.checkpoints > 0 and j.unlaned > 0 for j in kept)
    one_piece = [dataclasses.replace(j, unlaned=0.0, checkpoints=0) for j in kept]
    with_let_gos = simulate(kept, Setup()).evals_per_gpu_hour
    assert with_let_gos > 1.1 * simulate(one_piece, Setup()).evals_per_gpu_hour
    assert with_let_gos > 1.05 * simulate([levers.lane_time_levers(j) for j in base], Setup()).evals_per_gpu_hour


# ---- the hand-over AS BUILT (by handle within the device budget; H100 light batch, 2026-12-07) ----

def test_as_built_with_room_for_every_output_is_the_designs_hand_over():
    j = _ipc_step()
    nbytes, outputs = ipc_outputs.output_bytes(j)
    built = ipc_outputs.ipc_outputs_as_built(j, budget=nbytes + 1)
    assert built.check == pytest.approx(j.check - 0.3 + ipc_outputs.handover_s(nbytes, outputs))
    assert (built.check_read, built.check_prefetch) == (0.0, 0.0)
    assert built.save == j.save and built.correctness == j.correctness      # no host copy is left to make
    assert built.recheck == j.recheck
    assert built.write == pytest.approx(ipc_outputs.EXPORT_S_PER_OUTPUT * outputs)
    assert built.unlaned == pytest.approx(ipc_outputs.CHECKPOINT_MESSAGE_S * j.checkpoints)


def test_as_built_past_its_budget_copies_writes_and_reads_the_rest_as_files():
    """With no budget every output goes by file: its host copy lands in its lane (the save, the recheck), its
    write keeps the job's own less that copy, and its read moves under the check's lane, or stays before it with
    read_before_lane (the candidate)."""
    j = _ipc_step()
    nbytes, outputs = ipc_outputs.output_bytes(j)
    correctness = nbytes / (1 + ipc_outputs.RECHECK_BYTES_SHARE)
    copy = ipc_outputs.HOST_COPY_S_PER_BYTE
    built = ipc_outputs.ipc_outputs_as_built(j, budget=0)
    assert built.save == pytest.approx(j.save + copy * correctness)
    assert built.recheck == pytest.approx(j.recheck + copy * (nbytes - correctness))
    write_only = max(0.0, 1 - copy * nbytes / (j.unlaned + j.write))
    assert built.write == pytest.approx(j.write * write_only)
    assert built.check == pytest.approx(j.check + 0.5 + ipc_outputs.OPENER_FIXED_S)   # prefetch moved under the lane
    assert built.check_prefetch == 0.0 and built.check_read == pytest.approx(0.8)
    before = ipc_outputs.ipc_outputs_as_built(j, budget=0, read_before_lane=True)
    assert before.check_prefetch == pytest.approx(0.5) and before.check == pytest.approx(j.check + ipc_outputs.OPENER_FIXED_S)
    # in between, the share by file grows as the budget shrinks, and so does the check's lane hold
    holds = [ipc_outputs.ipc_outputs_as_built(j, budget=b).check for b in (nbytes, nbytes // 2, nbytes // 4, 0)]
    assert holds == sorted(holds)


def test_as_built_uses_the_placements_default_budget_and_runs_as_the_flag():
    from kernelgym_gap.core.placement import Placement
    assert ipc_outputs.DEVICE_BUDGET_BYTES == Placement().held_device_bytes
    built = [sc for sc in ipc_outputs.scenarios() if sc.variant == "hand_over_outputs=1"]
    assert len(built) == 1 and "as built" in built[0].name and "read before the lane" in built[0].name
    j = _ipc_step()
    assert built[0].job(j) == ipc_outputs.ipc_outputs_as_built(j, read_before_lane=True)
    # the design's rows stay last and never name a variant (nothing runs them)
    assert [sc.variant for sc in ipc_outputs.scenarios()[-2:]] == [None, None]
