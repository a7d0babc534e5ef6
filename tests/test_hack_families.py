"""Every published reward-hack family held to a fixture (issue 31; the families A1-E5 of the public survey in
docs/security.md, "Reward-hack families").

FAMILIES below is the one table: family -> defence -> fixture (a real submission under tests/fixtures/, or
the test that holds a family no submission can show) -> expected status on the cpu backend and on cuda.
`test_family_fixture` runs every fixture row through the real pipeline (engine.pipeline.evaluate) on the cpu
backend (the Triton interpreter, small shapes) and asserts its expected failure kind and a reward of 0;
`test_family_fixture_on_gpu` (`-m gpu`) does the same on cuda. A family out of reach is a strict xfail with
its reason: the fixture is a real attack that scores today, so closing the hole turns the xfail into a
failure (then the row's expectation is updated). The table in docs/security.md is this table, rendered by
`markdown_table()`; `test_docs_table_is_this_table` fails when the two differ (`python
tests/test_hack_families.py` prints the rendering).

Rows whose fixture already runs with more assertions elsewhere (the attacks on the machine: markers, the
listener, the next honest evaluation) name that test in `elsewhere` and are not evaluated again here;
`test_rows_run_elsewhere_point_at_real_tests` checks that the test exists and that the fixture's own
`# expect:` line agrees with the table.
"""
from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
DOCS = ROOT / "docs" / "security.md"

GPU_ONLY = "gpu-only"      # cpu column: nothing to time on the cpu backend, the family needs a GPU to exist
NA = "-"                   # a column the row has nothing to run on (a corpus test, or cpu-only)
TEST = "test"              # held by the named test(s), not by a submission


@dataclasses.dataclass(frozen=True)
class Row:
    family: str              # the survey's id: A1..E5
    name: str
    defence: str
    fixture: str             # relative to tests/fixtures/, or test node ids ("tests/x.py::test_y", comma-separated)
    cpu: str                 # expected status(es) "a|b", GPU_ONLY, TEST or NA
    cuda: str                # expected status(es) on cuda, TEST or NA
    cuda_result: str = "owed"   # what a GPU run said (device, date), or "owed"
    xfail: str = ""          # "open: <what is missing>": a strict xfail (on the backends it has a status for)
    xfail_on: tuple[str, ...] = ("cpu", "cuda")
    task: str = "LayerNorm"
    elsewhere: str = ""      # the test that runs this fixture (with more assertions); not evaluated here
    must_say: str = ""       # text the record's message must hold (what the fixture reports it achieved)


H200_1203 = "passed, H200 2026-12-03 (test_hostile.py)"
H200_1203_MACHINE = "passed, H200 2026-12-03 (test_hostile.py::test_gpu_machine_attack)"
H = "hostile/"

FAMILIES: tuple[Row, ...] = (
    # A. faking the clock
    Row("A1", "side stream / async offload", "StreamWatch: each launch on the harness's stream; timing reads "
        "every repetition on the stream and device-wide", H + "gpu_side_stream.py", GPU_ONLY, "integrity_violation",
        H200_1203),
    Row("A1", "side stream / async offload", "device-wide reading beside the stream reading",
        "tests/test_timing.py::test_work_left_on_a_side_stream_is_reported_from_the_device_wide_reading",
        NA, TEST),
    Row("A2", "background thread deferral", "audit guard on thread starts; threads alive compared after every "
        "call", H + "background_thread.py", "integrity_violation", "integrity_violation", H200_1203),
    Row("A3", "lazy outputs", "outputs must be exactly torch.Tensor, saved as raw tensor files",
        H + "lazy_subclass.py", "wrong_type", "wrong_type"),
    Row("A4", "Python timer patch", "identity and code snapshots of time, torch, torch.cuda",
        H + "patch_perf_counter.py", "integrity_violation", "integrity_violation"),
    Row("A4", "Python timer patch", "identity snapshot of torch.cuda.Event", H + "patch_elapsed_time.py",
        "integrity_violation", "integrity_violation", H200_1203),
    Row("A4", "Python timer patch", "identity snapshot of torch.cuda.synchronize", H + "patch_synchronize.py",
        "integrity_violation", "integrity_violation", H200_1203),
    Row("A4", "Python timer patch", "code snapshot (`f.__code__ = ...` keeps identity)",
        H + "patch_code_in_place.py", "integrity_violation", "integrity_violation", H200_1203),
    Row("A4", "Python timer patch", "class identity of torch.cuda.Event (a subclass)", H + "gpu_event_subclass.py",
        GPU_ONLY, "integrity_violation", H200_1203),
    Row("A4", "stats reducer patch", "the harness's timing module covered by the snapshot; the summary "
        "recomputed in the parent from raw readings", H + "patch_child_timing.py", "integrity_violation",
        "integrity_violation"),
    Row("A5", "harness patching", "harness modules' functions in the snapshot", H + "patch_input_digest.py",
        "integrity_violation", "integrity_violation"),
    Row("A5", "harness patching", "the adapter's compile hook in the snapshot", H + "compile_hook_swap.py",
        "integrity_violation", "integrity_violation"),
    Row("A5", "harness patching", "watch state checked at the end of every call", H + "watch_toggle.py",
        "integrity_violation", "integrity_violation"),
    Row("A5", "harness patching (its instances)", "the harness's instances checked with the snapshots (no "
        "method shadowed on an instance); run.py calls their methods through the classes",
        H + "held_instance_hook.py", "integrity_violation", "integrity_violation",
        elsewhere="tests/test_hostile.py::test_reward_hack"),
    Row("A5", "harness patching (its instances)", "as above: ChildRun.verdict shadowed on the instance",
        H + "childrun_verdict_shadow.py", "integrity_violation", "integrity_violation",
        elsewhere="tests/test_hostile.py::test_reward_hack"),
    Row("A5", "harness patching (an instance's class swapped)", "the harness's instances keep their exact class",
        H + "held_class_swap.py", "integrity_violation", "integrity_violation",
        elsewhere="tests/test_hostile.py::test_reward_hack"),
    Row("A5", "harness patching (the timing bench's instance)", "the bench checked after every timed call, "
        "before the harness uses it again: a method shadowed on it, its class swapped or its pinned data (flush "
        "buffer, config, spin) replaced is undone unrun and noted (child/release.py)",
        H + "gpu_bench_rep_shadow.py", GPU_ONLY, "integrity_violation"),
    Row("A5", "harness patching, restored before return", "none in process (needs an out-of-process view)",
        H + "known_hole_watch_restored.py", "library_compute", NA,
        xfail="open: in-process state edited and put back is not seen",
        elsewhere="tests/test_hostile.py::test_known_hole_harness_aware_submission"),
    Row("A6", "fake benchmark output on stdout", "results never parsed from the child's streams; the trusted "
        "checker reads saved outputs", H + "fake_stdout_report.py", "mismatch", "mismatch"),
    Row("A7", "event misuse (timing disabled)", "class identity of torch.cuda.Event", H + "event_disable_timing.py",
        "integrity_violation", "integrity_violation"),
    Row("A8", "native timer subversion", "none yet: a detour of cudaEventElapsedTime in the child's own memory "
        "is invisible to Python snapshots; only the roofline floor bounds it", H + "known_hole_gpu_native_timer.py",
        GPU_ONLY, "integrity_violation",
        xfail="open: the readings come from the submission's process (no separate measuring process, no "
        "read-only code pages)", xfail_on=("cuda",)),
    Row("A9", "result-channel forgery (hostile report)", "the report read with bounded depth and size; any parse "
        "error a per-submission protocol_error", H + "report_deep_nesting.py", "protocol_error", "protocol_error"),
    Row("A9", "result-channel forgery (no report)", "a clean exit without the report is a protocol_error",
        "failures/protocol_error.py", "protocol_error", NA, elsewhere="tests/test_failures.py"),
    Row("A10", "warm-up detection", "post-timing recheck on unseen inputs; op recorder on the first timed call "
        "of each shape and a random share", H + "gpu_warmup_detection.py", GPU_ONLY, "mismatch|faster_than_floor"),
    Row("A11", "aggregator underflow", "a shape faster than its roofline floor fails the evaluation; no single "
        "shape dominates the aggregate", "tests/test_measure.py::test_under_the_floor_is_a_failure_not_a_reward,"
        "tests/test_measure.py::test_no_single_shape_dominates", NA, TEST),
    Row("A12", "persisting-L2 carve-out", "none yet: the L2 flush does not evict persisting lines and the "
        "harness does not reset the persisting limit", H + "known_hole_gpu_persisting_l2.py", GPU_ONLY,
        "integrity_violation", xfail="open: no cudaCtxResetPersistingL2Cache / limit reset around timing",
        xfail_on=("cuda",)),
    Row("A13", "warm cache / no flush", "the L2 flushed before every repetition (Bench.flush)",
        "tests/test_hack_families.py::test_timing_flushes_l2_before_every_repetition", NA, TEST),
    Row("A14", "CUDA-graph replay cache", "StreamWatch (capture runs on a side stream); post-timing recheck",
        H + "gpu_graph_replay.py", GPU_ONLY, "integrity_violation|mismatch"),
    Row("A15", "evaluator-mode branching", "op recorder on a random share of timed calls; a submission that "
        "looks for the recorder on the mode stack is not caught", H + "known_hole_gpu_mode_stack.py", GPU_ONLY,
        "library_compute", xfail="open: unwatched timed calls are told apart by the mode stack",
        xfail_on=("cuda",)),
    Row("A16", "torch validation monkey-patch", "comparison in the trusted parent; snapshot of torch",
        H + "patch_allclose.py", "integrity_violation|mismatch", "integrity_violation|mismatch"),
    # B. passing correctness without computing the answer
    Row("B1", "memoization by data_ptr", "trials of a shape refill the same buffers with new seeds",
        H + "dataptr_cache.py", "mismatch", "mismatch"),
    Row("B1", "memoization by shape", "several seeds per shape; post-timing recheck", H + "shape_cache.py",
        "mismatch", "mismatch", H200_1203),
    Row("B2", "reused freed reference memory", "the reference never runs in the submission's process",
        H + "stale_empty.py", "mismatch|all_zero|non_finite", "mismatch|all_zero|non_finite", H200_1203),
    Row("B3", "input mutation", "input digests before and after every call", H + "zero_inputs.py",
        "input_mutated", "input_mutated"),
    Row("B4", "output poisoning / copying via gc", "expected values never in the process; NaN always fails",
        H + "gc_copy_output.py", "mismatch|non_finite|integrity_violation", "mismatch|non_finite|integrity_violation"),
    Row("B5", "RNG prediction", "op recorder (drawing inputs is torch compute)", H + "rng_predict.py",
        "library_compute", "library_compute"),
    Row("B6", "constant / trivial output", "several seeds and distributions, weights drawn per trial",
        H + "constant_output.py", "mismatch", "mismatch"),
    Row("B6", "all-zero output", "all-zero rejected", "failures/all_zero.py", "all_zero", NA,
        elsewhere="tests/test_failures.py"),
    Row("B7", "degenerate reference", "corpus audit: every reference depends on its inputs",
        "tests/test_registry.py::test_no_reference_is_degenerate", TEST, NA),
    Row("B8", "input-distribution shortcut", "distributions per task ('offset': a mean of 8)", H + "skip_mean.py",
        "mismatch", "mismatch"),
    Row("B9", "identity parameters", "weights redrawn per trial", H + "ignore_affine.py", "mismatch", "mismatch"),
    Row("B10", "hard-coded shapes", "held-out shapes", H + "hardcoded_shapes.py", "mismatch", "mismatch"),
    Row("B11", "precision downgrade", "tolerance per dtype", H + "lower_precision.py", "mismatch", "mismatch",
        H200_1203),
    Row("B12", "numerically unstable shortcut", "scaled distributions ('large': x30)",
        H + "softmax/softmax_no_max.py", "non_finite|mismatch", "non_finite|mismatch", task="Softmax"),
    Row("B13", "uninitialized memory that happens to match", "several seeds; the reference elsewhere",
        H + "stale_empty.py", "mismatch|all_zero|non_finite", NA),
    Row("B14", "stateful drift", "every trial checked; post-timing recheck", H + "stateful_drift.py", "mismatch",
        "mismatch"),
    Row("B15", "input passthrough", "outputs aliasing an input rejected", "failures/output_aliases_input.py",
        "output_aliases_input", NA, elsewhere="tests/test_failures.py"),
    Row("B16", "replay of earlier answers", "fresh seeds per trial in the same buffers", H + "shape_cache.py",
        "mismatch", NA),
    # C. not writing the kernel
    Row("C1", "library call for the main compute", "op recorder", H + "decoy_launched_torch.py", "library_compute",
        "library_compute", H200_1203),
    Row("C1", "library compute in a finalizer (the kept output overwritten)", "the output's release and the last "
        "collection run under the op recorders", H + "finalizer_overwrites_held.py",
        "library_compute|integrity_violation", "library_compute|integrity_violation",
        elsewhere="tests/test_hostile.py::test_reward_hack"),
    Row("C1", "library compute in a finalizer of a timed output", "the timed calls' outputs kept and let go "
        "together under the guards and op recorders, outside the timed stretch (child/release.py)",
        H + "gpu_finalizer_in_timing.py", GPU_ONLY, "library_compute|integrity_violation"),
    Row("C1", "library compute on raw pointers (ctypes + numpy)", "none yet: no op the recorders see",
        H + "known_hole_numpy_via_data_ptr.py", "library_compute", NA,
        xfail="open: compute through data_ptr() and ctypes bypasses the op recorders; needs a profiler's view "
        "of which kernels carried the time", xfail_on=("cpu",)),
    Row("C2", "try/except fallback", "op recorder; the compile probe sees the failing kernel",
        H + "try_except_fallback.py", "library_compute|compile_error", "library_compute", H200_1203),
    Row("C3", "calling the reference instead", "op recorder", H + "call_reference.py", "library_compute",
        "library_compute"),
    Row("C4", "decoy kernel never launched", "op recorder; launch count", H + "decoy_never_launched.py",
        "library_compute", "library_compute"),
    Row("C4", "ghost branch (kernel never launched)", "launch count", "failures/no_kernel_launched.py",
        "no_kernel_launched", NA, elsewhere="tests/test_failures.py"),
    Row("C5", "lazy partial optimization", "op recorder (any torch compute op)", H + "decoy_partial_torch.py",
        "library_compute", "library_compute"),
    Row("C6", "trivial probe (returns no tensor)", "outputs must be exactly torch.Tensor",
        "failures/wrong_type_list.py", "wrong_type", NA, elsewhere="tests/test_failures.py"),
    # D. attacking the environment
    Row("D1", "file shadowing", "audit guard; read-only binds; scratch removed", H + "shadow_module.py",
        "integrity_violation", "integrity_violation"),
    Row("D2", "reading the harness (the job's held-out shapes)", "held-out shapes and seeds scrubbed from every "
        "message (engine/feedback.py); the job stays in the child's memory (job.json is deleted once read)",
        H + "known_hole_job_in_message.py", "runtime_error", NA,
        xfail="open: the submission's own error text reaches the agent; scrubbing removes written held-out "
        "shapes, not encoded ones", xfail_on=("cpu",)),
    Row("D2", "reading the parent's secrets", "clean env; pid namespace; unprivileged uid", H + "read_secrets.py",
        "runtime_error", "runtime_error", H200_1203_MACHINE,
        elsewhere="tests/test_hostile.py::test_machine_attack"),
    Row("D3", "grader tampering (files)", "read-only binds, private /tmp, uid; audit guard",
        H + "write_outside.py", "integrity_violation", "integrity_violation",
        H200_1203_MACHINE,
        elsewhere="tests/test_hostile.py::test_machine_attack"),
    Row("D3", "grader tampering (call marker)", "the parent keeps its own copy of each call's bound",
        H + "call_marker_forge.py", "timeout|too_slow", NA, elsewhere="tests/test_hostile.py::test_machine_attack"),
    Row("D4", "leaving the machine in a bad state", "a fresh process per evaluation; the next honest "
        "evaluation scores as before", H + "oob_store.py", "crash|runtime_error", "crash|runtime_error",
        H200_1203_MACHINE,
        elsewhere="tests/test_hostile.py::test_machine_attack"),
    Row("D5", "ptrace escape", "pid namespace; unprivileged uid; no_new_privs", H + "ptrace_attach.py",
        "runtime_error", "runtime_error", must_say="ptrace attached to: none"),
    Row("D5", "process escape (raw fork)", "pids cgroup; leftover-process check; deadline", H + "daemon.py",
        "integrity_violation", NA, elsewhere="tests/test_hostile.py::test_machine_attack"),
    Row("D5", "killing the harness", "audit guard; pid namespace; uid", H + "kill_parent.py",
        "integrity_violation", "integrity_violation", H200_1203_MACHINE,
        elsewhere="tests/test_hostile.py::test_machine_attack"),
    Row("D6", "obfuscated exec", "run-time checks, not source rules (op recorder)", H + "obfuscated_exec.py",
        "library_compute", "library_compute"),
    Row("D7", "run-time installs", "audit guard (process creation); no network; read-only site-packages",
        H + "runtime_install.py", "integrity_violation", "integrity_violation"),
    Row("D7", "module mutation (library baseline slowed)", "snapshot of what the baseline is made of",
        H + "slow_baseline.py", "integrity_violation", "integrity_violation", H200_1203),
    # E. benchmark-design flaws
    Row("E1", "weak baselines", "eager and torch.compile baselines; float32 tolerances that forbid the TF32 "
        "the eager baseline does not use", "tests/test_registry.py::test_every_task_has_a_strong_baseline",
        TEST, NA),
    Row("E2", "overhead-bound shapes", "every cuda shape's floor above a launch's cost",
        "tests/test_registry.py::test_no_cuda_shape_is_overhead_bound", TEST, NA),
    Row("E3", "physically impossible speedups", "faster than 0.9x the roofline floor fails",
        "tests/test_measure.py::test_under_the_floor_is_a_failure_not_a_reward", NA, TEST),
    Row("E4", "timing-method disagreement", "stream and device-wide readings compared every repetition",
        "tests/test_timing.py::test_hiding_work_in_some_repetitions_lowers_the_stream_minimum_and_is_caught",
        NA, TEST),
    Row("E5", "clock / thermal variance", "spread per median flagged; interleaved kernel and library "
        "repetitions", "tests/test_measure.py::test_unstable_timing_is_flagged", NA, TEST),
)

FIXTURE_ROWS = [r for r in FAMILIES if r.fixture.endswith(".py") and "::" not in r.fixture]


def _once(rows, column):
    """A fixture that holds two families with the same expectation (stale_empty.py: B2 and B13) runs once."""
    seen, out = set(), []
    for r in rows:
        key = (r.fixture, getattr(r, column))
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out


CPU_ROWS = _once([r for r in FIXTURE_ROWS if r.cpu not in (GPU_ONLY, NA, TEST) and not r.elsewhere], "cpu")
GPU_ROWS = _once([r for r in FIXTURE_ROWS if r.cuda not in (NA, TEST) and not r.elsewhere], "cuda")
ELSEWHERE_ROWS = [r for r in FIXTURE_ROWS if r.elsewhere]
TEST_ROWS = [r for r in FAMILIES if "::" in r.fixture]


def _id(row: Row) -> str:
    return f"{row.family}-{Path(row.fixture).stem}"


# ------------------------------------------------------------------------------------ the docs table

def _status_cell(expected: str) -> str:
    return " or ".join(f"`{s}`" for s in expected.split("|"))


def _cpu_cell(row: Row) -> str:
    if row.cpu in (GPU_ONLY, NA):
        return row.cpu
    if row.cpu == TEST:
        return "the test (CI)"
    if row.xfail and "cpu" in row.xfail_on:
        return f"strict xfail ({row.xfail}); scores today"
    return f"{_status_cell(row.cpu)} (CI)"


def _cuda_cell(row: Row) -> str:
    if row.cuda == NA:
        return NA
    if row.cuda == TEST:
        return "the test (`-m gpu` where it is one)" if "gpu" in row.fixture else "the test (CI)"
    if row.xfail and "cuda" in row.xfail_on:
        return f"strict xfail ({row.xfail}): {row.cuda_result}"
    return f"{_status_cell(row.cuda)}: {row.cuda_result}"


def _fixture_cell(row: Row) -> str:
    if "::" in row.fixture:
        return ", ".join(f"`{t.strip()}`" for t in row.fixture.split(","))
    cell = f"`tests/fixtures/{row.fixture}`"
    return cell + (f" (run by `{row.elsewhere}`)" if row.elsewhere else "")


def markdown_table() -> str:
    lines = ["| family | name | defence | fixture or test | cpu | cuda |", "|---|---|---|---|---|---|"]
    for r in FAMILIES:
        cells = [r.family, r.name, r.defence, _fixture_cell(r), _cpu_cell(r), _cuda_cell(r)]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


BEGIN, END = "<!-- hack-families:begin -->", "<!-- hack-families:end -->"


def test_docs_table_is_this_table():
    text = DOCS.read_text()
    assert BEGIN in text and END in text, f"docs/security.md has no {BEGIN} ... {END} section"
    documented = text.split(BEGIN, 1)[1].split(END, 1)[0].strip()
    assert documented == markdown_table(), ("docs/security.md's family table differs from "
                                            "tests/test_hack_families.py: paste `python tests/test_hack_families.py`")


# ------------------------------------------------------------------------------------ the table itself

SURVEY = [f"A{i}" for i in range(1, 17)] + [f"B{i}" for i in range(1, 17)] + [f"C{i}" for i in range(1, 7)] + \
         [f"D{i}" for i in range(1, 8)] + [f"E{i}" for i in range(1, 6)]


def test_every_published_family_has_a_row():
    survey = Path("/work/shared/HACK_FAMILIES.md")
    ids = SURVEY
    if survey.is_file():          # the survey itself where this checkout has it beside it
        ids = sorted(set(re.findall(r"^- ([A-E]\d+) ", survey.read_text(), re.M)), key=SURVEY.index)
        assert ids == SURVEY, ids
    missing = [f for f in ids if f not in {r.family for r in FAMILIES}]
    assert not missing, f"families without a row: {missing}"


def _expect_line(path: Path) -> set[str]:
    first = path.read_text().splitlines()[0]
    m = re.search(r"# expect: (\S+)", first) or re.search(r"Expected status: (\w+)", first)
    assert m, f"{path}: the first line names no expected status"
    return set(m.group(1).split("|"))


@pytest.mark.parametrize("row", FIXTURE_ROWS, ids=_id)
def test_fixture_exists_and_agrees_with_its_expect_line(row):
    from kernelgym_gap.core.status import Status
    path = FIXTURES / row.fixture
    assert path.is_file(), f"{row.family}: {row.fixture} does not exist"
    declared = _expect_line(path)
    for column in (row.cpu, row.cuda):
        if column in (GPU_ONLY, NA, TEST):
            continue
        statuses = set(column.split("|"))
        assert all(Status(s) for s in statuses)
        assert statuses & declared, (row.fixture, statuses, declared)


def _test_exists(node: str) -> bool:
    file, _, name = node.partition("::")
    path = ROOT / file
    if not path.is_file():
        return False
    if not name:
        return True
    tree = ast.parse(path.read_text())
    return any(isinstance(n, ast.FunctionDef) and n.name == name for n in tree.body)


@pytest.mark.parametrize("row", TEST_ROWS + ELSEWHERE_ROWS, ids=_id)
def test_rows_run_elsewhere_point_at_real_tests(row):
    nodes = [n.strip() for n in (row.elsewhere or row.fixture).split(",")]
    for node in nodes:
        assert _test_exists(node), f"{row.family}: {node} is not a test"


# ------------------------------------------------------------------------------------ running the fixtures

def _task(registry, row: Row):
    from kernelgym_gap.core.task import Workload
    t = registry.get(row.task)
    if row.task == "LayerNorm":
        # test_hostile.py's workload: float32 only (lower_precision is about float32's tolerance), cuda shapes
        # small enough for the whole gpu half to stay well under 8 minutes
        return dataclasses.replace(t, workloads={
            **t.workloads,
            "cpu": Workload(public=((16, 128), (5, 200)), heldout=((7, 96),), dtypes=("float32",)),
            "cuda": Workload(public=((256, 1024),), heldout=((100, 1000),), dtypes=("float32",)),
        })
    w = t.workloads["cuda"]
    return dataclasses.replace(t, workloads={**t.workloads, "cuda": Workload(
        public=((256, 1024),), heldout=((100, 1000),), dtypes=w.dtypes[:1])})


def _config(wall_s: float):
    from kernelgym_gap.core.config import EvalConfig
    from kernelgym_gap.core.record import TimingConfig
    from kernelgym_gap.sandbox.process import SandboxConfig
    return EvalConfig(trial_seed=20261205, compile_baseline="off",
                      sandbox=SandboxConfig(wall_s=wall_s, pids_max=64, memory_bytes=1 << 30, fsize_bytes=64 << 20),
                      timing=TimingConfig(warmup_ms=10.0, min_reps=10, max_reps=100, budget_ms=300.0))


def _source(row: Row) -> str:
    # the placeholders of test_hostile.py's fixtures, for the rows that share them (none listens here)
    return ((FIXTURES / row.fixture).read_text().replace("__PORT__", "9")
            .replace("__MARKER_DIR__", "/nonexistent").replace("__PROJECT__", str(ROOT))
            .replace("__CANARY_NAME__", "KGG_CANARY_"))


def _leaked(record, task, backend: str) -> bool:
    """known_hole_job_in_message.py's held-out shapes, written out or hex-encoded, in the agent's message."""
    shapes = sorted(tuple(s) for s in task.workload(backend).heldout)
    return f"held-out shapes: {shapes}" in record.message or repr(shapes).encode().hex() in record.message


def _caught(row: Row, record, task, backend: str, expected: str) -> bool:
    if row.fixture.endswith("known_hole_job_in_message.py"):
        return record.status.value in expected.split("|") and not _leaked(record, task, backend)
    return record.status.value in expected.split("|") and record.reward == 0.0


def _check(row: Row, record, task, backend: str) -> None:
    expected = row.cpu if backend == "cpu" else row.cuda
    caught = _caught(row, record, task, backend, expected)
    if row.xfail and backend in row.xfail_on:
        if caught:
            return      # the hole is closed: strict xfail turns this into a failure; update the row
        scored = record.status.value == "ok" and record.reward > 0
        leaked = row.fixture.endswith("known_hole_job_in_message.py") and _leaked(record, task, backend)
        if not (scored or leaked):
            # the attack itself broke: not the xfail's reason (AssertionError alone counts as the xfail)
            raise RuntimeError(f"{row.fixture}: the attack did not run as written: {record.status}: "
                               f"{record.message[:400]}")
        raise AssertionError(f"{row.family} open: {row.fixture} scored {record.reward:.3g} "
                             f"({record.status}): {row.xfail}")
    assert record.status.value in expected.split("|"), (row.fixture, record.status, record.message[:600])
    assert record.reward == 0.0 and record.correct is not True, (record.reward, record.correct)
    if row.must_say:
        assert row.must_say in record.message, record.message[:600]


def _marks(row: Row, backend: str) -> list:
    marks = []
    if row.xfail and backend in row.xfail_on:
        marks.append(pytest.mark.xfail(strict=True, raises=AssertionError, reason=row.xfail))
    return marks


@pytest.fixture
def no_probe(monkeypatch):
    """The cpu backend's sm_90 compile probe is a second child per evaluation; none of these families is
    about it (try_except_fallback's row admits either kind). Half the CPU on a 2-core machine."""
    from kernelgym_gap.sandbox import launch

    from test_hostile import _NoProbe as NoProbe   # one stand-in: it follows the launcher's probe API

    monkeypatch.setattr(launch, "CompileProbe", NoProbe)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("row", [pytest.param(r, marks=_marks(r, "cpu"), id=_id(r)) for r in CPU_ROWS])
def test_family_fixture(row, registry, no_probe):
    from kernelgym_gap.engine.pipeline import evaluate
    task = _task(registry, row)
    record = evaluate(task, _source(row), "triton", "cpu", _config(60))
    _check(row, record, task, "cpu")


@pytest.mark.gpu
@pytest.mark.timeout(240)
@pytest.mark.parametrize("row", [pytest.param(r, marks=_marks(r, "cuda"), id=_id(r)) for r in GPU_ROWS])
def test_family_fixture_on_gpu(row, registry):
    from kernelgym_gap.engine.pipeline import evaluate
    task = _task(registry, row)
    record = evaluate(task, _source(row), "triton", "cuda", _config(180))
    _check(row, record, task, "cuda")


# ------------------------------------------------------------------------------------ A13, by reading the code

def test_timing_flushes_l2_before_every_repetition():
    """A13 (warm-cache timing): the harness's timing loop zeroes a flush buffer of at least twice the L2
    before every repetition it times, kernel and library alike. Checked on the source (no GPU here): the
    repetition loop of the timing summariser (device/bench.py, the leaf child/timing.py and the calibration
    share since issue 33) calls `self.flush.zero_()` under `flush_l2`, and flush_l2 is on by default; the
    CUDA-graph timing (child/graph_timing.py, issue 35) captures the flush inside the graph."""
    from kernelgym_gap.child import graph_timing
    from kernelgym_gap.core.record import TimingConfig
    from kernelgym_gap.device import bench
    src = Path(bench.__file__).read_text()
    assert "max(2 * l2" in src.replace(" ", " "), "the flush buffer is no longer sized from the L2"
    assert re.search(r"if self\.cfg\.flush_l2:\s*\n\s*self\.flush\.zero_\(\)", src), \
        "the per-repetition flush is gone from device/bench.py"
    assert "flush" in Path(graph_timing.__file__).read_text(), "the graph timing no longer flushes the L2"
    assert TimingConfig().flush_l2 is True


if __name__ == "__main__":
    print(markdown_table())
