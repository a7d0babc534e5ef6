"""The trusted checker's side of the outputs handed over on the device (issue 35; the contract in
docs/measurement.md, "The outputs handed over on the device"): judge/checker.run_handover's protocol driven in
process with a host uint8 tensor as the arena, into which the test copies the outputs' bytes as the opener
would (the plan rebuilt on the parent's side by ipc_records.plan_from_wire); the wire form of the plan; the
arena's typed errors; and WarmChecker.hand_over_check through the real `checker --serve` process on cpu, whose
arena factory gives no arena there (judge/arena.device_arena), so its copies cannot be exercised on cpu: the
gpu test does that end to end."""
import dataclasses
import json
import random
import sys

import pytest
import torch

from kernelgym_gap.api.warm import WarmChecker
from kernelgym_gap.core import inputs as inputs_mod
from kernelgym_gap.core.config import EvalConfig
from kernelgym_gap.core.record import ChildReport, Job, OutputHandle, ShapeTiming, Trial, TrialOutcome
from kernelgym_gap.core.status import Status
from kernelgym_gap.core.tensor_file import write_tensor
from kernelgym_gap.engine.trials import TIMING_INDEX_BASE, make_trials
from kernelgym_gap.judge import arena as arena_mod
from kernelgym_gap.judge import handover_check
from kernelgym_gap.judge.checker import check, run_handover
from kernelgym_gap.judge.ipc_records import (ARENA_ALIGN, NeedsFile, OutputKey, OutputKind, Plan, Planned,
                                             plan_from_wire, plan_outputs, plan_to_wire)

pytestmark = pytest.mark.usefixtures("one_torch_thread")
HANDLE = "cd" * 64


@pytest.fixture(scope="module")
def task():
    from kernelgym_gap.core.registry import default_registry
    return default_registry().get("AddReLU")       # output dtype = input dtype, output shape = input shape


@pytest.fixture(scope="module")
def trials(task):
    """Six trials: (16,128) and (40,77) public, (7,130) held out, each in float32 and float16."""
    return make_trials(task, "cpu", EvalConfig(seeds_per_shape=1), random.Random(0))


def _ref(task, trial):
    with torch.no_grad():
        return task.reference(*inputs_mod.make_trial_inputs(task, trial, "cpu"))


class Case:
    """A job and an honest child's report with every output handed over (records only), and the outputs' bytes
    the fake opener copies, by output key. `outs[key]` may be replaced by a wrong tensor before the exchange."""

    def __init__(self, task, trials, tmp_path, timed=()):
        self.task = task
        self.outs: dict[OutputKey, torch.Tensor] = {}
        outcomes, timings = [], []
        for t in trials:
            ins = inputs_mod.make_trial_inputs(task, t, "cpu")
            d = inputs_mod.digest(ins)
            self.outs[OutputKey(OutputKind.TRIAL, t.index)] = _ref(task, t)
            outcomes.append(TrialOutcome(index=t.index, output_file=None, launches=1, programs=1, seconds=0.0,
                                         input_digest_before=d, input_digest_after=d,
                                         output_handle=self.record(self.outs[OutputKey(OutputKind.TRIAL, t.index)])))
        for t in timed:
            out = self.outs[OutputKey(OutputKind.RECHECK, t.index)] = _ref(task, t)
            timings.append(ShapeTiming(shape=t.shape, dtype=t.dtype, split=t.split, kernel_ms=0.1, kernel_spread=0.0,
                                       kernel_reps=1, library_ms=0.1, library_spread=0.0, library_reps=1,
                                       launches_per_call=1, programs=1, recheck_trial=t,
                                       recheck_output_handle=self.record(out)))
        out_dir = tmp_path / "outputs"
        out_dir.mkdir(exist_ok=True)
        self.job = Job(task_id=task.id, dsl="triton", backend="cuda", source_file=str(tmp_path / "s.py"),
                       outputs_dir=str(out_dir), report_file=str(tmp_path / "report.json"), trials=tuple(trials),
                       timing=None, timing_trials=tuple(timed))
        self.report = ChildReport(status=Status.OK, message="", trials=tuple(outcomes), timings=tuple(timings))
        self.sent: list[dict] = []
        self.arenas: list["HostArena"] = []
        self.results: dict[str, str] = {}       # a copy's result other than "copied", by file name

    @staticmethod
    def record(out: torch.Tensor, **kw) -> OutputHandle:
        fields = dict(handle=HANDLE, offset=0, nbytes=out.numel() * out.element_size(),
                      dtype=str(out.dtype).removeprefix("torch."), shape=tuple(out.shape))
        return OutputHandle(**{**fields, **kw})

    def factory(self, nbytes: int, device: str) -> "HostArena":
        self.arenas.append(HostArena(nbytes))
        return self.arenas[-1]

    def opener(self) -> str:
        """The parent's side: the plan rebuilt from the handover line, each output's bytes copied into the
        arena at its offset, the go line."""
        handover = self.sent[-1]["handover"]
        plan = plan_from_wire(handover["planned"], self.job, self.report)
        copies = {}
        for e in plan.planned:
            result = self.results.get(e.key.file_name, "copied")
            if result == "copied":
                data = self.outs[e.key].contiguous().view(-1).view(torch.uint8)
                self.arenas[-1].tensor[e.arena_offset:e.arena_offset + data.numel()] = data
            copies[e.key.file_name] = result
        return json.dumps({"copies": copies})

    def run(self, receive=None):
        return run_handover("/spec.json", self.task, self.job, self.report, "cpu", self.sent.append,
                            receive or self.opener, self.factory)


class HostArena:
    """The arena on the host: what the opener copies into, as the CUDA one (judge/arena.Arena)."""

    def __init__(self, nbytes: int):
        self.tensor = torch.full((nbytes,), 0xAB, dtype=torch.uint8)    # not zeros: an uncopied view is garbage
        self.freed = 0

    def export(self) -> dict:
        return {"handle": "ef" * 64, "offset": 0, "nbytes": int(self.tensor.numel())}

    def free(self) -> None:
        self.freed += 1
        self.tensor = None


def _timed(trial, i):
    return dataclasses.replace(trial, index=TIMING_INDEX_BASE + i)


def _file_verdict(task, trial, out, tmp_path):
    """The same output written as a file and judged by the file path: (status, message)."""
    ins = inputs_mod.make_trial_inputs(task, trial, "cpu")
    d = inputs_mod.digest(ins)
    out_dir = tmp_path / "by_file"
    out_dir.mkdir(exist_ok=True)
    write_tensor(out_dir / "o.tensor", out)
    job = Job(task_id=task.id, dsl="triton", backend="cuda", source_file="/s.py", outputs_dir=str(out_dir),
              report_file="/r.json", trials=(trial,), timing=None)
    report = ChildReport(status=Status.OK, message="", trials=(TrialOutcome(
        index=trial.index, output_file="o.tensor", launches=1, programs=1, seconds=0.0, input_digest_before=d,
        input_digest_after=d),))
    r = check(task, job, report, "cpu")
    return r.status, r.message


# ---- the protocol in process -------------------------------------------------------------------------------

def test_copied_correct_outputs_are_judged_ok_from_the_arena_and_the_arena_is_freed(task, trials, tmp_path):
    timed = [_timed(trials[0], 0), _timed(trials[3], 1)]
    case = Case(task, trials, tmp_path, timed)
    result = case.run()
    assert result.status is Status.OK, result.message
    assert result.trials_checked == len(trials) + len(timed)      # the rechecks judged from the arena too
    line = case.sent[0]
    assert line["spec"] == "/spec.json" and line["handover"]["arena"] == {"handle": "ef" * 64, "offset": 0,
                                                                          "nbytes": line["handover"]["arena"]["nbytes"]}
    assert [r[:2] for r in line["handover"]["planned"]] == (
        [["trial", t.index] for t in trials] + [["recheck", t.index] for t in timed])
    assert len(case.arenas) == 1 and case.arenas[0].freed == 1
    # the references made for the plan are outside the check's parts: counted apart, not lost
    assert result.seconds["handover_references"] > 0 and "compare" in result.seconds


def test_the_arena_is_the_plans_size(task, trials, tmp_path):
    case = Case(task, trials[:2], tmp_path)
    case.run()
    plan = plan_outputs(case.job, case.report, task, lambda t: tuple(t.shape))
    assert case.sent[0]["handover"]["arena"]["nbytes"] == plan.arena_bytes > 0


@pytest.mark.parametrize("index", [0, 4])     # public, held out
def test_copied_wrong_bytes_are_the_file_paths_mismatch(task, trials, tmp_path, index):
    case = Case(task, trials, tmp_path)
    key = OutputKey(OutputKind.TRIAL, trials[index].index)
    wrong = case.outs[key].clone()
    wrong.view(-1)[3] += 5
    case.outs[key] = wrong
    result = case.run()
    assert (result.status, result.message) == _file_verdict(task, trials[index], wrong, tmp_path)
    assert result.status is Status.MISMATCH and result.trials_checked == index
    assert case.arenas[0].freed == 1


def test_a_refused_record_is_its_verdict_at_its_trials_turn(task, trials, tmp_path):
    """Trial 1's record claims float64: wrong_dtype with the file path's words, before trial 3's wrong bytes;
    and trial 0's wrong bytes come before trial 1's refusal."""
    case = Case(task, trials, tmp_path)
    k1, k3 = OutputKey(OutputKind.TRIAL, trials[1].index), OutputKey(OutputKind.TRIAL, trials[3].index)
    as_float64 = case.outs[k1].double()
    outcomes = list(case.report.trials)
    outcomes[1] = dataclasses.replace(outcomes[1], output_handle=Case.record(as_float64))
    case.report = dataclasses.replace(case.report, trials=tuple(outcomes))
    case.outs[k3] = case.outs[k3] + 1
    result = case.run()
    assert (result.status, result.message) == _file_verdict(task, trials[1], as_float64, tmp_path)
    assert result.status is Status.WRONG_DTYPE and result.trials_checked == 1
    assert result.failure is not None and result.failure.trial == trials[1]
    assert [r[1] for r in case.sent[0]["handover"]["planned"]] == [t.index for t in trials if t.index != 1]

    k0 = OutputKey(OutputKind.TRIAL, trials[0].index)
    case.outs[k0] = case.outs[k0] * 3 + 1
    case.sent.clear()
    assert case.run().status is Status.MISMATCH          # trial 0's turn comes first


@pytest.mark.parametrize("result", ["open_failed", "extent_refused", "copy_failed", "not_attempted"])
def test_a_planned_output_not_copied_is_a_protocol_error_at_its_turn(task, trials, tmp_path, result):
    case = Case(task, trials, tmp_path)
    case.results[OutputKey(OutputKind.TRIAL, trials[4].index).file_name] = result
    got = case.run()
    assert got.status is Status.PROTOCOL_ERROR and got.trials_checked == 4 and got.failure is None
    assert got.message == (f"trial 4 (held-out shape, {trials[4].dtype}, {trials[4].distribution} inputs): "
                           f"the child reported an output it did not hand over ({result})")
    assert case.arenas[0].freed == 1


def test_an_earlier_wrong_output_comes_before_a_later_uncopied_one(task, trials, tmp_path):
    case = Case(task, trials, tmp_path)
    case.results[OutputKey(OutputKind.TRIAL, trials[2].index).file_name] = "open_failed"
    k0 = OutputKey(OutputKind.TRIAL, trials[0].index)
    case.outs[k0] = case.outs[k0] + 1
    assert case.run().status is Status.MISMATCH


@pytest.mark.parametrize("line", [json.dumps({"abort": True}), ""])     # abort; the parent went away
def test_an_abort_gives_no_result_and_frees_the_arena(task, trials, tmp_path, line):
    case = Case(task, trials, tmp_path)
    assert case.run(lambda: line) is None
    assert len(case.sent) == 1 and case.arenas[0].freed == 1


def test_a_report_refused_as_a_whole_is_the_result_at_once_with_no_arena(task, trials, tmp_path):
    case = Case(task, trials[:2], tmp_path)
    twice = ShapeTiming(shape=trials[0].shape, dtype=trials[0].dtype, split=trials[0].split, kernel_ms=0.1,
                        kernel_spread=0.0, kernel_reps=1, library_ms=0.1, library_spread=0.0, library_reps=1,
                        launches_per_call=1, programs=1, recheck_trial=trials[0],
                        recheck_output_handle=Case.record(case.outs[OutputKey(OutputKind.TRIAL, trials[0].index)]))
    case.report = dataclasses.replace(case.report, timings=(twice,) * 3)   # 5 records for 2 trials, 0 timed
    result = case.run(lambda: pytest.fail("no go line is read"))
    assert result.status is Status.PROTOCOL_ERROR and "more than the job's 2 trials" in result.message
    assert "handover_references" in result.seconds
    assert case.sent == [] and case.arenas == []


@pytest.mark.parametrize("go", [
    lambda names: {"copies": {}},                                          # a planned output missing
    lambda names: {"copies": {**{n: "copied" for n in names}, "nonsense": "copied"}},
    lambda names: {"copies": "all"},
    lambda names: {"abort": False},
    lambda names: {"abort": True, "copies": {n: "copied" for n in names}},
])
def test_a_go_line_the_parent_never_sends_is_our_error_and_the_arena_is_freed(task, trials, tmp_path, go):
    case = Case(task, trials[:2], tmp_path)
    names = [OutputKey(OutputKind.TRIAL, t.index).file_name for t in trials[:2]]
    with pytest.raises(ValueError):
        case.run(lambda: json.dumps(go(names)))
    assert case.arenas[0].freed == 1


def test_a_result_outside_the_openers_is_our_error(task, trials, tmp_path):
    case = Case(task, trials[:1], tmp_path)
    case.results[OutputKey(OutputKind.TRIAL, trials[0].index).file_name] = "maybe"
    with pytest.raises(ValueError, match="are not among"):
        case.run()


def test_the_copy_results_are_the_openers():
    from kernelgym_gap.judge import opener
    assert handover_check.COPY_RESULTS == opener.RESULTS


def test_an_arena_that_cannot_be_made_is_announced_null(task, trials, tmp_path):
    case = Case(task, trials[:2], tmp_path)

    def failing(nbytes, device):
        raise arena_mod.ArenaError("out of device memory")
    got = run_handover("/spec.json", task, case.job, case.report, "cpu", case.sent.append,
                       lambda: json.dumps({"abort": True}), failing)
    assert got is None and case.sent[0]["handover"]["arena"] is None
    assert len(case.sent[0]["handover"]["planned"]) == 2


def test_copies_into_an_arena_never_exported_are_our_error(task, trials, tmp_path):
    case = Case(task, trials[:1], tmp_path)
    name = OutputKey(OutputKind.TRIAL, trials[0].index).file_name
    with pytest.raises(ValueError, match="never exported"):
        run_handover("/spec.json", task, case.job, case.report, "cpu", case.sent.append,
                     lambda: json.dumps({"copies": {name: "copied"}}), lambda n, d: None)


def test_file_outputs_beside_handed_ones_are_still_read(task, trials, tmp_path):
    case = Case(task, trials[:3], tmp_path)
    t = trials[1]
    write_tensor(tmp_path / "outputs" / "f.tensor", case.outs[OutputKey(OutputKind.TRIAL, t.index)] + 1)
    outcomes = list(case.report.trials)
    outcomes[1] = dataclasses.replace(outcomes[1], output_handle=None, output_file="f.tensor")
    case.report = dataclasses.replace(case.report, trials=tuple(outcomes))
    result = case.run()
    assert result.status is Status.MISMATCH and result.trials_checked == 1


def test_without_a_hand_over_a_handle_only_report_is_a_protocol_error(task, trials, tmp_path):
    """check() without `handed`: an outcome naming a handle no hand-over brought (the child exited before it was
    held, or forged the record) is protocol_error, not the wrong_type a missing file would read as."""
    case = Case(task, trials[:1], tmp_path)
    result = check(task, case.job, case.report, "cpu")
    assert result.status is Status.PROTOCOL_ERROR and "never handed over" in result.message


# ---- the plan on the wire --------------------------------------------------------------------------------

def test_the_plan_round_trips_through_the_wire_with_the_reports_records(task, trials, tmp_path):
    timed = [_timed(trials[0], 0)]
    case = Case(task, trials, tmp_path, timed)
    plan = plan_outputs(case.job, case.report, task, lambda t: tuple(t.shape), max_arena_bytes=40 * 77 * 4 + 4096)
    assert any(isinstance(e, NeedsFile) for e in plan.entries)
    rows = json.loads(json.dumps(plan_to_wire(plan)))
    back = plan_from_wire(rows, case.job, case.report)
    assert back.entries == tuple(e for e in plan.entries if isinstance(e, (Planned, NeedsFile)))
    assert back.arena_bytes <= plan.arena_bytes and back.arena_bytes % ARENA_ALIGN == 0


@pytest.mark.parametrize("row", [
    ["trial", 999, 0, "float32", [16, 128]],           # no record for it
    ["recheck", 0, 0, "float32", [16, 128]],
    ["output", 0, 0, "float32", [16, 128]],             # no such kind
    ["trial", 0, 3, "float32", [16, 128]],              # unaligned
    ["trial", 0, 0, "float32", [16, 129]],              # not the record's bytes
    ["trial", 0, 0, "float32"],
    "trial",
])
def test_a_row_the_checker_never_writes_is_a_value_error(task, trials, tmp_path, row):
    case = Case(task, trials[:1], tmp_path)
    assert trials[0].index == 0 and list(trials[0].shape) == [16, 128]
    with pytest.raises(ValueError):
        plan_from_wire([row], case.job, case.report)


def test_a_row_naming_an_output_twice_is_a_value_error(task, trials, tmp_path):
    case = Case(task, trials[:1], tmp_path)
    row = ["trial", 0, 0, "float32", [16, 128]]
    assert isinstance(plan_from_wire([row], case.job, case.report), Plan)
    with pytest.raises(ValueError, match="no handed-over output"):
        plan_from_wire([row, row], case.job, case.report)


# ---- the arena ---------------------------------------------------------------------------------------------

def test_the_arena_refuses_a_device_without_cuda_ipc_and_bad_sizes():
    with pytest.raises(arena_mod.ArenaError, match="has none"):
        arena_mod.Arena.allocate(1024, "cpu")
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError):
            arena_mod.Arena.allocate(bad, "cuda")
    assert arena_mod.device_arena(1024, "cpu") is None
    freed = arena_mod.Arena(tensor=None)
    with pytest.raises(arena_mod.ArenaError, match="freed"):
        freed.export()
    freed.free()                                       # idempotent


def test_freeing_an_exported_arena_releases_torchs_ipc_counter_once(monkeypatch, capsys):
    """torch keeps an exported block out of its allocator until a consumer releases the export's counter; the
    opener is no torch consumer, so `free` releases it (each arena of the warm checker stayed allocated to the
    checker's end before, 2026-12-07). A release that fails is said on stderr, never raised: it costs memory,
    not a verdict."""
    released = []

    def release(handle, offset, device=None):
        released.append((handle, offset, device))
    monkeypatch.setattr(torch.UntypedStorage, "_release_ipc_counter", release)
    arena = arena_mod.Arena(tensor=torch.zeros(64, dtype=torch.uint8), ref_counter=(b"/torch_1_2", 7))
    arena.free()
    arena.free()
    assert released == [(b"/torch_1_2", 7, torch.device("cpu"))] and arena.tensor is None

    def refuse(handle, offset, device=None):
        raise RuntimeError("no such counter file")
    monkeypatch.setattr(torch.UntypedStorage, "_release_ipc_counter", refuse)
    arena_mod.Arena(tensor=torch.zeros(64, dtype=torch.uint8), ref_counter=(b"/torch_1_3", 0)).free()
    assert "its IPC counter was not released (no such counter file)" in capsys.readouterr().err
    arena_mod.Arena(tensor=torch.zeros(64, dtype=torch.uint8)).free()     # never exported: nothing to release


class _FakeStorage:
    def __init__(self, events):
        self.events = events

    def _share_cuda_(self):
        self.events.append("share")
        return (0, b"\x02c" + bytes(range(64)), 4096, 512, b"/torch_9_9", 3, b"", False)


class _FakeCudaTensor:
    """What `export` reads of a cuda tensor, on a machine without one."""
    is_cuda = True
    device = torch.device("cuda", 0)

    def __init__(self, events):
        self.events = events

    def untyped_storage(self):
        return _FakeStorage(self.events)

    def storage_offset(self):
        return 0

    def element_size(self):
        return 1

    def numel(self):
        return 1024


def test_exporting_an_arena_waits_for_the_checkers_queued_kernels(monkeypatch):
    """The opener's copies are ordered with nothing on the checker's streams, and torch hands the arena a block
    that kernels still queued there may write (the references past precompute's bound, made and dropped just
    before). They then landed after the opener's copies: the hand-over's false non_finite of 2026-12-07. So
    the export returns only after the device is synchronized (the gpu test below shows the hazard itself)."""
    events = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: events.append(("sync", device)))
    arena = arena_mod.Arena(tensor=_FakeCudaTensor(events))
    record = arena.export()
    assert events == ["share", ("sync", torch.device("cuda", 0))]
    assert record == {"handle": bytes(range(64)).hex(), "offset": 512, "nbytes": 1024}
    assert arena.ref_counter == (b"/torch_9_9", 3)


def _arena_copy_after_queued_writes(synchronized: bool) -> torch.Tensor:
    """One hand-over by the real opener into an arena whose block was freed by a kernel still queued on this
    process's stream (a ~3 s spin, then a fill of 0x5A): what the arena holds afterwards. The source, 0x11,
    is exported by this process as a child's output is. `synchronized` False takes the export's wait out."""
    from kernelgym_gap.child.export import export_handle
    from kernelgym_gap.judge.opener_client import hand_over, start_opener, wait_ready
    n = 8 << 20
    source = torch.full((n,), 0x11, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    record = export_handle(source)
    opener = start_opener(torch.cuda.current_device())
    wait_ready(opener, 60.0)                  # its context is up before the spin starts
    old = torch.empty(n, dtype=torch.uint8, device="cuda")
    where = old.data_ptr()
    torch.cuda._sleep(6_000_000_000)          # cycles: 3 s at 2 GHz, longer at lower clocks
    old.fill_(0x5A)                           # queued behind the spin
    del old                                   # freed in stream order: the next allocation may take it
    arena = arena_mod.Arena.allocate(n, "cuda")
    assert arena.tensor.data_ptr() == where, "the allocator did not hand the freed block to the arena"
    real = torch.cuda.synchronize
    if not synchronized:
        torch.cuda.synchronize = lambda device=None: None
    try:
        exported = arena.export()
    finally:
        torch.cuda.synchronize = real
    trial = Trial(index=0, shape=(n,), dtype="uint8", seed=0, distribution="normal", split="public")
    plan = Plan(entries=(Planned(key=OutputKey(OutputKind.TRIAL, 0), trial=trial, record=record, arena_offset=0,
                                 dtype="uint8", shape=(n,)),), arena_bytes=n)
    done = hand_over(opener, plan, exported["handle"], 60.0, exported["offset"])
    assert [r.result for r in done.results] == ["copied"]
    torch.cuda.synchronize()
    got = arena.tensor.clone()
    arena.free()
    return got


@pytest.mark.gpu
def test_gpu_the_openers_copies_land_after_the_checkers_queued_kernels():
    """The regression of the false non_finite: with the export's wait, the arena holds the source's bytes."""
    got = _arena_copy_after_queued_writes(synchronized=True)
    assert bool((got == 0x11).all()), f"{int((got != 0x11).sum())} bytes are not the source's"


@pytest.mark.gpu
def test_gpu_without_the_exports_wait_queued_kernels_overwrite_the_copies():
    """The premise, so that the test above can fail: without the wait, the spin's fill lands after the copy."""
    got = _arena_copy_after_queued_writes(synchronized=False)
    assert bool((got == 0x5A).any()), "the queued fill did not overwrite the copy: the premise does not hold here"


@pytest.mark.gpu
def test_gpu_exported_arenas_go_back_to_the_allocator_when_freed():
    """The warm checker exports one arena per hand-over: twenty of 64 MiB, each exported and freed, leave the
    allocated memory where it was (before the release in `free`, each stayed in torch's limbo)."""
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    for _ in range(20):
        arena = arena_mod.Arena.allocate(64 << 20, "cuda")
        assert arena.export()["nbytes"] == 64 << 20 and arena.ref_counter is not None
        arena.free()
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() - before < 64 << 20, torch.cuda.memory_allocated() - before


# ---- through the warm checker's process (cpu: no arena there) ---------------------------------------------

@pytest.fixture(scope="module")
def warm():
    with WarmChecker(device="cpu") as w:
        yield w


def _spec(tmp_path, job, report, device="cpu", prefetch=False) -> tuple:
    private = tmp_path / "private"
    private.mkdir(exist_ok=True)
    (private / "job.json").write_text(job.to_json())
    (private / "report.json").write_text(report.to_json())
    result = private / "check.json"
    result.unlink(missing_ok=True)
    spec = {"job": str(private / "job.json"), "report": str(private / "report.json"), "result": str(result),
            "device": device, "handover": True, **({"prefetch": True} if prefetch else {})}
    (private / "check_spec.json").write_text(json.dumps(spec))
    return private / "check_spec.json", result


class Lane:
    def __init__(self):
        self.events: list[str] = []

    def __call__(self):
        import contextlib

        @contextlib.contextmanager
        def held():
            self.events.append("enter")
            yield
            self.events.append("exit")
        return held()


def test_warm_a_refused_only_hand_over_is_judged_inside_the_lane(warm, task, trials, tmp_path):
    case = Case(task, trials[:1], tmp_path)
    outcomes = (dataclasses.replace(case.report.trials[0], output_handle=Case.record(
        case.outs[OutputKey(OutputKind.TRIAL, trials[0].index)].half())),)
    case.report = dataclasses.replace(case.report, trials=outcomes)
    spec, result = _spec(tmp_path, case.job, case.report)
    lane, seen = Lane(), []

    def exchange(handover):
        seen.append((handover, list(lane.events)))
        return {"copies": {}}
    got = warm.hand_over_check(spec, result, 120, lane, exchange)
    assert got.status is Status.WRONG_DTYPE and "the output is torch.float16, expected torch.float32" in got.message
    assert seen == [({"arena": None, "planned": []}, ["enter"])] and lane.events == ["enter", "exit"]


def _file_then_refused(case, trials, tmp_path):
    """trial 0's output a file (past the device budget), trial 1's a record that is refused unopened."""
    write_tensor(tmp_path / "outputs" / "0.tensor", case.outs[OutputKey(OutputKind.TRIAL, trials[0].index)])
    first = dataclasses.replace(case.report.trials[0], output_handle=None, output_file="0.tensor")
    second = dataclasses.replace(case.report.trials[1], output_handle=Case.record(
        case.outs[OutputKey(OutputKind.TRIAL, trials[1].index)], dtype="complex64"))
    case.report = dataclasses.replace(case.report, trials=(first, second))


def test_warm_a_hand_over_reads_its_file_outputs_before_the_lane(warm, task, trials, tmp_path):
    """With `prefetch` the server reads the outputs that are files first and the lane is taken after (the H100
    light batch of 2026-12-07 read half its outputs under the lane); the check judges the file read then."""
    case = Case(task, trials[:2], tmp_path)
    _file_then_refused(case, trials, tmp_path)
    spec, result = _spec(tmp_path, case.job, case.report, prefetch=True)
    lane, seen = Lane(), []

    def exchange(handover):
        seen.append(list(lane.events))
        return {"copies": {}}
    got = warm.hand_over_check(spec, result, 120, lane, exchange, prefetch=True)
    # trial 0 from its file (read before the lane: the prefetch's seconds are in the result), then trial 1's verdict
    assert got.status is Status.PROTOCOL_ERROR and "the handed-over output's record" in got.message, got.message[-1500:]
    assert got.trials_checked == 1 and "prefetch" in got.seconds
    assert seen == [["enter"]] and lane.events == ["enter", "exit"]


def test_warm_a_hand_over_whose_lane_cannot_be_taken_after_the_read_ends_that_server(warm, task, trials,
                                                                                       tmp_path):
    case = Case(task, trials[:2], tmp_path)
    _file_then_refused(case, trials, tmp_path)
    spec, result = _spec(tmp_path, case.job, case.report, prefetch=True)
    starts = warm.starts

    def no_lane():
        raise TimeoutError("the lane was not free")
    with pytest.raises(TimeoutError):
        warm.hand_over_check(spec, result, 120, no_lane, lambda h: pytest.fail("no exchange"), prefetch=True)
    # that server waited for a "go": it was ended, and the next check runs on a fresh one
    got = warm.hand_over_check(spec, result, 120, None, lambda h: {"copies": {}}, prefetch=True)
    assert "the handed-over output's record" in got.message and warm.starts == starts + 1


def test_warm_a_spec_and_a_call_that_disagree_on_the_read_are_our_error_not_a_hang(warm, task, trials, tmp_path):
    case = Case(task, trials[:2], tmp_path)
    _file_then_refused(case, trials, tmp_path)
    spec, result = _spec(tmp_path, case.job, case.report)          # no prefetch in the spec
    got = warm.hand_over_check(spec, result, 120, None, lambda h: {"copies": {}}, prefetch=True)
    assert got.status is Status.PROTOCOL_ERROR and "the trusted checker failed" in got.message
    assert "the handed-over output's record" not in got.message
    # that server was ended; the next check, its spec and call agreeing, runs on a fresh one (and leaves it up)
    spec, result = _spec(tmp_path, case.job, case.report, prefetch=True)
    assert "the handed-over output's record" in warm.hand_over_check(spec, result, 120, None,
                                                                     lambda h: {"copies": {}}, prefetch=True).message


def test_warm_planned_outputs_without_an_arena_abort_and_the_server_goes_on(warm, task, trials, tmp_path):
    case = Case(task, trials[:2], tmp_path)
    spec, result = _spec(tmp_path, case.job, case.report)
    seen = []
    starts = warm.starts
    got = warm.hand_over_check(spec, result, 120, None, lambda h: seen.append(h) or {"abort": True})
    assert got is None and not result.exists()
    assert seen[0]["arena"] is None and [r[:2] for r in seen[0]["planned"]] == [["trial", t.index]
                                                                                for t in trials[:2]]
    # the same server answers the next check (by files here: the report as the fallback rewrites it)
    for t in trials[:2]:
        write_tensor(tmp_path / "outputs" / f"{t.index}.tensor", case.outs[OutputKey(OutputKind.TRIAL, t.index)])
    case.report = dataclasses.replace(case.report, trials=tuple(
        dataclasses.replace(o, output_handle=None, output_file=f"{o.index}.tensor") for o in case.report.trials))
    spec, result = _spec(tmp_path, case.job, case.report)
    spec.write_text(json.dumps({k: v for k, v in json.loads(spec.read_text()).items() if k != "handover"}))
    assert warm.check_spec(spec, result, 120).status is Status.OK
    assert warm.starts == starts


def test_warm_a_lane_that_cannot_be_taken_sends_nothing(warm, task, trials, tmp_path):
    """The lane is entered before the spec goes out: when it cannot be taken the server never saw the spec,
    keeps running, and answers the next check (it would otherwise read that check's line as its go line)."""
    case = Case(task, trials[:1], tmp_path)
    spec, result = _spec(tmp_path, case.job, case.report)
    starts = warm.starts

    def no_lane():
        raise TimeoutError("the lane was not free")
    with pytest.raises(TimeoutError):
        warm.hand_over_check(spec, result, 120, no_lane, lambda h: pytest.fail("no exchange"))
    got = warm.hand_over_check(spec, result, 120, None, lambda h: {"abort": True})
    assert got is None and warm.starts == starts


def test_warm_a_report_refused_as_a_whole_needs_no_exchange(warm, task, trials, tmp_path):
    case = Case(task, trials[:1], tmp_path)
    case.report = dataclasses.replace(case.report, trials=case.report.trials * 2)
    spec, result = _spec(tmp_path, case.job, case.report)
    got = warm.hand_over_check(spec, result, 120, None, lambda h: pytest.fail("no exchange"))
    assert got.status is Status.PROTOCOL_ERROR


def test_warm_a_checker_that_dies_mid_protocol_is_the_typed_failure_and_restarts(task, trials, tmp_path):
    import os
    import signal
    case = Case(task, trials[:2], tmp_path)
    spec, result = _spec(tmp_path, case.job, case.report)
    with WarmChecker(device="cpu") as w:
        def kill(handover):
            os.kill(w.pid, signal.SIGKILL)
            return {"copies": {OutputKey(OutputKind.TRIAL, t.index).file_name: "open_failed" for t in trials[:2]}}
        got = w.hand_over_check(spec, result, 120, None, kill)
        assert got.status is Status.PROTOCOL_ERROR and got.message.startswith("the trusted checker failed")
        assert w.starts == 1 and w.pid is None                      # not retried: the exchange already ran
        got = w.hand_over_check(spec, result, 120, None, lambda h: {"copies": {
            OutputKey(OutputKind.TRIAL, t.index).file_name: "open_failed" for t in trials[:2]}})
        assert got.status is Status.PROTOCOL_ERROR and "did not hand over (open_failed)" in got.message
        assert w.starts == 2

        def boom(handover):
            raise RuntimeError("the opener's thread failed")
        with pytest.raises(RuntimeError, match="opener's thread"):
            w.hand_over_check(spec, result, 120, None, boom)
        assert w.pid is None                                        # it waited for a go line: ended


def test_a_one_shot_checker_refuses_a_hand_over_spec(task, trials, tmp_path):
    import subprocess
    from kernelgym_gap.sandbox.child_io import backend_env
    from kernelgym_gap.sandbox.process import child_env
    case = Case(task, trials[:1], tmp_path)
    spec, result = _spec(tmp_path, case.job, case.report)
    proc = subprocess.run([sys.executable, "-m", "kernelgym_gap.judge.checker", str(spec)],
                          env=child_env(spec.parent, backend_env("cpu")), cwd=spec.parent, capture_output=True,
                          timeout=120)
    assert proc.returncode != 0 and b"answered only by the warm checker" in proc.stderr and not result.exists()


# ---- on a GPU: the real arena, a real exporter process and the real opener -------------------------------

_EXPORTER = r"""
import json, sys, torch
from kernelgym_gap.core import inputs as inputs_mod
from kernelgym_gap.core.record import Job
from kernelgym_gap.core.registry import find_task
job = Job.from_json(open(sys.argv[1]).read())
task = find_task(job.task_id, job.tasks_dir)
keep, rows = [], []
for t in job.trials:
    ins = inputs_mod.make_trial_inputs(task, t, "cuda")
    with torch.no_grad():
        out = task.reference(*ins).clone()
    if t.index == int(sys.argv[2]):
        out.view(-1)[0] += 7                  # one wrong output: its mismatch must be seen through the copy
    keep.append(out)
    share = out.untyped_storage()._share_cuda_()
    raw = bytes(share[1])[-64:]
    rows.append({"index": t.index, "digest": inputs_mod.digest(ins), "handle": raw.hex(),
                 "offset": int(share[3]) + out.storage_offset() * out.element_size(),
                 "nbytes": out.numel() * out.element_size(), "dtype": str(out.dtype).removeprefix("torch."),
                 "shape": list(out.shape)})
torch.cuda.synchronize()
print(json.dumps(rows), flush=True)
sys.stdin.readline()                          # holds the outputs until the test is done
"""


@pytest.mark.gpu
@pytest.mark.parametrize("wrong", [-1, 1])
def test_gpu_hand_over_check_end_to_end(task, tmp_path, wrong):
    """WarmChecker(cuda).hand_over_check with a real exporter process (the outputs' legacy IPC handles from
    torch's _share_cuda_, as child/export.py exports them) and the real opener copying into the real arena:
    an honest child's outputs are ok; one wrong element is the mismatch of that trial."""
    import subprocess
    from kernelgym_gap.judge.opener_client import hand_over, start_opener, wait_ready
    gpu_trials = make_trials(task, "cuda", EvalConfig(seeds_per_shape=1), random.Random(0))[:4]
    job = Job(task_id=task.id, dsl="triton", backend="cuda", source_file=str(tmp_path / "s.py"),
              outputs_dir=str(tmp_path), report_file=str(tmp_path / "r.json"), trials=tuple(gpu_trials), timing=None)
    (tmp_path / "job.json").write_text(job.to_json())
    opener = None
    exporter = subprocess.Popen([sys.executable, "-c", _EXPORTER, str(tmp_path / "job.json"), str(wrong)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        rows = json.loads(exporter.stdout.readline())
        report = ChildReport(status=Status.OK, message="", trials=tuple(TrialOutcome(
            index=r["index"], output_file=None, launches=1, programs=1, seconds=0.0, input_digest_before=r["digest"],
            input_digest_after=r["digest"], output_handle=OutputHandle(handle=r["handle"], offset=r["offset"],
                                                                       nbytes=r["nbytes"], dtype=r["dtype"],
                                                                       shape=tuple(r["shape"]))) for r in rows))
        spec, result = _spec(tmp_path, job, report, "cuda")
        opener = start_opener(0)
        wait_ready(opener, 60)

        def exchange(handover):
            plan = plan_from_wire(handover["planned"], job, report)
            got = hand_over(opener, plan, handover["arena"]["handle"], 60, handover["arena"]["offset"])
            return {"copies": {c.key.file_name: c.result for c in got.results}}
        with WarmChecker(device="cuda") as w:
            got = w.hand_over_check(spec, result, 300, None, exchange)
    finally:
        if opener is not None and opener.poll() is None:
            opener.kill()
            opener.wait()
        exporter.stdin.close()
        exporter.wait(timeout=60)
    if wrong < 0:
        assert got.status is Status.OK and got.trials_checked == len(gpu_trials), got.message
    else:
        assert got.status is Status.MISMATCH and got.trials_checked == wrong, got.message
