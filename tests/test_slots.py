"""Slots per GPU sized to the host (core/slots.py, issue 35): the rule's values on the hosts the simulator was
asked about, its bounds, and its refusal of nonsense."""
import pytest

from kernelgym_gap.core import slots


@pytest.mark.parametrize("cores,gpus,expected", [
    (16, 1, 6),      # the H200 host of docs/measurement.md
    (16, 8, 4),      # 8 GPUs on 16 cores: the cores bind, 4 is where the simulator's gain flattens
    (32, 8, 6),
    (128, 8, 6),
    (2, 1, 1),       # this development machine: everything reserved but one slot
    (1, 1, 1),
    (3, 2, 1),
])
def test_the_rule_on_known_hosts(cores, gpus, expected):
    assert slots.slots_per_gpu(cores, gpus) == expected


def test_more_cores_never_mean_fewer_slots_and_the_bounds_hold():
    for gpus in (1, 2, 4, 8):
        counts = [slots.slots_per_gpu(c, gpus) for c in range(1, 257)]
        assert counts == sorted(counts)
        assert min(counts) == 1 and max(counts) == slots.MAX_PER_GPU


def test_memory_limits_the_slots_where_it_is_known():
    gib = 1 << 30
    assert slots.slots_per_gpu(128, 1, host_memory_bytes=64 * gib, child_memory_bytes=16 * gib) == 2
    assert slots.slots_per_gpu(128, 1, host_memory_bytes=4 * gib, child_memory_bytes=16 * gib) == 1
    assert slots.slots_per_gpu(128, 1, host_memory_bytes=None, child_memory_bytes=16 * gib) == 6


@pytest.mark.parametrize("args", [(0, 1), (16, 0), (16.0, 1), ("16", 1), (16, 1, -1, 1)])
def test_nonsense_is_a_value_error(args):
    with pytest.raises(ValueError):
        slots.slots_per_gpu(*args)


def test_this_host_gets_a_usable_count():
    n = slots.host_slots(1)
    assert 1 <= n <= slots.MAX_PER_GPU


def test_the_simulator_predicts_at_the_rules_count_for_the_h200_host():
    from kernelgym_gap.sim import levers
    assert levers.RULE_SLOTS == slots.slots_per_gpu(16, 1)
