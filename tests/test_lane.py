"""GPU lanes (core/lane.py): the writer-preferring reader/writer lock across real processes, its descriptors
handed to a real sandboxed child, and a real evaluation's child honouring them (cpu: the lane is pretended)."""
import fcntl
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kernelgym_gap.core.config import EvalConfig, SandboxConfig
from kernelgym_gap.core.lane import ENV_FDS, ENV_WAIT, Lane, LaneTimeout, held, inherited, lane_paths
from kernelgym_gap.core.placement import Placement
from kernelgym_gap.core.status import Status

ROOT = Path(__file__).resolve().parent.parent
WAIT_S = 30.0        # how long a helper waits for a file before it gives up (a hang, not a timing)

# A holder in its own process: takes the lane in MODE, creates MARK, waits until RELEASE exists, releases.
HOLDER = """
import os, sys, time
from kernelgym_gap.core.lane import Lane, LaneTimeout
lane_dir, mode, mark, release, timeout = sys.argv[1:6]
def say(path, text):
    open(path + ".tmp", "w").write(text)
    os.replace(path + ".tmp", path)
lane = Lane.open(lane_dir, 0)
try:
    lane.acquire(mode, float(timeout) if timeout != "none" else None)
except LaneTimeout:
    say(mark, "timeout")
    sys.exit(0)
say(mark, "held")
t0 = time.monotonic()
while not os.path.exists(release) and time.monotonic() - t0 < 30:
    time.sleep(0.005)
say(mark + ".out", "out")
lane.release()
"""


def _holder(tmp_path, mode, name, timeout="none"):
    mark, release = tmp_path / name, tmp_path / (name + ".release")
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path / "lanes"), mode, str(mark), str(release),
                             timeout], env=dict(os.environ, PYTHONPATH=str(ROOT)))
    return proc, mark, release


def _wait_for(path: Path) -> str:
    t0 = time.monotonic()
    while not path.exists():
        assert time.monotonic() - t0 < WAIT_S, f"{path.name} never appeared"
        time.sleep(0.005)
    return path.read_text()


def _gate_taken(lane_dir) -> bool:
    fd = os.open(lane_paths(lane_dir, 0)[0], os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def test_shared_holders_run_together_and_exclusive_runs_alone(tmp_path):
    lanes = tmp_path / "lanes"
    a, mark_a, rel_a = _holder(tmp_path, "shared", "a")
    b, mark_b, rel_b = _holder(tmp_path, "shared", "b")
    assert _wait_for(mark_a) == "held" and _wait_for(mark_b) == "held"      # both inside at once
    w, mark_w, _ = _holder(tmp_path, "exclusive", "w", timeout="0.3")
    w.wait(WAIT_S)
    assert _wait_for(mark_w) == "timeout"                                    # readers inside: no writer
    rel_a.touch()
    rel_b.touch()
    a.wait(WAIT_S), b.wait(WAIT_S)
    with Lane.open(lanes, 0) as lane, lane.hold("exclusive", timeout_s=WAIT_S):
        r, mark_r, _ = _holder(tmp_path, "shared", "r", timeout="0.3")
        r.wait(WAIT_S)
        assert _wait_for(mark_r) == "timeout"                                # a writer inside: no reader
        w2, mark_w2, _ = _holder(tmp_path, "exclusive", "w2", timeout="0.3")
        w2.wait(WAIT_S)
        assert _wait_for(mark_w2) == "timeout"                               # nor another writer


def _writer_waiting_for_a_reader(tmp_path, lanes):
    """A reader of this process holding the lane shared, and a writer process (`_holder`) at the gate, waiting
    for it: (the reader's Lane, the writer's (process, mark, release))."""
    reader = Lane.open(lanes, 0)
    reader.acquire("shared")
    writer = _holder(tmp_path, "exclusive", "w")
    t0 = time.monotonic()
    while not _gate_taken(lanes):                 # the writer is at the gate, waiting for the reader
        assert time.monotonic() - t0 < WAIT_S
        time.sleep(0.005)
    return reader, writer


def test_a_waiting_writer_blocks_new_readers(tmp_path):
    lanes = tmp_path / "lanes"
    reader, (w, mark_w, rel_w) = _writer_waiting_for_a_reader(tmp_path, lanes)
    late, mark_late, rel_late = _holder(tmp_path, "shared", "late")
    assert not mark_w.exists()
    with pytest.raises(LaneTimeout) as e, Lane.open(lanes, 0) as other:
        other.acquire("shared", timeout_s=0.2)    # readers queue behind the waiting writer
    assert e.value.mode == "shared" and e.value.waited_s >= 0.2
    reader.release()
    assert _wait_for(mark_w) == "held"
    time.sleep(0.1)
    assert not mark_late.exists()                 # the writer is inside: the late reader still waits
    rel_w.touch()
    assert _wait_for(mark_late) == "held"
    # the late reader got in only after the writer left
    assert (mark_w.with_name("w.out")).exists()
    rel_late.touch()
    w.wait(WAIT_S), late.wait(WAIT_S)
    reader.close()


def test_the_data_shared_passes_a_writer_waiting_at_the_gate_and_keeps_it_out(tmp_path):
    """acquire_data_shared, the cover of a stopped child's hold (sandbox/held.lane_cover): never queued behind a
    writer at the gate (that writer may wait for the very hold covered), and the writer still waits."""
    lanes = tmp_path / "lanes"
    reader, (w, mark_w, rel_w) = _writer_waiting_for_a_reader(tmp_path, lanes)
    with Lane.open(lanes, 0) as cover:
        hold = cover.acquire_data_shared(timeout_s=0.5)
        assert hold.mode == "shared" and hold.wait_s < 0.5
        reader.release()
        time.sleep(0.2)
        assert not mark_w.exists()                # the cover alone keeps the writer out
        cover.release()
    assert _wait_for(mark_w) == "held"
    rel_w.touch()
    w.wait(WAIT_S)
    reader.close()


def test_the_data_shared_downgrades_its_own_exclusive_and_waits_only_for_another_writer(tmp_path):
    lanes = tmp_path / "lanes"
    with Lane.open(lanes, 0) as mine, Lane.open(lanes, 0) as other:
        mine.acquire("exclusive")
        assert mine.acquire_data_shared(timeout_s=0).wait_s < 0.1     # its own: downgraded at once
        with pytest.raises(LaneTimeout):
            other.acquire("shared", timeout_s=0.1)   # the gate is still the first holder's
        mine.release()
        other.acquire("exclusive")
        with pytest.raises(LaneTimeout) as e:
            mine.acquire_data_shared(timeout_s=0.2)  # a timing in progress: waited for, within the bound
        assert e.value.mode == "shared" and e.value.waited_s >= 0.2
        other.release()
        assert mine.acquire_data_shared(timeout_s=0.2).mode == "shared"
        mine.release()


def test_held_records_the_wait_and_is_a_no_op_without_a_lane_dir(tmp_path):
    waits = {}
    with held(None, 0, "exclusive", waits, "w"):
        pass
    assert waits == {}
    with held(str(tmp_path), 3, "shared", waits, "w"):
        assert (tmp_path / "gpu3.gate").exists() and (tmp_path / "gpu3.data").exists()
    assert waits["w"] >= 0
    with pytest.raises(ValueError):
        Lane.open(tmp_path, 0).acquire("both")


def test_inherited_takes_only_open_regular_files(tmp_path):
    assert inherited({}) == (None, None)
    assert inherited({ENV_FDS: "nonsense"}) == (None, None)
    assert inherited({ENV_FDS: "998,999"}) == (None, None)                  # not open
    r, w = os.pipe()
    try:
        assert inherited({ENV_FDS: f"{r},{w}"}) == (None, None)             # not regular files
    finally:
        os.close(r), os.close(w)
    with Lane.open(tmp_path, 0) as lane:
        got, wait = inherited({ENV_FDS: f"{lane.gate_fd},{lane.data_fd}", ENV_WAIT: "12.5"})
        assert (got.gate_fd, got.data_fd, got.owned, wait) == (lane.gate_fd, lane.data_fd, False, 12.5)


# -- a real sandboxed child ---------------------------------------------------------------------------------

CHILD = """
import os
from kernelgym_gap.core.lane import LaneTimeout, inherited
lane, wait = inherited()
if lane is None:
    print("none", os.environ.get("KGG_LANE_FDS"))
else:
    try:
        lane.acquire("exclusive", 0.3)
        print("held", wait, min(lane.gate_fd, lane.data_fd) >= 200)
    except LaneTimeout:
        print("timeout", wait)
"""


def _sandboxed(tmp_path, lane_dir, isolation):
    from kernelgym_gap.sandbox.child_io import backend_env
    from kernelgym_gap.sandbox.process import ChildSandbox, child_env, run_sandboxed
    scratch = Path(tmp_path / f"scratch{len(list(tmp_path.iterdir()))}")
    scratch.mkdir()
    config = ChildSandbox(lane_dir=str(lane_dir), wall_s=60, isolation=isolation)
    out = run_sandboxed([sys.executable, "-c", CHILD], scratch, child_env(scratch, backend_env("cpu")), config)
    assert out.returncode == 0, out.stderr_tail
    assert isolation == "auto" or isolation in out.layers or isolation == "none"
    return out.stdout_tail.split()


@pytest.mark.parametrize("isolation", ["auto", pytest.param("unshare", marks=pytest.mark.skipif(
    os.geteuid() != 0, reason="unshare isolation needs root")), "none"])
def test_the_lane_reaches_a_sandboxed_child_and_dies_with_it(tmp_path, isolation):
    lanes = tmp_path / "lanes"
    assert _sandboxed(tmp_path, lanes, isolation) == ["held", "30.0", "True"]           # wait budget: wall_s / 2
    with Lane.open(lanes, 0) as lane:
        lane.acquire("exclusive", timeout_s=0)                             # the child's hold died with it
        assert _sandboxed(tmp_path, lanes, isolation) == ["timeout", "30.0"]   # the child's fds are this lane
        lane.release()
        lane.acquire("shared", timeout_s=0)
        assert _sandboxed(tmp_path, lanes, isolation) == ["timeout", "30.0"]
        lane.release()


# -- a real evaluation --------------------------------------------------------------------------------------

def _source(registry):
    task = registry.get("AddReLU")
    return task, task.solution_path(task.solutions[0]).read_text()


@pytest.mark.slow
def test_a_real_child_holds_the_lane_for_its_trials(registry, tmp_path):
    """The evaluation's child waits for the lane after its import: held exclusive here until one second after
    the child's import was done, its shared wait is at least that long."""
    from kernelgym_gap.engine.pipeline import evaluate
    task, source = _source(registry)
    lanes, scratch = tmp_path / "lanes", tmp_path / "scratch"
    scratch.mkdir()
    config = EvalConfig(trial_seed=0)
    where = Placement(scratch_root=str(scratch), lane_dir=str(lanes))
    result = {}
    with Lane.open(lanes, 0) as lane:
        lane.acquire("exclusive")
        t = threading.Thread(target=lambda: result.update(rec=evaluate(task, source, "triton", "cpu", config,
                                                                       placement=where)))
        t.start()
        t0 = time.monotonic()
        while not list(scratch.glob("kgg-eval-*/import.done")):
            assert time.monotonic() - t0 < 120 and t.is_alive()
            time.sleep(0.01)
        time.sleep(1.0)
        lane.release()
        t.join()
    rec = result["rec"]
    assert rec.status is Status.OK, rec.message
    assert rec.latency["child_lane_wait_shared"] >= 0.9
    assert "child_lane_wait_exclusive" not in rec.latency           # cpu: no timing


@pytest.mark.slow
def test_a_child_without_a_usable_lane_still_evaluates(registry, monkeypatch, tmp_path):
    """Lanes are optional: descriptors that are not open in the child are ignored."""
    from kernelgym_gap.engine.pipeline import evaluate
    task, source = _source(registry)
    monkeypatch.setattr("kernelgym_gap.sandbox.process.child_fds",
                        lambda *a: ((), {ENV_FDS: "998,999", ENV_WAIT: "5"}))
    rec = evaluate(task, source, "triton", "cpu", EvalConfig(trial_seed=0), placement=Placement(lane_dir=str(tmp_path)))
    assert rec.status is Status.OK, rec.message
    assert not any(k.startswith("child_lane") for k in rec.latency)


def test_the_lane_dir_is_placement_not_part_of_the_config(tmp_path):
    from kernelgym_gap.core.placement import PlacementFieldError
    from kernelgym_gap.store.cache_key import settings_hash
    base = EvalConfig(trial_seed=0)
    with pytest.raises(PlacementFieldError, match="lane_dir"):
        SandboxConfig(lane_dir=str(tmp_path))           # a config written before the split: told where it went
    assert not hasattr(base.sandbox, "lane_dir")
    assert settings_hash(base) != settings_hash(base.replace(sandbox=SandboxConfig(wall_s=1)))


def test_auto_is_one_lane_directory_per_user_and_host():
    from kernelgym_gap.core.config import SandboxConfig
    from kernelgym_gap.core.lane import resolve
    assert Placement().lane_dir == "auto"
    path = resolve("auto")
    assert path == resolve("auto") and str(os.getuid()) in os.path.basename(path)
    assert resolve(None) is None and resolve("/x/y") == "/x/y"


def test_where_outputs_wait_is_placement_and_what_is_timed_is_hashed():
    from kernelgym_gap.core.placement import CPU_HELD_OUTPUT_BYTES
    from kernelgym_gap.store.cache_key import settings_hash
    base = EvalConfig(trial_seed=0)
    assert Placement(held_output_bytes=0).held_output_bytes_for("cuda") == 0
    assert Placement().held_output_bytes_for("cpu") == CPU_HELD_OUTPUT_BYTES < Placement().held_output_bytes_for("cuda")
    with pytest.raises(ValueError):
        Placement(held_output_bytes=-1)
    assert settings_hash(base) != settings_hash(base.replace(timed_shapes=2))
