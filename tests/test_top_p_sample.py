"""TopPSample's check (tasks/indexing/top_p_sample): the output view accepts exactly the tokens a float32 kernel
can reach where a cumulative sum lies on a boundary, keeps the id tie-break strict, and rejects bad ids with
a typed error. Hand-made rows, no kernel: the solutions themselves run in tests/test_solutions.py."""
import math

import pytest
import torch

from kernelgym_gap.core.registry import default_registry


@pytest.fixture(scope="module")
def task():
    return default_registry().get("TopPSample")


def _row(probs, p, u):
    logits = torch.tensor([[math.log(q) for q in probs]], dtype=torch.float32)
    one = lambda v: torch.tensor([v], dtype=torch.float32)
    return logits, one(1.0), one(p), one(u)


def _view(task, ins, token):
    return int(task.output_view(ins, torch.tensor([token]))[0])


def test_a_mass_exactly_on_top_p_accepts_both_nuclei_picks(task):
    # c = [0.4, 0.7, 0.9, 1.0] and top_p = 0.7: float32 may put c[1] on either side, so the nucleus is 2 or
    # 3 tokens and u * nucleus is 0.35 or 0.45: token 0 or token 1; tokens 2 and 3 are never reachable
    ins = _row([0.4, 0.3, 0.2, 0.1], 0.7, 0.5)
    ref = int(task.reference(*ins)[0])
    assert ref in (0, 1)
    assert _view(task, ins, 0) == _view(task, ins, 1) == _view(task, ins, ref)
    assert _view(task, ins, 2) == 2 != _view(task, ins, 0)
    assert _view(task, ins, 3) == 3


def test_away_from_a_boundary_only_the_exact_pick_passes(task):
    ins = _row([0.4, 0.3, 0.2, 0.1], 0.8, 0.5)       # nucleus 3 tokens (0.9), t = 0.45: token 1 alone
    assert int(task.reference(*ins)[0]) == 1
    assert _view(task, ins, 1) == 1
    assert [_view(task, ins, k) for k in (0, 2, 3)] == [0, 2, 3]     # each maps to itself: a mismatch


def test_equal_logits_go_to_the_lower_id(task):
    # four equal logits, top_p 0.6: the nucleus is the first 3 in id order, t = 0.375 picks the second: id 1;
    # id 2 has the same logit and probability but is not the rule's pick
    ins = _row([0.25] * 4, 0.6, 0.5)
    assert int(task.reference(*ins)[0]) == 1
    assert _view(task, ins, 1) == 1 and _view(task, ins, 2) == 2


def test_a_temperature_changes_the_pick(task):
    ins = list(_row([0.4, 0.3, 0.2, 0.1], 0.95, 0.6))
    cold = int(task.reference(*ins)[0])
    ins[1] = torch.tensor([5.0])                        # hot: nearly uniform, the nucleus reaches token 3
    hot = int(task.reference(*ins)[0])
    assert (cold, hot) == (1, 2)
    assert _view(task, tuple(ins), cold) == cold != _view(task, tuple(ins), hot)


@pytest.mark.parametrize("bad,match", [(torch.tensor([1], dtype=torch.int32), "int64"),
                                       (torch.tensor([4]), "outside"), (torch.tensor([-1]), "outside")])
def test_bad_ids_raise_a_value_error(task, bad, match):
    with pytest.raises(ValueError, match=match):
        task.output_view(_row([0.4, 0.3, 0.2, 0.1], 0.8, 0.5), bad)
