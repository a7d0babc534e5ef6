"""The Gymnasium vector API over KernelEnv: `make_vector_env`, and the info wrapper that lets Gymnasium's
vector merge take the infos of failed and correct steps in one batch."""
from __future__ import annotations

import functools
import shutil
import weakref
from collections.abc import Mapping, Sequence

import gymnasium as gym

from kernelgym_gap.api.service import place_copies

class InfoMapping(Mapping):
    """A read-only mapping that is not a dict. Gymnasium's vector environments merge a dict-valued info entry
    key by key into typed numpy arrays; a step's `terms`, `diagnosis` and `record` hold None in one copy
    where another has a dict or a float (a failed and a correct kernel in one batch), which that merge
    cannot take (it raises, and AsyncVectorEnv then hangs in close()). Wrapped in this class they are kept
    whole: `info["record"][i]["status"]`. Picklable, so it crosses AsyncVectorEnv's pipes."""

    __slots__ = ("_data",)

    def __init__(self, data: dict):
        self._data = dict(data)

    def __getitem__(self, key):
        return self._data[key]

    def __iter__(self):
        return iter(self._data)

    def __len__(self):
        return len(self._data)

    def __repr__(self):
        return f"InfoMapping({self._data!r})"

    def __getstate__(self):
        return self._data

    def __setstate__(self, state):
        self._data = state

    def to_dict(self) -> dict:
        return dict(self._data)


def vector_info(info: dict) -> dict:
    """A KernelEnv info made safe for Gymnasium's vector merge: its dict values become InfoMapping. The
    scalars stay as they are; note that `correct` (None for an unverified kernel) is merged into a bool
    array when the first copy's value is a bool, so read the exact value from `info["record"][i]`."""
    return {k: InfoMapping(v) if isinstance(v, dict) else v for k, v in info.items()}


class VectorInfo(gym.Wrapper):
    """Wraps KernelEnv for gymnasium.vector.*VectorEnv (see InfoMapping); make_vector_env applies it."""

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        return obs, vector_info(info)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, terminated, truncated, vector_info(info)


def _make_env(kwargs: dict):
    from kernelgym_gap.api.env import KernelEnv
    return VectorInfo(KernelEnv(**kwargs))


def make_vector_env(n: int, task_id: str | None = None, *, asynchronous: bool = True,
                    gpus: Sequence[int] | None = None, context: str | None = None, ray: str | None = None,
                    **env_kwargs):
    """`n` KernelEnv copies as one Gymnasium vector environment (AsyncVectorEnv: one process per copy, so
    the copies' evaluations run in parallel; SyncVectorEnv with asynchronous=False).

    Text observations need `shared_memory=False` (with shared memory AsyncVectorEnv returns a string of
    '0's instead of the observation): this helper always passes it. Each copy is wrapped in VectorInfo, so
    that infos of failed and correct steps merge (`info["record"][i]` is the i-th copy's record). On the
    cuda backend copy i evaluates on GPU gpus[i % len(gpus)] (default: all visible GPUs); copies that share
    a GPU share its lane (core/lane.py: trials side by side, timings one at a time), in a lane directory
    made here and removed with the vector env. With
    `ray="auto"` or an address, each copy evaluates through its own Ray actor instead (ray_pool.RayEvaluator;
    Ray places the actors, one GPU or one CPU slot each); AsyncVectorEnv then starts its copies with
    "spawn", since a process forked from a Ray driver cannot use Ray. Other keyword arguments go to
    KernelEnv (task_ids, dsl, backend, max_steps, config, stop_when_correct, evaluator, ...)."""
    from kernelgym_gap.core.backend import resolve_backend
    if n < 1:
        raise ValueError("n must be at least 1")
    env_kwargs = dict(env_kwargs, task_id=task_id)
    backend = resolve_backend(env_kwargs.get("backend", "auto"))
    env_kwargs["backend"] = backend
    if ray is not None:
        if "evaluator" in env_kwargs or gpus is not None:
            raise ValueError("ray= gives each copy a Ray evaluator; it combines with neither evaluator= nor gpus=")
        from kernelgym_gap.api.ray_pool import RayEvaluator, driver_address
        address = driver_address(ray)
        context = context or "spawn"
    base = env_kwargs.get("placement")
    # each copy's KernelEnv holds a one-slot api/service.EvalService; their GPUs and shared lanes are placed
    # by the service module (a Placement per copy, passed as the copy's placement=)
    placed, lane_dir = place_copies(n, base, gpus) if backend == "cuda" and ray is None else (None, None)
    fns = []
    for i in range(n):
        kw = dict(env_kwargs)
        if placed is not None:
            kw["placement"] = placed[i]
        if ray is not None:
            kw["evaluator"] = RayEvaluator(address, backend)
        fns.append(functools.partial(_make_env, kw))
    if not asynchronous:
        env = gym.vector.SyncVectorEnv(fns)
    else:
        env = gym.vector.AsyncVectorEnv(fns, shared_memory=False, context=context)
    if lane_dir is not None:
        weakref.finalize(env, shutil.rmtree, lane_dir, True)
    return env
