"""The Scorer every adapter shares, with an evaluator double (no child processes): concurrent single calls
coalesced into one batch, duplicates evaluated once, the in-memory and store caches, reply text."""
import asyncio
import threading
import time

from kernelgym_gap.core.record import EvalRecord
from kernelgym_gap.core.status import Status
from kernelgym_gap.integrations.scorer import Scorer, completion_text, record_terms, reward_of


class Double:
    def __init__(self, status=Status.OK):
        self.calls, self.lock, self.status = [], threading.Lock(), status

    def __call__(self, task, source, dsl, backend, config):
        with self.lock:
            self.calls.append(source)
        time.sleep(0.05)
        ok = self.status is Status.OK
        return EvalRecord(task=task.id, task_version=task.version, dsl=dsl, backend=backend, status=self.status,
                          correct=ok, reward=1.0 if ok else 0.0, reward_mode="correctness", terms={}, message=source,
                          device={})


def test_concurrent_single_calls_become_one_batch_and_duplicates_run_once():
    ev = Double()
    with Scorer("cpu", workers=4, evaluator=ev, window_s=0.2) as s:
        out = [None] * 6
        def call(i):
            out[i] = s.score_one("GELU", f"src{i % 3}")
        threads = [threading.Thread(target=call, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert [r.message for r in out] == [f"src{i % 3}" for i in range(6)]
        assert sorted(ev.calls) == ["src0", "src1", "src2"] and s.stats["batches"] == 1
        # asyncio callers: the same batch path; cached now
        recs = asyncio.run(s.ascore([("GELU", "src0"), ("GELU", "src1", "triton")]))
        assert [r.message for r in recs] == ["src0", "src1"] and len(ev.calls) == 3


def test_store_cache_across_scorers_and_uncached_statuses(tmp_path):
    db = tmp_path / "results.sqlite3"
    ev = Double()
    with Scorer("cpu", workers=1, evaluator=ev, store=db, submitter="grpo-run") as s:
        s.score([("GELU", "a"), ("GELU", "b")])
    ev2 = Double()
    with Scorer("cpu", workers=1, evaluator=ev2, store=db) as s2:
        assert [r.message for r in s2.score([("GELU", "a"), ("GELU", "c")])] == ["a", "c"]
    assert ev2.calls == ["c"]                  # "a" came from the results database
    crash = Double(Status.CRASH)
    with Scorer("cpu", workers=1, evaluator=crash) as s3:
        s3.score([("GELU", "x")])
        s3.score([("GELU", "x")])
    assert crash.calls == ["x", "x"]           # a crash can come from the machine: evaluated again


def test_reply_text_and_terms():
    assert completion_text("x") == "x"
    assert completion_text([{"role": "assistant", "content": "a"}, {"role": "tool", "content": "t"},
                            {"role": "assistant", "content": [{"type": "text", "text": "b"}]}]) == "a\n\nb"
    assert completion_text({"role": "assistant", "content": "c"}) == "c" and completion_text(None) == ""
    rec = Double(Status.MISMATCH)(type("T", (), {"id": "kernelgym_gap/GELU-v0", "version": 0})(), "s", "triton",
                                  "cpu", None)
    assert reward_of(rec, -1.0) == -1.0
    t = record_terms(rec)
    assert t["score"] == 0.0 and t["status"] == "mismatch" and t["E"] is None and t["correct"] == 0.0
