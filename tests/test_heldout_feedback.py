"""Issue 31, finding 5: agent-facing text never reveals held-out shapes or seeds. A failure on a held-out shape
said `heldout shape [3, 96]`, its seed and a `reproduce(...)` line in `message`, the agent's feedback. Now the
message names the case in kind; the record keeps the trial (`failure.trial`, `failure.reproduce`) for people.

Over the message builders: the trusted checker for every failure kind it can give on a held-out trial, the
texts other stages and the child write (a runtime error, a Triton/torch error printing the tensor's size, a
stage deadline, the timing flags), and end to end through the engine, the environment's observation and the
trainers' feedback text."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from kernelgym_gap.core import inputs as inputs_mod
from kernelgym_gap.core import tensor_file
from kernelgym_gap.core.config import EvalConfig
from kernelgym_gap.core.record import ChildReport, EvalRecord, Job, Trial, TrialOutcome
from kernelgym_gap.core.status import Status
from kernelgym_gap.core.task import Workload
from kernelgym_gap.engine import feedback
from kernelgym_gap.judge import checker

from conftest import FIXTURES

PUBLIC = ((16, 128), (4, 256))     # row lengths a power of two: the fixtures fail on the held-out shape only
HELD = (37, 96)
SEED = 987654321
TRIAL = Trial(index=0, shape=HELD, dtype="float32", seed=SEED, distribution="normal", split="heldout")
SECRETS = feedback.secrets_of([TRIAL], PUBLIC)


@pytest.fixture(scope="module")
def task(registry):
    t = registry.get("kernelgym_gap/LayerNorm-v1")
    return dataclasses.replace(t, workloads={**t.workloads, "cpu": Workload(public=PUBLIC, heldout=(HELD,),
                                                                            dtypes=("float32",))})


def test_the_secrets_are_the_held_out_shapes_seeds_dims_and_sizes():
    assert SECRETS.shapes == (HELD,) and SECRETS.seeds == {SEED}
    assert SECRETS.dims == {37, 96} and SECRETS.sizes == {37 * 96}
    public = Trial(index=1, shape=(16, 128), dtype="float32", seed=5, distribution="normal", split="public")
    assert not feedback.secrets_of([public], PUBLIC)          # nothing to hide without a held-out trial
    # a held-out dimension that a public shape has too tells nothing by itself
    assert feedback.secrets_of([dataclasses.replace(TRIAL, shape=(16, 96))], PUBLIC).dims == {96}


# ------------------------------------------------------------------- the trusted checker, kind by kind

def _check(task, tmp_path, out: torch.Tensor | None, **outcome):
    ins = inputs_mod.make_trial_inputs(task, TRIAL, "cpu")
    d = inputs_mod.digest(ins)
    fields = dict(index=0, output_file="trial_0.tensor", launches=1, programs=37, seconds=0.1,
                  input_digest_before=d, input_digest_after=d)
    fields.update(outcome)
    if out is not None:
        tensor_file.write_tensor(tmp_path / "trial_0.tensor", out)
    job = Job(task_id=task.id, dsl="triton", backend="cpu", source_file="x.py", outputs_dir=str(tmp_path),
              report_file=str(tmp_path / "report.json"), trials=(TRIAL,), timing=None)
    report = ChildReport(status=Status.OK, message="", trials=(TrialOutcome(**fields),))
    return checker.check(task, job, report, "cpu"), ins


def _outputs(task):
    ins = inputs_mod.make_trial_inputs(task, TRIAL, "cpu")
    ref = task.reference(*ins)
    nan = ref.clone()
    nan[3, 5] = float("nan")
    return {
        Status.WRONG_DTYPE: (ref.double(), {}),
        Status.WRONG_SHAPE: (ref.reshape(-1), {}),
        Status.NON_FINITE: (nan, {}),
        Status.ALL_ZERO: (torch.zeros_like(ref), {}),
        Status.MISMATCH: (ref * 1.5 + 0.1, {}),
        Status.INPUT_MUTATED: (ref, {"input_digest_after": "changed"}),
        Status.WRONG_TYPE: (None, {"output_file": None, "output_type": "builtins.list"}),
        Status.OUTPUT_ALIASES_INPUT: (ref, {"output_aliases_input": True}),
        Status.PROTOCOL_ERROR: (None, {"output_file": "missing.tensor"}),
    }


@pytest.mark.parametrize("status", [s for s in checker_kinds] if (checker_kinds := [
    Status.WRONG_DTYPE, Status.WRONG_SHAPE, Status.NON_FINITE, Status.ALL_ZERO, Status.MISMATCH,
    Status.INPUT_MUTATED, Status.WRONG_TYPE, Status.OUTPUT_ALIASES_INPUT, Status.PROTOCOL_ERROR]) else [],
    ids=lambda s: s.value)
def test_a_held_out_failure_of_the_checker_names_the_case_in_kind_only(task, tmp_path, status):
    out, outcome = _outputs(task)[status]
    result, _ = _check(task, tmp_path, out, **outcome)
    assert result.status is status, result.message
    assert feedback.reveals(result.message, SECRETS, dims=True) == [], result.message
    assert "reproduce(" not in result.message
    if status not in (Status.PROTOCOL_ERROR,):
        assert "held-out shape, float32, normal inputs" in result.message, result.message
    if result.failure is not None and result.failure.trial is not None:
        assert result.failure.trial == TRIAL                       # the record keeps the whole trial
    if result.failure is not None and result.failure.reproduce is not None:
        assert f"shape={HELD!r}" in result.failure.reproduce and f"seed={SEED}" in result.failure.reproduce


def test_a_held_out_mismatch_keeps_its_statistics_and_values_without_indices(task, tmp_path):
    result, _ = _check(task, tmp_path, _outputs(task)[Status.MISMATCH][0])
    msg = result.message
    assert "% of the elements differ" in msg and "max abs err" in msg and "expected " in msg
    f = result.failure
    assert 0.9 * 37 * 96 < f.bad_elements <= 37 * 96 and len(f.first_bad) == 3 and f.max_abs_err > 0
    assert f"{f.mismatched_fraction:.2%} of the elements" in msg


def test_a_public_failure_keeps_its_shape_seed_and_reproduce_line(task, tmp_path):
    public = dataclasses.replace(TRIAL, shape=(16, 128), split="public", seed=11)
    ins = inputs_mod.make_trial_inputs(task, public, "cpu")
    d = inputs_mod.digest(ins)
    tensor_file.write_tensor(tmp_path / "trial_0.tensor", task.reference(*ins) * 2 + 1)
    job = Job(task_id=task.id, dsl="triton", backend="cpu", source_file="x.py", outputs_dir=str(tmp_path),
              report_file=str(tmp_path / "r.json"), trials=(public,), timing=None)
    report = ChildReport(status=Status.OK, message="", trials=(TrialOutcome(
        index=0, output_file="trial_0.tensor", launches=1, programs=16, seconds=0.1, input_digest_before=d,
        input_digest_after=d),))
    result = checker.check(task, job, report, "cpu")
    assert "public shape [16, 128]" in result.message and "seed 11" in result.message
    assert result.message.splitlines()[-1] == f"inputs: {result.failure.reproduce}"


# ------------------------------------------------------- other stages' and the child's text, scrubbed

CHILD_TEXTS = [
    # the child's own wording of a runtime error on the trial, and the submission's traceback
    f"trial 0 (heldout shape [37, 96], float32, normal inputs, seed {SEED}): RuntimeError: shape '[37, 95]' is "
    "invalid for input of size 3552\nTraceback (the submission's frames):\n  File \"submission.py\", line 9\n"
    "    x.view(37, 95)",
    # torch / Triton errors that print a tensor's size
    "ValueError: The expanded size of the tensor (96) must match the existing size (128) at non-singleton "
    "dimension 1.  Target sizes: [37, 96].  Tensor sizes: [128]",
    "IndexError: index 96 is out of bounds for dimension 1 with size 96",
    "AssertionError: expected torch.Size([37, 96]), got a 37x96 block (3552 elements)",
    "CompilationError: at 3:10: tl.arange(0, 96) arange's range must be a power of 2",
    # a stage deadline's wording (sandbox/deadlines.py) and the timing's flags (judge/measure.py)
    "trial 0 (first call of its shape): heldout shape [37, 96], float32, ran past its 60 s stage deadline",
    "timing stopped early at [37, 96] float32: >50x slower than the library",
    f"kernelgym_gap.reproduce('kernelgym_gap/LayerNorm-v1', shape=(37, 96), dtype='float32', seed={SEED}, "
    "distribution='normal')",
]


@pytest.mark.parametrize("text", CHILD_TEXTS)
def test_child_and_stage_text_loses_every_held_out_number(text):
    assert feedback.reveals(text, SECRETS, dims=True), "the sample must hold a secret to begin with"
    clean = feedback.scrub(text, SECRETS, dims=True)
    assert feedback.reveals(clean, SECRETS, dims=True) == [], clean
    # the parent's own words are kept: only the secrets go
    assert clean.count("<held-out") >= 1


def test_scrubbing_leaves_public_shapes_and_unrelated_numbers():
    text = "public shape [16, 128] fine; [4, 256] fine; atol=0.0001, max abs err 2.49e+03, 960 of 9600"
    assert feedback.scrub(text, SECRETS, dims=True) == text


def test_the_record_scrubs_every_stage_and_fills_reproduce(task):
    """Evaluation.record: the verdict's message as the agent reads it, the failure for people."""
    from kernelgym_gap.core.backend import backend as backend_info
    from kernelgym_gap.core.record import FailureDetail
    from kernelgym_gap.engine.evaluation import Evaluation
    from kernelgym_gap.engine.stages import Verdict
    ev = Evaluation(task, b"", "triton", backend_info("cpu"), EvalConfig())
    ev.trials = (TRIAL,)
    for stage in ("child_report", "sandbox", "too_slow", "trusted_check", "score"):
        for text in CHILD_TEXTS:
            verdict = Verdict(stage, Status.RUNTIME_ERROR, text, failure=FailureDetail(trial=TRIAL, traceback_tail=text))
            record = ev.record(verdict)
            child_text = stage not in ("trusted_check", "score")
            assert feedback.reveals(record.message, SECRETS, dims=child_text) == [], (stage, record.message)
            assert record.failure.trial == TRIAL and f"seed={SEED}" in record.failure.reproduce


def test_public_view_drops_held_out_details_and_keeps_public_ones():
    record = {"failure": {"trial": dataclasses.asdict(TRIAL), "reproduce": "kernelgym_gap.reproduce(...)",
                          "first_bad": [{"index": [36, 95], "expected": 1.0, "got": 2.0}],
                          "traceback_tail": "size 96"},
              "terms": {"per_shape": [{"shape": [16, 128], "split": "public", "E": 1.0, "min_bytes": 10},
                                      {"shape": [37, 96], "split": "heldout", "E": 2.0, "U": 0.5,
                                       "min_bytes": 28416, "programs": 37, "kernel_ms": 0.1}]}}
    view = feedback.public_view(record)
    text = json.dumps(view)
    assert feedback.reveals(text, SECRETS, dims=True) == [], text
    assert view["terms"]["per_shape"][0] == record["terms"]["per_shape"][0]
    assert view["terms"]["per_shape"][1]["E"] == 2.0 and view["failure"]["trial"]["split"] == "heldout"
    assert record["failure"]["reproduce"] == "kernelgym_gap.reproduce(...)"      # the original is untouched


# ----------------------------------------------------------------------------------- end to end (cpu)

@pytest.mark.parametrize("name, status", [("runtime_error_prints_shape.py", Status.RUNTIME_ERROR),
                                          ("mismatch_off_power_of_two.py", Status.MISMATCH)])
def test_end_to_end_the_agent_reads_the_case_in_kind_and_people_get_the_trial(task, name, status):
    from kernelgym_gap.api.env import feedback_text, observation_text
    from kernelgym_gap.engine.pipeline import evaluate
    source = (FIXTURES / "heldout" / name).read_text()
    record = evaluate(task, source, "triton", "cpu", EvalConfig(trial_seed=7, seeds_per_shape=1))
    assert record.status is status, record.message
    trial = record.failure.trial
    assert trial.split == "heldout" and tuple(trial.shape) == HELD
    secrets = feedback.secrets_of([trial], PUBLIC)
    agent_text = [record.message, feedback_text(record),
                  observation_text(task, "triton", "cpu", 1, 4, feedback_text(record))]
    for text in agent_text:
        assert feedback.reveals(text, secrets, dims=True) == [], text
    assert "held-out" in record.message
    assert f"shape={HELD!r}" in record.failure.reproduce and f"seed={trial.seed}" in record.failure.reproduce
    # the call people get regenerates the very inputs the trial ran on
    import kernelgym_gap
    ins = eval(record.failure.reproduce, {"kernelgym_gap": kernelgym_gap})       # noqa: S307 - our own record
    assert tuple(ins[0].shape) == HELD
    assert EvalRecord.from_json(record.to_json()) == record


def test_the_envs_info_is_the_public_view_and_last_record_keeps_the_trial(task):
    """info reaches the agent (trainers log it, tool envs return it): its record and terms are the public
    view; the whole record stays on env.unwrapped.last_record for people."""
    from kernelgym_gap.api.env import KernelEnv
    from kernelgym_gap.engine.pipeline import evaluate
    source = (FIXTURES / "heldout" / "runtime_error_prints_shape.py").read_text()

    def evaluator(_task, src, dsl, backend, _config):
        return evaluate(task, src, dsl, backend, EvalConfig(trial_seed=7, seeds_per_shape=1))

    env = KernelEnv(task_id="LayerNorm", backend="cpu", evaluator=evaluator)
    env.reset(seed=0)
    _, reward, _, _, info = env.step(source)
    full = env.unwrapped.last_record
    assert reward == 0.0 and full.failure.trial.split == "heldout" and tuple(full.failure.trial.shape) == HELD
    secrets = feedback.secrets_of([full.failure.trial], PUBLIC)
    assert feedback.reveals(json.dumps(info, default=str), secrets, dims=True) == []
    assert info["record"]["failure"]["trial"]["split"] == "heldout"
    assert info["record"]["failure"]["reproduce"] is None and full.failure.reproduce
