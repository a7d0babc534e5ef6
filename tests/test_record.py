"""The versioned records that cross every process boundary: JSON round trips, and strict parsing of what
comes back (a child's report is hostile input)."""
import json

import pytest

from kernelgym_gap.core.errors import ProtocolError
from kernelgym_gap.core.record import (SCHEMA_VERSION, CheckResult, ChildReport, EvalRecord, FailureDetail, Job,
                                  KernelSpec, ShapeTiming, TimingConfig, Trial, TrialOutcome)
from kernelgym_gap.core.status import Status

TRIAL = Trial(index=3, shape=(16, 128), dtype="float16", seed=12345, distribution="offset", split="heldout")
SPEC = KernelSpec(module="submission", qualname="_row_kernel", source_sha256="cd" * 32,
                  signature={"x_ptr": "*fp16", "n": "i32", "BLOCK": "constexpr", "eps": "fp32"},
                  constexprs={"BLOCK": 128}, options={"num_warps": 4})


def _record(**kw):
    base = dict(task="kernelgym_gap/LayerNorm-v0", task_version=0, dsl="triton", backend="cpu",
                status=Status.MISMATCH, correct=False, reward=0.0, reward_mode="correctness",
                terms={"E": None, "U": None, "per_shape": [{"shape": [16, 128], "ms": 0.5}], "flags": ["x"]},
                message="differs", failure=FailureDetail(trial=TRIAL, max_abs_err=0.5, max_rel_err=2.0,
                                                         mismatched_fraction=0.25, traceback_tail="tb"),
                diagnosis={"verdict": "efficient"}, trials_checked=4, device={"kind": "cpu"},
                versions={"torch": "2.13.0"}, sandbox_layers=("session", "bwrap"),
                latency={"child": 1.5, "total": 2.0}, source_sha256="ab" * 32, created_at="2026-12-02T00:00:00+00:00")
    base.update(kw)
    return EvalRecord(**base)


def _job(**kw):
    base = dict(task_id="kernelgym_gap/LayerNorm-v0", dsl="triton", backend="cuda", source_file="/s/submission.py",
                outputs_dir="/s/outputs", report_file="/s/report.json", trials=(TRIAL, TRIAL),
                timing=TimingConfig(n_input_sets=2),
                timing_trials=(Trial(10000, (4, 4), "float32", 1, "normal", "public"),), mode="compile_specs",
                specs=(SPEC,))
    base.update(kw)
    return Job(**base)


def _report(**kw):
    timing = ShapeTiming(shape=(16, 128), dtype="float16", split="public", kernel_ms=0.1, kernel_spread=0.01,
                         kernel_reps=50, library_ms=0.2, library_spread=0.02, library_reps=50, launches_per_call=1,
                         programs=16, recheck_output_file="recheck_0.tensor", recheck_trial=TRIAL)
    base = dict(status=Status.OK, message="", trials=(TrialOutcome(0, "trial_0.tensor", 1, 16, 0.1, "a" * 64, "a" * 64),),
                timings=(timing,), integrity=("none",), phases={"setup": 1.0}, device={"kind": "cuda", "sm": 132},
                versions={"triton": "3.7.1"}, failed_trial=None, launched=(SPEC,))
    base.update(kw)
    return ChildReport(**base)


# ---- round trips ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("make,cls", [(_record, EvalRecord), (_job, Job), (_report, ChildReport)])
def test_round_trip(make, cls):
    obj = make()
    text = obj.to_json()
    again = cls.from_json(text)
    assert again == obj
    assert again.to_json() == text
    assert cls.from_json(text.encode()) == obj            # bytes, as read from a file
    assert cls.from_dict(obj.to_dict()) == obj


def test_round_trip_minimal_and_none_fields():
    r = _record(status=Status.UNVERIFIED, correct=None, failure=None, diagnosis=None)
    assert EvalRecord.from_json(r.to_json()) == r
    job = _job(timing=None, timing_trials=(), mode="evaluate")
    assert Job.from_json(job.to_json()) == job
    rep = ChildReport(status=Status.CRASH, message="m")
    assert ChildReport.from_json(rep.to_json()) == rep


def test_check_result_round_trip():
    c = CheckResult(status=Status.WRONG_SHAPE, message="m", trials_checked=1, failure=FailureDetail(trial=TRIAL))
    assert CheckResult.from_json(c.to_json()) == c


def test_json_is_plain_and_versioned():
    d = json.loads(_record().to_json())
    assert d["schema"] == "kernelgym_gap.record" and d["schema_version"] == SCHEMA_VERSION
    assert d["status"] == "mismatch"                      # the enum as its value
    assert d["failure"]["trial"]["shape"] == [16, 128]    # tuples as lists
    assert json.loads(_job().to_json())["schema"] == "kernelgym_gap.job"
    assert json.loads(_report().to_json())["schema"] == "kernelgym_gap.child_report"


def test_record_ok_property():
    assert _record(status=Status.OK, correct=True, reward=1.0).ok
    assert not _record().ok


# ---- strict parsing ------------------------------------------------------------------------------------

def _rejects(cls, data):
    with pytest.raises(ProtocolError):
        cls.from_json(json.dumps(data))


@pytest.mark.parametrize("mutate", [
    pytest.param(lambda d: d.update(extra=1), id="unknown-top-field"),
    pytest.param(lambda d: d["failure"].update(hint="x"), id="unknown-nested-field"),
    pytest.param(lambda d: d["failure"]["trial"].update(device="cuda"), id="unknown-deep-field"),
    pytest.param(lambda d: d.pop("task"), id="missing-field"),
    pytest.param(lambda d: d.update(reward="1.0"), id="reward-string"),
    pytest.param(lambda d: d.update(reward=True), id="reward-bool"),
    pytest.param(lambda d: d.update(correct="yes"), id="correct-string"),
    pytest.param(lambda d: d.update(correct=1), id="correct-int"),
    pytest.param(lambda d: d.update(task_version="0"), id="version-string"),
    pytest.param(lambda d: d.update(task_version=True), id="int-bool"),
    pytest.param(lambda d: d.update(trials_checked=4.0), id="int-float"),
    pytest.param(lambda d: d.update(status="great"), id="unknown-status"),
    pytest.param(lambda d: d.update(status=None), id="status-null"),
    pytest.param(lambda d: d.update(sandbox_layers="session"), id="tuple-string"),
    pytest.param(lambda d: d.update(sandbox_layers=[1]), id="tuple-item-type"),
    pytest.param(lambda d: d.update(latency=[1.0]), id="dict-list"),
    pytest.param(lambda d: d.update(latency={"child": "slow"}), id="dict-value-type"),
    pytest.param(lambda d: d["failure"]["trial"].update(shape=[16, "128"]), id="shape-item-type"),
    pytest.param(lambda d: d.update(failure="bad"), id="nested-not-object"),
    pytest.param(lambda d: d.update(schema_version=SCHEMA_VERSION + 1), id="schema-version"),
    pytest.param(lambda d: d.update(schema_version=str(SCHEMA_VERSION)), id="schema-version-string"),
    pytest.param(lambda d: d.pop("schema_version"), id="no-schema-version"),
    pytest.param(lambda d: d.update(schema="kernelgym_gap.child_report"), id="other-schema"),
    pytest.param(lambda d: d.pop("schema"), id="no-schema"),
])
def test_eval_record_from_json_rejects(mutate):
    d = _record().to_dict()
    mutate(d)
    _rejects(EvalRecord, d)


@pytest.mark.parametrize("mutate", [
    pytest.param(lambda d: d["trials"][0].update(launches="1"), id="launches-string"),
    pytest.param(lambda d: d["trials"][0].update(output_aliases_input=0), id="bool-int"),
    pytest.param(lambda d: d["trials"][0].update(secret=1), id="outcome-unknown-field"),
    pytest.param(lambda d: d["timings"][0].update(kernel_ms="fast"), id="timing-string"),
    pytest.param(lambda d: d.update(failed_trial=1.5), id="failed-trial-float"),
    pytest.param(lambda d: d.update(status="faster"), id="unknown-status"),
    pytest.param(lambda d: d.update(schema="kernelgym_gap.record"), id="record-schema"),
    pytest.param(lambda d: d["launched"][0].update(signature={"n": 32}), id="spec-signature-int"),
    pytest.param(lambda d: d["launched"][0].pop("source_sha256"), id="spec-without-source"),
])
def test_child_report_from_json_rejects(mutate):
    d = _report().to_dict()
    mutate(d)
    _rejects(ChildReport, d)


def test_job_from_json_rejects():
    d = _job().to_dict()
    d["timing"]["flush_l2"] = "yes"
    _rejects(Job, d)
    d = _job().to_dict()
    d["trials"][0]["split"] = 1
    _rejects(Job, d)
    d = _job().to_dict()
    d["schema_version"] = 0
    _rejects(Job, d)


@pytest.mark.parametrize("text", ["{not json", "", "[]", "null", '"report"', "42", b"\xff\xfe"])
def test_not_a_json_object(text):
    with pytest.raises(ProtocolError):
        ChildReport.from_json(text)


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_child_report_rejects_non_json_number_constants(constant):
    """JSON has no NaN or Infinity. Python's json.loads accepts them by default; a hostile child that
    writes `"phases": {"total": Infinity}` must not get a value past from_json that the parent's own
    to_json (allow_nan=False) then cannot write."""
    text = _report().to_json().replace('"setup": 1.0', f'"setup": {constant}')
    assert constant in text
    with pytest.raises(ProtocolError):
        ChildReport.from_json(text)


def test_to_json_writes_standard_json_only():
    r = _record(latency={"child": float("nan")})
    assert json.loads(r.to_json())["latency"]["child"] is None


def test_kernel_spec_key_is_its_content():
    """The compile probe compares what was launched with what it compiled by this key: equal content, equal
    key, whatever the dict order; another source or constexpr value, another key."""
    same = KernelSpec(module="submission", qualname="_row_kernel", source_sha256="cd" * 32,
                      signature=dict(reversed(list(SPEC.signature.items()))), constexprs={"BLOCK": 128},
                      options={"num_warps": 4})
    assert same.key() == SPEC.key()
    assert KernelSpec(**{**SPEC.__dict__, "source_sha256": "ef" * 32}).key() != SPEC.key()
    assert KernelSpec(**{**SPEC.__dict__, "constexprs": {"BLOCK": 256}}).key() != SPEC.key()


def test_the_first_trial_of_each_shape_and_dtype_is_the_one_that_compiles():
    from kernelgym_gap.core.record import Trial, first_of_their_shape
    t = lambda i, shape, dtype: Trial(index=i, shape=shape, dtype=dtype, seed=i, distribution="normal",  # noqa: E731
                                      split="public")
    trials = [t(0, (4, 8), "float16"), t(1, (4, 8), "float16"), t(2, (4, 8), "float32"), t(3, [4, 8], "float32"),
              t(4, (2, 8), "float16")]
    assert first_of_their_shape(trials) == {0, 2, 4}
    assert first_of_their_shape(()) == frozenset()


def test_job_outputs_by_handle_round_trips_and_defaults_off_for_old_job_json():
    job = _job(outputs_by_handle=True)
    assert Job.from_json(job.to_json()).outputs_by_handle is True
    d = _job().to_dict()
    assert d["outputs_by_handle"] is False
    del d["outputs_by_handle"]                      # a job written before the field existed
    assert Job.from_dict(d).outputs_by_handle is False
    d["outputs_by_handle"] = "yes"
    _rejects(Job, d)
