"""Disk reservations across evaluations sharing one scratch root (sandbox/disk_ledger.py): two big jobs that
each saw enough free space used to both write, and one died of ENOSPC mid-write (an honest kernel's false
zero). Free space is injected (no disk is filled); the ledger, its lock and the directories are real."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from kernelgym_gap.core.placement import Placement
from kernelgym_gap.core.status import Status
from kernelgym_gap.sandbox import disk, disk_ledger, launch, output_sizes

GiB = 1 << 30
FAST = (0.01, 0.05)                       # poll quickly: the tests wait fractions of a second


def _configured(quota: int) -> disk.JobDisk:
    return disk.JobDisk(quota=quota, fsize=1 << 20)


def _derived(total: int, quota: int) -> disk.JobDisk:
    return disk.JobDisk(quota=quota, fsize=1 << 20, need=output_sizes.OutputNeed(total=total, largest=total,
                                                                                 count=1, source="fake"))


def _ledger(root) -> list[dict]:
    path = disk_ledger.ledger_paths(str(root))[1]
    if not os.path.exists(path):
        return []
    return json.loads(Path(path).read_text())["entries"]


def _reserve(root, limits, free_bytes, wait_s=5.0, with_probe=False):
    return disk_ledger.reserve(str(root), limits, with_probe=with_probe, wait_s=wait_s,
                               free=lambda r: free_bytes, poll_s=FAST)


def test_a_second_reservation_that_does_not_fit_waits_for_the_first(tmp_path):
    first = _reserve(tmp_path, _configured(6 * GiB), 10 * GiB)
    assert first.bytes == 6 * GiB and [e["pid"] for e in _ledger(tmp_path)] == [os.getpid()]
    got: dict = {}

    def second():
        got["r"] = _reserve(tmp_path, _configured(6 * GiB), 10 * GiB)

    t = threading.Thread(target=second)
    t.start()
    time.sleep(0.4)
    assert t.is_alive() and "r" not in got            # 6 + 6 > 10: it waits
    first.release()
    t.join(5)
    assert not t.is_alive() and got["r"].bytes == 6 * GiB and got["r"].waited_s >= 0.3
    assert len(_ledger(tmp_path)) == 1
    got["r"].release()
    first.release()                                   # idempotent
    assert _ledger(tmp_path) == []
    assert not list(tmp_path.glob("kgg-disk-*"))       # the last release leaves the scratch root as it was


def test_what_a_reservations_directory_already_holds_is_not_counted_twice(tmp_path):
    """The free space already lacks what the first job wrote: only the rest of its reservation is pending."""
    d = tmp_path / "kgg-eval-a"
    d.mkdir()
    (d / "out.tensor").write_bytes(os.urandom(3 << 20))
    first = _reserve(tmp_path, _configured(4 << 20), 6 << 20)
    first.attach(d)
    assert _ledger(tmp_path)[0]["dirs"] == [str(d)]
    # 4 MiB more fits in 6 MiB free beside 1 MiB still to come; before the attach it would wait (4 + 4 > 6)
    second = _reserve(tmp_path, _configured(4 << 20), 6 << 20, wait_s=0)
    assert second.waited_s < 1.0
    second.release()
    first.release()


def test_the_wait_is_bounded_and_names_the_holder(tmp_path):
    holder = _reserve(tmp_path, _configured(6 * GiB), 10 * GiB)
    holder.attach(tmp_path / "kgg-eval-holder")
    t0 = time.monotonic()
    with pytest.raises(disk.ScratchSpaceError) as caught:
        _reserve(tmp_path, _configured(6 * GiB), 10 * GiB, wait_s=0.3)
    assert 0.3 <= time.monotonic() - t0 < 3
    text = str(caught.value)
    assert "waited 0." in text and "disk_wait_s = 0.3" in text
    assert f"pid {os.getpid()}" in text and "6.00 GiB" in text and "kgg-eval-holder" in text
    holder.release()
    assert _ledger(tmp_path) == []


def test_a_job_that_cannot_fit_even_alone_raises_at_once(tmp_path):
    t0 = time.monotonic()
    with pytest.raises(disk.ScratchSpaceError, match="has 20.00 GiB free; this job's honest outputs need 23"):
        _reserve(tmp_path, _derived(23 * GiB, 28 * GiB), 20 * GiB, wait_s=60)
    assert time.monotonic() - t0 < 5 and _ledger(tmp_path) == []
    # its honest outputs fit but not its whole quota: it reserves what there is (it runs once alone)
    r = _reserve(tmp_path, _derived(23 * GiB, 28 * GiB), 24 * GiB, wait_s=0)
    assert r.bytes == 24 * GiB
    r.release()


def test_what_a_job_reserves_is_the_most_its_sandbox_lets_it_write():
    assert disk_ledger.reserve_bytes(_configured(6 * GiB), with_probe=False) == 6 * GiB
    child, probe = disk.split(6 * GiB)
    assert disk_ledger.reserve_bytes(_configured(child), with_probe=True) == 6 * GiB == child + 2 * probe
    assert disk_ledger.reserve_bytes(_derived(5 * GiB, 7 * GiB), with_probe=False) == 7 * GiB
    no_quota = disk.JobDisk(quota=None, fsize=1, need=output_sizes.OutputNeed(100, 100, 1, "fake"))
    assert disk_ledger.reserve_bytes(no_quota, with_probe=False) == 100 + disk.HEADER_BYTES
    assert disk_ledger.reserve(None, disk.JobDisk(quota=None, fsize=1), with_probe=False, wait_s=0).entry is None


def test_dead_and_recycled_pids_entries_are_dropped(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    live = _reserve(tmp_path, _configured(1 << 20), 10 * GiB)
    entries = _ledger(tmp_path)
    stale = [dict(entries[0], pid=gone.pid, token="dead"),                       # exited
             dict(entries[0], start="1", token="recycled")]                      # our pid, another start time
    path = disk_ledger.ledger_paths(str(tmp_path))[1]
    Path(path).write_text(json.dumps({"version": 1, "entries": entries + [dict(e, bytes=9 * GiB) for e in stale]}))
    # 9 GiB each would leave no room: they are not trusted, so 8 GiB fits at once
    r = _reserve(tmp_path, _configured(8 * GiB), 10 * GiB, wait_s=0)
    assert sorted(e["token"] for e in _ledger(tmp_path)) == sorted([entries[0]["token"], r.entry["token"]])
    r.release()
    live.release()


def test_a_killed_process_reservation_stops_counting(tmp_path):
    """Two processes: one reserves and is killed (SIGKILL, no release); the other, waiting for it, goes on."""
    code = textwrap.dedent(f"""
        import sys
        from kernelgym_gap.sandbox import disk, disk_ledger
        r = disk_ledger.reserve({str(tmp_path)!r}, disk.JobDisk(quota=6 << 30, fsize=1), with_probe=False,
                                wait_s=0, free=lambda root: 10 << 30)
        print("held", flush=True)
        sys.stdin.read()
    """)
    other = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             cwd=Path(__file__).resolve().parents[1])
    try:
        assert other.stdout.readline().strip() == b"held"
        assert [e["pid"] for e in _ledger(tmp_path)] == [other.pid]
        got: dict = {}
        t = threading.Thread(target=lambda: got.setdefault("r", _reserve(tmp_path, _configured(6 * GiB), 10 * GiB)))
        t.start()
        time.sleep(0.3)
        assert t.is_alive()
        other.send_signal(signal.SIGKILL)
        other.wait(10)
        t.join(10)
        assert not t.is_alive() and got["r"].entry["pid"] == os.getpid()
        got["r"].release()
    finally:
        if other.poll() is None:
            other.kill()
            other.wait()
    assert _ledger(tmp_path) == []


def test_an_unreadable_ledger_is_moved_aside_not_fatal(tmp_path, caplog):
    path = disk_ledger.ledger_paths(str(tmp_path))[1]
    Path(path).write_text("{not json")
    with caplog.at_level("WARNING"):
        r = _reserve(tmp_path, _configured(1 << 20), 10 * GiB, wait_s=0)
    r.release()
    assert "could not be read" in caplog.text
    aside = list(tmp_path.glob("kgg-disk-*.ledger.bad-*"))
    assert len(aside) == 1 and aside[0].read_text() == "{not json"


def test_the_wait_bound_is_placement_and_validated():
    assert Placement().disk_wait_s == 900.0
    for bad in (-1, True, "5", float("nan")):
        with pytest.raises(ValueError):
            Placement(disk_wait_s=bad)
    with pytest.raises(ValueError):
        disk_ledger.reserve(None, _configured(1), with_probe=False, wait_s=-1)


# ------------------------------------------------------------------- through an evaluation, on the cpu

def test_an_evaluation_reserves_its_disk_and_leaves_the_ledger_empty(registry, tmp_path, monkeypatch):
    from test_disk_limits import _NoProbe, _tiny

    from kernelgym_gap.engine.pipeline import evaluate
    monkeypatch.setattr(launch, "CompileProbe", _NoProbe)
    task = registry.get("LayerNorm")
    honest = next(s for s in task.solutions if s.dsl == "triton" and s.kind == "optimized")
    seen = []
    real_run = launch.Launcher.run

    def run(self, job, source):
        seen.append(_ledger(tmp_path))          # while the child runs: this evaluation's entry, its scratch
        return real_run(self, job, source)

    monkeypatch.setattr(launch.Launcher, "run", run)
    where = Placement(scratch_root=str(tmp_path))
    record = evaluate(task, task.solution_path(honest).read_text(), "triton", "cpu", _tiny(), placement=where)
    assert record.status is Status.OK, (record.status, record.message)
    (entry,), = seen
    assert entry["pid"] == os.getpid() and entry["bytes"] > 0 and "kgg-eval-" in entry["dirs"][0]
    assert _ledger(tmp_path) == []

    # every path gives it back: here the launch is interrupted (KeyboardInterrupt) once the child's turn came
    def interrupted(self, job, source):
        raise KeyboardInterrupt

    monkeypatch.setattr(launch.Launcher, "run", interrupted)
    with pytest.raises(KeyboardInterrupt):
        evaluate(task, task.solution_path(honest).read_text(), "triton", "cpu", _tiny(), placement=where)
    assert _ledger(tmp_path) == [] and not list(tmp_path.glob("kgg-eval-*"))


def test_an_evaluation_waits_for_the_disk_another_holds_then_raises(registry, tmp_path, monkeypatch):
    from test_disk_limits import _tiny

    from kernelgym_gap.engine.pipeline import evaluate
    task = registry.get("LayerNorm")
    honest = next(s for s in task.solutions if s.dsl == "triton" and s.kind == "optimized")
    # the tiny job reserves about 1.6 MB (its derived quota and the probes' shares); 3 MiB of 4 MiB are held
    monkeypatch.setattr(disk.shutil, "disk_usage", lambda p: type("U", (), {"free": 4 << 20})())
    holder = _reserve(tmp_path, _configured(3 << 20), 4 << 20)
    with pytest.raises(disk.ScratchSpaceError, match=f"waited 0.*pid {os.getpid()}"):
        evaluate(task, task.solution_path(honest).read_text(), "triton", "cpu", _tiny(),
                 placement=Placement(scratch_root=str(tmp_path), disk_wait_s=0.2))
    assert not list(tmp_path.glob("kgg-eval-*"))
    holder.release()
    assert _ledger(tmp_path) == []


# ------------------------------------------------------------------- on a GPU (the H100's 64 GiB disk)

@pytest.mark.gpu
def test_gpu_two_big_jobs_at_once_both_pass_and_leave_the_ledger_empty(tmp_path):
    """Two CrossEntropyBackward cuda jobs (14.6 GiB of honest outputs each, an 18.1 GiB derived quota) on two
    slots of one GPU, one scratch root: before the ledger, on a disk that holds one but not both, the second
    died of ENOSPC mid-write (a false zero). Both must come back with the verdict a lone evaluation gives;
    where the free space cannot hold both reservations, one of them waited for the other."""
    from kernelgym_gap.api.service import EvalRequest, EvalService
    from kernelgym_gap.core.config import EvalConfig
    from kernelgym_gap.core.registry import default_registry
    from kernelgym_gap.engine.trials import output_cases

    task = default_registry().get("CrossEntropyBackward")
    honest = next(s for s in task.solutions if s.dsl == "triton" and s.kind == "optimized")
    config = EvalConfig(trial_seed=0)
    limits = disk.job_limits(config.sandbox, task, output_cases(task, "cuda", config), with_probe=False)
    want = disk_ledger.reserve_bytes(limits, with_probe=False)
    free = disk.shutil.disk_usage(tmp_path).free
    if free < limits.honest_bytes():
        pytest.skip(f"{free / GiB:.1f} GiB free at {tmp_path}: not even one job fits")
    where = Placement(scratch_root=str(tmp_path))
    source = task.solution_path(honest).read_text()
    with EvalService("cuda", config, gpus=[0], per_gpu=2, placement=where) as svc:
        recs = svc.map([EvalRequest(task.id, source, backend="cuda") for _ in range(2)])
    assert [r.status for r in recs] == [Status.OK, Status.OK], [(r.status, r.message[:300]) for r in recs]
    waits = sorted(r.latency["disk_wait"] for r in recs)
    if free < 2 * want:
        assert waits[1] > 1.0, waits          # the second waited for the first's scratch to be gone
    assert _ledger(tmp_path) == [] and not list(tmp_path.glob("kgg-eval-*"))
