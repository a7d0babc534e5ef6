"""The warm pool's persistent trusted checker (kernelgym_gap.api.warm.WarmChecker) on the cpu device: the same
CheckResult as the per-evaluation checker (in the parent and as a fresh `python -m kernelgym_gap.judge.checker`
process) for a correct and a mismatching output; a killed server is restarted; a hung one (SIGSTOPped) is
killed at the request's timeout and the next request works; and `evaluate(..., checker=warm)` gives the same
records as `evaluate` without it. Outputs are written by the test itself (no sandboxed child) except in the
evaluate tests, which run AddReLU's reference solution and a wrong variant of it."""
import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest
import torch

from kernelgym_gap.core import inputs as inputs_mod
from kernelgym_gap.core.tensor_file import write_tensor
from kernelgym_gap.judge.checker import check
from kernelgym_gap.sandbox.child_io import backend_env
from kernelgym_gap.core.config import EvalConfig
from kernelgym_gap.engine.pipeline import evaluate
from kernelgym_gap.engine.trials import make_trials
from kernelgym_gap.core.record import CheckResult, ChildReport, Job, TrialOutcome
from kernelgym_gap.sandbox.process import child_env
from kernelgym_gap.core.status import Status
from kernelgym_gap.sandbox.prestart import ChildPool
from kernelgym_gap.api.warm import WarmChecker


@pytest.fixture(scope="module")
def warm():
    with WarmChecker(device="cpu") as w:
        yield w


@pytest.fixture
def task(registry):
    return registry.get("AddReLU")


def _case(task, tmp_path, wrong: bool):
    """A job, a report and the outputs a correct (or, wrong=True, an off-by-one) child would have written."""
    trials = make_trials(task, "cpu", EvalConfig(seeds_per_shape=1), random.Random(0))[:3]
    out_dir = tmp_path / "outputs"
    out_dir.mkdir()
    outcomes = []
    for tr in trials:
        ins = inputs_mod.make_trial_inputs(task, tr, "cpu")
        with torch.no_grad():
            out = task.reference(*ins).clone()
        if wrong:
            out = out + 1
        write_tensor(out_dir / f"{tr.index}.tensor", out)
        d = inputs_mod.digest(ins)
        outcomes.append(TrialOutcome(index=tr.index, output_file=f"{tr.index}.tensor", launches=1, programs=1,
                                     seconds=0.0, input_digest_before=d, input_digest_after=d))
    job = Job(task_id=task.id, dsl="triton", backend="cpu", source_file=str(tmp_path / "s.py"),
              outputs_dir=str(out_dir), report_file=str(tmp_path / "report.json"), trials=trials, timing=None)
    report = ChildReport(status=Status.OK, message="", trials=tuple(outcomes))
    return job, report


def _spec(tmp_path, job, report) -> tuple:
    private = tmp_path / "private"
    private.mkdir(exist_ok=True)
    (private / "job.json").write_text(job.to_json())
    (private / "report.json").write_text(report.to_json())
    spec = {"job": str(private / "job.json"), "report": str(private / "report.json"),
            "result": str(private / "check.json"), "device": "cpu"}
    (private / "check_spec.json").write_text(json.dumps(spec))
    return private / "check_spec.json", private / "check.json"


def _fresh_process(spec, result) -> CheckResult:
    """The per-evaluation path: one `python -m kernelgym_gap.judge.checker CHECK.json` process."""
    env = child_env(spec.parent, backend_env("cpu"))
    subprocess.run([sys.executable, "-m", "kernelgym_gap.judge.checker", str(spec)], env=env, cwd=spec.parent,
                   capture_output=True, timeout=120, check=True)
    return CheckResult.from_json(result.read_text())


@pytest.mark.parametrize("wrong", [False, True], ids=["correct", "mismatch"])
def test_same_result_as_the_per_evaluation_checker(warm, task, tmp_path, wrong):
    job, report = _case(task, tmp_path, wrong)
    spec, result = _spec(tmp_path, job, report)
    in_parent = check(task, job, report, "cpu")
    fresh = _fresh_process(spec, result)
    result.unlink()
    served = warm.check_spec(spec, result, timeout=60)
    assert served == fresh == in_parent
    assert served.status is (Status.MISMATCH if wrong else Status.OK)
    assert served.trials_checked == (0 if wrong else len(job.trials))


def test_a_killed_server_is_restarted(task, tmp_path):
    job, report = _case(task, tmp_path, False)
    spec, result = _spec(tmp_path, job, report)
    with WarmChecker(device="cpu") as w:
        assert w.check_spec(spec, result, timeout=60).status is Status.OK
        first = w.pid
        os.kill(first, signal.SIGKILL)                 # died between two checks
        deadline = time.monotonic() + 10
        while w.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        result.unlink()
        assert w.check_spec(spec, result, timeout=60).status is Status.OK
        assert w.pid not in (None, first) and w.starts == 2


def test_a_server_dying_during_a_check_is_retried_once(task, tmp_path):
    job, report = _case(task, tmp_path, False)
    spec, result = _spec(tmp_path, job, report)
    with WarmChecker(device="cpu") as w:
        w.warm_up()
        os.kill(w.pid, signal.SIGSTOP)
        killer = subprocess.Popen(["sh", "-c", f"sleep 0.5; kill -KILL {w.pid}"])
        try:
            got = w.check_spec(spec, result, timeout=60)  # the request is sent to the stopped process
        finally:
            killer.wait()
        assert got.status is Status.OK and w.starts == 2


def test_a_hung_check_times_out_and_the_next_one_works(task, tmp_path):
    job, report = _case(task, tmp_path, False)
    spec, result = _spec(tmp_path, job, report)
    with WarmChecker(device="cpu") as w:
        w.warm_up()
        hung = w.pid
        os.kill(hung, signal.SIGSTOP)
        t = time.monotonic()
        with pytest.raises(subprocess.TimeoutExpired):   # what the per-evaluation subprocess.run raises
            w.check_spec(spec, result, timeout=1.0)
        assert time.monotonic() - t < 15
        assert not _exists(hung)                          # killed (and reaped), not left stopped
        assert w.check_spec(spec, result, timeout=60).status is Status.OK
        assert w.starts == 2


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_check_that_raises_gives_protocol_error_and_a_fresh_server(warm, tmp_path):
    spec = tmp_path / "check_spec.json"
    spec.write_text(json.dumps({"job": str(tmp_path / "missing.json"), "report": "x", "result": "y",
                                "device": "cpu"}))
    got = warm.check_spec(spec, tmp_path / "y", timeout=60)
    assert got.status is Status.PROTOCOL_ERROR and "the trusted checker failed" in got.message
    assert "FileNotFoundError" in got.message
    assert not warm.alive()                               # not reused after a failed check


def test_close_ends_the_process():
    w = WarmChecker(device="cpu")
    w.warm_up()
    pid = w.pid
    w.close()
    assert not _exists(pid) and not w.alive()
    with pytest.raises(RuntimeError):
        w.check_spec("x", "y", timeout=1)


def test_server_protocol_keeps_stray_prints_off_its_stdout(tmp_path):
    """The protocol channel is the real stdout; fd 1 inside the server is stderr."""
    code = ("import sys, kernelgym_gap.judge.checker as c; r = c.serve('cpu', stdin=iter([])); "
            "print('stray', flush=True); sys.exit(r)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120,
                          env=child_env(tmp_path, backend_env("cpu")), cwd=tmp_path)
    lines = proc.stdout.decode().splitlines()
    assert proc.returncode == 0 and len(lines) == 1 and json.loads(lines[0])["ready"] is True
    assert "stray" in proc.stderr.decode()


def _strip(record) -> dict:
    d = record.to_dict()
    d.pop("latency")
    d.pop("created_at")
    return d


@pytest.mark.parametrize("wrong", [False, True], ids=["correct", "mismatch"])
def test_evaluate_with_a_warm_checker_gives_the_same_record(warm, task, wrong):
    sol = next(s for s in task.solutions if s.dsl == "triton" and s.kind == "optimized")
    source = task.solution_path(sol).read_text()
    if wrong:
        source = source.replace("tl.maximum(", "1.0 + tl.maximum(")
        assert "1.0 + tl.maximum(" in source
    cfg = EvalConfig(trial_seed=0)
    with_warm = evaluate(task, source, "triton", "cpu", cfg, checker=warm)
    without = evaluate(task, source, "triton", "cpu", cfg)
    assert _strip(with_warm) == _strip(without)
    assert with_warm.status is (Status.MISMATCH if wrong else Status.OK)
    assert "check" in with_warm.latency


def test_evaluate_rejects_a_checker_for_another_device(warm, task):
    with pytest.raises(ValueError, match="device"):
        evaluate(task, "def add_relu(:\n", "triton", "cpu", checker=type("C", (), {"device": "cuda"})())


def test_env_warm_flag_holds_and_closes_one(task):
    from kernelgym_gap.api.env import KernelEnv
    env = KernelEnv(task_id=task.id, backend="cpu", warm=True)
    try:
        assert isinstance(env.checker, WarmChecker) and isinstance(env.children, ChildPool)
        env.checker.warm_up()
        pid = env.checker.pid
        env.reset(seed=0)
        assert env.children.idle() == 1                   # reset pre-started the first step's child
        (waiting,) = env.children._idle.values()
        _, _, _, _, info = env.step("def broken(:\n")      # fails at the gate: the checker is not asked
        assert info["status"] == "syntax_error"
    finally:
        env.close()
    assert not _exists(pid)
    assert waiting.child.proc.poll() is not None and not waiting.scratch.exists()
    with pytest.raises(ValueError):
        KernelEnv(task_id=task.id, backend="cpu", warm=True, evaluator=lambda *a: None)


def test_evaluate_many_warm_passes_each_worker_its_checker(task):
    from kernelgym_gap.api.batch import EvalRequest, evaluate_many
    seen = []

    def fake(task_, source, dsl, backend, config, checker=None, children=None):
        seen.append((checker, children))
        return evaluate(task_, "def broken(:\n", dsl, backend, config, checker=checker, children=children)

    records = evaluate_many([EvalRequest(task.id, "x", backend="cpu")] * 3, workers=1, evaluator=fake, warm=True)
    assert [r.status for r in records] == [Status.SYNTAX_ERROR] * 3
    assert len({id(c) for c, _ in seen}) == 1 and isinstance(seen[0][0], WarmChecker)
    assert len({id(p) for _, p in seen}) == 1 and isinstance(seen[0][1], ChildPool)
    assert not seen[0][0].alive() and seen[0][1].idle() == 0     # closed when the batch ended


@pytest.mark.gpu
def test_cuda_warm_checker_matches_a_fresh_process(registry):
    task = registry.get("AddReLU")
    sol = next(s for s in task.solutions if s.dsl == "triton" and s.kind == "optimized")
    source = task.solution_path(sol).read_text()
    cfg = EvalConfig(trial_seed=0)
    with WarmChecker(gpu_index=0, device="cuda") as w:           # GPU 0: the default Placement
        a = evaluate(task, source, "triton", "cuda", cfg, checker=w)
    b = evaluate(task, source, "triton", "cuda", cfg)
    assert a.status is b.status is Status.OK
    assert a.correct == b.correct and a.trials_checked == b.trials_checked
