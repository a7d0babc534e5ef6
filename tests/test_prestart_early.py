"""The next child started early (Placement.prestart_early; sandbox/prestart.ChildPool.start_early): its process
starts as a child starts, without a task, and is given the next evaluation's task (its warm-up line) as that
child ends, then serves that evaluation with the cold record; a child started for other settings is let go and
the next one started as before; one that dies while it waits unbound is replaced; close() ends it; the child's
side reads the bind line before the job's, and the parent's write of it is bounded."""
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernelgym_gap.core.config import EvalConfig
from kernelgym_gap.core.placement import Placement
from kernelgym_gap.core.status import Status
from kernelgym_gap.engine.pipeline import evaluate
from kernelgym_gap.sandbox.launch import child_spec
from kernelgym_gap.sandbox.prestart import ChildPool, PrestartedChild
from kernelgym_gap.sandbox.process import MAX_LINE_BEFORE, SandboxConfig, SandboxedChild, child_env

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
# the AddReLU task and its optimized source, and the record without its timings, as test_prestart.py has them
from test_prestart import _strip, source, task  # noqa: E402,F401


def test_the_early_child_is_bound_as_the_child_ends_and_serves_the_next_evaluation(task, source, tmp_path):
    cfg, where = EvalConfig(trial_seed=0), Placement(scratch_root=str(tmp_path))
    spec = child_spec(task, "triton", "cpu", cfg, where)
    cold = evaluate(task, source, "triton", "cpu", cfg, placement=where)
    with ChildPool(start_early=True) as pool:
        first = evaluate(task, source, "triton", "cpu", cfg, children=pool, placement=where)
        # the first evaluation's child was cold; beside it the next one started without a task, and was bound
        # to the next evaluation's spec (no plan: the same) as it ended
        assert (pool.started, pool.bound, pool.unbound_let_go, pool.served) == (1, 1, 0, 0)
        bound = pool.waiting(spec)
        assert bound is not None and not bound.unbound and bound.child.alive()
        assert bound.child.proc.args[-1] == "--bind"              # started without its task
        second = evaluate(task, source, "triton", "cpu", cfg, children=pool, placement=where)
        assert pool.served == 1 and bound.child.proc.poll() is not None       # single-use, as any
        assert (pool.started, pool.bound) == (2, 2)                             # the third, bound in turn
    assert first.status is second.status is Status.OK
    assert _strip(second) == _strip(cold) == _strip(first)
    assert 0.0 <= second.latency["child_preimport_bind_wait"] < 300.0
    assert second.latency["child_preimport"] > 0.0 and "child_preimport_bind_wait" not in first.latency
    assert not list(tmp_path.iterdir())            # close() ended the third and removed its directory


def test_without_start_early_no_child_starts_before_the_end(task, source, tmp_path):
    cfg, where = EvalConfig(trial_seed=0), Placement(scratch_root=str(tmp_path))
    with ChildPool() as pool:
        pool.early(child_spec(task, "triton", "cpu", cfg, where))
        assert pool.started == 0 and pool.idle() == 0 and pool._spawner is None and not pool._early_pending


def test_an_early_child_for_other_settings_is_let_go(task, tmp_path):
    cfg, where = EvalConfig(trial_seed=0), Placement(scratch_root=str(tmp_path))
    spec = child_spec(task, "triton", "cpu", cfg, where)
    other = child_spec(task, "triton", "cpu", cfg.replace(sandbox=SandboxConfig(pids_max=256)), where)
    with ChildPool(start_early=True, plan=lambda ended: other) as pool:
        pool.early(spec)
        early = pool._take_early()
        assert early is not None and early.unbound
        pool._early["child"] = early            # as early() left it
        pool.refill_after(spec)
        assert (pool.bound, pool.unbound_let_go) == (0, 1)
        assert early.child.proc.wait(timeout=30) is not None and not early.scratch.exists()
        fresh = pool.waiting(other)
        assert fresh is not None and fresh is not early and not fresh.unbound
        assert fresh.child.proc.args[-1] != "--bind"


def test_a_bound_child_refuses_a_second_binding_and_other_settings(task, tmp_path):
    cfg, where = EvalConfig(trial_seed=0), Placement(scratch_root=str(tmp_path))
    spec = child_spec(task, "triton", "cpu", cfg, where)
    other = child_spec(task, "triton", "cpu", cfg.replace(sandbox=SandboxConfig(pids_max=256)), where)
    child = PrestartedChild(spec, bind_later=True)
    plain = PrestartedChild(spec)
    try:
        assert child.bind(other) is False and child.unbound            # another sandbox: not this child's
        assert child.bind(spec) is True and not child.unbound
        assert child.bind(spec) is False                                # once
        assert plain.bind(spec) is False                                # a child started with its task
    finally:
        child.discard()
        plain.discard()


def test_an_early_child_that_died_is_replaced(task, source, tmp_path):
    import os
    import signal
    cfg, where = EvalConfig(trial_seed=0), Placement(scratch_root=str(tmp_path))
    spec = child_spec(task, "triton", "cpu", cfg, where)
    with ChildPool(start_early=True) as pool:
        pool.early(spec)
        early = pool._take_early()
        pool._early["child"] = early
        os.killpg(early.child.proc.pid, signal.SIGKILL)
        early.child.proc.wait(timeout=30)
        pool.early(spec)                         # not usable: let go, another started
        again = pool._take_early()
        assert again is not None and again is not early and again.child.alive()
        pool._early["child"] = again
        os.killpg(again.child.proc.pid, signal.SIGKILL)
        again.child.proc.wait(timeout=30)
        pool.refill_after(spec)                  # dead at the end: let go, the next one started as before
        assert (pool.bound, pool.unbound_let_go) == (0, 1)
        waiting = pool.waiting(spec)
        assert waiting is not None and waiting.child.alive() and not waiting.unbound
        record = evaluate(task, source, "triton", "cpu", cfg, children=pool, placement=where)
        assert pool.served == 1 and record.status is Status.OK
    assert not list(tmp_path.iterdir())


def test_close_ends_a_child_started_early(task, tmp_path):
    cfg, where = EvalConfig(trial_seed=0), Placement(scratch_root=str(tmp_path))
    pool = ChildPool(start_early=True)
    pool.early(child_spec(task, "triton", "cpu", cfg, where))
    early = pool._take_early()
    pool._early["child"] = early
    pool.close()
    assert early.child.proc.wait(timeout=30) is not None
    assert not list(tmp_path.iterdir())
    pool.early(child_spec(task, "triton", "cpu", cfg, where))     # closed: nothing starts
    assert not pool._early_pending and not pool._early and not pool._spawner.is_alive()


def _runner(*args, stdin: bytes, timeout=120):
    return subprocess.run([sys.executable, "-m", "kernelgym_gap.child.runner", *args], input=stdin,
                          capture_output=True, cwd=ROOT, timeout=timeout)


def test_the_child_let_go_before_its_task_exits_cleanly():
    done = _runner("--wait", "--dsl", "triton", "--backend", "cpu", "--bind", stdin=b"")
    assert done.returncode == 0, done.stderr.decode()[-2000:]


def test_the_runner_takes_bind_or_warm_not_both():
    done = _runner("--wait", "--dsl", "triton", "--backend", "cpu", "--bind", "--warm", "x", stdin=b"")
    assert done.returncode == 2 and b"--bind" in done.stderr


def test_the_bind_line_is_read_as_a_warm_up_or_none():
    from kernelgym_gap.child.runner import read_bind
    assert read_bind('{"task": "Softmax", "cases": []}\n') == {"task": "Softmax", "cases": []}
    assert read_bind("{}\n") is None and read_bind("[1]") is None and read_bind("not json") is None


def test_the_line_before_the_job_is_bounded_and_one_line(tmp_path):
    child = SandboxedChild([sys.executable, "-S", "-c", "import time; time.sleep(30)"], tmp_path,
                           child_env(tmp_path, {}), SandboxConfig(wall_s=60.0), stdin_pipe=True)
    try:
        assert child.send_before("x" * MAX_LINE_BEFORE) is False
        assert child.send_before("two\nlines") is False
        t = time.monotonic()
        assert child.send_before("{}") is True and child.send_before("y" * 1000) is True
        assert time.monotonic() - t < 5
        assert child.begun is None                               # the deadline waits for the job's line
    finally:
        child.kill()
    child.proc.wait(timeout=30)
    assert child.send_before("{}") is False                    # gone


def test_placement_checks_the_switch():
    assert Placement().prestart_early is False
    with pytest.raises(ValueError, match="prestart_early"):
        Placement(prestart_early="yes")


@pytest.mark.gpu
@pytest.mark.timeout(600)
def test_gpu_an_early_child_makes_its_context_then_warms_the_task_it_is_given():
    """On cuda: a pool with start_early runs Softmax's optimized solution twice; the second evaluation runs in the
    child started beside the first, bound to it as the first ended with the task's library warm-up (the spec's
    `warm`, on by default), which it made after the bind line (child_preimport_library_warm) in a shared hold of
    its own; both records are ok and their E agree within 10% (two timings of one kernel, not a fidelity figure)."""
    from kernelgym_gap.api.warm import WarmChecker
    from kernelgym_gap.core.registry import default_registry
    task = default_registry().get("Softmax")
    sol = next(s for s in task.solutions if s.dsl == "triton" and s.kind == "optimized")
    source = task.solution_path(sol).read_text()
    cfg = EvalConfig(trial_seed=0)
    with WarmChecker(device="cuda") as checker, ChildPool(start_early=True) as pool:
        first = evaluate(task, source, "triton", "cuda", cfg, checker=checker, children=pool)
        assert (pool.bound, pool.unbound_let_go) == (1, 0)
        time.sleep(10)                      # the agent's turn
        second = evaluate(task, source, "triton", "cuda", cfg, checker=checker, children=pool)
        assert pool.served == 1 and pool.bound == 2
    print({k: v for k, v in second.latency.items() if "preimport" in k or "warm" in k})
    assert first.ok and second.ok, (first.status, first.message, second.status, second.message)
    assert second.latency["child_preimport_bind_wait"] >= 0.0
    assert second.latency.get("child_preimport_library_warm", 0) > 0
    assert abs(second.terms["E"] / first.terms["E"] - 1) < 0.10
