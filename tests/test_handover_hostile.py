"""The IPC hand-over's hostile twins (issue 35; docs/measurement.md, "The outputs handed over on the device",
"Hostile fixtures that would need twins"): the submissions tests/fixtures/hostile/ipc_*.py, each attacking the
handle path from inside the child, evaluated on cuda with EvalConfig.hand_over_outputs on and a warm pool, each
followed by an honest evaluation on the same warm checker (and child pool), which must score ok: one hostile
child's handles may not poison the checker that serves the next.

How the twins reach the harness's records: from inside a call they find the child's HeldOutputs instance with
gc.get_objects() and shadow its `handed_over` method with an instance attribute. The snapshots
(child/snapshots.py) compare the harness's modules and classes, not its instances, and no comparison runs after
the last verdict in ChildRun.wrap_up, so the hook runs, unwatched, in ChildRun.finish after the export (the
twins' docstrings say what each does with it). The parent's schema, plan, opener and kill are then what stands.

The gpu test runs in one process (a module-scoped WarmPool), 14 evaluations of LayerNorm at one small cuda
shape with a short timing: well under 300 s on an H200. Without a GPU it is collected and skipped
(tests/conftest.py); the cpu tests below check the fixtures and their expectations table.
"""
from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from kernelgym_gap.core.config import EvalConfig
from kernelgym_gap.core.record import TimingConfig
from kernelgym_gap.core.status import Status
from kernelgym_gap.core.task import Workload
from kernelgym_gap.sandbox.process import SandboxConfig

HOSTILE = Path(__file__).resolve().parent / "fixtures" / "hostile"

# The twins and what each may end in (the design's status class; integrity_violation where the child's guards
# see the attack first). Never ok. Each file's first line (`# expect: ...`) says the same (checked below).
TWINS: dict[str, frozenset[str]] = {
    "ipc_record_forgery.py": frozenset({"protocol_error", "integrity_violation"}),
    "ipc_records_huge.py": frozenset({"protocol_error", "integrity_violation"}),
    "ipc_oversize_extent.py": frozenset({"protocol_error", "integrity_violation"}),
    "ipc_foreign_handle.py": frozenset({"protocol_error", "mismatch", "integrity_violation"}),
    "ipc_free_after_export.py": frozenset({"protocol_error", "mismatch", "integrity_violation"}),
    "ipc_write_during_copy.py": frozenset({"mismatch", "protocol_error", "integrity_violation"}),
    "ipc_exit_before_copy.py": frozenset({"protocol_error", "integrity_violation"}),
}

TASK_ID = "kernelgym_gap/LayerNorm-v1"
# cuda: short timing and one small shape per split (the verdicts are under test, not the figures)
FAST_TIMING = TimingConfig(warmup_ms=10.0, min_reps=10, max_reps=50, budget_ms=200.0)


def _expect_line(name: str) -> frozenset[str]:
    first = (HOSTILE / name).read_text().splitlines()[0]
    assert first.startswith("# expect:"), name
    return frozenset(first.split(":", 1)[1].strip().split("|"))


# ------------------------------------------------------------------------------------------------- cpu

def test_the_table_lists_every_twin_and_agrees_with_each_files_expect_line():
    on_disk = {p.name for p in HOSTILE.glob("ipc_*.py")}
    assert on_disk == set(TWINS), on_disk ^ set(TWINS)
    statuses = {s.value for s in Status}
    for name, allowed in TWINS.items():
        assert _expect_line(name) == allowed, name
        assert allowed <= statuses, (name, allowed - statuses)
        assert "ok" not in allowed, name


@pytest.mark.parametrize("name", sorted(TWINS))
def test_each_twin_parses_and_defines_the_tasks_entry_point(name, registry):
    entry = registry.get(TASK_ID).entry_point
    tree = ast.parse((HOSTILE / name).read_text(), filename=name)
    defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert entry in defined, (name, entry)
    # a Triton submission, like its file twin: a @triton.jit kernel it launches
    jitted = [n for n in tree.body if isinstance(n, ast.FunctionDef)
              and any(ast.unparse(d) == "triton.jit" for d in n.decorator_list)]
    assert jitted, name
    # every twin goes through the instance hook on the harness's HeldOutputs (the module's docstring says why)
    assert "_hook_handed_over" in defined and "_harness_held" in defined, name


def test_the_twins_are_kept_out_of_the_cpu_hostile_suite():
    """On cpu nothing is handed over (the twins compute honestly there): the cpu suite must not run them."""
    import test_hostile as cpu_suite
    assert not set(TWINS) & set(cpu_suite.REWARD_HACKS)


def _twin(name: str) -> dict:
    """The twin's module namespace (its source run as the child would load it; its kernels are not launched)."""
    namespace: dict = {"__name__": "submission_" + name.removesuffix(".py")}
    exec(compile((HOSTILE / name).read_text(), str(HOSTILE / name), "exec"), namespace)
    return namespace


@pytest.fixture
def hooked_child(tmp_path, monkeypatch):
    """A partial ChildRun in handle mode on a pretended GPU (tests/test_child_handover.py's), one trial's output
    held and exported at a checkpoint, and a function that installs a twin's hook the way the twin does from
    its entry point (its own `_hook_handed_over`, which finds the HeldOutputs instance with gc)."""
    import gc

    import test_child_handover as child_tests
    from kernelgym_gap.child import outputs
    from kernelgym_gap.child import run as run_mod
    monkeypatch.setattr(outputs, "_on_gpu", lambda t: True)
    monkeypatch.setattr(outputs, "_export", child_tests.fake_export)
    monkeypatch.setattr(run_mod, "hold_outputs", lambda directory, fallback: 0)     # no wait for a signal
    (tmp_path / "outputs").mkdir()
    gc.collect()                # no HeldOutputs of an earlier test left for the twin's search to find first
    run = child_tests.partial_child(tmp_path, by_handle=True)

    def install(name: str) -> dict:
        twin = _twin(name)
        assert twin["_harness_held"]() is run.held       # found by gc: an instance, outside the snapshots
        twin["_hook_handed_over"](twin["_forge"])
        assert "handed_over" in vars(run.held)
        return twin
    return run, install


def _final_report(run):
    """The final report as the twin's hook rewrites it: the hook called on the instance, as the harness's own
    `finish` did until 2026-12-07 (it now calls HeldOutputs.handed_over through the class and the instance check
    names the shadow: `test_the_harness_never_runs_a_twins_hook`), for the parent's defences to be tested on."""
    from kernelgym_gap.child.report_parts import write_report
    from kernelgym_gap.core.record import ChildReport
    assert run.checkpoint() is None
    write_report(run.report_path, run.held.handed_over(ChildReport(status=Status.OK, message="",
                                                                   trials=tuple(run.outcomes))))
    return run.report_path.read_text(), ChildReport


@pytest.mark.parametrize("name", ["ipc_record_forgery.py", "ipc_oversize_extent.py", "ipc_records_huge.py"])
def test_the_harness_never_runs_a_twins_hook(hooked_child, name):
    """child/instances.py: the harness's checkpoint and finish call HeldOutputs.handed_over through the class, so
    the report that goes out carries the genuine record, and the instance check names the shadow (in a real
    child that check runs after the very call that installed it: integrity_violation)."""
    from kernelgym_gap.child.instances import HarnessInstances
    from kernelgym_gap.core.record import ChildReport
    run, install = hooked_child
    registry = HarnessInstances()
    registry.register("HeldOutputs", run.held)
    install(name)
    assert registry.violations() == ["the harness's HeldOutputs.handed_over was shadowed on the instance "
                                     "(HeldOutputs.handed_over is a function)"]
    assert run.checkpoint() is None
    assert run.finish(Status.OK, "", trials=tuple(run.outcomes)) == 0
    sent = ChildReport.from_json(run.report_path.read_text()).trials[0].output_handle
    assert sent == run.held.handles["trial_0.tensor"]


def test_the_forgery_hook_rewrites_the_final_reports_record_and_the_parents_schema_refuses_it(hooked_child):
    """What the twin's hook does in the child's own `finish`: the report that goes out carries its forged record
    (trial 0: a shape nested 200 deep), and the parent's bounded reader refuses the report as a whole."""
    from kernelgym_gap.core.errors import ProtocolError
    run, install = hooked_child
    install("ipc_record_forgery.py")
    text, report_cls = _final_report(run)
    assert text.count("[") > 150, text[:200]
    with pytest.raises(ProtocolError):
        report_cls.from_json(text)


def test_the_oversize_hook_moves_the_offset_past_the_segment_and_keeps_the_rest_genuine(hooked_child):
    run, install = hooked_child
    install("ipc_oversize_extent.py")
    text, report_cls = _final_report(run)
    forged = report_cls.from_json(text).trials[0].output_handle      # the schema passes: the opener must refuse
    genuine = run.held.handles["trial_0.tensor"]
    assert forged.offset == genuine.offset + (1 << 30)
    assert (forged.handle, forged.nbytes, forged.shape) == (genuine.handle, genuine.nbytes, genuine.shape)


def test_the_huge_hook_sends_thousands_of_records_under_the_report_size_limit(hooked_child):
    from kernelgym_gap.judge.ipc_records import record_count
    from kernelgym_gap.sandbox.child_io import MAX_REPORT_BYTES
    run, install = hooked_child
    install("ipc_records_huge.py")
    text, report_cls = _final_report(run)
    assert len(text.encode()) <= MAX_REPORT_BYTES
    assert record_count(report_cls.from_json(text, max_bytes=MAX_REPORT_BYTES)) == 3000


def test_the_exit_hook_rebinds_the_hold_after_the_last_verdict(hooked_child):
    """The rebinding of child/run.py's `hold_outputs` happens inside `handed_over`, i.e. in `finish`, after the
    last snapshot comparison: `finish` would then call the twin's os._exit right after the report (not called
    here: it would end this process)."""
    from kernelgym_gap.core.record import ChildReport
    from kernelgym_gap.child import run as run_mod
    run, install = hooked_child
    twin = install("ipc_exit_before_copy.py")
    assert run.checkpoint() is None
    assert run_mod.hold_outputs is not twin["_exit_after_report"]        # a checkpoint leaves it alone
    run.held.handed_over(ChildReport(status=Status.OK, message="", trials=tuple(run.outcomes)))
    assert run_mod.hold_outputs is twin["_exit_after_report"]


@pytest.mark.timeout(240)
def test_a_hook_on_the_held_outputs_instance_is_an_integrity_violation(registry, monkeypatch):
    """The hole the twins used, on the default path (hand-over off), on cpu: a kernel that copies its input,
    its kept outputs replaced by torch's answer, scored ok (a strict xfail until 2026-12-07); the harness's
    instances are now checked with the snapshots (child/instances.py) and the shadow is named."""
    import test_hostile as cpu_suite
    from kernelgym_gap.engine.pipeline import evaluate
    from kernelgym_gap.sandbox import launch
    monkeypatch.setattr(launch, "CompileProbe", cpu_suite._NoProbe)
    task = dataclasses.replace(registry.get(TASK_ID), workloads={
        **registry.get(TASK_ID).workloads,
        "cpu": Workload(public=((16, 128), (5, 200)), heldout=((7, 96),), dtypes=("float32",))})
    name = "held_instance_hook.py"
    record = evaluate(task, (HOSTILE / name).read_text(), "triton", "cpu", cpu_suite.config())
    assert record.status.value in _expect_line(name), (record.status, record.message)
    assert "HeldOutputs.add was shadowed on the instance" in record.message, record.message
    assert record.reward == 0.0


def _report_by_handle_with_no_held_child(tmp_path, rechecks_only: bool):
    """What ipc_exit_before_copy.py leaves when the parent finds it gone rather than held (sandbox/process.py's
    wait sees the exit before, or without, the marker): an OK report naming outputs by handle, no HeldChild.
    Evaluation.check (engine/evaluation.py) then calls `_hand_over` only for a held child and otherwise checks by
    files: judge/checker.check on that report. `rechecks_only`: the trials' outputs went by file (their files
    written, as over the device budget) and only the rechecks' by handle."""
    import random

    import test_handover_check as hc
    from kernelgym_gap.core.tensor_file import write_tensor
    from kernelgym_gap.engine.trials import make_trials
    from kernelgym_gap.judge.checker import check
    from kernelgym_gap.core.registry import default_registry
    task = default_registry().get("AddReLU")
    trials = make_trials(task, "cpu", EvalConfig(seeds_per_shape=1), random.Random(0))
    case = hc.Case(task, trials[:2], tmp_path, timed=(hc._timed(trials[0], 0),))
    report = case.report
    if rechecks_only:
        outcomes = []
        for o in report.trials:
            name = f"trial_{o.index}.tensor"
            write_tensor(Path(case.job.outputs_dir) / name, hc._ref(task, next(t for t in trials if t.index == o.index)))
            outcomes.append(dataclasses.replace(o, output_file=name, output_handle=None))
        report = dataclasses.replace(report, trials=tuple(outcomes))
    return check(task, case.job, report, "cpu")


def test_a_report_by_handle_whose_child_was_not_held_is_a_protocol_error(tmp_path):
    result = _report_by_handle_with_no_held_child(tmp_path, rechecks_only=False)
    assert result.status is Status.PROTOCOL_ERROR, (result.status, result.message)


def test_a_recheck_by_handle_whose_child_was_not_held_is_not_skipped(tmp_path):
    # (the lead's fix, judge/checker.check: a record no hand-over brought is protocol_error, never skipped)
    result = _report_by_handle_with_no_held_child(tmp_path, rechecks_only=True)
    assert result.status is Status.PROTOCOL_ERROR and "never handed over" in result.message, \
        (result.status, result.message)
    assert result.trials_checked == 2       # both trials judged from their files, then the recheck refused


# ------------------------------------------------------------------------------------------------- gpu

@pytest.fixture(scope="module")
def small_task(registry):
    t = registry.get(TASK_ID)
    return dataclasses.replace(t, workloads={
        **t.workloads,
        "cuda": Workload(public=((256, 1024),), heldout=((100, 1000),), dtypes=("float32",)),
    })


def _config() -> EvalConfig:
    return EvalConfig(trial_seed=20261206, hand_over_outputs=True, timing=FAST_TIMING,
                      sandbox=SandboxConfig(wall_s=60.0, pids_max=64, memory_bytes=1 << 30, fsize_bytes=64 << 20))


@pytest.mark.gpu
@pytest.mark.timeout(300)
def test_gpu_each_twin_gets_its_verdict_and_the_next_honest_evaluation_on_the_same_warm_checker_is_ok(
        small_task, warm_cuda):
    from kernelgym_gap.engine.pipeline import evaluate
    honest = (small_task.directory / "solutions" / "triton_rowwise.py").read_text()
    seen = {}
    for name, allowed in TWINS.items():
        record = evaluate(small_task, (HOSTILE / name).read_text(), "triton", "cuda", _config(),
                          checker=warm_cuda.checker, children=warm_cuda.children)
        seen[name] = (record.status.value, record.message[:300])
        assert record.status.value in allowed, (name, record.status, record.message)
        assert record.reward == 0.0 and record.correct is not True, (name, record.reward)
        after = evaluate(small_task, honest, "triton", "cuda", _config(), checker=warm_cuda.checker,
                         children=warm_cuda.children)
        assert after.ok, (name, "the honest evaluation after it", after.status, after.message, seen)
        # the honest one went by handle (the hand-over was on and not fallen back): the checker served it
        assert "check_handover" in after.latency, (name, sorted(after.latency))
        assert not any(f.startswith("outputs_ipc_fallback") for f in after.terms.get("flags", ())), after.terms
