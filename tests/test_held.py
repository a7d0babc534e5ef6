"""sandbox/held.py and SandboxedChild.wait(hold=True): a child stopped after its hold marker (the outputs handed
over by handle, issue 35) or overdue at a call's deadline, then killed, resumed for its files, or covered on its
lane. Scripted children (python -S) play the harness's side: report, marker, a wait for SIGUSR1."""
from __future__ import annotations

import os
import secrets
import sys
import threading
import time
import types
from pathlib import Path

import pytest

from kernelgym_gap.core.errors import ProtocolError
from kernelgym_gap.core.lane import Lane, LaneTimeout
from kernelgym_gap.core.record import CALL_MARKER, CallBound
from kernelgym_gap.core.slowness import HOLD_MARKER
from kernelgym_gap.sandbox import held as held_mod
from kernelgym_gap.sandbox import isolation as iso
from kernelgym_gap.sandbox.child_io import read_report
from kernelgym_gap.sandbox.process import ChildSandbox, SandboxConfig, SandboxedChild, child_env

pytestmark = pytest.mark.timeout(120)

ISOLATIONS = ["auto", "none"] + (["unshare"] if os.geteuid() == 0 and iso.mode_works("unshare") else [])

# the harness's side of the hold: the final report, then the marker, then a wait for SIGUSR1 (never a spin);
# on it, the held outputs written as files and an exit with the report's code
HOLDER = """
import os, signal, subprocess, sys
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
# a helper of its own session (outside the process group) that must be stopped and killed with it
subprocess.Popen(["/bin/sh", "-c", "sleep 120 # TOKEN"], start_new_session=True)
open("report.json", "w").write("{}")
open("%s", "w").close()
signal.sigwait({signal.SIGUSR1})
open("outputs/out0.bin", "w").write("files")
sys.exit(3)
""" % HOLD_MARKER


def _child(tmp_path: Path, code: str, config: SandboxConfig | None = None, name: str = "scratch") -> SandboxedChild:
    scratch = tmp_path / name
    scratch.mkdir()
    (scratch / "outputs").mkdir()
    config = config or SandboxConfig(wall_s=30.0)
    return SandboxedChild([sys.executable, "-S", "-c", code], scratch, child_env(scratch, {}), config)


def _with_token(code: str) -> tuple[str, str]:
    token = "kgg-held-" + secrets.token_hex(4)
    return code.replace("TOKEN", token), token


def _processes_with(token: str) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if token.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                    found.append(int(pid))
            except OSError:
                pass
    return found


STOPPED = ("T", "t", "D")


def _states(procs: list[int]) -> list[tuple[int, str | None, bytes]]:
    """What a failed wait shows: each process's state and the start of its command line."""
    out = []
    for p in procs:
        try:
            cmd = Path(f"/proc/{p}/cmdline").read_bytes()[:80]
        except OSError:
            cmd = b""
        out.append((p, held_mod.state(p), cmd))
    return out


def _dead(pid: int) -> bool:
    """Gone, or a zombie waiting for whichever reaper it was re-parented to: nothing of it runs."""
    return held_mod.state(pid) in (None, "Z", "X")


def _wait_for(predicate, timeout_s: float = 20.0, describe=lambda: None) -> None:
    t0 = time.monotonic()
    while not predicate():
        assert time.monotonic() - t0 < timeout_s, describe()
        time.sleep(0.02)


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_a_child_that_writes_the_marker_is_stopped_and_nothing_of_it_survives_kill(tmp_path, isolation):
    code, token = _with_token(HOLDER)
    child = _child(tmp_path, code, SandboxConfig(wall_s=30.0, isolation=isolation))
    out = child.wait(hold=True)
    assert out.held and out.returncode is None and out.signal is None and not out.timed_out, out
    assert out.wall_s < 20
    held = child.held
    assert held is not None and held.pid == child.proc.pid and held.stopped_at <= time.monotonic()
    procs = held_mod.members(child)
    _wait_for(lambda: _processes_with(token) != [])
    # every process of it stopped, the helper that left the process group too. 'D' counts: a parent in vfork
    # whose child was stopped before its exec waits there until the child goes on or dies (seen twice in ~10
    # runs under load); it runs no code of its own, and kill ends both (asserted below)
    assert procs
    _wait_for(lambda: all(held_mod.state(p) in STOPPED for p in procs), 10.0, lambda: _states(procs))
    assert all(p in procs for p in _processes_with(token))
    cgroup_dirs = list(child._cgroups.dirs.values())
    time.sleep(0.3)
    assert not (child.scratch / "outputs" / "out0.bin").exists()   # stopped: it did not go on
    held.kill()
    # a process the SIGKILL reached may still be exiting (bwrap's namespace init, seen 'R' once): never stopped
    _wait_for(lambda: all(_dead(p) for p in procs), 2.0)
    assert _processes_with(token) == []
    assert not any(d.exists() for d in cgroup_dirs) and child._cgroups.dirs == {}
    held.kill()                                                       # idempotent
    with pytest.raises(RuntimeError):
        held.resume_for_files(5)
    with pytest.raises(RuntimeError):
        child.wait(hold=True)


def test_without_hold_the_marker_changes_nothing(tmp_path):
    """hold=False is today's wait: the marker is not looked at, the child runs to its wall deadline."""
    code, token = _with_token(HOLDER)
    child = _child(tmp_path, code, SandboxConfig(wall_s=2.0))
    out = child.wait()
    assert out.timed_out and not out.held and child.held is None and 1.9 <= out.wall_s < 10, out
    assert (child.scratch / HOLD_MARKER).exists()
    assert _processes_with(token) == []


def test_resume_for_files_lets_the_child_write_its_files_and_exit(tmp_path):
    code, token = _with_token(HOLDER)
    child = _child(tmp_path, code)
    assert child.wait(hold=True).held
    out = child.held.resume_for_files(20.0)
    assert not out.held and not out.timed_out and out.returncode == 3, out
    assert (child.scratch / "outputs" / "out0.bin").read_text() == "files"
    assert _processes_with(token) == []                     # the helper of its own session died with it
    child.held.kill()                                       # a no-op once it ended
    with pytest.raises(RuntimeError):
        child.held.resume_for_files(5)


RESUMED_HOG = """
import os, signal, sys, time
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
open("%s", "w").close()
signal.sigwait({signal.SIGUSR1})
AFTER
""" % HOLD_MARKER


@pytest.mark.parametrize("after, config, expect", [
    ("time.sleep(60)", dict(wall_s=30.0), "timed_out"),
    ("sys.stdout.buffer.write(b'x' * (4 << 20)); sys.stdout.flush(); time.sleep(60)",
     dict(wall_s=30.0, kill_output_bytes=1 << 20), "output"),
    ("open('big', 'wb').write(b'x' * (8 << 20)); time.sleep(60)",
     dict(wall_s=30.0, scratch_quota_bytes=4 << 20), "scratch_quota"),
])
def test_resume_for_files_keeps_the_ordinary_waits_limits(tmp_path, after, config, expect):
    child = _child(tmp_path, RESUMED_HOG.replace("AFTER", after), SandboxConfig(**config))
    assert child.wait(hold=True).held
    t0 = time.monotonic()
    out = child.held.resume_for_files(2.0)
    assert time.monotonic() - t0 < 10 and not out.held
    if expect == "timed_out":
        assert out.timed_out and time.monotonic() - t0 >= 1.9, out
    else:
        assert expect in out.limits_hit and not out.timed_out, out


def test_the_wall_deadline_keeps_running_while_held(tmp_path):
    """A held child's resume ends at its own wall deadline, however long the caller allows."""
    child = _child(tmp_path, RESUMED_HOG.replace("AFTER", "time.sleep(60)"), SandboxConfig(wall_s=3.0))
    t0 = time.monotonic()
    assert child.wait(hold=True).held
    time.sleep(1.0)
    out = child.held.resume_for_files(60.0)
    assert out.timed_out and time.monotonic() - t0 < 6.0, out


def test_a_child_past_a_calls_bound_is_stopped_with_the_call_timeout(tmp_path):
    code, token = _with_token("""
import subprocess, time
subprocess.Popen(["/bin/sh", "-c", "sleep 120 # TOKEN"], start_new_session=True)
open("%s", "w").write("call 0 0.5\\n")
time.sleep(60)
""" % CALL_MARKER)
    child = _child(tmp_path, code)
    out = child.wait((CallBound("trial 0", 0.5),), hold=True)
    assert out.held and out.timed_out and out.stage_timeout == "call" and out.returncode is None, out
    assert out.stage_overrun is not None and out.stage_overrun[0] == 0 and "call 0" in out.stage_detail
    procs = held_mod.members(child)
    _wait_for(lambda: all(held_mod.state(p) in STOPPED for p in procs), 10.0)
    child.kill()                                            # the SandboxedChild's own kill ends a held child
    _wait_for(lambda: all(_dead(p) for p in procs), 2.0)
    assert _processes_with(token) == []
    assert child.held.ended


def test_a_call_overdue_without_hold_is_killed_as_before(tmp_path):
    code = 'import time; open("%s", "w").write("call 0 0.5\\n"); time.sleep(60)' % CALL_MARKER
    out = _child(tmp_path, code).wait((CallBound("trial 0", 0.5),))
    assert out.timed_out and out.stage_timeout == "call" and not out.held and out.returncode is not None


def test_a_child_that_exits_between_the_markers_check_and_the_stop_is_an_ordinary_ending(tmp_path, monkeypatch):
    """The race made certain: the stop is sent only once the child has exited."""
    code = 'import sys, time; open("%s", "w").close(); time.sleep(0.5); sys.exit(5)' % HOLD_MARKER
    child = _child(tmp_path, code)
    real = held_mod.stop_all

    def late_stop(c):
        c.proc.wait()
        return real(c)
    monkeypatch.setattr(held_mod, "stop_all", late_stop)
    out = child.wait(hold=True)
    assert not out.held and out.returncode == 5 and not out.timed_out and child.held is None, out


@pytest.mark.parametrize("kind", ["symlink", "directory", "no_report"])
def test_a_forged_marker_only_stops_the_child_where_it_stands(tmp_path, kind):
    """The marker is the hostile child's: a link (to anywhere), a directory, or one written with no report stop
    the child as a marker does; nothing follows the link, and the report is still read as hostile input."""
    make = {"symlink": 'os.symlink("/etc/shadow", "%s")' % HOLD_MARKER,
            "directory": 'os.mkdir("%s")' % HOLD_MARKER,
            "no_report": 'open("%s", "w").close()' % HOLD_MARKER}[kind]
    child = _child(tmp_path, "import os, time\n%s\ntime.sleep(60)" % make)
    out = child.wait(hold=True)
    try:
        assert out.held, out
        if kind == "symlink":
            assert out.removed_from_scratch >= 1 and not os.path.lexists(child.scratch / HOLD_MARKER)
        with pytest.raises(ProtocolError, match="without a report"):
            read_report(child.scratch / "report.json", out)
    finally:
        child.held.kill()


# ---- the lane --------------------------------------------------------------------------------------------

LANE_HOLDER = """
import fcntl, os, signal, time
gate, data = (int(x) for x in os.environ["KGG_LANE_FDS"].split(","))
MODE
open("%s", "w").close()
time.sleep(60)
""" % HOLD_MARKER
SHARED = ("fcntl.flock(gate, fcntl.LOCK_EX); fcntl.flock(data, fcntl.LOCK_SH); fcntl.flock(gate, fcntl.LOCK_UN)")
EXCLUSIVE = "fcntl.flock(gate, fcntl.LOCK_EX); fcntl.flock(data, fcntl.LOCK_EX)"


def _lane_child(tmp_path, lanes, mode_code, name="scratch"):
    config = ChildSandbox(lane_dir=str(lanes), wall_s=30.0)
    return _child(tmp_path, LANE_HOLDER.replace("MODE", mode_code), config, name)


def _free(lanes, mode) -> bool:
    with Lane.open(lanes, 0) as lane:
        try:
            lane.acquire(mode, timeout_s=0)
        except LaneTimeout:
            return False
        lane.release()
        return True


def test_lane_cover_keeps_the_stopped_childs_shared_hold_past_a_writer_waiting_at_the_gate(tmp_path):
    """The deadlock of 2026-12-07 (H100, the full mix with the hand-over): a timing waits at the gate for the
    stopped child's shared hold; a cover that asked for the gate waited for that timing in turn, 136 s, until
    the timing's own lane wait ran out. The cover takes the data shared on the child's own description, the
    gate untouched: at once, and the timing goes on only after the child's death."""
    lanes = tmp_path / "lanes"
    child = _lane_child(tmp_path, lanes, SHARED)
    writer_got, inside = [], []
    try:
        assert child.wait(hold=True).held
        writer = Lane.open(lanes, 0)                 # another evaluation's timing, waiting for the child

        def timing():
            try:
                writer_got.append(writer.acquire("exclusive", timeout_s=20).mode)
                writer.release()
            except LaneTimeout:
                writer_got.append("timed out")
        t = threading.Thread(target=timing)
        t.start()
        deadline = time.monotonic() + 5
        while _free(lanes, "shared") and time.monotonic() < deadline:   # until the writer holds the gate
            time.sleep(0.02)
        assert not _free(lanes, "shared") and not writer_got
        t0 = time.monotonic()
        with child.held.lane_cover(timeout_s=5) as hold:
            inside.append(time.monotonic() - t0)
            assert hold.mode == "shared" and hold.wait_s < 0.5
            time.sleep(0.3)
            assert not writer_got                    # no timing beside the stopped child
            child.held.kill()                        # the child dies inside the cover; the dups close after
        t.join(20)
        assert inside[0] < 1.0 and writer_got == ["exclusive"]
        writer.close()
        assert _free(lanes, "exclusive") and _lane_fds_here(lanes) == []
    finally:
        child.kill()


def test_lane_cover_does_not_wait_for_other_shared_holders(tmp_path):
    lanes = tmp_path / "lanes"
    child = _lane_child(tmp_path, lanes, SHARED)
    try:
        assert child.wait(hold=True).held
        with Lane.open(lanes, 0) as other:
            other.acquire("shared")
            with child.held.lane_cover(timeout_s=0.5) as hold:
                assert hold.mode == "shared"
            other.release()
    finally:
        child.held.kill()


def test_lane_cover_is_let_go_only_with_the_childs_death(tmp_path):
    """A kernel the stopped child launched may still run: no timing can start until kill(), not just the block's
    end."""
    lanes = tmp_path / "lanes"
    child = _lane_child(tmp_path, lanes, "pass")        # a child that held nothing: the cover's lock is its
    try:
        assert child.wait(hold=True).held and _free(lanes, "exclusive")
        with child.held.lane_cover(timeout_s=5) as hold:
            assert hold.mode == "shared" and not _free(lanes, "exclusive")
        assert not _free(lanes, "exclusive")         # still on the child's description
    finally:
        child.held.kill()
    assert _free(lanes, "exclusive")
    assert _lane_fds_here(lanes) == []                # no descriptor of the lane is left open here


def test_lane_cover_waits_only_for_a_timing_in_progress_and_within_its_bound(tmp_path):
    lanes = tmp_path / "lanes"
    child = _lane_child(tmp_path, lanes, "pass")
    try:
        assert child.wait(hold=True).held
        with Lane.open(lanes, 0) as timing:
            timing.acquire("exclusive")
            with pytest.raises(LaneTimeout):
                with child.held.lane_cover(timeout_s=0.3):
                    pytest.fail("covered beside a timing")
            timing.release()
        with child.held.lane_cover(timeout_s=0.3) as hold:
            assert hold.mode == "shared"
    finally:
        child.held.kill()
    assert _free(lanes, "exclusive") and _lane_fds_here(lanes) == []


def _lane_fds_here(lanes: Path) -> list[str]:
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith(str(lanes)):
                found.append(fd)
        except OSError:
            pass
    return found


def test_lane_cover_returns_at_once_when_the_child_holds_the_lane_exclusive(tmp_path):
    lanes = tmp_path / "lanes"
    child = _lane_child(tmp_path, lanes, EXCLUSIVE)
    try:
        assert child.wait(hold=True).held
        assert not _free(lanes, "shared")
        t0 = time.monotonic()
        with child.held.lane_cover(timeout_s=0.5) as hold:
            # downgraded on the child's own description, which keeps the gate: nobody else gets in
            assert hold.mode == "shared" and time.monotonic() - t0 < 0.3
            assert not _free(lanes, "shared")
    finally:
        child.held.kill()
    assert _free(lanes, "exclusive")


def test_lane_cover_without_a_lane_holds_nothing(tmp_path):
    child = _child(tmp_path, 'import time; open("%s", "w").close(); time.sleep(60)' % HOLD_MARKER)
    try:
        assert child.wait(hold=True).held
        with child.held.lane_cover() as hold:
            assert hold is None
    finally:
        child.held.kill()


def test_a_held_child_that_replaced_its_lane_descriptors_gives_none_of_them(tmp_path):
    """The child may dup2 another file over its lane's descriptor numbers: the inode check refuses it, and
    lane_cover then waits like any holder (here: nothing else holds, so it gets the lane)."""
    lanes = tmp_path / "lanes"
    code = SHARED + '; fcntl.flock(data, fcntl.LOCK_UN); f = os.open("x", os.O_CREAT | os.O_RDWR); os.dup2(f, gate)'
    child = _lane_child(tmp_path, lanes, code)
    try:
        assert child.wait(hold=True).held
        assert child.held._lane is None
        with child.held.lane_cover(timeout_s=2) as hold:
            assert hold is None
    finally:
        child.held.kill()


# ---- the launcher ----------------------------------------------------------------------------------------

def test_launcher_close_kills_a_held_child_it_handed_out(tmp_path):
    from kernelgym_gap.sandbox.launch import Launcher
    code, token = _with_token(HOLDER)
    child = _child(tmp_path, code)
    assert child.wait(hold=True).held
    procs = held_mod.members(child)
    launcher = Launcher(types.SimpleNamespace(scratch_root=str(tmp_path)))
    launcher.held = child.held
    launcher.close()
    _wait_for(lambda: all(_dead(p) for p in procs), 2.0)
    assert _processes_with(token) == []


@pytest.mark.parametrize("by_handle", [False, True])
def test_launcher_run_passes_the_jobs_hold_to_the_cold_child(tmp_path, monkeypatch, by_handle):
    from kernelgym_gap.core.record import Job
    from kernelgym_gap.sandbox import launch
    calls = []
    outcome = types.SimpleNamespace(wall_s=0.1, limits_hit=(), returncode=0, held=False)
    fake_held = types.SimpleNamespace(kill=lambda: calls.append("kill"))
    monkeypatch.setattr(launch, "cold_child", lambda *a: calls.append("cold") or outcome)
    monkeypatch.setattr(launch, "cold_child_held", lambda *a: calls.append("cold_held") or (outcome, fake_held))
    monkeypatch.setattr(launch, "call_bounds", lambda job, sandbox: ())
    monkeypatch.setattr(launch, "read_report", lambda path, out: None)
    spec = types.SimpleNamespace(scratch_root=str(tmp_path), probe_env=None, sandbox=None, env=())
    launcher = launch.Launcher(spec)
    job = Job(task_id="t", dsl="triton", backend="cuda", source_file="", outputs_dir="", report_file="r",
              trials=(), timing=None, outputs_by_handle=by_handle)
    result = launcher.run(job, "source")
    assert calls == (["cold_held"] if by_handle else ["cold"])
    assert result.held is (fake_held if by_handle else None)
    launcher.close()
    assert calls[-1] == ("kill" if by_handle else "cold")


def test_a_prestarted_child_is_held_through_the_launcher_and_killed_by_its_close(tmp_path, monkeypatch):
    """The pre-started path: PrestartedChild.run(hold=...) from Launcher.run with the job's outputs_by_handle;
    the ChildResult carries the HeldChild and Launcher.close kills it."""
    from kernelgym_gap.core.record import Job
    from kernelgym_gap.sandbox import launch
    from kernelgym_gap.sandbox.prestart import PrestartedChild
    code, token = _with_token("import sys; sys.stdin.readline()\n" + HOLDER)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (scratch / "outputs").mkdir()
    pre = PrestartedChild.__new__(PrestartedChild)
    pre.scratch, pre.probe, pre.probe_dir = scratch, None, None
    pre.child = SandboxedChild([sys.executable, "-S", "-c", code], scratch, child_env(scratch, {}),
                               SandboxConfig(wall_s=30.0), stdin_pipe=True)
    pool = types.SimpleNamespace(take=lambda spec: pre, early=lambda spec: None, refill_after=lambda spec: None)
    monkeypatch.setattr(launch, "call_bounds", lambda job, sandbox: ())
    monkeypatch.setattr(launch, "read_report", lambda path, out: None)
    spec = types.SimpleNamespace(scratch_root=str(tmp_path), probe_env=None, sandbox=None, env=())
    launcher = launch.Launcher(spec, pool)
    job = Job(task_id="t", dsl="triton", backend="cuda", source_file="", outputs_dir="",
              report_file=str(scratch / "report.json"), trials=(), timing=None, outputs_by_handle=True)
    result = launcher.run(job, "source")
    assert result.outcome.held and result.held is pre.child.held and result.held is not None
    procs = held_mod.members(pre.child)
    _wait_for(lambda: all(held_mod.state(p) in STOPPED for p in procs), 10.0)
    launcher.close()
    _wait_for(lambda: all(_dead(p) for p in procs), 2.0)
    assert _processes_with(token) == [] and result.held.ended


HARNESS_HOLD = """
import sys
from pathlib import Path
from kernelgym_gap.child.hold import hold_outputs

def fallback():
    Path("outputs/out0.bin").write_text("files")
    return 3

open("report.json", "w").write("{}")
sys.exit(hold_outputs(Path("."), fallback))
"""


@pytest.mark.parametrize("ending", ["kill", "resume"])
def test_the_harness_hold_and_the_parents_wait_fit_together(tmp_path, ending):
    """The child's real hold (child/hold.py: the marker, then a wait for SIGUSR1 on a wakeup pipe) under the
    sandbox: held on its marker; killed, or resumed into its fallback (files written, its exit code)."""
    from kernelgym_gap.sandbox.child_io import backend_env
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (scratch / "outputs").mkdir()
    child = SandboxedChild([sys.executable, "-c", HARNESS_HOLD], scratch, child_env(scratch, backend_env("cpu")),
                           SandboxConfig(wall_s=60.0))
    out = child.wait(hold=True)
    assert out.held, (out.returncode, out.stderr_tail[-2000:])
    if ending == "kill":
        procs = held_mod.members(child)
        child.held.kill()
        _wait_for(lambda: all(_dead(p) for p in procs), 2.0)
        assert not (scratch / "outputs" / "out0.bin").exists()
    else:
        out = child.held.resume_for_files(30.0)
        assert out.returncode == 3 and not out.timed_out, (out, out.stderr_tail[-2000:])
        assert (scratch / "outputs" / "out0.bin").read_text() == "files"
        assert not (scratch / HOLD_MARKER).exists()          # the harness removed it: nothing is held any more


def test_a_kill_while_the_cover_waits_leaves_it_on_descriptions_of_its_own(tmp_path):
    """kill() from another thread while lane_cover waits for a timing in progress: the cover goes on with its own
    dups (no closed or reused numbers), gets the lane once the timing lets go, and nothing stays locked after it."""
    lanes = tmp_path / "lanes"
    child = _lane_child(tmp_path, lanes, "pass")
    assert child.wait(hold=True).held
    other = Lane.open(lanes, 0)
    other.acquire("exclusive")
    got, errors = [], []

    def cover():
        try:
            with child.held.lane_cover(timeout_s=20) as hold:
                got.append(hold)
        except Exception as e:  # noqa: BLE001 - reported by the assertion below
            errors.append(e)
    t = threading.Thread(target=cover)
    t.start()
    time.sleep(0.3)
    child.held.kill()
    assert child.held.ended and not got
    other.release()
    other.close()
    t.join(20)
    assert errors == [] and got and got[0].mode == "shared"
    assert _free(lanes, "exclusive") and _lane_fds_here(lanes) == []
