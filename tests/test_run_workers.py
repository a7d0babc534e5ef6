"""`run` (api.suite.run_suite) on the cpu backend uses one worker per core by default, as `bench` and
evaluate_many do. Before issue 37 it ran one episode at a time, leaving a 2-core machine half idle."""
import os
import threading
import time

import pytest

from kernelgym_gap.api.suite import run_suite
from kernelgym_gap.engine.pipeline import evaluate


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs at least two cores to see two workers")
def test_run_suite_uses_the_cores_by_default():
    seen, lock = set(), threading.Lock()

    def stub(task, source, dsl, backend, config):
        with lock:
            seen.add(threading.current_thread().name)
        time.sleep(0.3)
        return evaluate(task, "def broken(:\n", dsl, backend, config)      # fails at the gate, no child
    rows = run_suite(backend="cpu", dsls=("triton",), task_ids=["LayerNorm", "RMSNorm", "GELU"], evaluator=stub)
    assert rows and all(r.status == "syntax_error" for r in rows)
    assert len(seen) == min(os.cpu_count(), 3)              # one episode per (task, dsl): three here
