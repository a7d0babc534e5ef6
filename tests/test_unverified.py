"""One meaning of `unverified` (a TileLang kernel the cpu backend could only compile for the GPU): not scored,
neither correct nor failed, in `run`, `bench`, `bench compare` and the trainers' reward (docs/backends.md,
"unverified"). Before issue 37 bench counted it among the failures (in the denominators and the top-failure
column) and compare called a task whose samples came back unverified "lost"."""
from kernelgym_gap.bench import metrics
from kernelgym_gap.bench.compare import _headline, changes, format_compare
from kernelgym_gap.bench.report import format_report
from kernelgym_gap.core.record import EvalRecord
from kernelgym_gap.core.status import Status
from kernelgym_gap.integrations.scorer import number_reward, record_terms, reward_of

T = "kernelgym_gap/LayerNorm-v1"


def _sample(k, status, correct=False):
    ep = {"task_id": T, "sample": k, "category": "normalization", "state": "done"}
    steps = [{"step": 1, "status": "compile_error", "reward": 0.0, "correct": False, "e": None, "u": None,
              "verdict": None},
             {"step": 2, "status": status, "reward": 1.0 if correct else 0.0, "correct": True if correct else
              (None if status == "unverified" else False), "e": None, "u": None, "verdict": None}]
    return metrics.summarize_episode(ep, steps)


def test_an_unverified_sample_is_neither_pass_nor_fail():
    samples = [_sample(0, "ok", True), _sample(1, "unverified"), _sample(2, "mismatch")]
    assert [s["status"] for s in samples] == ["ok", "unverified", "compile_error"]   # unverified outranks a fail
    m = metrics.task_metrics(samples, [1, 2], speed=False)
    assert m["samples"] == 3 and m["verified"] == 2 and m["unverified"] == 1 and m["correct"] == 1
    assert m["correctness_rate"] == 0.5                      # 1 of the 2 verified, not 1 of 3
    assert m["pass_at_k"] == {"1": 0.5, "2": 1.0}
    assert m["failures"] == {"compile_error": 1}              # no "unverified" among the failures
    only = metrics.task_metrics([_sample(0, "unverified")], [1], speed=False)
    assert only["correctness_rate"] is None and only["pass_at_k"] == {"1": None} and only["failures"] == {}
    overall = metrics.compute(samples, [1], speed=False)["overall"]
    assert overall["verified"] == 2 and overall["unverified"] == 1


def _report(samples, label):
    out = metrics.compute(samples, [1], speed=False)
    return {"label": label, "agent": "replay", "dsl": "tilelang", "backend": "cpu", "device": [], "created_at": "",
            "complete": True, "speed_measured": False, "ks": [1], "settings": {"samples": 1, "steps": 2},
            "notes": [], "errors": [], **{k: out[k] for k in ("overall", "by_category", "tasks")}}


def test_compare_does_not_call_an_unverified_task_lost():
    a = _report([_sample(0, "ok", True)], "a")
    b = _report([_sample(0, "unverified")], "b")
    ch = changes(_headline(a["tasks"][T], "1"), _headline(b["tasks"][T], "1"))
    assert "lost" not in ch and ch[0] == "unverified (not scored)"
    from kernelgym_gap.bench.compare import compare
    text = format_compare(compare([a, b]))
    assert "0/0 +1 unverified" in text and "lost" not in text


def test_the_report_has_an_unverified_column_and_says_what_it_means():
    r = _report([_sample(0, "ok", True), _sample(1, "unverified")], "r")
    text = format_report(r)
    header = text.splitlines()[2].split()
    assert header[:4] == ["task", "correct", "unverified", "rate"]
    assert "1/1 verified samples correct" in text and "1 sample(s) unverified: not scored" in text
    assert "docs/backends.md" in text


def test_the_reward_of_an_unverified_record_is_not_scored():
    rec = EvalRecord(task=T, task_version=0, dsl="tilelang", backend="cpu", status=Status.UNVERIFIED, correct=None,
                     reward=0.0, reward_mode="correctness", terms={}, message="compiled for sm_90a, not run")
    assert reward_of(rec, -1.0) is None                     # TRL: None, a reward it ignores
    assert number_reward(rec, -1.0) == -1.0                 # verl / verifiers need a number: failure_reward ...
    terms = record_terms(rec, -1.0)
    assert terms["status"] == "unverified" and terms["score"] == -1.0 and "not run" in terms["reason"]
