"""The trusted check started while the child runs (judge/early_check.py, issue 35): its verdicts are the
ordinary check's, and its references are made before the child's report exists (ordering, not wall time)."""
import dataclasses
import threading
from pathlib import Path

import pytest
import torch

from kernelgym_gap.core import inputs as inputs_mod
from kernelgym_gap.core.config import EvalConfig
from kernelgym_gap.core.placement import Placement
from kernelgym_gap.core.record import ChildReport, Job, TrialOutcome
from kernelgym_gap.core.registry import load_task_file
from kernelgym_gap.core.status import Status
from kernelgym_gap.core.tensor_file import write_tensor
from kernelgym_gap.engine.trials import make_trials, trial_rng
from kernelgym_gap.judge import checker, early_check

ROOT = Path(__file__).resolve().parent.parent
CONFIG = EvalConfig(trial_seed=7, seeds_per_shape=1)


@pytest.fixture(scope="module")
def layernorm():
    return load_task_file(ROOT / "tasks/normalization/layernorm/task.py")


def honest_child(task, tmp_path, corrupt: int | None = None, **job_kw):
    """The job, and the report and outputs an honest child writes (the task's own reference, in the trial's
    dtype); the `corrupt`-th trial's output is off by 1 in one element."""
    trials = make_trials(task, "cpu", CONFIG, trial_rng(CONFIG))
    out_dir = tmp_path / "outputs"
    out_dir.mkdir(exist_ok=True)
    outcomes = []
    for n, trial in enumerate(trials):
        ins = inputs_mod.make_trial_inputs(task, trial, "cpu")
        digest = inputs_mod.digest(ins)
        out = task.reference(*ins).clone()
        if n == corrupt:
            out.view(-1)[0] += 1.0
        write_tensor(out_dir / f"out{trial.index}.tensor", out)
        outcomes.append(TrialOutcome(index=trial.index, output_file=f"out{trial.index}.tensor", launches=1,
                                     programs=1, seconds=0.0, input_digest_before=digest,
                                     input_digest_after=digest))
    job = Job(task_id=task.id, dsl="triton", backend="cpu", source_file="s.py", outputs_dir=str(out_dir),
              report_file="r.json", trials=tuple(trials), timing=None, **job_kw)
    return job, ChildReport(status=Status.OK, message="", trials=tuple(outcomes))


@pytest.mark.parametrize("corrupt", [None, 0, 3])
def test_the_precomputed_references_give_the_same_verdict(layernorm, tmp_path, corrupt):
    job, report = honest_child(layernorm, tmp_path, corrupt)
    plain = checker.check(layernorm, job, report, "cpu")
    early = checker.check(layernorm, job, report, "cpu", checker.precompute(layernorm, job, "cpu"))
    assert plain == early                          # status, message, trials checked, failure detail
    assert plain.status is (Status.OK if corrupt is None else Status.MISMATCH)


def test_a_byte_budget_keeps_the_rest_for_the_check(layernorm, tmp_path):
    job, report = honest_child(layernorm, tmp_path, corrupt=len(make_trials(layernorm, "cpu", CONFIG,
                                                                             trial_rng(CONFIG))) - 1)
    ready = checker.precompute(layernorm, job, "cpu", max_bytes=1)
    assert ready == {}
    ins = inputs_mod.make_trial_inputs(layernorm, job.trials[0], "cpu")
    first = sum(x.numel() * x.element_size() for x in (*ins, checker._reference(layernorm, ins)))
    part = checker.precompute(layernorm, job, "cpu", max_bytes=first)
    assert list(part) == [job.trials[0].index]
    assert 0 < len(part) < len(job.trials)
    assert checker.check(layernorm, job, report, "cpu", part) == checker.check(layernorm, job, report, "cpu")


def test_the_references_are_made_while_the_child_runs_and_not_again(layernorm, tmp_path, monkeypatch):
    """The early check starts with the job; its references are made before the child's report exists (the
    child here waits on an event the test sets only once they are), and the check then makes none."""
    job, report = honest_child(layernorm, tmp_path)
    calls = []
    real = checker._reference
    monkeypatch.setattr(checker, "_reference", lambda task, ins: calls.append(1) or real(task, ins))
    child_done = threading.Event()
    early = early_check.start(layernorm, job, "cpu", CONFIG.replace(precompute_reference=True))
    assert isinstance(early, early_check.InProcess)
    assert early.wait(timeout=60) and not child_done.is_set()
    assert early.made is not None and early.started <= early.made
    made = len(calls)
    assert made == len(job.trials)
    child_done.set()                                   # the child ends; its report is read now
    result = early.check(layernorm, job, report, "cpu", tmp_path, CONFIG)
    assert result.status is Status.OK and result.trials_checked == len(job.trials)
    assert len(calls) == made                          # no reference made after the child
    assert "early_wait" in result.seconds


def test_it_starts_only_where_asked_and_not_with_a_warm_checker(layernorm, tmp_path):
    job, _ = honest_child(layernorm, tmp_path)
    assert early_check.start(layernorm, job, "cpu", CONFIG) is None
    assert early_check.start(layernorm, job, "cpu", CONFIG.replace(precompute_reference=True),
                             checker=object()) is None
    assert early_check.start(layernorm, dataclasses.replace(job, trials=()), "cpu",
                             CONFIG.replace(precompute_reference=True)) is None


def test_asked_for_beside_a_warm_checker_it_says_it_does_nothing(layernorm, tmp_path, caplog, monkeypatch):
    """The throughput script's lanes rows run a warm checker: on the H100 (2026-12-06) the lever's row ran
    without it and nothing said so."""
    job, _ = honest_child(layernorm, tmp_path)
    monkeypatch.setattr(early_check, "_WARNED_WARM", False)
    with caplog.at_level("WARNING", logger="kernelgym_gap.judge.early_check"):
        for _ in range(2):
            assert early_check.start(layernorm, job, "cpu", CONFIG.replace(precompute_reference=True),
                                     checker=object()) is None
    said = [r.getMessage() for r in caplog.records if "warm checker" in r.getMessage()]
    assert len(said) == 1 and "no effect" in said[0]


def test_the_early_checker_process_gives_the_ordinary_verdict(layernorm, tmp_path):
    """The cuda path's protocol (`python -m kernelgym_gap.judge.checker --early`), run on the cpu device: the
    process makes its references after the parent's start line, says so, and checks once the report is in."""
    job, report = honest_child(layernorm, tmp_path, corrupt=2)
    config = CONFIG.replace(precompute_reference=True)
    proc = early_check.Process(layernorm, job, "cpu", config, Placement(scratch_root=str(tmp_path)))
    try:
        assert proc.wait(timeout=120)
        assert b'"references"' in proc._line and proc.started <= proc.made
        result = proc.check(layernorm, job, report, "cpu", tmp_path, config)
    finally:
        proc.close()
    assert result == checker.check(layernorm, job, report, "cpu")
    assert result.status is Status.MISMATCH
    assert proc.proc.poll() is not None


def test_a_closed_early_process_is_gone_and_a_retry_checks_afresh(layernorm, tmp_path):
    job, report = honest_child(layernorm, tmp_path)
    config = CONFIG.replace(precompute_reference=True)
    proc = early_check.Process(layernorm, job, "cpu", config, Placement(scratch_root=str(tmp_path)))
    proc.close()
    assert proc.proc.poll() is not None and not proc.private.exists()
    proc.used = True       # a retry (checked_alone_if_failed) after the first check: the ordinary check
    private = tmp_path / "private"
    private.mkdir()
    assert proc.check(layernorm, job, report, "cpu", private, config).status is Status.OK


@pytest.mark.parametrize("source,status", [
    ("tasks/normalization/layernorm/solutions/triton_rowwise.py", Status.OK),
    ("tests/fixtures/failures/mismatch.py", Status.MISMATCH)])
def test_an_evaluation_with_early_references_scores_as_without(source, status):
    from kernelgym_gap.engine.pipeline import evaluate
    code = (ROOT / source).read_bytes()
    plain = evaluate("LayerNorm", code, backend="cpu", config=CONFIG)
    early = evaluate("LayerNorm", code, backend="cpu", config=CONFIG.replace(precompute_reference=True))
    assert (early.status, early.correct, early.reward, early.message, early.trials_checked) == \
        (plain.status, plain.correct, plain.reward, plain.message, plain.trials_checked)
    assert plain.status is status
    assert "check_early_wait" in early.latency and "check_early_wait" not in plain.latency


@pytest.mark.gpu
def test_gpu_an_early_check_on_cuda_gives_the_ordinary_verdict():
    """On the device, through the lanes: the early checker process holds the shared lane while it makes the
    references, and the evaluation's record matches the ordinary check's."""
    from kernelgym_gap.engine.pipeline import evaluate
    code = (ROOT / "tasks/normalization/layernorm/solutions/triton_rowwise.py").read_bytes()
    config = EvalConfig(trial_seed=7, seeds_per_shape=1)
    plain = evaluate("LayerNorm", code, backend="cuda", config=config)
    early = evaluate("LayerNorm", code, backend="cuda", config=config.replace(precompute_reference=True))
    assert early.status is plain.status is Status.OK
    assert early.trials_checked == plain.trials_checked
    assert "check_early_wait" in early.latency
    assert torch.cuda.is_available()
