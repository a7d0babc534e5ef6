"""The built-in agents, one module each (api/agent.py loads them by name, by path). This file makes the folder
the package data `kernelgym_gap.builtin_agents` that setup.py maps it to (core/builtin.py)."""
