"""--agent-arg values are checked against the agent's parameters: a list parameter takes `a,b`, one word or
JSON; a wrong value says what was expected. Before issue 37, `--agent-arg kinds=slow` reached the replay
agent as a string, was iterated one character at a time, matched no solution and ended in a misleading
'no reference solution left to replay' (exit 2)."""
import argparse

import pytest

from kernelgym_gap.cli import main as cli
from kernelgym_gap.cli.options import agent_kwargs
from kernelgym_gap.core.errors import KernelGymError


def _kw(agent, *items):
    return agent_kwargs(argparse.Namespace(agent=agent, agent_arg=list(items), seed=None), with_seed=False)


def test_lists_numbers_and_flags_are_parsed_by_the_agents_parameters():
    assert _kw("replay", "kinds=slow") == {"kinds": ("slow",)}
    assert _kw("replay", "kinds=slow,optimized") == {"kinds": ("slow", "optimized")}
    assert _kw("replay", 'kinds=["slow"]') == {"kinds": ("slow",)}
    assert _kw("search", "seed=3", "pairs=false") == {"seed": 3, "pairs": False}
    assert _kw("search", "anything=1") == {"anything": 1}          # the search agent takes **kwargs


@pytest.mark.parametrize("item, expected", [
    ("seed=abc", "seed=abc: expected an integer"),
    ("pairs=3", "pairs=3: expected true or false"),
])
def test_a_wrong_value_says_what_was_expected(item, expected):
    with pytest.raises(KernelGymError, match=expected):
        _kw("search", item)


def test_unknown_key_and_wrong_list_items(capsys):
    with pytest.raises(KernelGymError, match="no parameter 'kind'; expected one of kinds, registry"):
        _kw("replay", "kind=slow")
    with pytest.raises(KernelGymError, match="expected a list of text"):
        _kw("replay", "kinds=[1, 2]")
    # a value of the right type that is not one of the agent's choices: the agent says which it takes
    assert cli.main(["bench", "--agent", "replay", "--agent-arg", "kinds=slw", "--tasks", "GELU",
                     "--backend", "cpu", "--db", ":memory:"]) == 2
    err = capsys.readouterr().err
    assert "kinds=('slw',): expected a list of optimized, slow" in err and "left to replay" not in err
