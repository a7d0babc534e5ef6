"""The Gymnasium environment. Every task is registered under its versioned id
(`kernelgym_gap/LayerNorm-v1`) and the suite (`kernelgym_gap/Suite-v0`), so that
`gymnasium.make("kernelgym_gap/LayerNorm-v1")` works after `import kernelgym_gap` (api/registration.py).

Observation: text (task statement, reference source, public shapes and dtypes, DSL, backend, entry point
and signature, the previous step's feedback). Action: the kernel's source text. Reward and every term of
the evaluation record are in `info`. An episode is a budget of `max_steps` submissions for one task.
"""
from __future__ import annotations

import string
from collections.abc import Callable
from typing import Any

import gymnasium as gym
from gymnasium import spaces

from kernelgym_gap.core.config import EvalConfig
from kernelgym_gap.core.backend import backend as backend_info
from kernelgym_gap.core.backend import resolve_backend
from kernelgym_gap.core.errors import UnknownChoiceError
from kernelgym_gap.core.placement import Placement
from kernelgym_gap.core.ids import SUITE_ID
from kernelgym_gap.core.record import EvalRecord
from kernelgym_gap.core.terms import Headline
from kernelgym_gap.engine.feedback import public_view
from kernelgym_gap.core.registry import TaskRegistry, default_registry, task_source
from kernelgym_gap.core.task import DSLS, TaskSpec

CHARSET = string.printable            # every character of ordinary Python source
MAX_ACTION_CHARS = 256 * 1024
MAX_OBSERVATION_CHARS = 64 * 1024

Evaluator = Callable[[TaskSpec, str, str, str, EvalConfig], EvalRecord]


def _printable(text: str) -> str:
    allowed = set(CHARSET)
    return "".join(c if c in allowed else "?" for c in text)


def observation_text(task: TaskSpec, dsl: str, backend: str, step: int, max_steps: int,
                     feedback: str) -> str:
    w = task.workload(backend)
    perf = ("full: correctness gate, then speed relative to the library (E) and to the roofline (U)"
            if backend_info(backend).measures_time
            else "correctness gate only (the cpu backend never measures speed)")
    text = "\n".join([
        f"# Task {task.id} ({task.category})",
        f"DSL: {dsl}    backend: {backend}    step {step + 1} of {max_steps}    reward: {perf}",
        "", "## Statement", task.statement,
        "", "## Entry point", f"Define a top-level function `{task.signature}`. It must launch a {dsl} kernel "
        "that does the work and return a new torch.Tensor.",
        "", "## Reference (the library operator your kernel replaces)", task.reference_source().rstrip(),
        "", "## Public shapes and dtypes (held-out shapes are evaluated too)",
        "shapes: " + ", ".join(str(list(s)) for s in w.public), "dtypes: " + ", ".join(w.dtypes),
        "", "## Feedback from the previous step", feedback or "(none yet)",
    ])
    return _printable(text)[:MAX_OBSERVATION_CHARS]


def feedback_text(record: EvalRecord) -> str:
    lines = [f"status: {record.status.value}   correct: {record.correct}   reward: {record.reward:.4f}"]
    if record.message:
        lines.append(record.message[:4000])
    h = Headline.of(record.terms)
    if h.E is not None:
        u = f"{h.U:.3g}" if h.U is not None else "-"
        lines.append(f"E (library time / kernel time): {h.E:.3g}   U (floor time / kernel time): {u}")
    if record.diagnosis:
        lines.append(f"diagnosis: {record.diagnosis.get('verdict')}: {record.diagnosis.get('summary', '')}")
    return "\n".join(lines)


def _deterministic(record: dict) -> dict:
    """The record without its wall-clock fields, so that the same seed and action give the same info (as
    Gymnasium's checker requires); the full record is `env.unwrapped.last_record`."""
    return {k: v for k, v in record.items() if k not in ("latency", "created_at")}


class KernelEnv(gym.Env):
    """One task (`task_id`) or a suite drawn from `task_ids` (all tasks when None) per episode."""

    metadata = {"render_modes": ["ansi"]}

    def __init__(self, task_id: str | None = None, task_ids: list[str] | None = None, dsl: str = "triton",
                 backend: str = "auto", max_steps: int = 4, config: EvalConfig | None = None,
                 stop_when_correct: bool | None = None, evaluator: Evaluator | None = None,
                 registry: TaskRegistry | None = None, render_mode: str | None = None, warm: Any = "auto",
                 tasks_dir: str | None = None, service: Any = None, placement: Placement | None = None):
        if dsl not in DSLS:
            raise UnknownChoiceError("dsl", dsl, DSLS)
        if max_steps < 1:
            raise ValueError("max_steps must be at least 1")
        if render_mode not in (None, "ansi"):
            raise UnknownChoiceError("render mode", str(render_mode), ["ansi"])
        if registry is not None and tasks_dir is not None:
            raise ValueError("pass registry= or tasks_dir=, not both")
        self.registry = registry or task_source(tasks_dir)     # one directory or several (core/registry)
        if task_id is not None:
            self.tasks = [self.registry.get(task_id)]
        else:
            self.tasks = [self.registry.get(t) for t in task_ids] if task_ids else list(self.registry)
        self.dsl = dsl
        self.backend = resolve_backend(backend)
        self.max_steps = max_steps
        self.config = config or EvalConfig()
        # where its evaluations run (core/placement.Placement: GPU index, lanes, scratch and cache paths); the
        # config says only what they measure. With service=, the service's placement stands.
        self.placement = placement or Placement()
        # Where speed cannot be measured, a correct kernel is the best outcome: the episode ends there.
        self.stop_when_correct = (backend_info(self.backend).reward_mode(self.config.reward.mode) == "correctness"
                                  if stop_when_correct is None else stop_when_correct)
        # warm: False (a fresh trusted checker per step, as engine.evaluate does by default); True (a warm
        # pool for this env's backend and GPU: a warm checker and pre-started children, closed in close());
        # "auto" (default): api/service.decide_warm's rule (warm on cuda with the built-in evaluator); or a
        # WarmPool or WarmChecker the caller owns and closes. Each submission still runs in a fresh,
        # single-use child (pre-started or not). Every step goes through an api/service.EvalService: this
        # env's own one-slot service (closed in close()), or `service=`, one the caller owns and closes.
        from kernelgym_gap.api.service import EvalService
        if isinstance(warm, str) and warm != "auto":
            raise ValueError(f"warm must be True, False, 'auto', a WarmPool or a WarmChecker, not {warm!r}")
        if evaluator is not None and warm is not False and warm is not None and warm != "auto":
            raise ValueError("warm= applies to the built-in evaluator; pass a checker to your own evaluator")
        if service is not None:
            if evaluator is not None:
                raise ValueError("pass service= or evaluator=, not both")
            self.service, self._owns_service = service, False
        else:
            slot = [self.placement.gpu_index] if self.backend == "cuda" else 1
            self.service = EvalService(self.backend, self.config, slots=slot, warm=warm or False,
                                       evaluator=evaluator, registry=self.registry, placement=self.placement)
            self._owns_service = True
        parts = self.service.warm_parts(0) if len(self.service.slots) == 1 else {}
        self.checker, self.children = parts.get("checker"), parts.get("children")
        self.evaluator: Evaluator = self.service.evaluate
        self.render_mode = render_mode
        self.observation_space = spaces.Text(max_length=MAX_OBSERVATION_CHARS, min_length=0, charset=CHARSET)
        self.action_space = spaces.Text(max_length=MAX_ACTION_CHARS, min_length=0, charset=CHARSET)
        self.task: TaskSpec = self.tasks[0]
        self._dsl = dsl
        self._steps = 0
        self._obs = ""
        self.last_record: EvalRecord | None = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = options or {}
        if "task" in options:
            self.task = self.registry.get(options["task"])
        elif len(self.tasks) == 1:
            self.task = self.tasks[0]
        else:
            self.task = self.tasks[int(self.np_random.integers(len(self.tasks)))]
        self._dsl = options.get("dsl", self.dsl)
        if self._dsl not in DSLS:
            raise UnknownChoiceError("dsl", self._dsl, DSLS)
        self._steps = 0
        if self.children is not None:       # the first step's child does its imports while the agent thinks
            self.service.prestart(self.task, self._dsl)
        self._obs = observation_text(self.task, self._dsl, self.backend, 0, self.max_steps, "")
        return self._obs, {"task": self.task.id, "dsl": self._dsl, "backend": self.backend,
                           "max_steps": self.max_steps}

    def step(self, action: str):
        if self._steps >= self.max_steps:
            raise RuntimeError("the episode's step budget is spent: call reset() first")
        source = action if isinstance(action, str) else str(action)
        record = self.evaluator(self.task, source, self._dsl, self.backend, self.config)
        self._steps += 1
        terminated = bool(record.correct) and self.stop_when_correct
        truncated = not terminated and self._steps >= self.max_steps
        feedback = feedback_text(record)
        self._obs = observation_text(self.task, self._dsl, self.backend, min(self._steps, self.max_steps - 1),
                                     self.max_steps, feedback)
        # info reaches the agent (trainers log it, tool envs return it): the record's public view, without
        # held-out trials' shapes, seeds or sizes (issue 31); people read env.unwrapped.last_record
        public = public_view(record.to_dict())
        info = {"task": self.task.id, "dsl": self._dsl, "backend": self.backend, "step": self._steps,
                "status": record.status.value, "correct": record.correct, "reward": record.reward,
                "reward_mode": record.reward_mode, "terms": dict(public.get("terms") or {}),
                "diagnosis": record.diagnosis, "message": record.message, "record": _deterministic(public)}
        self.last_record = record
        return self._obs, float(record.reward), terminated, truncated, info

    def close(self):
        if self._owns_service:
            self.service.close()
        super().close()

    def render(self):
        if self.render_mode == "ansi":
            return self._obs
        return None


def make(task: str = "Suite", tasks_dir: str | None = None, **kwargs) -> gym.Env:
    """`gymnasium.make` for a task named by id or bare name (`"LayerNorm"`, `"layernorm"`,
    `"kernelgym_gap/LayerNorm-v1"`); "Suite" makes the suite env. kwargs go to KernelEnv (backend, dsl,
    max_steps, config, ...). tasks_dir: a task directory other than tasks/ (e.g. `import kernelbench`'s
    output): its tasks are registered with Gymnasium (bound to that directory) and looked up there."""
    if tasks_dir is not None:
        from kernelgym_gap.api.registration import register_envs
        registry = task_source(tasks_dir)
        register_envs(registry)
        if task in ("Suite", SUITE_ID):
            return gym.make(SUITE_ID, tasks_dir=registry.source(), **kwargs)
        return gym.make(registry.get(task).id, **kwargs)
    if task in ("Suite", SUITE_ID):
        return gym.make(SUITE_ID, **kwargs)
    return gym.make(default_registry().get(task).id, **kwargs)
