"""The trusted validation of the handed-over outputs' records (judge/ipc_records.py; docs/measurement.md, "The
outputs handed over on the device", points 2, 3 and 5): every verdict decided before a handle is opened, in
the check's order (judge/prefetch.named_outputs), with the file path's statuses and words; the arena's
offsets, its cap and the per-output fallback to a file; the records' count bound; and the checker's views of
its own arena with the task's dtype and shape. All on cpu: a uint8 host tensor stands for the arena."""
import dataclasses
import random

import pytest
import torch

from kernelgym_gap.core import inputs as inputs_mod
from kernelgym_gap.core.config import EvalConfig
from kernelgym_gap.core.record import ChildReport, Job, OutputHandle, ShapeTiming, Trial, TrialOutcome
from kernelgym_gap.core.status import Status
from kernelgym_gap.core.tensor_file import write_tensor
from kernelgym_gap.engine.trials import TIMING_INDEX_BASE, make_trials
from kernelgym_gap.judge import prefetch
from kernelgym_gap.judge.checker import check
from kernelgym_gap.judge.ipc_records import (ARENA_ALIGN, NeedsFile, OutputKey, OutputKind, Plan, Planned, Refused,
                                             ReportRefused, plan_outputs, shapes_from_references, views_from_arena)
from kernelgym_gap.judge.output_rules import max_output_bytes

pytestmark = pytest.mark.usefixtures("one_torch_thread")
HANDLE = "ab" * 64
CONFIG = EvalConfig(seeds_per_shape=1)


@pytest.fixture(scope="module")
def task():
    from kernelgym_gap.core.registry import default_registry
    return default_registry().get("AddReLU")       # output dtype = input dtype, output shape = input shape


@pytest.fixture(scope="module")
def trials(task):
    """Six trials: (16,128) and (40,77) public, (7,130) held out, each in float32 and float16."""
    return make_trials(task, "cpu", CONFIG, random.Random(0))


def _record(shape, dtype="float32", **kw) -> OutputHandle:
    torch_dtype = getattr(torch, dtype, None)
    size = torch.empty((), dtype=torch_dtype).element_size() if isinstance(torch_dtype, torch.dtype) else 4
    base = dict(handle=HANDLE, offset=0, nbytes=size * int(torch.Size(shape).numel()), dtype=dtype,
                shape=tuple(shape))
    base.update(kw)
    return OutputHandle(**base)


def _outcome(trial, handle=None, file=None) -> TrialOutcome:
    return TrialOutcome(index=trial.index, output_file=file, launches=1, programs=1, seconds=0.0,
                        input_digest_before="d", input_digest_after="d", output_handle=handle)


def _timing(trial, handle=None, file=None) -> ShapeTiming:
    return ShapeTiming(shape=trial.shape, dtype=trial.dtype, split=trial.split, kernel_ms=0.1, kernel_spread=0.0,
                       kernel_reps=1, library_ms=0.1, library_spread=0.0, library_reps=1, launches_per_call=1,
                       programs=1, recheck_output_file=file, recheck_trial=trial, recheck_output_handle=handle)


def _timed(trial, i) -> Trial:
    return dataclasses.replace(trial, index=TIMING_INDEX_BASE + i)


def _job(trials, timing_trials=(), outputs_dir="/nonexistent") -> Job:
    return Job(task_id="kernelgym_gap/AddReLU-v0", dsl="triton", backend="cuda", source_file="/s.py",
               outputs_dir=str(outputs_dir), report_file="/r.json", trials=tuple(trials), timing=None,
               timing_trials=tuple(timing_trials))


def _honest(trials, timed=()) -> ChildReport:
    """Every output handed over, with the dtype and shape the task expects."""
    return ChildReport(status=Status.OK, message="",
                       trials=tuple(_outcome(t, _record(t.shape, t.dtype)) for t in trials),
                       timings=tuple(_timing(t, _record(t.shape, t.dtype)) for t in timed))


def _same_shape(trial):       # AddReLU's output has its input's shape
    return tuple(trial.shape)


# ---- the plan of an honest report -------------------------------------------------------------------------

def test_an_honest_report_is_planned_in_the_checks_order_at_aligned_offsets(task, trials):
    timed = [_timed(trials[0], 0), _timed(trials[3], 1)]
    plan = plan_outputs(_job(trials, timed), _honest(trials, timed), task, _same_shape)
    assert isinstance(plan, Plan)
    assert all(isinstance(e, Planned) for e in plan.entries)
    assert [e.key for e in plan.entries] == ([OutputKey(OutputKind.TRIAL, t.index) for t in trials]
                                             + [OutputKey(OutputKind.RECHECK, t.index) for t in timed])
    offsets = [e.arena_offset for e in plan.entries]
    assert all(o % ARENA_ALIGN == 0 for o in offsets)
    ends = [e.arena_offset + e.record.nbytes for e in plan.entries]
    assert all(end <= nxt for end, nxt in zip(ends, offsets[1:]))          # no two copies overlap
    assert offsets[1] == -(-ends[0] // ARENA_ALIGN) * ARENA_ALIGN          # packed: the next aligned byte
    assert plan.arena_bytes == -(-ends[-1] // ARENA_ALIGN) * ARENA_ALIGN
    assert [e.dtype for e in plan.entries] == [t.dtype for t in (*trials, *timed)]


def test_the_order_is_prefetch_named_outputs(task, trials):
    """The same report with files instead of handles: the plan walks the outputs in named_outputs' order,
    including the trials the report has no outcome for and the rechecks without a trial (both skipped)."""
    order = [trials[4], trials[0], trials[5], trials[2], trials[1], trials[3]]
    timed = [_timed(trials[0], 0), _timed(trials[3], 1)]
    kept = [t for t in order if t.index != 2]
    as_files = ChildReport(status=Status.OK, message="",
                           trials=tuple(_outcome(t, file=f"trial_{t.index}.tensor") for t in reversed(kept)),
                           timings=(_timing(timed[1], file="r1"), dataclasses.replace(_timing(timed[0], file="r0"),
                                                                                       recheck_trial=None),
                                    _timing(timed[0], file="r0b")))
    as_handles = ChildReport(status=Status.OK, message="",
                             trials=tuple(_outcome(t, _record(t.shape, t.dtype)) for t in reversed(kept)),
                             timings=(_timing(timed[1], _record(timed[1].shape, timed[1].dtype)),
                                      dataclasses.replace(_timing(timed[0], _record(timed[0].shape, "float32")),
                                                          recheck_trial=None),
                                      _timing(timed[0], _record(timed[0].shape, timed[0].dtype))))
    job = _job(order, timed)
    plan = plan_outputs(job, as_handles, task, _same_shape)
    named = prefetch.named_outputs(job, as_files)
    assert [(e.key.index if e.key.kind is OutputKind.TRIAL else -1) for e in plan.entries] == [i for _, i in named]
    assert [e.key.index for e in plan.entries if e.key.kind is OutputKind.RECHECK] == [timed[1].index,
                                                                                       timed[0].index]


def test_file_outputs_are_not_in_the_plan(task, trials):
    rep = ChildReport(status=Status.OK, message="", trials=(_outcome(trials[0], file="trial_0.tensor"),
                                                            _outcome(trials[1], _record(trials[1].shape, "float16"))))
    plan = plan_outputs(_job(trials[:2]), rep, task, _same_shape)
    assert [e.key.index for e in plan.entries] == [trials[1].index]


# ---- verdicts decided unopened --------------------------------------------------------------------------

def _one(task, trial, record, kind=OutputKind.TRIAL, ref_shape=None):
    if kind is OutputKind.TRIAL:
        job, rep = _job([trial]), ChildReport(status=Status.OK, message="", trials=(_outcome(trial, record),))
    else:
        job, rep = _job([], [trial]), ChildReport(status=Status.OK, message="", timings=(_timing(trial, record),))
    plan = plan_outputs(job, rep, task, lambda t: ref_shape or tuple(t.shape))
    assert isinstance(plan, Plan) and len(plan.entries) == 1
    return plan.entries[0], plan


@pytest.mark.parametrize("record,status,words", [
    (_record((16, 128), "float16"), Status.WRONG_DTYPE, "the output is torch.float16, expected torch.float32"),
    (_record((16, 128), "float64"), Status.WRONG_DTYPE, "the output is torch.float64, expected torch.float32"),
    (_record((128, 16)), Status.WRONG_SHAPE, "has shape [128, 16], expected [16, 128] (the same number"),
    (_record((16, 127)), Status.WRONG_SHAPE, "has shape [16, 127], expected [16, 128]"),
    (_record((16, 128), nbytes=16 * 128 * 4 + 4), Status.PROTOCOL_ERROR, "gives 8196 bytes, its dtype and shape 8192"),
    (_record((16, 128), nbytes=16 * 128 * 2), Status.PROTOCOL_ERROR, "gives 4096 bytes"),
    (_record((16, 128), dtype="float99"), Status.PROTOCOL_ERROR, "dtype 'float99' is not one of"),
    (_record((16, 128), dtype="Tensor"), Status.PROTOCOL_ERROR, "dtype 'Tensor' is not one of"),
    (_record((16, 128, 1024)), Status.WRONG_SHAPE, "far larger than the expected output"),
], ids=["float16", "float64", "transposed", "short", "nbytes-over", "nbytes-under", "unknown-dtype",
        "torch-attribute", "far-too-large"])
def test_each_wrong_record_gets_the_file_paths_verdict_unopened(task, trials, record, status, words):
    trial = trials[0]                       # public (16, 128) float32
    entry, plan = _one(task, trial, record)
    assert isinstance(entry, Refused), entry
    assert entry.status is status and words in entry.message
    assert entry.key == OutputKey(OutputKind.TRIAL, trial.index) and entry.trial == trial
    assert plan.arena_bytes == 0                      # nothing of it is copied


def test_the_size_bound_is_the_checkers(task, trials):
    trial = trials[0]
    bound = max_output_bytes(trial.shape)
    assert bound == 2 * 16 * 128 * 8 + (1 << 16)
    at = _record((bound // 8,), "float64")
    over = _record((bound // 8 + 1,), "float64")
    assert isinstance(_one(task, trial, at)[0], Refused) and _one(task, trial, at)[0].status is Status.WRONG_DTYPE
    assert _one(task, trial, over)[0].status is Status.WRONG_SHAPE
    assert "is 8 bytes" not in _one(task, trial, over)[0].message


def test_held_out_wording_hides_the_shape(task, trials):
    trial = trials[4]                       # held out (7, 130) float32
    assert trial.split == "heldout"
    entry, _ = _one(task, trial, _record((130, 7)))
    assert entry.status is Status.WRONG_SHAPE
    assert "130" not in entry.message and "does not have the expected shape (2 dimensions, expected 2)" in entry.message
    assert entry.message.startswith(f"trial {trial.index} (held-out shape, float32")


def test_a_recheck_is_named_as_the_checker_names_it(task, trials):
    trial = _timed(trials[1], 0)            # float16
    entry, _ = _one(task, trial, _record(trial.shape, "float32"), OutputKind.RECHECK)
    assert entry.status is Status.WRONG_DTYPE
    assert entry.key == OutputKey(OutputKind.RECHECK, trial.index)
    assert entry.message.startswith("the output of a call after timing (public shape [16, 128], float16")


def test_a_record_beside_a_file_for_the_same_output_is_a_protocol_error(task, trials):
    t = trials[0]
    rep = ChildReport(status=Status.OK, message="", trials=(_outcome(t, _record(t.shape), file="trial_0.tensor"),))
    entry = plan_outputs(_job([t]), rep, task, _same_shape).entries[0]
    assert isinstance(entry, Refused) and entry.status is Status.PROTOCOL_ERROR


def test_a_refused_record_takes_no_room_and_later_ones_are_still_planned(task, trials):
    rep = ChildReport(status=Status.OK, message="", trials=(
        _outcome(trials[0], _record(trials[0].shape, "float16")), _outcome(trials[2], _record(trials[2].shape))))
    plan = plan_outputs(_job([trials[0], trials[2]]), rep, task, _same_shape)
    assert [type(e) for e in plan.entries] == [Refused, Planned]
    assert plan.entries[1].arena_offset == 0


# ---- the report as a whole ------------------------------------------------------------------------------

def test_more_records_than_trials_and_timed_shapes_refuse_the_report(task, trials):
    timed = [_timed(trials[0], 0)]
    job = _job(trials[:2], timed)
    ok = ChildReport(status=Status.OK, message="", trials=tuple(_outcome(t, _record(t.shape, t.dtype))
                                                                for t in trials[:2]),
                     timings=(_timing(timed[0], _record(timed[0].shape)),))
    assert isinstance(plan_outputs(job, ok, task, _same_shape), Plan)      # 3 records, 2 trials + 1 timed shape
    # one more, on an outcome the check would not even read: the count is of every record the report holds
    extra = dataclasses.replace(ok, trials=ok.trials + (_outcome(trials[3], _record(trials[3].shape)),))
    refused = plan_outputs(job, extra, task, _same_shape)
    assert isinstance(refused, ReportRefused) and refused.status is Status.PROTOCOL_ERROR
    assert "4 handed-over outputs, more than the job's 2 trials and 1 timed shapes" in refused.message
    huge = dataclasses.replace(ok, timings=tuple(_timing(timed[0], _record(timed[0].shape)) for _ in range(5000)))
    calls = []
    refused = plan_outputs(job, huge, task, lambda t: calls.append(t) or tuple(t.shape))
    assert isinstance(refused, ReportRefused) and calls == []             # refused before any output is looked at


def test_one_output_handed_over_twice_refuses_the_report(task, trials):
    timed = [_timed(trials[0], 0), _timed(trials[1], 1)]
    rep = ChildReport(status=Status.OK, message="", timings=tuple(_timing(timed[0], _record(timed[0].shape))
                                                                  for _ in range(2)))
    refused = plan_outputs(_job([], timed), rep, task, _same_shape)
    assert isinstance(refused, ReportRefused) and "recheck_10000.tensor twice" in refused.message


# ---- the arena's cap and the fallback to files ----------------------------------------------------------

def test_outputs_past_the_arenas_room_need_a_file_and_a_smaller_later_one_still_fits(task, trials):
    # trial sizes (float32 / float16): (16,128) 8192 / 4096, (40,77) 12320 / 6160, (7,130) 3640 / 1820
    cap = 8192 + 4096 + 3640
    plan = plan_outputs(_job(trials), _honest(trials), task, _same_shape, max_arena_bytes=cap)
    kinds = [type(e).__name__ for e in plan.entries]
    assert kinds == ["Planned", "Planned", "NeedsFile", "NeedsFile", "Planned", "NeedsFile"]
    assert plan.arena_bytes <= cap
    assert [e.arena_offset for e in plan.planned] == [0, 8192, 12288]
    need = [e for e in plan.entries if isinstance(e, NeedsFile)]
    assert [e.key.file_name for e in need] == [f"trial_{trials[i].index}.tensor" for i in (2, 3, 5)]
    assert plan_outputs(_job(trials), _honest(trials), task, _same_shape, max_arena_bytes=0).planned == ()
    with pytest.raises(ValueError):
        plan_outputs(_job(trials), _honest(trials), task, _same_shape, max_arena_bytes=-1)


def test_the_recheck_file_name_is_the_childs():
    from kernelgym_gap.core.tensor_file import output_name
    assert OutputKey(OutputKind.RECHECK, 10003).file_name == output_name("recheck", 10003)
    assert OutputKey(OutputKind.TRIAL, 3).file_name == output_name("trial", 3)


# ---- the verdicts' words are the checker's own ----------------------------------------------------------

@pytest.mark.parametrize("index,make,status", [
    (0, lambda ref: ref.to(torch.float64), Status.WRONG_DTYPE),          # public float32 trial
    (1, lambda ref: ref.to(torch.float32), Status.WRONG_DTYPE),          # public float16 trial
    (0, lambda ref: ref.t().contiguous(), Status.WRONG_SHAPE),           # same elements, another shape
    (2, lambda ref: ref[:, :70].contiguous(), Status.WRONG_SHAPE),
    (4, lambda ref: ref.to(torch.float16), Status.WRONG_DTYPE),          # held out
    (4, lambda ref: ref.reshape(-1), Status.WRONG_SHAPE),                # held out: dimensions only
    (5, lambda ref: torch.zeros(16, 1024, 1024, dtype=torch.float16), Status.WRONG_SHAPE),   # far too large
])
def test_the_verdict_is_the_checkers_for_the_same_wrong_file(task, trials, tmp_path, index, make, status):
    """A real wrong output written as the child writes it, judged by the checker's own path (check), and the
    same output's record planned: the same status, and for dtype and shape the same message."""
    trial = trials[index]
    ins = inputs_mod.make_trial_inputs(task, trial, "cpu")
    with torch.no_grad():
        ref = task.reference(*ins)
    out = make(ref)
    name = f"trial_{trial.index}.tensor"
    write_tensor(tmp_path / name, out)
    digest = inputs_mod.digest(ins)
    job = _job([trial], outputs_dir=tmp_path)
    file_report = ChildReport(status=Status.OK, message="", trials=(dataclasses.replace(
        _outcome(trial, file=name), input_digest_before=digest, input_digest_after=digest),))
    result = check(task, job, file_report, "cpu")
    record = _record(tuple(out.shape), str(out.dtype).removeprefix("torch."))
    handle_report = ChildReport(status=Status.OK, message="", trials=(_outcome(trial, record),))
    plan = plan_outputs(job, handle_report, task, shapes_from_references({trial.index: ref}))
    entry = plan.entries[0]
    assert isinstance(entry, Refused)
    assert result.status is status and entry.status is status
    if "far larger" in result.message:       # the file's size counts its header, the record its data
        assert "far larger than the expected output" in entry.message
    else:
        assert entry.message == result.message


def test_shapes_from_references_refuses_a_trial_without_one(trials):
    with pytest.raises(KeyError, match="no reference computed for trial"):
        shapes_from_references({})(trials[0])


# ---- the checker's views of its own arena -----------------------------------------------------------

def test_views_have_the_tasks_dtype_and_shape_and_read_the_copied_bytes(task, trials):
    timed = [_timed(trials[3], 0)]
    plan = plan_outputs(_job(trials, timed), _honest(trials, timed), task, _same_shape)
    arena = torch.zeros(plan.arena_bytes, dtype=torch.uint8)
    wanted = {}
    for e in plan.planned:        # what the opener does on the device: the child's bytes at the planned offset
        src = torch.randn(e.shape).to(getattr(torch, e.dtype))
        arena[e.arena_offset:e.arena_offset + e.record.nbytes] = src.reshape(-1).view(torch.uint8)
        wanted[e.key] = src
    views = views_from_arena(arena, plan)
    assert set(views) == set(wanted)
    for key, src in wanted.items():
        v = views[key]
        assert v.dtype == src.dtype and v.shape == src.shape and torch.equal(v, src)
        assert v.untyped_storage().data_ptr() == arena.untyped_storage().data_ptr()     # no copy


def test_views_use_the_plans_dtype_and_shape_not_the_records(task, trials):
    """Point 5: the views come from the task's dtype and the reference's shape. A plan whose record claims
    another form (which plan_outputs never makes) is refused, never viewed the child's way."""
    plan = plan_outputs(_job(trials[:1]), _honest(trials[:1]), task, _same_shape)
    entry = plan.entries[0]
    forged = dataclasses.replace(entry, record=OutputHandle(HANDLE, 0, entry.record.nbytes, "int32", (2048,)))
    arena = torch.zeros(plan.arena_bytes, dtype=torch.uint8)
    view = views_from_arena(arena, Plan(entries=(forged,), arena_bytes=plan.arena_bytes))[entry.key]
    assert view.dtype == torch.float32 and tuple(view.shape) == (16, 128)
    bad = dataclasses.replace(entry, shape=(16, 256))
    with pytest.raises(ValueError, match="not one plan_outputs makes"):
        views_from_arena(torch.zeros(1 << 16, dtype=torch.uint8), Plan(entries=(bad,), arena_bytes=plan.arena_bytes))


@pytest.mark.parametrize("arena", [torch.zeros(8192, dtype=torch.float32), torch.zeros(4, 8192, dtype=torch.uint8),
                                   torch.zeros(16384, dtype=torch.uint8)[::2], torch.zeros(100, dtype=torch.uint8)])
def test_an_arena_that_is_not_the_plans_is_refused(task, trials, arena):
    plan = plan_outputs(_job(trials[:1]), _honest(trials[:1]), task, _same_shape)
    with pytest.raises(ValueError, match="arena"):
        views_from_arena(arena, plan)
