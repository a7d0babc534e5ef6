"""Flags shared by several commands, mapped onto the package's types in one place."""
from __future__ import annotations

import stat
from pathlib import Path

from kernelgym_gap.core.errors import KernelGymError


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


class UsageError(KernelGymError):
    """A command line that cannot work as given (exit 2, one line on stderr)."""


def read_source(path: str) -> bytes:
    """The bytes of a kernel file named on the command line, or UsageError (an empty path, a directory, a
    missing, unreadable or non-regular file) in one line, never a traceback."""
    if not path or not path.strip():
        raise UsageError("the kernel file is an empty path")
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except OSError as e:
        raise UsageError(f"{path}: cannot be read ({e.strerror or e})") from None
    if stat.S_ISDIR(st.st_mode):
        raise UsageError(f"{path}: is a directory, not a kernel file")
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"{path}: is not a regular file")
    try:
        return p.read_bytes()
    except OSError as e:
        raise UsageError(f"{path}: cannot be read ({e.strerror or e})") from None
