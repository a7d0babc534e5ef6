"""Stage deadlines of the submission's calls (sandbox/deadlines.py): each call's bound as the parent computes
it, the parent's watch over the child's call marker, and, end to end on the cpu backend, a kernel that hangs
in a later call killed at that call's deadline (pre-started or cold, with its marker forged or not), the
compile probe under the same deadlines, and the next evaluation unaffected."""
from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

import pytest

from kernelgym_gap.core.config import EvalConfig, SandboxConfig, TimingConfig
from kernelgym_gap.core.placement import Placement
from kernelgym_gap.core.record import CALL_MARKER, CallBound, Job, KernelSpec, Trial
from kernelgym_gap.core.status import Status
from kernelgym_gap.core.task import Workload
from kernelgym_gap.engine.pipeline import evaluate
from kernelgym_gap.sandbox import launch
from kernelgym_gap.sandbox.deadlines import TIMING_EXTRA_CALLS, CallWatch, call_bounds
from kernelgym_gap.sandbox.prestart import ChildPool
from kernelgym_gap.sandbox.probe import CompileProbe, probe_env

HOSTILE = Path(__file__).resolve().parent / "fixtures" / "hostile"

pytestmark = pytest.mark.timeout(300)


def _trial(index, shape, dtype="float16", split="public"):
    return Trial(index=index, shape=shape, dtype=dtype, seed=1, distribution="normal", split=split)


def _job(**kw) -> Job:
    fields = dict(task_id="t", dsl="triton", backend="cuda", source_file="s.py", outputs_dir="o",
                  report_file="r.json", timing=None,
                  trials=(_trial(0, (128, 256)), _trial(1, (128, 256)), _trial(2, (64, 64)), _trial(3, (64, 64))))
    fields.update(kw)
    return Job(**fields)


# ------------------------------------------------------------------------------------------ the bounds

def test_the_first_call_of_each_shape_gets_the_compile_bound_and_later_ones_the_unknown_bound():
    bounds = call_bounds(_job(), SandboxConfig(compile_call_s=60.0, call_unknown_s=45.0))
    assert [b.bound_s for b in bounds] == [60.0, 45.0, 60.0, 45.0]
    assert bounds[1].what == "trial 1: public shape [128, 256], float16"
    assert "first call of its shape" in bounds[0].what


def test_a_known_library_time_bounds_later_calls_by_a_multiple_of_it_with_a_floor():
    hint = (((128, 256), "float16", 0.05), ((64, 64), "float16", 0.001))   # ms
    bounds = call_bounds(_job(library_hint=hint), SandboxConfig(call_floor_s=2.0, call_factor=200_000.0))
    assert bounds[0].bound_s == 60.0 and bounds[2].bound_s == 60.0          # first calls: compile
    assert bounds[1].bound_s == pytest.approx(10.0)                          # 200000 x 0.05 ms
    assert bounds[3].bound_s == 2.0                                          # 0.2 s, under the floor
    other_dtype = call_bounds(_job(library_hint=(((128, 256), "float32", 0.05),)), SandboxConfig())
    assert other_dtype[1].bound_s == SandboxConfig().call_unknown_s          # the hint is per (shape, dtype)


def test_a_timed_shape_is_one_call_bounded_by_its_repetitions():
    # the rechecks inside the timing (recheck_outside_exclusive off: tests/test_recheck_outside.py has them after)
    timing = TimingConfig(min_reps=20, warmup_ms=25.0, budget_ms=2000.0, recheck_outside_exclusive=False)
    timed = (_trial(10_000, (128, 256)), _trial(10_001, (32, 32)))
    hint = (((128, 256), "float16", 0.1),)
    bounds = call_bounds(_job(timing=timing, timing_trials=timed, library_hint=hint), SandboxConfig())
    assert len(bounds) == 4 + 2 and bounds[4].what == "timing of public shape [128, 256], float16"
    per_call = max(2.0, 200 * 0.1e-3)
    assert bounds[4].bound_s == pytest.approx(per_call * (20 + TIMING_EXTRA_CALLS) + 2 * 2.025)
    # a timed shape no correctness trial compiled: unknown library time, and its compilation on top
    assert bounds[5].bound_s == pytest.approx(60.0 * (20 + TIMING_EXTRA_CALLS) + 2 * 2.025 + 60.0)


def test_probe_calls_are_compilations_and_the_deadlines_can_be_turned_off():
    probe = call_bounds(_job(mode="compile_probe"), SandboxConfig(compile_call_s=30.0))
    assert [b.bound_s for b in probe] == [30.0] * 4 and probe[0].what.startswith("probe of trial 0")
    spec = KernelSpec(module="submission", qualname="_k", source_sha256="0", signature={}, constexprs={}, options={})
    specs = call_bounds(_job(mode="compile_specs", trials=(), specs=(spec, spec)), SandboxConfig())
    assert [b.what for b in specs] == ["compiling _k for sm_90"] * 2
    assert call_bounds(_job(), SandboxConfig(compile_call_s=None)) == ()


def test_a_first_calls_launch_bound_after_its_compiles_is_off_by_default_and_needs_the_librarys_time():
    hint = (((128, 256), "float16", 0.05),)                                   # ms; (64, 64) unknown
    assert all(b.launch_s is None for b in call_bounds(_job(library_hint=hint), SandboxConfig()))
    on = SandboxConfig(launch_bound_after_compile=True, call_floor_s=2.0, call_factor=200.0, launch_calls=10)
    bounds = call_bounds(_job(library_hint=hint), on)
    assert bounds[0].bound_s == 60.0 and bounds[0].launch_s == pytest.approx(20.0)   # 10 x max(2 s, 10 us)
    assert bounds[1].launch_s is None                                         # a later call compiles nothing
    assert bounds[2].launch_s is None                                         # the library's time unknown
    slow_library = (((128, 256), "float16", 100.0),)                          # 200 x 0.1 s x 10 > 60 s
    assert call_bounds(_job(library_hint=slow_library), on)[0].launch_s == 60.0   # never past the compile bound
    timing = TimingConfig(min_reps=20, warmup_ms=25.0, budget_ms=2000.0)
    timed = (_trial(10_000, (128, 256)), _trial(10_001, (256, 256)))
    t = call_bounds(_job(timing=timing, timing_trials=timed, library_hint=hint + (((256, 256), "float16", 0.05),)), on)
    assert t[4].launch_s is None                                              # compiled by a correctness trial
    assert t[5].launch_s == pytest.approx(t[5].bound_s - 60.0)                # its repetitions, without the compile


# ------------------------------------------------------------------------- the parent's watch (no clock)

def _watch(tmp_path, bounds=(2.0, 5.0, 5.0)):
    return CallWatch(tmp_path / CALL_MARKER, [CallBound(f"c{i}", b) for i, b in enumerate(bounds)])


def _mark(tmp_path, text):
    (tmp_path / CALL_MARKER).write_text(text)


def test_the_watch_times_a_call_from_when_it_first_saw_it_against_its_own_bound(tmp_path):
    watch = _watch(tmp_path)
    assert watch.overdue(0.0) is None                       # no marker yet
    _mark(tmp_path, "call 0 2.000\n")
    assert watch.overdue(10.0) is None and watch.overdue(11.9) is None
    assert watch.overdue(12.1) == "call 0 (c0) ran past 2.0 s"
    _mark(tmp_path, "done 0\n")
    assert watch.overdue(100.0) is None                     # between calls: the wall deadline alone


def test_the_child_can_neither_lengthen_a_bound_nor_restart_or_reopen_a_call(tmp_path):
    watch = _watch(tmp_path)
    _mark(tmp_path, "call 1 5.000\n")
    assert watch.overdue(0.0) is None
    _mark(tmp_path, "call 1 1000000000\n")                  # its own bound, and the same call again
    assert watch.overdue(4.0) is None
    assert watch.overdue(5.5) == "call 1 (c1) ran past 5.0 s"
    _mark(tmp_path, "call 0 1\n")                           # an earlier call: ignored, call 1 still runs
    assert watch.overdue(6.0) is not None
    for junk in ("call 9 1\n", "done 0\n", "garbage", "call -1 1\n", ""):   # unknown, not running, malformed
        _mark(tmp_path, junk)
        assert watch.overdue(6.0) == "call 1 (c1) ran past 5.0 s", junk


def test_a_later_calls_done_mark_ends_the_call_being_timed(tmp_path):
    """The watch polls every 0.1 s and a later call takes milliseconds: it may see `call 0`, miss `done 0`,
    `call 1` and see `done 1` while the child waits for the lane in its next checkpoint. On the H100
    (2026-12-06) the mark was ignored, call 0's clock ran on, and honest kernels were killed as too_slow."""
    watch = _watch(tmp_path)
    _mark(tmp_path, "call 0 2.000\n")
    assert watch.overdue(0.0) is None
    _mark(tmp_path, "done 1\n")                            # call 0 and call 1 both ended between polls
    assert watch.overdue(30.0) is None and watch.current is None
    _mark(tmp_path, "call 1 5.000\n")                      # an earlier call than the last seen: ignored
    assert watch.overdue(40.0) is None
    _mark(tmp_path, "call 2 5.000\n")                      # the next call is timed as usual
    assert watch.overdue(41.0) is None and watch.overdue(46.5) == "call 2 (c2) ran past 5.0 s"


def test_a_later_calls_compile_mark_times_that_call_from_when_it_was_seen(tmp_path):
    watch = CallWatch(tmp_path / CALL_MARKER, [CallBound("c0", 2.0), CallBound("c1", 60.0, launch_s=5.0)])
    _mark(tmp_path, "call 0 2\n")
    assert watch.overdue(0.0) is None
    _mark(tmp_path, "compiling 1 1\n")                     # `done 0` and `call 1` missed: call 1 compiles
    assert watch.overdue(10.0) is None and watch.current == (1, 10.0)
    _mark(tmp_path, "compiled 1 1\n")
    assert watch.overdue(20.0) is None
    assert watch.overdue(25.5) == "call 1 (c1) ran past 5.0 s after its compiles"
    watch = CallWatch(tmp_path / CALL_MARKER, [CallBound("c0", 2.0), CallBound("c1", 60.0, launch_s=5.0)])
    _mark(tmp_path, "call 0 2\n")
    watch.overdue(0.0)
    _mark(tmp_path, "compiled 1 1\n")                      # only its compile's end seen: the launch clock from now
    assert watch.overdue(3.0) is None and watch.overdue(8.5) == "call 1 (c1) ran past 5.0 s after its compiles"


def test_once_its_compiles_are_marked_done_a_call_has_only_its_launch_bound(tmp_path):
    watch = CallWatch(tmp_path / CALL_MARKER, [CallBound("c0", 60.0, launch_s=5.0), CallBound("c1", 60.0)])
    _mark(tmp_path, "call 0 60\n")
    assert watch.overdue(0.0) is None
    _mark(tmp_path, "compiling 0 1\n")
    assert watch.overdue(20.0) is None                       # compiling: the compile bound from the call's start
    _mark(tmp_path, "compiled 0 1\n")
    assert watch.overdue(21.0) is None and watch.overdue(25.9) is None
    _mark(tmp_path, "compiling 0 2\n")                       # an autotuner's next config: the launch clock stops
    assert watch.overdue(40.0) is None
    _mark(tmp_path, "compiled 0 2\n")
    assert watch.overdue(41.0) is None
    assert watch.overdue(46.5) == "call 0 (c0) ran past 5.0 s after its compiles"
    assert watch.overrun == (0, 5.0, 5.5)


def test_what_the_child_says_of_its_compiles_can_only_shorten_a_call(tmp_path):
    watch = CallWatch(tmp_path / CALL_MARKER, [CallBound("c0", 60.0, launch_s=5.0), CallBound("c1", 8.0)])
    _mark(tmp_path, "call 0 60\n")
    watch.overdue(0.0)
    for t in range(1, 60):                                   # "compiling" forever: the compile bound still holds
        _mark(tmp_path, f"compiling 0 {t}\n")
        assert watch.overdue(float(t)) is None
    assert watch.overdue(60.5) == "call 0 (c0) ran past 60.0 s"
    watch = CallWatch(tmp_path / CALL_MARKER, [CallBound("c0", 60.0, launch_s=5.0), CallBound("c1", 8.0)])
    _mark(tmp_path, "call 0 60\n")
    watch.overdue(0.0)
    _mark(tmp_path, "compiled 0 7\n")
    watch.overdue(1.0)
    assert watch.overdue(5.9) is None and watch.overdue(6.1) is not None   # the same count again: no restart
    _mark(tmp_path, "call 1 8\n")                            # a call with no launch part: its bound alone
    watch.overdue(10.0)
    _mark(tmp_path, "compiled 1 8\n")
    assert watch.overdue(17.9) is None and watch.overdue(18.1) == "call 1 (c1) ran past 8.0 s"
    _mark(tmp_path, "compiled 0 9\n")                        # about a call that does not run: ignored
    assert watch.current[0] == 1


def test_the_watch_reads_no_link_and_no_fifo(tmp_path):
    watch = _watch(tmp_path)
    (tmp_path / "elsewhere").write_text("call 0 2\n")
    (tmp_path / CALL_MARKER).symlink_to(tmp_path / "elsewhere")
    assert watch.overdue(100.0) is None and watch.current is None
    (tmp_path / CALL_MARKER).unlink()
    os.mkfifo(tmp_path / CALL_MARKER)                       # would block a plain open()
    assert watch.overdue(100.0) is None and watch.current is None


def test_the_childs_marks_are_what_the_watch_reads(tmp_path):
    from kernelgym_gap.child.marks import CallMarks
    bounds = [CallBound("c0", 2.0), CallBound("c1", 5.0)]
    marks, watch = CallMarks(tmp_path, bounds), CallWatch(tmp_path / CALL_MARKER, bounds)
    marks.begin(0)
    assert (tmp_path / CALL_MARKER).read_text() == "call 0 2.000\n" and watch.overdue(0.0) is None
    marks.begin(1)                                          # ends call 0 first
    assert watch.overdue(1.0) is None and watch.current == (1, 1.0)
    marks.end()
    assert (tmp_path / CALL_MARKER).read_text() == "done 1\n" and watch.overdue(100.0) is None
    marks.begin(2)                                          # a call without a bound: not marked
    assert (tmp_path / CALL_MARKER).read_text() == "done 1\n"
    CallMarks(tmp_path / "none", ()).begin(0)               # no call deadlines: no marker at all
    assert not (tmp_path / "none").exists()


def test_the_childs_compile_marks_are_what_the_watch_reads(tmp_path):
    from kernelgym_gap.child.marks import CallMarks
    bounds = [CallBound("c0", 60.0, launch_s=2.0), CallBound("c1", 5.0)]
    marks, watch = CallMarks(tmp_path, bounds), CallWatch(tmp_path / CALL_MARKER, bounds)
    marker = tmp_path / CALL_MARKER
    with marks.compiling():                                 # outside a call: nothing marked
        assert not marker.exists()
    marks.begin(0)
    watch.overdue(0.0)
    with marks.compiling():
        assert marker.read_text() == "compiling 0 1\n"
        with marks.compiling():                             # nested: marked once
            assert marker.read_text() == "compiling 0 1\n"
        assert watch.overdue(30.0) is None
    assert marker.read_text() == "compiled 0 1\n"
    assert watch.overdue(31.0) is None and watch.overdue(33.5) == "call 0 (c0) ran past 2.0 s after its compiles"
    marks.begin(1)
    with marks.compiling():                                 # a call without a launch part: left as it is
        assert marker.read_text() == "call 1 5.000\n"


# ------------------------------------------------------------------------------- end to end, cpu backend

@pytest.fixture(scope="module")
def task(registry):
    t = registry.get("kernelgym_gap/LayerNorm-v1")
    return dataclasses.replace(t, workloads={
        **t.workloads, "cpu": Workload(public=((16, 128),), heldout=((7, 96),), dtypes=("float32",))})


class _NoProbe:
    """The compile probe off where a test is about the main child (half the CPU on a 2-core machine)."""

    def __init__(self, job, directory, source, sandbox, env, pre=None):
        if pre is not None:
            pre.kill()
        self.wall_s, self.inconclusive, self.specs_wall_s = 0.0, None, None

    def start(self):
        pass

    def compile_error(self):
        return None

    def cover(self, launched, scratch_root):
        return None

    def over_disk_quota(self):          # the launcher asks since issue 32's per-evaluation quota
        return False


def _config(tmp_path, **sandbox) -> EvalConfig:
    limits = dict(wall_s=120.0, call_unknown_s=3.0, pids_max=64, memory_bytes=1 << 30, fsize_bytes=64 << 20)
    limits.update(sandbox)
    return EvalConfig(trial_seed=20261204, sandbox=SandboxConfig(**limits))


def test_a_kernel_that_hangs_in_a_later_call_is_killed_at_that_calls_deadline(task, registry, tmp_path,
                                                                              monkeypatch):
    """Pre-started and cold alike, well before wall_s; the next evaluation (pre-started) works normally."""
    monkeypatch.setattr(launch, "CompileProbe", _NoProbe)
    cfg, where = _config(tmp_path), Placement(scratch_root=str(tmp_path))
    honest = (task.directory / "solutions" / "triton_rowwise.py").read_text()
    with ChildPool() as pool:
        pool.refill(launch.child_spec(task, "triton", "cpu", cfg, where))
        for children in (pool, None):               # pre-started, then cold
            start = time.monotonic()
            record = evaluate(task, (HOSTILE / "call_hang_after_first.py").read_text(), "triton", "cpu", cfg,
                              children=children, placement=where)
            elapsed = time.monotonic() - start
            # correct on its first call, killed on a later one: too_slow since issue 38 (engine/too_slow.py);
            # the smallest shape runs first, trial 3 is its second seed: a later call, no library time on cpu
            assert record.status is Status.TOO_SLOW and record.stage == "too_slow", record.message
            # (a held-out shape is named in kind only in the message: engine/feedback.py)
            assert "call 1 (trial 3: heldout shape" in record.message, record.message
            assert "float32) ran past 3.0 s, its stage deadline" in record.message, record.message
            assert elapsed < 60, elapsed
        assert pool.served == 1
        after = evaluate(task, honest, "triton", "cpu", cfg, children=pool, placement=where)
        assert after.ok and after.correct is True, after.message
        assert pool.served == 2


def test_a_child_that_forges_its_marker_is_still_killed_at_the_parents_bound(task, tmp_path, monkeypatch):
    """The submission can reach the marker (its own uid, its own scratch; through libc, past the audit
    guard) and writes a huge bound for its call: the parent uses its own."""
    monkeypatch.setattr(launch, "CompileProbe", _NoProbe)
    cfg = _config(tmp_path)
    start = time.monotonic()
    record = evaluate(task, (HOSTILE / "call_marker_forge.py").read_text(), "triton", "cpu", cfg,
                      placement=Placement(scratch_root=str(tmp_path), keep_scratch=True))
    # correct on its first call: too_slow since issue 38, killed at the parent's bound all the same
    assert record.status is Status.TOO_SLOW and "call 1 " in record.message, record.message
    assert "ran past 3.0 s" in record.message and time.monotonic() - start < 60
    markers = [p.read_text() for p in tmp_path.glob(f"kgg-eval-*/{CALL_MARKER}")]
    assert markers == ["call 1 1000000000\n"], markers       # the forgery was written, and changed nothing


def test_the_compile_probe_is_under_the_call_deadlines(task, tmp_path):
    """The probe child (cpu, Triton) calls the entry point once per shape: each call a compilation bounded
    by compile_call_s. A probe killed there leaves the evaluation to the main child, saying why."""
    sandbox = SandboxConfig(wall_s=120.0, compile_call_s=4.0, pids_max=64, memory_bytes=1 << 30)
    source = (HOSTILE / "busy_loop.py").read_text()
    job = Job(task_id=task.id, dsl="triton", backend="cpu", source_file="", outputs_dir="", report_file="",
              trials=(_trial(0, (16, 128), "float32"),), timing=None, mode="compile_probe", tasks_dir=task.tasks_dir)
    directory = tmp_path / "probe"
    directory.mkdir()
    probe = CompileProbe(job, directory, source, sandbox, probe_env())
    start = time.monotonic()
    probe.start()
    assert probe.compile_error() is None
    assert probe.outcome.stage_timeout == "call" and time.monotonic() - start < 60
    assert probe.inconclusive == ("it was killed at a stage deadline: call 0 (probe of trial 0: public shape "
                                  "[16, 128], float32) ran past 4.0 s")


def test_the_first_launch_hang_fixture_keeps_its_spin_loop_when_compiled_for_sm90():
    """gpu_first_launch_hang.py must hang on the GPU. Its first version spun on a loop without side effects
    (`acc = acc * 1.0`) that the compiler removed: on the H100 it finished and wrote |x| + 1 (mismatch). Here,
    on the cpu, it is compiled for sm_90 as the compile probe does: the loop (a back branch) and the volatile
    load in its condition must both survive into the PTX (the old fixture compiles to neither)."""
    import importlib.util
    import re

    triton = pytest.importorskip("triton")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    spec = importlib.util.spec_from_file_location("gpu_first_launch_hang", HOSTILE / "gpu_first_launch_hang.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    signature = {"x_ptr": "*fp16", "y_ptr": "*fp16", "flag_ptr": "*i32", "n_cols": "i32", "BLOCK": "constexpr"}
    kernel = triton.compile(ASTSource(module._spin, signature, {"BLOCK": 128}), target=GPUTarget("cuda", 90, 32))
    ptx = kernel.asm["ptx"]
    assert re.search(r"ld\.volatile\.global", ptx), "the flag is not re-read from memory"
    assert re.search(r"\bbra\b", ptx), "the spin loop was compiled away"
    assert (HOSTILE / "gpu_first_launch_hang.py").read_text().startswith("# expect: timeout\n")


@pytest.mark.gpu
def test_gpu_a_first_launch_that_hangs_is_killed_soon_after_its_compile(registry, tmp_path):
    """cuda, LayerNorm at its cuda shapes: an honest evaluation fills the library cache (the launch bound needs
    the library's time), then a kernel whose first launch spins forever is killed at its compile plus
    launch_calls x the later-call bound (10 x 2 s), not at compile_call_s (60 s); the next evaluation works."""
    task = registry.get("kernelgym_gap/LayerNorm-v1")
    honest = (task.directory / "solutions" / "triton_rowwise.py").read_text()
    cfg = EvalConfig(trial_seed=20261205, sandbox=SandboxConfig(launch_bound_after_compile=True))
    where = Placement(library_cache_path=str(tmp_path / "lib.json"))
    assert evaluate(task, honest, "triton", "cuda", cfg, placement=where).ok
    start = time.monotonic()
    record = evaluate(task, (HOSTILE / "gpu_first_launch_hang.py").read_text(), "triton", "cuda", cfg,
                      placement=where)
    elapsed = time.monotonic() - start
    assert record.status in (Status.TIMEOUT, Status.TOO_SLOW), record.message
    # The launch bound decided: its message names the 10 x 2 s after the compiles, where the compile bound's
    # would say "ran past 60.0 s". The wall time is only a guard: on the H100 (2026-12-06, beside another
    # evaluation's compiles) the whole evaluation took 54.7 s, the child's start and compiles included, so
    # a bound on it cannot tell the two deadlines apart
    assert "ran past 20.0 s after its compiles" in record.message and elapsed < 90, (elapsed, record.message)
    assert evaluate(task, honest, "triton", "cuda", cfg, placement=where).ok
