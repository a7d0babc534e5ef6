"""The agent protocol, and loading the built-in agents (the checkout's agents/ folder, package data when
installed: core/builtin.py) by name."""
from __future__ import annotations

import importlib.util
import sys
from typing import Any, Protocol

from kernelgym_gap.core.errors import UnknownChoiceError
from kernelgym_gap.core.builtin import agents_dir

AGENTS_DIR = agents_dir()      # package data (core/builtin.py): the checkout's agents/, shipped in the wheel


class Agent(Protocol):
    name: str

    def reset(self, observation: str, info: dict[str, Any]) -> None:
        """A new episode began (info holds task, dsl, backend, max_steps)."""

    def act(self, observation: str, info: dict[str, Any]) -> str:
        """The next submission's source; info is the previous step's info (the reset info at first)."""


def available_agents() -> list[str]:
    return sorted(p.stem for p in AGENTS_DIR.glob("*.py") if not p.stem.startswith("_"))


def load_agent(name: str, **kwargs) -> Agent:
    return load_agent_module(name).make_agent(**kwargs)


def load_agent_module(name: str):
    """The module agents/NAME.py (loaded once per process); the CLI reads its make_agent's parameters."""
    path = AGENTS_DIR / f"{name}.py"
    if not path.is_file():
        raise UnknownChoiceError("agent", name, available_agents())
    module_name = f"kernelgym_gap_agents.{name}"
    module = sys.modules.get(module_name)
    if module is None:
        spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    return module
