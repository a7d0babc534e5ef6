"""EvalConfig.read_outputs_while_timing (issue 35; judge/early_prefetch.py): the pre-timing checkpoint's output
files are read while the child still times, by a thread of the parent (the cpu check in the parent) or by the
warm checker (its `early` step); the check after the child keeps only the files the final report names for the
same trials, unchanged (inode, size, mtime), and reads the rest. Verdicts are the ones without the switch; a
replaced file is read again; a killed or failed child's early read is dropped; a warm checker that dies or hangs
in the early step leaves the check to read everything, with the submission's own verdict. Real files and a real
warm checker on the cpu device, as tests/test_check_prefetch.py; the test plays the child: it writes the
outputs and the checkpoint report while the early read watches, and ends "the child" (stop) only after it."""
import dataclasses
import os
import random
import signal
import subprocess
from pathlib import Path

import pytest
import torch

from kernelgym_gap.api.warm import WarmChecker
from kernelgym_gap.core import inputs as inputs_mod
from kernelgym_gap.core.config import EvalConfig
from kernelgym_gap.core.lane import held
from kernelgym_gap.core.record import ChildReport, Job, TrialOutcome
from kernelgym_gap.core.slowness import CHECKPOINT_FILE
from kernelgym_gap.core.status import Status
from kernelgym_gap.core.tensor_file import write_tensor
from kernelgym_gap.engine.trials import make_trials
from kernelgym_gap.judge import early_prefetch, prefetch as prefetch_mod, trusted
from kernelgym_gap.judge.checker import check

pytestmark = pytest.mark.usefixtures("one_torch_thread")
CONFIG = EvalConfig(seeds_per_shape=1, read_outputs_outside_lane=True, read_outputs_while_timing=True)
CASES = {"ok": ("ok", "ok", "ok"), "mismatch": ("ok", "wrong", "ok"),
         "forged_after_mismatch": ("wrong", "forged", "ok"), "forged": ("forged", "ok", "ok"),
         "truncated": ("ok", "truncated", "ok")}


@pytest.fixture
def task(registry):
    return registry.get("AddReLU")


def _output(task, trial, kind: str) -> torch.Tensor:
    ins = inputs_mod.make_trial_inputs(task, trial, "cpu")
    with torch.no_grad():
        out = task.reference(*ins).clone()
    if kind == "wrong":
        out = out + 1
    if kind == "forged":
        out = torch.zeros(out.numel() * 4 + (1 << 16), dtype=torch.float64)
    return out


def _write(task, trial, path: Path, kind: str) -> None:
    write_tensor(path, _output(task, trial, kind))
    if kind == "truncated":
        os.truncate(path, path.stat().st_size - 8)


def _case(task, tmp_path, kinds):
    """The job, its report, and a function that plays the child up to its pre-timing checkpoint: the outputs
    written (each kind as in test_check_prefetch.py), then the checkpoint report beside the final one."""
    trials = make_trials(task, "cpu", CONFIG, random.Random(0))[:len(kinds)]
    out_dir = tmp_path / "outputs"
    out_dir.mkdir()
    outcomes = []
    for tr in trials:
        d = inputs_mod.digest(inputs_mod.make_trial_inputs(task, tr, "cpu"))
        outcomes.append(TrialOutcome(index=tr.index, output_file=f"{tr.index}.tensor", launches=1, programs=1,
                                     seconds=0.0, input_digest_before=d, input_digest_after=d))
    job = Job(task_id=task.id, dsl="triton", backend="cpu", source_file=str(tmp_path / "s.py"),
              outputs_dir=str(out_dir), report_file=str(tmp_path / "report.json"), trials=trials, timing=None)
    report = ChildReport(status=Status.OK, message="", trials=tuple(outcomes))

    def child_checkpoint():
        for tr, kind in zip(trials, kinds):
            _write(task, tr, out_dir / f"{tr.index}.tensor", kind)
        (tmp_path / CHECKPOINT_FILE).write_text(report.to_json())
    return job, report, child_checkpoint


def _write_outputs(task, job, kind):
    """The outputs alone, no checkpoint: a test of a bad checkpoint writes only that one. Writing the full
    checkpoint first (as `child_checkpoint` does) and overwriting it raced the reader on a loaded machine: it
    could read the valid one in between (CI, 2026-12-07: the short one once, the garbage one once)."""
    for tr in job.trials:
        _write(task, tr, Path(job.outputs_dir) / f"{tr.index}.tensor", kind)


def _lane():
    return held(None, 0, "shared")


def _early(job, tmp_path, checker=None) -> early_prefetch.EarlyRead:
    private = tmp_path / "private"
    private.mkdir(exist_ok=True)
    return early_prefetch.start(job, tmp_path / CHECKPOINT_FILE, private, checker, timeout=60)


def test_the_switch_needs_the_outputs_read_outside_the_lane():
    with pytest.raises(ValueError, match="read_outputs_outside_lane"):
        EvalConfig(read_outputs_while_timing=True, read_outputs_outside_lane=False)
    assert not EvalConfig().read_outputs_while_timing
    assert EvalConfig(read_outputs_while_timing=True).read_outputs_outside_lane   # on by default (item 12)


@pytest.mark.parametrize("name", list(CASES))
def test_in_the_parent_the_files_are_read_while_the_child_runs_and_the_verdict_is_the_same(task, tmp_path, name):
    job, report, child_checkpoint = _case(task, tmp_path, CASES[name])
    early = _early(job, tmp_path)
    child_checkpoint()
    assert early.done.wait(30), "the early read did not happen while the child ran"
    assert early.prefetch is not None and early.seconds is not None
    early.stop()                                   # the child ends after its timing
    expected = check(task, job, report, "cpu")
    got = trusted.check_in_process(task, job, report, "cpu", tmp_path / "private", CONFIG, lane=_lane,
                                   early_read=early)
    assert got == expected and got.message == expected.message
    # the files the early read kept: every one it read (the final report names them for the same trials)
    again = prefetch_mod.prefetch_outputs(job, report, early=early.prefetch)
    assert again.kept_early == len(early.prefetch.files) > 0 or name == "forged"


def test_a_file_replaced_after_the_early_read_is_read_again(task, tmp_path):
    job, report, child_checkpoint = _case(task, tmp_path, ("ok", "ok", "ok"))
    early = _early(job, tmp_path)
    child_checkpoint()
    assert early.done.wait(30)
    early.stop()
    path = Path(job.outputs_dir) / report.trials[1].output_file
    path.unlink()                                  # a hostile child's new file: another inode
    _write(task, job.trials[1], path, "wrong")
    got = trusted.check_in_process(task, job, report, "cpu", tmp_path / "private", CONFIG, lane=_lane,
                                   early_read=early)
    assert got.status is Status.MISMATCH and got == check(task, job, report, "cpu")
    assert prefetch_mod.prefetch_outputs(job, report, early=early.prefetch).kept_early == 2


def test_a_file_named_for_another_trial_in_the_final_report_is_read_again(task, tmp_path):
    job, report, child_checkpoint = _case(task, tmp_path, ("ok", "wrong", "ok"))
    early = _early(job, tmp_path)
    child_checkpoint()
    assert early.done.wait(30)
    early.stop()
    a, b = report.trials[0], report.trials[1]
    swapped = dataclasses.replace(report, trials=(dataclasses.replace(a, output_file=b.output_file),
                                                  dataclasses.replace(b, output_file=a.output_file), *report.trials[2:]))
    again = prefetch_mod.prefetch_outputs(job, swapped, early=early.prefetch)
    assert again.kept_early == 1                   # only the third trial's file
    got = trusted.check_in_process(task, job, swapped, "cpu", tmp_path / "private", CONFIG, lane=_lane,
                                   early_read=early)
    assert got == check(task, job, swapped, "cpu") and got.status is not Status.OK


@pytest.mark.parametrize("text", ["{not json", '{"status": "ok", "trials": 5}', "x" * (9 << 20)],
                         ids=["garbage", "invalid", "oversized"])
def test_a_hostile_checkpoint_means_no_early_read(task, tmp_path, text):
    job, report, _ = _case(task, tmp_path, ("ok", "ok", "ok"))
    early = _early(job, tmp_path)
    _write_outputs(task, job, "ok")     # then only the hostile checkpoint (no valid one for the reader to catch)
    (tmp_path / CHECKPOINT_FILE).write_text(text)
    assert not early.done.wait(0.5)
    early.stop()
    assert early.prefetch is None and early.seconds is None
    got = trusted.check_in_process(task, job, report, "cpu", tmp_path / "private", CONFIG, lane=_lane,
                                   early_read=early)
    assert got.status is Status.OK


def test_a_checkpoint_short_of_the_jobs_trials_is_not_read(task, tmp_path):
    job, report, _ = _case(task, tmp_path, ("ok", "ok", "ok"))
    early = _early(job, tmp_path)
    _write_outputs(task, job, "ok")     # then only the short checkpoint
    (tmp_path / CHECKPOINT_FILE).write_text(dataclasses.replace(report, trials=report.trials[:2]).to_json())
    assert not early.done.wait(0.5)
    early.stop()
    assert early.prefetch is None


@pytest.mark.parametrize("name", ["ok", "mismatch", "forged_after_mismatch"])
def test_the_warm_checker_reads_while_the_child_runs(task, tmp_path, name):
    job, report, child_checkpoint = _case(task, tmp_path, CASES[name])
    with WarmChecker(device="cpu") as w:
        w.warm_up()
        early = _early(job, tmp_path, w)
        child_checkpoint()
        assert early.done.wait(60)
        assert early.in_checker and early.seconds is not None
        early.stop()
        got = trusted.check_in_process(task, job, report, "cpu", tmp_path / "private", CONFIG, checker=w,
                                       lane=_lane, early_read=early)
        assert w.starts == 1
        assert w.drop_early() == 0                 # the check used it and freed it
    expected = check(task, job, report, "cpu")
    assert got == expected and got.message == expected.message


def test_a_killed_childs_early_read_is_dropped_in_the_warm_checker(task, tmp_path):
    job, report, child_checkpoint = _case(task, tmp_path, ("ok", "ok", "ok"))
    with WarmChecker(device="cpu") as w:
        w.warm_up()
        early = _early(job, tmp_path, w)
        child_checkpoint()
        assert early.done.wait(60) and early.in_checker
        pid = w.pid
        early.discard()                            # Evaluation.check for a killed child, or close
        assert not early.in_checker and early.prefetch is None
        assert w.drop_early() == 0 and w.pid == pid   # nothing held any more, the same process


def test_in_the_parent_a_discarded_early_read_holds_nothing(task, tmp_path):
    job, report, child_checkpoint = _case(task, tmp_path, ("ok", "ok", "ok"))
    early = _early(job, tmp_path)
    child_checkpoint()
    assert early.done.wait(30) and early.prefetch is not None
    early.discard()
    assert early.prefetch is None


@pytest.mark.parametrize("how", ["hung", "killed"])
def test_a_warm_checker_that_hangs_or_dies_in_the_early_step_leaves_the_right_verdict(task, tmp_path, how):
    job, report, child_checkpoint = _case(task, tmp_path, ("ok", "wrong", "ok"))
    with WarmChecker(device="cpu") as w:
        w.warm_up()
        os.kill(w.pid, signal.SIGSTOP)
        killer = subprocess.Popen(["sh", "-c", f"sleep 0.3; kill -KILL {w.pid}"]) if how == "killed" else None
        private = tmp_path / "private"
        private.mkdir()
        early = early_prefetch.start(job, tmp_path / CHECKPOINT_FILE, private, w, timeout=1.5)
        child_checkpoint()
        assert early.done.wait(30)
        if killer is not None:
            killer.wait()
        early.stop()
        assert not early.in_checker and not w.alive()
        got = trusted.check_in_process(task, job, report, "cpu", private, CONFIG, checker=w, lane=_lane,
                                       early_read=early)
        assert w.starts == 2
    assert got == check(task, job, report, "cpu") and got.status is Status.MISMATCH


def test_an_early_step_that_fails_inside_the_server_ends_it_and_the_check_goes_on(task, tmp_path):
    job, report, child_checkpoint = _case(task, tmp_path, ("ok", "ok", "ok"))
    child_checkpoint()
    with WarmChecker(device="cpu") as w:
        spec = tmp_path / "early_spec.json"
        spec.write_text('{"job": "/nonexistent.json", "report": "x"}')
        assert w.read_early(spec, 60) is None and not w.alive()
        private = tmp_path / "private"
        private.mkdir()
        got = trusted.check_in_process(task, job, report, "cpu", private, CONFIG, checker=w, lane=_lane)
        assert got.status is Status.OK and w.starts == 2


def test_an_evaluation_with_the_switch_records_the_early_read(registry, tmp_path, monkeypatch):
    """evaluate() on cpu, whose child has no timing and so no pre-timing checkpoint: the launcher is wrapped to
    play one (after the real child, the checkpoint report written, then `run` returns only once the early read
    is done, as a child still timing would). The verdicts with and without the switch are the same; the record
    says how long the early read took (check_prefetch_early), a key the simulator does not count."""
    import shutil
    from kernelgym_gap.core.placement import Placement
    from kernelgym_gap.engine.pipeline import evaluate
    from kernelgym_gap.sandbox.launch import Launcher
    from kernelgym_gap.sim import workload
    started, real_run, real_start = [], Launcher.run, early_prefetch.start

    def start(*a, **k):
        started.append(real_start(*a, **k))
        return started[-1]

    def run(self, job, source):
        result = real_run(self, job, source)
        if started and result.report is not None and result.report.status is Status.OK:
            shutil.copy(job.report_file, Path(job.report_file).parent / CHECKPOINT_FILE)
            assert started[-1].done.wait(30), "no early read while the child ran"
        return result
    monkeypatch.setattr(early_prefetch, "start", start)
    monkeypatch.setattr(Launcher, "run", run)
    task = registry.get("AddReLU")
    sol = next(s for s in task.solutions if s.dsl == "triton" and s.cpu_status == "ok")
    source = task.solution_path(sol).read_text()
    wrong = source.replace("tl.maximum(", "tl.minimum(")
    base = EvalConfig(seeds_per_shape=1, trial_seed=0, read_outputs_outside_lane=True)
    for code, status in ((source, Status.OK), (wrong, Status.MISMATCH)):
        recs = [evaluate(task, code, "triton", "cpu", base.replace(read_outputs_while_timing=on),
                         placement=Placement(scratch_root=str(tmp_path))) for on in (False, True)]
        assert [r.status for r in recs] == [status, status], recs[1].message
        assert recs[0].message == recs[1].message and recs[0].trials_checked == recs[1].trials_checked
        assert "check_prefetch_early" not in recs[0].latency and recs[1].latency["check_prefetch_early"] > 0
        assert started[-1].prefetch is None        # freed at the evaluation's close
        lat = dict(recs[1].latency)
        rec = {"task": task.id, "status": "ok", "at_s": 0.0, "latency": lat}
        without = {**rec, "latency": {k: v for k, v in lat.items() if k != "check_prefetch_early"}}
        assert workload.job_from_record(rec) == workload.job_from_record(without)


def test_the_switch_is_a_throughput_variant():
    import importlib.util
    script = Path(__file__).resolve().parents[1] / "scripts" / "throughput.py"
    spec = importlib.util.spec_from_file_location("throughput", script)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    lever = "read_outputs_outside_lane=1,read_outputs_while_timing=1"
    assert lever in mod.LEVERS
    applied, _ = mod.apply_variant(EvalConfig(), mod.parse_variant(lever))
    assert applied.read_outputs_while_timing and applied.read_outputs_outside_lane


def test_a_file_rewritten_in_place_with_its_mtime_set_back_is_read_again(task, tmp_path):
    """The same inode and size, the mtime restored by utime: the ctime still tells, and the new content is
    the one judged."""
    job, report, child_checkpoint = _case(task, tmp_path, ("ok", "ok", "ok"))
    early = _early(job, tmp_path)
    child_checkpoint()
    assert early.done.wait(30)
    early.stop()
    path = Path(job.outputs_dir) / report.trials[0].output_file
    st = path.stat()
    wrong = Path(job.outputs_dir) / "wrong.tensor"
    _write(task, job.trials[0], wrong, "wrong")
    with open(path, "r+b") as f:
        f.write(wrong.read_bytes())
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_ino == st.st_ino and path.stat().st_size == st.st_size
    got = trusted.check_in_process(task, job, report, "cpu", tmp_path / "private", CONFIG, lane=_lane,
                                   early_read=early)
    assert got.status is Status.MISMATCH and got == check(task, job, report, "cpu")


@pytest.mark.parametrize("how", ["ok", "killed", "failed"])
def test_a_killed_or_failed_childs_early_read_is_not_given_to_the_check(registry, task, tmp_path, how):
    from kernelgym_gap.core.backend import backend
    from kernelgym_gap.engine.evaluation import Evaluation
    from kernelgym_gap.sandbox.launch import ChildResult
    job, report, child_checkpoint = _case(task, tmp_path, ("ok", "ok", "ok"))
    early = _early(job, tmp_path)
    child_checkpoint()
    assert early.done.wait(30)
    early.stop()
    ev = Evaluation(task, b"", "triton", backend("cpu"), CONFIG)
    ev._early_read = early
    final = report if how != "failed" else dataclasses.replace(report, status=Status.RUNTIME_ERROR)
    ev.child = ChildResult(outcome=None, report=final)
    if how == "killed":
        ev.killed = (3, 1.0, 2.0)
    got = ev.early_read_for_check()
    assert (got is early and early.prefetch is not None) if how == "ok" else (got is None and early.prefetch is None)


def test_the_env_steps_take_a_variant(monkeypatch):
    """--env-steps-variant: the owed GPU run compares warm steps with and without the switch; the variant's
    fields reach the KernelEnv's config (a recording stand-in for the env: the steps themselves need a GPU)."""
    import importlib.util
    import types
    from kernelgym_gap.api import env as env_mod
    script = Path(__file__).resolve().parents[1] / "scripts" / "throughput.py"
    spec = importlib.util.spec_from_file_location("throughput", script)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    configs = []

    class Recording:
        def __init__(self, task_id, config, **kw):
            configs.append(config)
            self.last_record = types.SimpleNamespace(latency={"check": 1.0})

        def reset(self, seed=None):
            return None

        def step(self, source):
            return None, 1.0, True, False, {"status": "ok", "terms": {}}

        def close(self):
            pass
    monkeypatch.setattr(env_mod, "KernelEnv", Recording)
    out = mod.env_steps(["GELU"], "cpu", 0.0, mod.parse_variant("read_outputs_outside_lane=1,read_outputs_while_timing=1"))
    assert len(out["steps"]) == 2 and configs[0].read_outputs_while_timing and configs[0].read_outputs_outside_lane
    mod.env_steps(["GELU"], "cpu", 0.0)
    assert not configs[-1].read_outputs_while_timing
