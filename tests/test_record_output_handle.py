"""The record of an output handed over on the device (core/output_handle.py) inside the child's report
(core/record.py: TrialOutcome.output_handle, ShapeTiming.recheck_output_handle): JSON round trips, and a
malformed record failing the report's parsing as every other malformed field does (ProtocolError, which the
parent turns into protocol_error, or crash with a non-zero exit), never reaching Python objects of the wrong
type. docs/measurement.md, "The outputs handed over on the device", protocol point 2."""
import json

import pytest

from kernelgym_gap.core import output_handle, tensor_file
from kernelgym_gap.core.errors import ProtocolError
from kernelgym_gap.core.record import (CHILD_REPORT_VERSION, ChildReport, OutputHandle, ShapeTiming, Trial,
                                       TrialOutcome)
from kernelgym_gap.core.status import Status
from kernelgym_gap.sandbox.child_io import MAX_REPORT_BYTES

HANDLE = "0123456789abcdef" * 8
TRIAL = Trial(index=10000, shape=(16, 128), dtype="float16", seed=7, distribution="normal", split="public")


def _handle(**kw) -> OutputHandle:
    base = dict(handle=HANDLE, offset=512, nbytes=16 * 128 * 2, dtype="float16", shape=(16, 128))
    base.update(kw)
    return OutputHandle(**base)


def _report(**kw) -> ChildReport:
    timing = ShapeTiming(shape=(16, 128), dtype="float16", split="public", kernel_ms=0.1, kernel_spread=0.01,
                         kernel_reps=50, library_ms=0.2, library_spread=0.02, library_reps=50, launches_per_call=1,
                         programs=16, recheck_trial=TRIAL, recheck_output_handle=_handle(offset=0))
    base = dict(status=Status.OK, message="",
                trials=(TrialOutcome(0, None, 1, 16, 0.1, "a" * 64, "a" * 64, output_handle=_handle()),),
                timings=(timing,))
    base.update(kw)
    return ChildReport(**base)


def test_a_report_with_handles_round_trips():
    rep = _report()
    again = ChildReport.from_json(rep.to_json())
    assert again == rep
    assert type(again.trials[0].output_handle) is OutputHandle
    assert again.trials[0].output_handle.shape == (16, 128)          # a tuple again, not the JSON list
    assert again.timings[0].recheck_output_handle == _handle(offset=0)
    assert ChildReport.from_json(rep.to_json().encode()) == rep


def test_a_report_without_handles_parses_as_before_at_the_same_version():
    """The fields are optional and their absence means the file path: an old report still parses, so the
    version stays (CHILD_REPORT_VERSION's comment)."""
    d = _report().to_dict()
    del d["trials"][0]["output_handle"]
    del d["timings"][0]["recheck_output_handle"]
    rep = ChildReport.from_json(json.dumps(d))
    assert rep.trials[0].output_handle is None and rep.timings[0].recheck_output_handle is None
    assert d["schema_version"] == CHILD_REPORT_VERSION == 2


def test_the_dims_bound_is_the_tensor_files():
    assert output_handle.MAX_DIMS == tensor_file.MAX_DIMS


@pytest.mark.parametrize("mutate", [
    pytest.param(lambda h: h.update(handle="g" + HANDLE[1:]), id="non-hex"),
    pytest.param(lambda h: h.update(handle=HANDLE.upper()), id="upper-case"),
    pytest.param(lambda h: h.update(handle=HANDLE[:127]), id="127-digits"),
    pytest.param(lambda h: h.update(handle=HANDLE + "0"), id="129-digits"),
    pytest.param(lambda h: h.update(handle=HANDLE[:127] + "\n"), id="newline"),
    pytest.param(lambda h: h.update(handle=HANDLE[:126] + "\u0661\u0662"), id="unicode-digits"),
    pytest.param(lambda h: h.update(handle=""), id="empty-handle"),
    pytest.param(lambda h: h.update(handle=int(HANDLE, 16)), id="handle-int"),
    pytest.param(lambda h: h.update(handle=list(bytes.fromhex(HANDLE))), id="handle-byte-list"),
    pytest.param(lambda h: h.update(offset=-1), id="negative-offset"),
    pytest.param(lambda h: h.update(offset=2 ** 48), id="offset-2^48"),
    pytest.param(lambda h: h.update(offset=2 ** 70), id="offset-huge"),
    pytest.param(lambda h: h.update(offset=1.0), id="offset-float"),
    pytest.param(lambda h: h.update(offset="0"), id="offset-string"),
    pytest.param(lambda h: h.update(offset=True), id="offset-bool"),
    pytest.param(lambda h: h.update(nbytes=0), id="nbytes-0"),
    pytest.param(lambda h: h.update(nbytes=-4096), id="nbytes-negative"),
    pytest.param(lambda h: h.update(nbytes=True), id="nbytes-bool"),
    pytest.param(lambda h: h.update(nbytes=2 ** 48), id="nbytes-2^48"),
    pytest.param(lambda h: h.update(dtype=7), id="dtype-int"),
    pytest.param(lambda h: h.update(dtype=["float16"]), id="dtype-list"),
    pytest.param(lambda h: h.update(dtype=""), id="dtype-empty"),
    pytest.param(lambda h: h.update(dtype="f" * 33), id="dtype-long"),
    pytest.param(lambda h: h.update(shape=[16, -128]), id="shape-negative"),
    pytest.param(lambda h: h.update(shape=[16, 2 ** 48]), id="shape-huge-size"),
    pytest.param(lambda h: h.update(shape=[1] * 17), id="shape-17-dims"),
    pytest.param(lambda h: h.update(shape=[1] * 200_000), id="shape-huge-list"),
    pytest.param(lambda h: h.update(shape=[16, True]), id="shape-bool"),
    pytest.param(lambda h: h.update(shape=[16, 128.0]), id="shape-float"),
    pytest.param(lambda h: h.update(shape=[[16, 128]]), id="shape-nested"),
    pytest.param(lambda h: h.update(shape="16x128"), id="shape-string"),
    pytest.param(lambda h: h.update(shape={"0": 16}), id="shape-object"),
    pytest.param(lambda h: h.update(extra=1), id="unknown-field"),
    pytest.param(lambda h: h.pop("nbytes"), id="missing-field"),
    pytest.param(lambda h: h.update(handle={"handle": HANDLE}), id="handle-nested-object"),
])
@pytest.mark.parametrize("where", ["trial", "recheck"])
def test_a_malformed_record_fails_the_reports_parsing(mutate, where):
    d = _report().to_dict()
    record = d["trials"][0]["output_handle"] if where == "trial" else d["timings"][0]["recheck_output_handle"]
    mutate(record)
    text = json.dumps(d)
    assert len(text) < MAX_REPORT_BYTES       # within the parent's size bound: the schema is what refuses it
    with pytest.raises(ProtocolError):
        ChildReport.from_json(text, max_bytes=MAX_REPORT_BYTES)


@pytest.mark.parametrize("value", [[HANDLE], "x", 5, True, [[[[]]]]])
def test_a_record_that_is_not_an_object_fails_the_parsing(value):
    d = _report().to_dict()
    d["trials"][0]["output_handle"] = value
    with pytest.raises(ProtocolError):
        ChildReport.from_json(json.dumps(d))


def test_a_deeply_nested_record_is_refused_within_bounds():
    d = _report().to_dict()
    d["trials"][0]["output_handle"] = "NEST"
    text = json.dumps(d).replace('"NEST"', "[" * 100_000 + "]" * 100_000)
    with pytest.raises(ProtocolError, match="nests deeper"):
        ChildReport.from_json(text, max_bytes=MAX_REPORT_BYTES)


def test_the_refusal_says_which_rule_the_record_broke():
    d = _report().to_dict()
    d["trials"][0]["output_handle"]["handle"] = HANDLE[:127]
    with pytest.raises(ProtocolError, match="exactly 128 lower-case hex digits.*127 characters"):
        ChildReport.from_json(json.dumps(d))
    d["trials"][0]["output_handle"].update(handle=HANDLE, offset=-1)
    with pytest.raises(ProtocolError, match=r"offset -1 is not an integer in \[0, 2\*\*48\)"):
        ChildReport.from_json(json.dumps(d))


def test_a_huge_record_value_does_not_make_a_huge_message():
    d = _report().to_dict()
    d["trials"][0]["output_handle"]["shape"] = [1] * 500_000
    with pytest.raises(ProtocolError) as e:
        ChildReport.from_json(json.dumps(d), max_bytes=MAX_REPORT_BYTES)
    assert len(str(e.value)) < 2000


def test_construction_applies_the_same_rules():
    """The child builds the record with the same class: what it could not send, it cannot build."""
    with pytest.raises(ProtocolError):
        _handle(offset=-1)
    with pytest.raises(ProtocolError):
        _handle(shape=[16, 128])          # a list is not the record's tuple
    assert _handle(offset=2 ** 48 - 1, shape=()).offset == 2 ** 48 - 1


def test_the_parent_reads_a_report_with_a_malformed_record_as_a_protocol_error(tmp_path):
    """Through the parent's own reading of the report file (sandbox/child_io.read_report): ProtocolError,
    which the child-report stage turns into protocol_error (crash if the child also exited non-zero), the
    status any other malformed report gets."""
    from kernelgym_gap.sandbox.child_io import read_report
    from kernelgym_gap.sandbox.process import ChildOutcome
    outcome = ChildOutcome(returncode=0, signal=None, timed_out=False, wall_s=1.0, stdout_tail="", stderr_tail="",
                           output_bytes=0, layers=())
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(_report().to_json())
    assert read_report(good, outcome) == _report()
    d = _report().to_dict()
    d["timings"][0]["recheck_output_handle"]["nbytes"] = -1
    bad.write_text(json.dumps(d))
    with pytest.raises(ProtocolError, match="nbytes -1"):
        read_report(bad, outcome)


def test_every_handle_the_record_accepts_is_one_the_ipc_runtime_decodes():
    """The runtime's codec (judge/cuda_ipc.handle_from_hex) takes either case; the record takes the lower case
    its encoder writes (handle_hex), so no record passes the schema and then fails to decode."""
    from kernelgym_gap.judge.cuda_ipc import handle_from_hex, handle_hex
    raw = bytes(range(64))
    assert _handle(handle=handle_hex(raw)).handle == raw.hex()
    assert handle_from_hex(_handle(handle=handle_hex(raw)).handle) == raw
