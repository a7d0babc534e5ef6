"""Pre-started children (kernelgym_gap.sandbox.prestart.ChildPool): a submission handed to a child that did its
imports before the submission arrived gets the same record as in a cold child; each child serves one
submission and is gone after it; a crash leaves the next pre-started child clean; a child that died while it
waited, or one started for another sandbox setting, is not used (a cold child runs instead); the deadline
starts at the handoff; close() ends the waiting children. Also the evaluation's one uid: the cpu backend's
compile probe runs as the main child's uid (it used to race for it and silently fail)."""
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kernelgym_gap.core.config import EvalConfig
from kernelgym_gap.core.placement import Placement
from kernelgym_gap.engine.pipeline import evaluate
from kernelgym_gap.sandbox.launch import child_spec
from kernelgym_gap.sandbox.prestart import ChildPool
from kernelgym_gap.sandbox.process import SandboxConfig, SandboxedChild, child_env
from kernelgym_gap.core.status import Status

FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture(scope="module")
def task(registry):
    return registry.get("AddReLU")


@pytest.fixture(scope="module")
def source(task):
    sol = next(s for s in task.solutions if s.dsl == "triton" and s.kind == "optimized")
    return task.solution_path(sol).read_text()


def _strip(record) -> dict:
    d = record.to_dict()
    d.pop("latency")
    d.pop("created_at")
    return d


def _ended(child) -> bool:
    return child.proc.poll() is not None


def test_a_prestarted_child_gives_the_cold_record_and_serves_once(task, source, tmp_path):
    cfg, where = EvalConfig(trial_seed=0), Placement(scratch_root=str(tmp_path))
    spec = child_spec(task, "triton", "cpu", cfg, where)
    cold = evaluate(task, source, "triton", "cpu", cfg, placement=where)
    with ChildPool() as pool:
        pool.refill(spec)
        first = pool.waiting(spec)
        assert first is not None and first.child.alive() and first.probe is not None
        warm = evaluate(task, source, "triton", "cpu", cfg, children=pool, placement=where)
        assert pool.served == 1
        assert _ended(first.child) and _ended(first.probe)          # single-use: gone after its submission
        assert not first.scratch.exists()
        second = pool.waiting(spec)                                 # the next one, started after the child
        assert second is not None and second is not first and second.child.alive()
        assert second.child.proc.pid != first.child.proc.pid and second.scratch != first.scratch
    assert _ended(second.child) and not second.scratch.exists()    # close() ends the waiting child
    assert _strip(warm) == _strip(cold) and warm.status is Status.OK
    assert "child_preimport" in warm.latency and "child_preimport" not in cold.latency
    # what child_preimport leaves out: the process's start and the package's imports before the runner began
    assert 0.0 < warm.latency["child_preimport_startup"] < 300.0
    assert "child_preimport_startup" not in cold.latency
    assert not list(tmp_path.iterdir())


def test_a_process_knows_its_age():
    from kernelgym_gap.child.runner import process_age_s
    code = "import time; time.sleep(0.3); from kernelgym_gap.child.runner import process_age_s; print(process_age_s())"
    age = float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                               timeout=120).stdout)
    assert age >= 0.3
    assert 0.0 <= process_age_s() < float(Path("/proc/uptime").read_text().split()[0])


def test_a_crash_in_a_prestarted_child_leaves_the_next_one_clean(registry, tmp_path):
    task = registry.get("LayerNorm")
    honest = task.solution_path(next(s for s in task.solutions if s.file == "triton_rowwise.py")).read_text()
    cfg, where = EvalConfig(trial_seed=0), Placement(scratch_root=str(tmp_path))
    baseline = evaluate(task, honest, "triton", "cpu", cfg, placement=where)
    with ChildPool() as pool:
        pool.refill(child_spec(task, "triton", "cpu", cfg, where))
        crash = evaluate(task, (FIXTURES / "failures" / "crash.py").read_text(), "triton", "cpu", cfg, children=pool, placement=where)
        again = evaluate(task, honest, "triton", "cpu", cfg, children=pool, placement=where)
        assert pool.served == 2
    assert crash.status is Status.CRASH and crash.reward == 0.0
    assert _strip(again) == _strip(baseline) and again.status is Status.OK


def test_a_child_that_died_while_it_waited_is_replaced_by_a_cold_one(task, source, tmp_path):
    cfg, where = EvalConfig(trial_seed=0), Placement(scratch_root=str(tmp_path))
    spec = child_spec(task, "triton", "cpu", cfg, where)
    with ChildPool() as pool:
        pool.refill(spec)
        waiting = pool.waiting(spec)
        os.killpg(waiting.child.proc.pid, signal.SIGKILL)
        waiting.child.proc.wait(timeout=30)
        record = evaluate(task, source, "triton", "cpu", cfg, children=pool, placement=where)
        assert pool.served == 0
        assert not waiting.scratch.exists()
    assert record.status is Status.OK and "child_preimport" not in record.latency


def test_a_child_started_for_other_settings_is_not_used(task, source, tmp_path):
    cfg, where = EvalConfig(trial_seed=0), Placement(scratch_root=str(tmp_path))
    other = cfg.replace(sandbox=SandboxConfig(pids_max=256))
    with ChildPool() as pool:
        pool.refill(child_spec(task, "triton", "cpu", cfg, where))
        record = evaluate(task, source, "triton", "cpu", other, children=pool, placement=where)
        assert pool.served == 0 and record.status is Status.OK
        assert pool.waiting(child_spec(task, "triton", "cpu", cfg, where)).child.alive()     # still there
        assert pool.waiting(child_spec(task, "triton", "cpu", other, where)) is not None      # and one for `other`
        assert pool.idle() == 2


def test_the_deadline_starts_at_the_handoff(tmp_path):
    """A child that waited past its wall-clock limit still gets the whole limit once its job arrives, and is
    killed at it."""
    cfg = SandboxConfig(wall_s=2.0)
    code = "import sys, time; print(sys.stdin.readline().strip(), flush=True); time.sleep(60)"
    child = SandboxedChild([sys.executable, "-S", "-c", code], tmp_path, child_env(tmp_path, {}), cfg,
                           stdin_pipe=True)
    time.sleep(3.0)
    assert child.alive()
    assert child.send_line("job-path")
    out = child.wait()
    assert out.timed_out and 1.9 <= out.wall_s < 10, out
    assert "job-path" in out.stdout_tail
    assert not child.alive()
    with pytest.raises(RuntimeError):
        child.wait()


@pytest.mark.parametrize("loads_in_s, expect_timeout", [(0.5, False), (None, True)])
def test_the_import_deadline_starts_when_the_submission_starts_loading(tmp_path, loads_in_s, expect_timeout):
    """A pre-started child can still be importing torch, or waiting for the GPU's shared lane to make its
    CUDA context, when its job arrives (20-40 s under load on the H200, 2026-12-05, where an honest
    StridedConv2d was called `timeout` at its import). The import's deadline counts from the byte the child
    writes on its import-start pipe: 2 s before it do not count against a 1 s import deadline; a submission
    that never finishes loading is still killed 1 s after it."""
    cfg = SandboxConfig(wall_s=30.0, import_s=1.0)
    finish = ("time.sleep(%r); open('import.done', 'w').close()" % loads_in_s if loads_in_s is not None
              else "time.sleep(60)")
    code = ("import os, sys, time; sys.stdin.readline(); time.sleep(2.0); "
            "os.write(int(os.environ['KGG_IMPORT_START_FD']), b's'); " + finish)
    child = SandboxedChild([sys.executable, "-S", "-c", code], tmp_path, child_env(tmp_path, {}), cfg,
                           stdin_pipe=True)
    assert child.send_line("job-path")
    out = child.wait()
    if expect_timeout:
        assert out.timed_out and out.stage_timeout == "import" and 2.9 <= out.wall_s < 10, out
    else:
        assert not out.timed_out and out.stage_timeout is None and out.returncode == 0, out


def test_a_submission_cannot_withhold_or_take_back_the_import_start(registry, tmp_path):
    """The harness signals the import's start before the submission's module runs and closes the pipe: the
    module finds neither the variable nor an open descriptor to write to, so it cannot delay its own import
    deadline (a file marker could have been deleted before the parent saw it)."""
    task = registry.get("AddReLU")
    probe = textwrap.dedent("""
        import os
        leaked = os.environ.get("KGG_IMPORT_START_FD")
        open_fds = sorted(int(f) for f in os.listdir("/proc/self/fd"))
        raise RuntimeError(f"variable={leaked!r} fds={open_fds}")
    """)
    solution = next(task.solution_path(s) for s in task.solutions if s.file == "triton_blocked.py").read_text()
    source = tmp_path / "probe.py"
    source.write_text(solution + "\n" + probe)
    record = evaluate(task, source.read_text(), "triton", "cpu", EvalConfig())
    assert "variable=None" in record.message, record.message
    fds = [int(x) for x in record.message.split("fds=[")[1].split("]")[0].split(", ") if x]
    assert fds and not [fd for fd in fds if fd >= 200], record.message      # a cpu child has no lane either


def test_send_line_to_a_dead_child_says_so(tmp_path):
    child = SandboxedChild([sys.executable, "-S", "-c", "pass"], tmp_path, child_env(tmp_path, {}),
                           SandboxConfig(wall_s=30.0), stdin_pipe=True)
    child.proc.wait(timeout=30)
    assert child.send_line("x") is False
    child.kill()


@pytest.mark.skipif(os.geteuid() != 0, reason="the unprivileged uid layer needs root")
@pytest.mark.parametrize("pooled", [False, True])
def test_the_compile_probe_has_its_own_directory_and_uid(task, source, tmp_path, pooled):
    """The probe runs beside the main child, not inside its scratch, and as another uid: the main child can
    neither swap the probe's source nor write its report. It ran and reported (no inconclusive flag)."""
    cfg, where = EvalConfig(trial_seed=0), Placement(scratch_root=str(tmp_path), keep_scratch=True)
    if pooled:
        with ChildPool() as pool:
            pool.refill(child_spec(task, "triton", "cpu", cfg, where))
            record = evaluate(task, source, "triton", "cpu", cfg, children=pool, placement=where)
            assert pool.served == 1
    else:
        record = evaluate(task, source, "triton", "cpu", cfg, placement=where)
    assert record.status is Status.OK and not record.terms["flags"], record.terms["flags"]
    [scratch] = tmp_path.glob("kgg-eval-*")
    [probe] = tmp_path.glob("kgg-probe-*")
    assert not (scratch / "probe").exists()
    assert (probe / "report.json").is_file()
    assert scratch.stat().st_uid != probe.stat().st_uid and 0 not in (scratch.stat().st_uid, probe.stat().st_uid)
    assert oct(probe.stat().st_mode & 0o777) == oct(0o700)
    subprocess.run(["rm", "-rf", str(tmp_path)], check=False)


@pytest.mark.gpu
def test_cuda_prestarted_child_matches_a_cold_one(task, source):
    """On the GPU path: the pre-started child created its CUDA context before its job; the record is the
    cold one's (status, correctness, trials), its time a real measurement, and the child single-use."""
    cfg = EvalConfig(trial_seed=0)
    spec = child_spec(task, "triton", "cuda", cfg)
    cold = evaluate(task, source, "triton", "cuda", cfg)
    with ChildPool() as pool:
        pool.refill(spec)
        first = pool.waiting(spec)
        time.sleep(5)                                   # its imports and CUDA context, before the step
        warm = evaluate(task, source, "triton", "cuda", cfg, children=pool)
        assert pool.served == 1 and _ended(first.child)
    assert warm.status is cold.status is Status.OK, warm.message
    assert warm.correct and warm.trials_checked == cold.trials_checked
    assert "child_preimport" in warm.latency and "gpu_devices" in warm.sandbox_layers
    assert all(p["kernel_ms"] > 0 for p in warm.terms["per_shape"])


def test_the_import_start_pipe_is_not_handed_to_what_the_child_starts(monkeypatch):
    """The child marks the inherited pipe non-inheritable as it starts, so a process its own pre-import runs
    (a compiler, say) holds no copy of it."""
    from kernelgym_gap.child.runner import keep_import_start_to_itself
    from kernelgym_gap.core.record import IMPORT_START_FD_ENV
    r, w = os.pipe()
    try:
        os.set_inheritable(w, True)
        monkeypatch.setenv(IMPORT_START_FD_ENV, str(w))
        keep_import_start_to_itself()
        assert not os.get_inheritable(w)
        monkeypatch.setenv(IMPORT_START_FD_ENV, "not a number")
        keep_import_start_to_itself()             # a bad value is ignored, as run._signal_import_start does
        monkeypatch.delenv(IMPORT_START_FD_ENV)
        keep_import_start_to_itself()             # and none at all
    finally:
        os.close(r)
        os.close(w)
