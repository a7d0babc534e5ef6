"""The hostile suite: real submission files under tests/fixtures/hostile/, each with its expected outcome on
its first line (`# expect: kind[|kind...]`), evaluated end to end on the cpu backend (the LayerNorm task,
with a small workload). Each ends in a failure record within its deadline, the harness survives, and —
for the attacks on the machine — the next honest evaluation scores exactly as before.

Placeholders in the fixtures: __PORT__ (a listener this test opens on 127.0.0.1), __MARKER_DIR__ (a folder
of this test's, outside every scratch directory), __PROJECT__ (this checkout), __CANARY_NAME__ (the prefix
of the canary secret).

The fixtures named gpu_* and those in GPU_FIXTURES also run on the cuda backend (`-m gpu`, on the H200:
scripts/gpu_check.py --sections hostile). The ipc_* fixtures, the IPC hand-over's twins, run only there, with
hand_over_outputs on (tests/test_handover_hostile.py).
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import socket
import time
from pathlib import Path

import pytest

from kernelgym_gap.sandbox import child_io as child

from kernelgym_gap.sandbox import launch
from kernelgym_gap.sandbox import isolation as iso
from kernelgym_gap.sandbox import process as sb
from kernelgym_gap.core.config import EvalConfig
from kernelgym_gap.core.placement import Placement
from kernelgym_gap.engine.pipeline import evaluate
from kernelgym_gap.core.record import TimingConfig
from kernelgym_gap.sandbox.process import SandboxConfig
from kernelgym_gap.core.task import Workload

HOSTILE = Path(__file__).resolve().parent / "fixtures" / "hostile"
ROOT = Path(__file__).resolve().parent.parent
CANARY = "KGG_CANARY_" + secrets.token_hex(12)
# kept alive in this process's memory for the whole session: a child that could read it would find it
_CANARY_IN_MEMORY = (CANARY + "_memory").encode()

pytestmark = pytest.mark.timeout(240)


def expected(name: str) -> set[str]:
    first = (HOSTILE / name).read_text().splitlines()[0]
    assert first.startswith("# expect:"), name
    return set(first.split(":", 1)[1].strip().split("|"))


class _NoProbe:
    """Stands in for the cpu backend's sm_90 compile probe (a second child per evaluation) where a test
    is about the main child: half the CPU per evaluation on a 2-core machine."""

    def __init__(self, job, directory, source, sandbox, env, pre=None):
        if pre is not None:
            pre.kill()
        self.wall_s = 0.0
        self.inconclusive = None

    def start(self):
        pass

    def compile_error(self):
        return None

    def cover(self, launched, scratch_root):
        return None

    def over_disk_quota(self):          # the launcher asks since issue 32's per-evaluation quota
        return False

    specs_wall_s = None


@pytest.fixture(scope="module")
def task(registry):
    t = registry.get("kernelgym_gap/LayerNorm-v1")
    return dataclasses.replace(t, workloads={
        **t.workloads,
        "cpu": Workload(public=((16, 128), (5, 200)), heldout=((7, 96),), dtypes=("float32",)),
        "cuda": Workload(public=((256, 1024),), heldout=((100, 1000),), dtypes=("float32",)),
    })


# cuda: shorter timing than the default (the verdicts, not the figures, are under test here)
FAST_TIMING = TimingConfig(warmup_ms=10.0, min_reps=10, max_reps=100, budget_ms=300.0)


def config(wall_s: float = 60.0, **sandbox) -> EvalConfig:
    limits = dict(pids_max=64, memory_bytes=1 << 30, fsize_bytes=64 << 20)
    limits.update(sandbox)
    return EvalConfig(trial_seed=20261202, sandbox=SandboxConfig(wall_s=wall_s, **limits), timing=FAST_TIMING)


@pytest.fixture
def no_probe(monkeypatch):
    monkeypatch.setattr(launch, "CompileProbe", _NoProbe)


@pytest.fixture
def outcomes(monkeypatch):
    """Every ChildOutcome of the evaluations in the test (the child's stdout/stderr tails)."""
    seen = []
    real = child.run_sandboxed

    def spy(*args, **kwargs):
        out = real(*args, **kwargs)
        seen.append(out)
        return out

    monkeypatch.setattr(child, "run_sandboxed", spy)
    return seen


@pytest.fixture(scope="module")
def listener():
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.settimeout(0.2)
    yield srv
    srv.close()


@pytest.fixture(scope="module")
def honest_source(task) -> str:
    return (task.directory / "solutions" / "triton_rowwise.py").read_text()


def _summary(record) -> dict:
    return {"status": record.status, "reward": record.reward, "correct": record.correct,
            "trials_checked": record.trials_checked, "terms": record.terms, "message": record.message}


@pytest.fixture(scope="module")
def honest_baseline(task, honest_source):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(launch, "CompileProbe", _NoProbe)
        record = evaluate(task, honest_source, "triton", "cpu", config())
    assert record.ok, record.message
    return _summary(record)


def source_of(name: str, port: int, marker_dir: Path) -> str:
    return ((HOSTILE / name).read_text().replace("__PORT__", str(port))
            .replace("__MARKER_DIR__", str(marker_dir)).replace("__PROJECT__", str(ROOT))
            .replace("__CANARY_NAME__", "KGG_CANARY_"))


def _accepted(srv) -> list[bytes]:
    got = []
    for _ in range(5):
        try:
            conn, _ = srv.accept()
        except (socket.timeout, BlockingIOError):
            break
        conn.settimeout(0.5)
        try:
            got.append(conn.recv(100))
        except OSError:
            got.append(b"")
        conn.close()
    return got


# ------------------------------------------------------------------------------ attacks on the machine

# name -> (wall-clock deadline, sandbox settings)
MACHINE_ATTACKS = {
    "net_connect.py": (60, {}),
    "write_outside.py": (60, {}),
    "fork_bomb.py": (10, {}),
    "memory_hog.py": (60, {}),
    "busy_loop.py": (6, {}),
    "import_busy_loop.py": (120, {"import_s": 6}),    # the import's stage deadline, well before wall_s
    "call_hang_after_first.py": (120, {"call_unknown_s": 6}),   # a later call's stage deadline (test_deadlines.py)
    "call_marker_forge.py": (120, {"call_unknown_s": 6}),       # the same, its marker forged
    "sleep_forever.py": (6, {}),
    "read_secrets.py": (60, {}),
    "kill_parent.py": (60, {}),
    "daemon.py": (60, {}),
    "big_stdout.py": (60, {}),
    "big_file.py": (60, {}),
    "segfault.py": (60, {}),
    "oob_store.py": (60, {}),
}


# where write_outside.py tries to leave a marker on the host
HOST_MARKERS = (ROOT / "kgg_hostile_marker.txt", ROOT / "kgg_hostile_marker_raw.txt",
                Path("/tmp/kgg_hostile_marker.txt"), Path("/tmp/kgg_hostile_marker_raw.txt"),
                Path("/var/tmp/kgg_hostile_marker_raw.txt"), Path("/dev/shm/kgg_hostile_marker_raw.txt"),
                Path("/root/kgg_hostile_marker.txt"), Path("/root/kgg_hostile_marker_raw.txt"))


def _attack(name, task, honest_source, honest_baseline, listener, tmp_path, monkeypatch, outcomes,
            backend="cpu", **overrides):
    wall_s, sandbox = MACHINE_ATTACKS[name]
    if backend == "cuda":
        wall_s = max(wall_s, 30)      # CUDA's own start-up (context, ptxas) comes first
    marker_dir = tmp_path / "markers"
    marker_dir.mkdir()
    scratch_root = tmp_path / "scratch"
    scratch_root.mkdir()
    # pytest's temporary directories are 0700: where the sandbox cannot hide /tmp behind a tmpfs (the
    # unshare layer on the H200 binds back only what the child needs), the unprivileged uid must still be
    # able to traverse down to its scratch directory. Traverse-only (o+x), no listing.
    for d in [scratch_root, *scratch_root.parents]:
        if d == Path("/tmp") or d == d.parent:
            break
        d.chmod(d.stat().st_mode | 0o011)
    for p in HOST_MARKERS:        # one left by an earlier run that got through (H200, 2026-12-03) is not this one's
        with contextlib.suppress(OSError):
            p.unlink()
    monkeypatch.setenv(CANARY, "the parent's secret")
    monkeypatch.setenv("KGG_SECRET_TOKEN", CANARY + "_token")
    cfg = config(wall_s, **{**sandbox, **overrides})
    where = Placement(scratch_root=str(scratch_root), keep_scratch=True)

    start = time.monotonic()
    record = evaluate(task, source_of(name, listener.getsockname()[1], marker_dir), "triton", backend, cfg,
                      placement=where)
    elapsed = time.monotonic() - start

    if name == "memory_hog.py" and backend == "cuda" and "cgroup_memory" not in record.sandbox_layers:
        pytest.skip("no memory cgroup on this machine: the GPU path (no RLIMIT_AS) has no memory limit here")
    assert record.status.value in expected(name), (record.status, record.message)
    # too_slow (issue 38: correct first calls, then killed) is ranked above a wrong kernel, never verified
    assert (record.reward == 0.0 or record.status.value == "too_slow") and record.correct is not True
    assert elapsed < wall_s + 20, f"{name} took {elapsed:.1f} s (deadline {wall_s} s)"
    isolation = overrides.get("isolation", "auto")
    if isolation != "auto":
        assert isolation in record.sandbox_layers, record.sandbox_layers
    elif iso.mode_works("bwrap"):
        assert "bwrap" in record.sandbox_layers, record.sandbox_layers
    else:
        # the unshare fallback wherever it starts (as root, without bwrap); where it does not (the H200 on
        # 2026-12-03: scripts/gpu_check.py --sections isolation says why), the layers below carry the attack
        assert ("unshare" in record.sandbox_layers) == (iso.mode_works("unshare") or iso.mode_works("unshare+uid")), \
            record.sandbox_layers
    if os.geteuid() == 0:
        assert "unprivileged_uid" in record.sandbox_layers, record.sandbox_layers

    if name == "daemon.py":
        time.sleep(4)     # the daemon would write its markers 3 s after it started
        assert not list(scratch_root.rglob("daemon_marker.txt"))
    if name == "import_busy_loop.py":
        assert "stage deadline" in record.message and elapsed < 6 + 30, (elapsed, record.message)
    if name.startswith("call_"):
        assert "ran past 6.0 s, its stage deadline" in record.message and elapsed < 6 + 30, (elapsed, record.message)
    if name == "fork_bomb.py" and "cgroup_pids" in record.sandbox_layers:
        assert "pids limit refused" in record.message
    assert not any(marker_dir.iterdir()), list(marker_dir.iterdir())
    for p in HOST_MARKERS:
        assert not p.exists(), p
    assert _accepted(listener) == [], "the sandboxed child reached a listener on the host's loopback"
    text = record.to_json() + "".join(o.stdout_tail + o.stderr_tail for o in outcomes)
    assert CANARY not in text

    # the harness survived, and the next honest evaluation scores exactly as before
    again = evaluate(task, honest_source, "triton", "cpu", config())
    assert _summary(again) == honest_baseline
    if backend == "cuda":
        # and on the GPU (times vary from run to run: the verdict, not the figures)
        on_gpu = evaluate(task, honest_source, "triton", "cuda", config(300))
        assert on_gpu.ok and on_gpu.correct is True and on_gpu.reward > 0, on_gpu.message
    return record


@pytest.mark.parametrize("name", sorted(MACHINE_ATTACKS))
def test_machine_attack(name, task, honest_source, honest_baseline, listener, tmp_path, monkeypatch,
                        no_probe, outcomes):
    _attack(name, task, honest_source, honest_baseline, listener, tmp_path, monkeypatch, outcomes)


# The H200 has no bubblewrap: there the sandbox falls back to util-linux unshare. The attacks on the
# file system, the network, the harness's processes and its secrets, once more through that layer.
UNSHARE_ATTACKS = ["daemon.py", "kill_parent.py", "net_connect.py", "read_secrets.py", "write_outside.py"]


@pytest.mark.skipif(os.geteuid() != 0 or not iso.mode_works("unshare"), reason="the unshare layer needs root")
@pytest.mark.parametrize("name", UNSHARE_ATTACKS)
def test_machine_attack_through_unshare(name, task, honest_source, honest_baseline, listener, tmp_path,
                                        monkeypatch, no_probe, outcomes):
    _attack(name, task, honest_source, honest_baseline, listener, tmp_path, monkeypatch, outcomes,
            isolation="unshare")


# --------------------------------------------------------------------------------------- reward hacks

# attacks on the trusted side's own surfaces, each run by the test of what it attacks: the terminal
# (test_cli.py: ansi_message) and the evaluation's disk quota over the compile probe, which the stand-in
# probe here does not run (test_sandbox.py: probe_disk_hog)
OTHER_SURFACES = {"ansi_message.py", "probe_disk_hog.py"}
REWARD_HACKS = sorted(p.name for p in HOSTILE.glob("*.py")
                      if p.name not in MACHINE_ATTACKS and p.name not in OTHER_SURFACES
                      and not p.name.startswith(("gpu_", "ipc_"))   # ipc_*: the hand-over's GPU twins
                      and p.name != "try_except_fallback.py" and not p.name.startswith(("known_hole_",
                                                                                         "probe_evasion")))
PROBE_EVASIONS = sorted(p.name for p in HOSTILE.glob("probe_evasion*.py"))


@pytest.mark.parametrize("name", REWARD_HACKS)
def test_reward_hack(name, task, no_probe):
    record = evaluate(task, source_of(name, 9, Path("/nonexistent")), "triton", "cpu", config())
    assert record.status.value in expected(name), (record.status, record.message)
    assert record.reward == 0.0 and record.correct is False


def test_try_except_fallback_with_the_real_probe(task):
    """With the compile probe (a second child) on: the failing kernel is seen even though the submission
    caught its error."""
    name = "try_except_fallback.py"
    record = evaluate(task, source_of(name, 9, Path("/nonexistent")), "triton", "cpu", config())
    assert record.status.value in expected(name), (record.status, record.message)
    assert record.reward == 0.0


def test_library_compute_names_the_op(task, no_probe):
    record = evaluate(task, source_of("decoy_launched_torch.py", 9, Path("/x")), "triton", "cpu", config())
    assert record.status.value == "library_compute"
    assert "native_layer_norm" in record.message


@pytest.mark.xfail(strict=True, reason="known hole: a submission that edits the harness's in-process state "
                   "and restores it before returning is not caught (docs/security.md)")
def test_known_hole_harness_aware_submission(task, no_probe):
    name = "known_hole_watch_restored.py"
    record = evaluate(task, source_of(name, 9, Path("/nonexistent")), "triton", "cpu", config())
    assert record.status.value in expected(name) and record.reward == 0.0, (record.status, record.message)


def test_honest_after_reward_hacks(task, honest_source, honest_baseline, no_probe):
    again = evaluate(task, honest_source, "triton", "cpu", config())
    assert _summary(again) == honest_baseline


def test_timing_calls_are_watched_for_library_compute():
    """The timing phase (cuda only) runs the entry point under the op recorders on the first call of each
    shape and on a random share of the rest: a submission that turns to torch once the calls pile up is
    seen. (In this process, without the child's audit hook: the recorders only.)"""
    import random

    import torch
    from kernelgym_gap.child import integrity as integ
    from kernelgym_gap.child.timing_watch import timing_entry

    calls = []

    def switches_to_torch(x):
        calls.append(1)
        if len(calls) <= 3:
            return x.clone()
        return torch.nn.functional.layer_norm(x, (x.shape[-1],))

    watched, recorded = timing_entry(switches_to_torch, integ, fraction=0.1, rng=random.Random(5))
    x = torch.randn(4, 8)
    for _ in range(200):
        watched(x)
    assert any("native_layer_norm" in k for k in recorded.ops), recorded.ops
    assert not integ.WATCH.active

    # the first call of every new shape is always watched, even with no random share
    watched, recorded = timing_entry(lambda x: torch.sigmoid(x), integ, fraction=0.0)
    watched(torch.randn(3, 3))
    assert any("sigmoid" in k for k in recorded.ops), recorded.ops
    # an honest call (allocation and copies only) records nothing
    watched, recorded = timing_entry(lambda x: torch.empty_like(x).copy_(x), integ, fraction=1.0)
    for _ in range(5):
        watched(torch.randn(3, 3))
    assert not recorded.ops, recorded.ops


# ------------------------------------------------------------------------------------ GPU (the H200)

GPU_FIXTURES = sorted(p.name for p in HOSTILE.glob("gpu_*.py")) + [
    "patch_elapsed_time.py", "patch_synchronize.py", "decoy_launched_torch.py", "background_thread.py",
    "shape_cache.py", "stale_empty.py", "lower_precision.py", "try_except_fallback.py", "slow_baseline.py",
    "patch_code_in_place.py"]


@pytest.mark.gpu
@pytest.mark.parametrize("name", GPU_FIXTURES)
def test_gpu_hack(name, task):
    record = evaluate(task, source_of(name, 9, Path("/nonexistent")), "triton", "cuda", config(300))
    assert record.status.value in expected(name), (record.status, record.message)
    assert record.reward == 0.0 and record.correct is not True


# Attacks on the machine from the GPU path: no RLIMIT_AS there (the memory cgroup is the limit), GPU
# device nodes inside the sandbox, CUDA's own threads under the pids limit.
GPU_MACHINE_ATTACKS = ["fork_bomb.py", "kill_parent.py", "memory_hog.py", "net_connect.py", "oob_store.py",
                       "read_secrets.py", "sleep_forever.py", "write_outside.py", "call_hang_after_first.py"]


@pytest.mark.gpu
@pytest.mark.parametrize("name", GPU_MACHINE_ATTACKS)
def test_gpu_machine_attack(name, task, honest_source, honest_baseline, listener, tmp_path, monkeypatch,
                            outcomes):
    _attack(name, task, honest_source, honest_baseline, listener, tmp_path, monkeypatch, outcomes,
            backend="cuda", gpu_memory_bytes=16 << 30)


@pytest.mark.parametrize("name", PROBE_EVASIONS)
def test_probe_evasion_is_a_compile_error(name, task):
    """A kernel that cannot compile for sm_90, hidden from the cpu backend's compile probe (the entry point
    raises when it runs without the interpreter): the follow-up probe compiles what the interpreter
    launched, without the entry point, and finds it."""
    record = evaluate(task, source_of(name, 9, Path("/nonexistent")), "triton", "cpu", config())
    assert record.status.value in expected(name), (record.status, record.message)
    assert record.reward == 0.0 and "_layernorm_chunked as the interpreter launched it" in record.message
    assert "compile_probe_specs" in record.latency


def test_known_hole_probe_evasion_with_a_kernel_made_in_the_entry_point_is_flagged(task):
    """The same evasion with a kernel that exists only once the entry point runs: the follow-up cannot find
    it without calling the submission, so the evaluation is not failed, but the record says the probe was
    inconclusive and why."""
    name = "known_hole_probe_evasion_local_kernel.py"
    record = evaluate(task, source_of(name, 9, Path("/nonexistent")), "triton", "cpu", config())
    assert record.status.value in expected(name), (record.status, record.message)
    flags = [f for f in record.terms["flags"] if f.startswith("compile_probe_inconclusive")]
    assert flags and "exists only once the entry point runs" in flags[0], record.terms["flags"]


def test_an_honest_submission_needs_no_follow_up_probe(task, honest_source):
    """The entry-point probe compiles every specialization the interpreter launched: no second probe."""
    record = evaluate(task, honest_source, "triton", "cpu", config())
    assert record.ok and "compile_probe" in record.latency and "compile_probe_specs" not in record.latency
    assert "flags" not in record.terms or not record.terms["flags"], record.terms


# ------------------------------------------------- the harness's own code, out of reach (issue 31, finding 1)

HARNESS_PATCHES = ["patch_child_timing.py", "patch_timing_stats.py", "patch_harness_constant.py"]
PROBES = Path(__file__).resolve().parent / "fixtures" / "probes"


class _SnapshotAdapter:
    """What snapshots.Integrity reads of a DSL adapter, without installing one in this process."""

    class log:  # noqa: N801 - stands in for the adapter's LaunchLog instance
        pass

    compile_hook = None

    def watched(self):
        return [], []

    def hook_reader(self):
        return dict


def _import_child_side() -> set[str]:
    """Every module of the child side (child/, dsl/, core/) imported here; their names."""
    import importlib
    import pkgutil

    import kernelgym_gap
    names = set()
    for pkg in ("child", "dsl", "core"):
        path = [str(Path(kernelgym_gap.__file__).parent / pkg)]
        for info in pkgutil.iter_modules(path, f"kernelgym_gap.{pkg}."):
            importlib.import_module(info.name)
            names.add(info.name)
    return names


def test_every_child_side_module_is_covered_by_the_snapshots():
    """What the snapshots protect is derived from what is loaded: every module of child/, dsl/ and core/ (a
    new one included, with no list to add it to), every global of each, and a harness module loaded after
    the snapshot from the next comparison on. Until 2026-12-05 a hand-kept list left child/timing.py out."""
    import sys
    import types

    from kernelgym_gap.child import snapshots, timing
    names = _import_child_side()
    assert "kernelgym_gap.child.timing" in names and "kernelgym_gap.core.timing_stats" in names
    integrity = snapshots.Integrity(_SnapshotAdapter())
    loaded = {n for n in sys.modules if snapshots.is_harness_name(n)}
    assert names <= integrity.covered() and loaded <= integrity.covered(), sorted(loaded - integrity.covered())
    def changed():       # pytest-timeout's own itimer and threads are this process's, not a submission's
        return [v for v in integrity.violations() if "timer" not in v and "thread" not in v]

    assert changed() == []
    late = types.ModuleType("kernelgym_gap._late_for_test")
    late.helper = lambda: 1
    sys.modules[late.__name__] = late
    try:
        assert changed() == [] and late.__name__ in integrity.covered()
        late.helper = lambda: 2
        real_spin, timing.SPIN_MS = timing.SPIN_MS, 0.0
        try:
            found = changed()
        finally:
            timing.SPIN_MS = real_spin
        assert "kernelgym_gap._late_for_test.helper was replaced" in found
        assert "kernelgym_gap.child.timing.SPIN_MS was replaced" in found
        from kernelgym_gap.core import tensor_file      # a table of the outputs' hand-off, changed in place
        key = next(iter(tensor_file.DTYPES))
        real_dtype, tensor_file.DTYPES[key] = tensor_file.DTYPES[key], None
        try:
            assert "kernelgym_gap.core.tensor_file.DTYPES was changed in place" in changed()
        finally:
            tensor_file.DTYPES[key] = real_dtype
        sys.modules[late.__name__] = types.ModuleType(late.__name__)
        assert f"sys.modules[{late.__name__!r}] was replaced" in changed()
    finally:
        sys.modules.pop(late.__name__, None)


def test_every_harness_module_of_a_real_child_is_covered(task, no_probe):
    """In a real child (the cpu backend): at the submission's second call, every kernelgym_gap module loaded
    there is covered by the live snapshots (tests/fixtures/probes/harness_coverage.py reports it)."""
    import re
    record = evaluate(task, (PROBES / "harness_coverage.py").read_text(), "triton", "cpu", config())
    found = re.search(r"COVERAGE snapshots=(\d+) loaded=(\d+) timing=(\w+) uncovered=(.*?) END", record.message)
    assert found, record.message
    assert found.group(1) == "1" and int(found.group(2)) > 20 and found.group(3) == "True"
    assert found.group(4) == "[]", found.group(4)


@pytest.mark.parametrize("name", HARNESS_PATCHES)
def test_a_patched_harness_module_is_named(name, task, no_probe):
    """The patches are caught by what they changed (on cpu, where no timing runs: at the import)."""
    record = evaluate(task, source_of(name, 9, Path("/nonexistent")), "triton", "cpu", config())
    assert record.status.value == "integrity_violation" and record.reward == 0.0
    named = {"patch_child_timing.py": ["kernelgym_gap.child.timing.time_shape was replaced",
                                       # the bench is the leaf both sides import (device/bench.py)
                                       "kernelgym_gap.device.bench.Bench._summarise was replaced"],
             "patch_timing_stats.py": ["kernelgym_gap.core.timing_stats.summarise was replaced"],
             "patch_harness_constant.py": ["kernelgym_gap.child.timing_watch.TIMING_WATCH_FRACTION was replaced",
                                           "kernelgym_gap.child.timing.DEVICE_EXCESS was replaced"]}[name]
    for what in named:
        assert what in record.message, record.message


@pytest.mark.gpu
@pytest.mark.parametrize("name", HARNESS_PATCHES)
def test_gpu_a_patched_harness_module_is_caught(name, task):
    """On cuda, where the timing runs: the patch is an integrity violation, never a score."""
    record = evaluate(task, source_of(name, 9, Path("/nonexistent")), "triton", "cuda", config(300))
    assert record.status.value == "integrity_violation", (record.status, record.message)
    assert record.reward == 0.0 and record.correct is not True


@pytest.mark.gpu
def test_gpu_an_honest_kernel_scores_from_the_parents_summary(task, honest_source):
    """On cuda: the honest kernel's record is ok and its per-shape times are the parent's own summary of
    the raw readings (the repetitions match what was read)."""
    record = evaluate(task, honest_source, "triton", "cuda", config(300))
    assert record.ok and record.reward > 0, record.message
    for p in record.terms["per_shape"]:
        assert p["kernel_reps"] >= 1 and p["kernel_ms"] > 0 and not p["early_exit"]
