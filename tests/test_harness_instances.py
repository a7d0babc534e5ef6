"""child/instances.py: the harness's own instances inside the child, checked with the snapshots (a method
shadowed on an instance, a class swapped, a held object replaced), and registered by a real ChildRun's setup.
The hostile fixtures held_instance_hook.py, childrun_verdict_shadow.py and held_class_swap.py run the same
attacks through the real environment (tests/test_hostile.py)."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from kernelgym_gap.child.instances import HarnessInstances, register_child_run
from kernelgym_gap.child.outputs import HeldOutputs


class _Thing:
    limit = 3                  # a class-level constant: an instance may set its own value

    def method(self):
        return "class"

    @property
    def prop(self):
        return 1


def _registry(tmp_path: Path):
    reg = HarnessInstances()
    held = HeldOutputs(tmp_path, 1 << 20)
    thing = _Thing()
    thing.partner = held
    reg.register("HeldOutputs", held)
    reg.register("thing", thing, pinned=("partner",))
    return reg, held, thing


def test_untouched_instances_and_their_plain_data_are_no_violation(tmp_path):
    reg, held, thing = _registry(tmp_path)
    held.held_bytes = 12           # what the harness itself changes on its instances
    thing.limit = 5                # shadows a class constant, not a descriptor
    assert reg.violations() == []
    assert reg.labels() == ("HeldOutputs", "thing")


def test_a_method_shadowed_on_an_instance_is_named(tmp_path):
    reg, held, thing = _registry(tmp_path)
    held.add = lambda name, t: None
    assert reg.violations() == ["the harness's HeldOutputs.add was shadowed on the instance "
                                "(HeldOutputs.add is a function)"]


def test_a_property_shadowed_through_the_instance_dict_is_named(tmp_path):
    reg, _, thing = _registry(tmp_path)
    vars(thing)["prop"] = 2        # a property ignores the instance dict, but a data shadow is still tampering
    assert [v for v in reg.violations() if "thing.prop" in v]


def test_a_class_swapped_for_a_subclass_is_named(tmp_path):
    reg, held, _ = _registry(tmp_path)

    class Held(HeldOutputs):
        def add(self, name, t):
            pass
    held.__class__ = Held
    found = reg.violations()
    assert len(found) == 1 and "HeldOutputs had its class swapped" in found[0] and "Held" in found[0]


def test_a_pinned_attribute_replaced_is_named(tmp_path):
    reg, _, thing = _registry(tmp_path)
    thing.partner = HeldOutputs(tmp_path, 1)
    assert reg.violations() == ["the harness's thing.partner was replaced"]
    del thing.partner
    assert reg.violations() == ["the harness's thing.partner was replaced"]


def test_registering_twice_keeps_one_entry(tmp_path):
    reg, held, _ = _registry(tmp_path)
    reg.register("again", held)
    assert reg.labels() == ("HeldOutputs", "thing")


def test_the_check_is_cheap(tmp_path):
    """It runs after every call: a registry the size of a real child's (eight instances) checks in well under
    a millisecond (2-core machine at load 3, 2026-12-07: 33-38 us, 0.5% of the whole snapshot comparison's
    7.3-8.3 ms; docs/journal.md). The bound is loose so a loaded CI machine does not fail it."""
    reg = HarnessInstances()
    for i in range(8):
        reg.register(f"held {i}", HeldOutputs(tmp_path, 1 << 20))
    n = 2000
    t = time.perf_counter()
    for _ in range(n):
        reg.violations()
    per_check = (time.perf_counter() - t) / n
    assert per_check < 1e-3, per_check


@pytest.fixture
def partial_child(tmp_path):
    """A ChildRun with what `register_child_run` and `verdict` use, built without `setup` (which installs the
    guards' audit hook for good: not in the test process): real held outputs, call marks, lane and snapshots,
    test_hostile's stand-in adapter."""
    from test_hostile import _SnapshotAdapter
    from kernelgym_gap.child.lanes import ChildLane
    from kernelgym_gap.child.marks import CallMarks
    from kernelgym_gap.child.run import ChildRun
    from kernelgym_gap.child.snapshots import Integrity
    from kernelgym_gap.dsl.base import StreamWatch
    run = ChildRun.__new__(ChildRun)
    run.report_path = tmp_path / "report.json"
    run.job, run.task, run.phases, run.common, run.t0 = None, None, {}, {}, time.perf_counter()
    run.held = HeldOutputs(tmp_path, 1 << 20)
    run.marks = CallMarks(tmp_path, ())
    run.lane = ChildLane(None, None, run.phases)
    run.adapter = _SnapshotAdapter()
    run.adapter.log = type("Log", (), {"side_stream": 0, "failed": 0})()
    run.adapter.streams = StreamWatch("cpu")
    run.integrity = Integrity(run.adapter)
    register_child_run(run)
    return run


def test_a_childs_instances_are_registered_and_a_shadowed_verdict_is_caught_by_the_verdict(partial_child):
    from kernelgym_gap.child import run as run_mod
    run = partial_child
    labels = run.integrity.instances.labels()
    for label in ("ChildRun", "HeldOutputs", "CallMarks", "ChildLane", "DSL launch log", "DSL stream watch",
                  "Integrity"):
        assert label in labels
    assert run.integrity.instances.violations() == []   # (the whole check also sees pytest-timeout's timer)
    run.verdict = lambda *a, **k: None             # what childrun_verdict_shadow.py does from a call
    assert run_mod.ChildRun.verdict(run, "after a call") == 0       # the class's verdict: a report written
    assert "the harness's ChildRun.verdict was shadowed on the instance" in run.report_path.read_text()


def test_a_replaced_held_outputs_on_the_child_is_caught(partial_child, tmp_path):
    run = partial_child
    run.held = HeldOutputs(tmp_path, 1 << 20)
    assert "the harness's ChildRun.held was replaced" in run.integrity.violations()


def test_torch_compute_in_a_finalizer_when_a_recheck_output_is_released_is_noted(tmp_path, monkeypatch):
    """child/timing.recheck_call releases the recheck's output under the op recorders: a finalizer that computes
    with torch there (to overwrite the copy just kept, as finalizer_overwrites_held.py does to a trial's) is a
    WATCH event, i.e. an integrity violation at the timing's verdict. Before 2026-12-07 `del out` ran unwatched."""
    import weakref

    import torch

    from kernelgym_gap.child import timing
    from kernelgym_gap.core.record import Trial
    from kernelgym_gap.dsl.watch import WATCH
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)     # cpu: nothing to wait for
    monkeypatch.setattr(WATCH, "events", [])
    held = HeldOutputs(tmp_path, 1 << 20)

    def entry(x):
        y = x + 0
        weakref.finalize(y, lambda: torch.ones(3).sum())
        return y
    trial = Trial(index=0, shape=(4,), dtype="float32", seed=1, distribution="normal", split="public")
    timing.recheck_call(entry, trial, (torch.zeros(4),), held)
    assert len(WATCH.events) == 1 and "released a recheck's output" in WATCH.events[0], WATCH.events
    assert len(held.held) == 1                      # the copy was kept before the release


def test_a_method_added_to_a_registered_class_and_shadowed_is_caught(partial_child, monkeypatch):
    """The registry takes each class's descriptor names once, as it is registered (HarnessInstances._names), so a
    descriptor put on the class later is not among them: the snapshots must name the class change (they do, as
    "... was added"), which keeps the cache from opening a hole."""
    from kernelgym_gap.child.outputs import HeldOutputs as Held
    run = partial_child
    monkeypatch.setattr(Held, "extra", lambda self: "class", raising=False)     # removed again at teardown
    run.held.extra = lambda: "shadow"
    assert "kernelgym_gap.child.outputs.HeldOutputs.extra was added" in run.integrity.violations()
