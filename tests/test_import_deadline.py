"""The import's stage deadline (SandboxConfig.import_s, import_module_class_s): its defaults are the ones
docs/security.md states, a task's kind of entry point picks which one its child gets (launch.child_spec) and
its timeout message names (the sandbox stage), and, end to end on the cpu backend, a hung import is killed
at the deadline of its task's kind (tests/fixtures/hostile/import_busy_loop.py)."""
from __future__ import annotations

import dataclasses
import re
import time
from pathlib import Path

import pytest

from kernelgym_gap.core.config import EvalConfig, SandboxConfig
from kernelgym_gap.core.status import Status
from kernelgym_gap.engine.pipeline import evaluate
from kernelgym_gap.sandbox.launch import child_spec

ROOT = Path(__file__).resolve().parent.parent
BUSY_IMPORT = ROOT / "tests" / "fixtures" / "hostile" / "import_busy_loop.py"

pytestmark = pytest.mark.timeout(300)


def _module_class(task):
    """`task` as an imported KernelBench task is: one that also takes a module class (ModelNew)."""
    return dataclasses.replace(task, module_entry_point="ModelNew")


def test_the_import_deadlines_defaults_are_the_ones_docs_security_md_states():
    """docs/security.md's "import deadline" row is the reference a reader takes the values from: 30 s for a
    task whose entry point is a function, 60 s for one that takes a module class (the old 60 s for both)."""
    row = next(line for line in (ROOT / "docs" / "security.md").read_text().splitlines()
               if line.startswith("| import deadline |"))
    function_s = re.search(r"`SandboxConfig\.import_s`, (\d+) s", row)
    module_s = re.search(r"`SandboxConfig\.import_module_class_s`, (\d+) s", row)
    assert function_s and module_s, row
    defaults = SandboxConfig()
    assert defaults.import_s == float(function_s.group(1)) == 30.0
    assert defaults.import_module_class_s == float(module_s.group(1)) == 60.0


def test_a_tasks_kind_of_entry_point_picks_its_childs_import_deadline(registry):
    """The child's sandbox (and so the parent's watch, sandbox/process.py) gets import_s for a function entry
    point and import_module_class_s for a task that takes a module class, whose construction is in it."""
    task = registry.get("LayerNorm")
    assert task.module_entry_point is None
    config = EvalConfig(sandbox=SandboxConfig(import_s=7.0, import_module_class_s=45.0))
    assert child_spec(task, "triton", "cpu", config).sandbox.import_s == 7.0
    assert child_spec(_module_class(task), "triton", "cpu", config).sandbox.import_s == 45.0
    assert child_spec(task, "triton", "cpu", EvalConfig()).sandbox.import_s == 30.0
    off = EvalConfig(sandbox=SandboxConfig(import_s=None, import_module_class_s=None))
    assert child_spec(_module_class(task), "triton", "cpu", off).sandbox.import_s is None


@pytest.mark.parametrize("module_class", [False, True], ids=["function", "module_class"])
def test_a_hung_import_is_killed_at_its_task_kinds_deadline_and_the_message_names_it(registry, module_class):
    """The busy import is killed at 3 s, its kind's deadline, not at the other kind's 90 s (nor the 120 s wall);
    the message names the deadline that applied."""
    task = registry.get("LayerNorm")
    task = _module_class(task) if module_class else task
    short, long_ = 3.0, 90.0
    sandbox = (SandboxConfig(wall_s=120.0, import_s=long_, import_module_class_s=short) if module_class
               else SandboxConfig(wall_s=120.0, import_s=short, import_module_class_s=long_))
    start = time.monotonic()
    record = evaluate(task, BUSY_IMPORT.read_bytes(), "triton", "cpu", EvalConfig(trial_seed=1, sandbox=sandbox))
    elapsed = time.monotonic() - start
    assert record.status is Status.TIMEOUT and record.stage == "sandbox", record.message
    assert "import" in record.message and "within its 3 s stage deadline" in record.message, record.message
    assert elapsed < 60, elapsed
