"""Flags shared by several commands, mapped onto the package's types in one place."""
from __future__ import annotations


def eval_config(args):
    """The EvalConfig that `--seed`, `--reward-mode` and `--gpu` ask for (defaults for flags a command lacks)."""
    from kernelgym_gap.core.config import EvalConfig
    from kernelgym_gap.judge.reward import RewardConfig
    cfg = EvalConfig()
    changes = {}
    if getattr(args, "seed", None) is not None:
        changes["trial_seed"] = args.seed
    if getattr(args, "reward_mode", None):
        changes["reward"] = RewardConfig(mode=args.reward_mode)
    if getattr(args, "gpu", None) is not None:
        changes["gpu_index"] = args.gpu
    return cfg.replace(**changes) if changes else cfg


def add_tasks_dir(parser) -> None:
    parser.add_argument("--tasks-dir", help="load tasks from this directory (<category>/<name>/task.py, e.g. "
                                            "the output of `import kernelbench`) instead of tasks/")


def task_registry(args):
    """The registry `--tasks-dir` names (the default tasks/ without it)."""
    from kernelgym_gap.core.registry import TaskRegistry, default_registry
    tasks_dir = getattr(args, "tasks_dir", None)
    return TaskRegistry(tasks_dir) if tasks_dir else default_registry()
