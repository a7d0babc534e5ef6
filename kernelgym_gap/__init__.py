"""kernelgym_gap: a Gymnasium environment and evaluation harness for Triton and TileLang GPU kernels whose
reward sees what a correctness check cannot (library-relative efficiency E and roofline utilization U).

    import gymnasium as gym
    import kernelgym_gap                      # registers kernelgym_gap/<Task>-v<N> and kernelgym_gap/Suite-v0
    env = gym.make("kernelgym_gap/LayerNorm-v1", backend="cpu")
    record = kernelgym_gap.evaluate("LayerNorm", source, dsl="triton", backend="cpu")

The package is cut along its process boundaries (docs/architecture.md): `core` (the task contract, ids,
records, the one frozen config), `engine` (one evaluation as typed stages), `sandbox` (the child process
under its isolation layers), `child` (what runs inside it), `dsl` (one adapter per DSL), `judge` (trusted
checker, measurement, reward, diagnosis), `api` (Gymnasium env, batch, pools), `store`, `cli`, `web`.
"""
from __future__ import annotations

import logging

from kernelgym_gap.core.errors import TaskDefinitionError

__version__ = "0.2.0"

# Everything else is imported on first use (PEP 562): a child process imports this package too, and
# should not pay for the engine, the store or the web app.
_LAZY = {
    "evaluate": ("kernelgym_gap.engine.pipeline", "evaluate"),
    "make": ("kernelgym_gap.api.env", "make"),
    "EvalConfig": ("kernelgym_gap.core.config", "EvalConfig"),
    "Placement": ("kernelgym_gap.core.placement", "Placement"),   # where it runs, beside the config
    "EvalRecord": ("kernelgym_gap.core.record", "EvalRecord"),
    "FailureDetail": ("kernelgym_gap.core.record", "FailureDetail"),
    "Status": ("kernelgym_gap.core.status", "Status"),
    "TaskSpec": ("kernelgym_gap.core.task", "TaskSpec"),
    "get_task": ("kernelgym_gap.core.registry", "get_task"),
    "reproduce": ("kernelgym_gap.core.inputs", "reproduce"),
    "register_envs": ("kernelgym_gap.api.registration", "register_envs"),
}
__all__ = ["__version__", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        import importlib
        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'kernelgym_gap' has no attribute {name!r}")


def _register() -> None:
    from kernelgym_gap.api.registration import register_envs
    try:
        register_envs()
    except TaskDefinitionError as e:        # a broken task file must not make the package unimportable
        logging.getLogger(__name__).warning("Gymnasium ids not registered: %s", e)


_register()
