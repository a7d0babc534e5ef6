import json

import pytest

from kernelgym_gap.errors import ProtocolError
from kernelgym_gap.record import ChildReport, EvalRecord, Job, Trial, TrialOutcome
from kernelgym_gap.status import Status


def _record():
    return EvalRecord(task="kernelgym_gap/LayerNorm-v0", task_version=0, dsl="triton", backend="cpu",
                      status=Status.OK, correct=True, reward=1.0, reward_mode="correctness",
                      terms={"E": None, "U": None}, message="", sandbox_layers=("session",))


def test_round_trips():
    r = _record()
    assert EvalRecord.from_json(r.to_json()) == r
    job = Job(task_id="t", dsl="triton", backend="cpu", source_file="s", outputs_dir="o", report_file="r",
              trials=(Trial(0, (2, 3), "float32", 5, "normal", "public"),), timing=None)
    assert Job.from_json(job.to_json()) == job
    rep = ChildReport(status=Status.OK, message="", trials=(TrialOutcome(0, "f.pt", 1, 4, 0.1, "a", "a"),))
    assert ChildReport.from_json(rep.to_json()) == rep


@pytest.mark.parametrize("mutate", [
    lambda d: d.update(extra=1),
    lambda d: d.update(reward="1.0"),
    lambda d: d.update(status="great"),
    lambda d: d.update(schema_version=99),
    lambda d: d.pop("task"),
])
def test_from_json_rejects(mutate):
    d = _record().to_dict()
    mutate(d)
    with pytest.raises(ProtocolError):
        EvalRecord.from_json(json.dumps(d))


def test_not_json():
    with pytest.raises(ProtocolError):
        ChildReport.from_json("{not json")
