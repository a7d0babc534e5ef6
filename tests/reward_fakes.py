"""Evaluators for the reward server's tests, importable by its slot processes (a module of its own, so that a
slot imports this and not a test module). A source "sleep:S" sleeps S seconds; with $KGG_FAKE_LOG set, each
evaluation appends "start <source>" and "end <source>" lines to that file (the tests count evaluations, and
see a cancelled one start but never end)."""
import os
import time

from kernelgym_gap.core.record import EvalRecord
from kernelgym_gap.core.status import Status


def _log(line: str) -> None:
    path = os.environ.get("KGG_FAKE_LOG")
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")


def fake_record(task, source, dsl, backend, config):
    _log(f"start {source}")
    if source.startswith("sleep:"):
        time.sleep(float(source.split(":")[1].split()[0]))
    _log(f"end {source}")
    ok = "wrong" not in source
    return EvalRecord(task=task.id, task_version=task.version, dsl=dsl, backend=backend,
                      status=Status.OK if ok else Status.MISMATCH, correct=ok, reward=1.0 if ok else 0.0,
                      reward_mode="correctness", terms={}, message="", device={})
