"""Flags shared by several commands, mapped onto the package's types in one place; the help formatter and
parser class every command uses (each option's help ends with its default)."""
from __future__ import annotations

import argparse
import json
import stat
from pathlib import Path

from kernelgym_gap.core import dsls
from kernelgym_gap.core.errors import KernelGymError

BACKEND_HELP = ("where to evaluate: cpu (Triton interpreter, TileLang C target: correctness only), cuda (a GPU: "
                "correctness, E, U and the verdict), auto (cuda when a GPU is visible, else cpu)")
DSL_HELP = "the kernel language of the source file"
REWARD_MODE_HELP = ("full: 0 unless correct, then 0.2 + 0.8 x a score of E and U where the backend measures "
                    "them; correctness: 1 for a correct kernel, 0 otherwise (default: full; the cpu backend "
                    "measures no time, so it is always correctness there)")
SEED_HELP = ("seed the generator of the trial seeds, so the same trials (and inputs) come back; each trial's "
             "own seed is derived from it and printed with a failure (default: fresh random seeds)")
GPU_HELP = "GPU index for the cuda backend (default: the first visible GPU)"
JSON_HELP = "print one JSON document on stdout instead of text (no progress on stderr)"


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps descriptions as written and appends `(default: X)` to an option's help unless the help already
    names its default, or the default is None or False (the help then says what leaving it out means)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if "default" in text or action.default in (None, False, argparse.SUPPRESS) or not action.option_strings:
            return text
        return f"{text} (default: %(default)s)"


class Parser(argparse.ArgumentParser):
    """argparse.ArgumentParser with HelpFormatter; subcommand parsers made from one inherit it."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)


def add_backend(p, default: str = "auto") -> None:
    p.add_argument("--backend", default=default, choices=["cpu", "cuda", "auto"], help=BACKEND_HELP)


COMPILE_BASELINE_HELP = ("cuda: the torch.compile baseline (E_compile): measure it where the cache lacks it (seconds "
                         "per shape, once per task, device and software, holding the GPU), cached (only what the "
                         "cache holds), off; the reward is against torch eager either way")


def add_compile_baseline(p) -> None:
    p.add_argument("--compile-baseline", choices=["measure", "cached", "off"], help=COMPILE_BASELINE_HELP
                   + " (default: measure)")


def add_dsl(p) -> None:
    p.add_argument("--dsl", default=dsls.DEFAULT, choices=dsls.NAMES, help=DSL_HELP)


def placement(args):
    """Where the command's evaluations run (core.placement.Placement): `--gpu` (default GPU 0)."""
    from kernelgym_gap.core.placement import Placement
    gpu = getattr(args, "gpu", None)
    return Placement(gpu_index=gpu) if gpu is not None else Placement()


def eval_config(args):
    """The EvalConfig that `--seed`, `--reward-mode`, `--timed-shapes` and `--compile-baseline` ask for
    (defaults for flags a command lacks); `--gpu` is placement (see placement())."""
    from kernelgym_gap.core.config import EvalConfig
    from kernelgym_gap.judge.reward import RewardConfig
    cfg = EvalConfig()
    changes = {}
    if getattr(args, "seed", None) is not None:
        changes["trial_seed"] = args.seed
    if getattr(args, "reward_mode", None):
        changes["reward"] = RewardConfig(mode=args.reward_mode)
    if getattr(args, "timed_shapes", None) is not None:
        changes["timed_shapes"] = args.timed_shapes
    if getattr(args, "compile_baseline", None):
        changes["compile_baseline"] = args.compile_baseline
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


def add_tasks_dir(parser) -> None:
    parser.add_argument("--tasks-dir", action="append", metavar="DIR",
                        help="load tasks from this directory (<category>/<name>/task.py, e.g. the output of "
                             "`import kernelbench`) instead of tasks/; repeat it for several, `builtin` naming "
                             "tasks/ (e.g. --tasks-dir builtin --tasks-dir ./kb)")


def task_registry(args):
    """The registry of the task source `--tasks-dir` names (one directory or several; tasks/ without it)."""
    from kernelgym_gap.core.registry import task_source
    return task_source(getattr(args, "tasks_dir", None) or None)


def no_solution_reason(task, dsl: str) -> str:
    """Why `task` has nothing to replay in `dsl`: an imported task ships no reference solution at all."""
    if task.origin:
        return (f"{task.id} was imported ({task.origin}) and ships no reference solution to replay; evaluate a "
                f"kernel for it with `kernelgym-gap eval`, or run an agent that writes one (search with "
                f"--agent-arg start_file=..., chat)")
    return f"{task.id} has no {dsl} reference solution to replay"


def replay_plan(tasks, dsl_names, replay) -> tuple[int, list[str]]:
    """What `run` has to replay: the number of reference solutions of `tasks` in `dsl_names`, and one line
    per task that has none (imported tasks ship none), so that the command says so instead of printing an
    empty table."""
    total, lines = 0, []
    imported = [t for t in tasks if t.origin]
    for t in tasks:
        n = sum(len(replay.solutions(t.id, d)) for d in dsl_names)
        total += n
        if n == 0 and not t.origin:
            lines.append(f"nothing to replay for {t.id}: no {'/'.join(dsl_names)} reference solution")
    if imported:
        more = f" and {len(imported) - 5} more" if len(imported) > 5 else ""
        names = ", ".join(t.name for t in imported[:5]) + more
        lines.append(f"nothing to replay for {len(imported)} imported task(s) ({names}): imported tasks ship no "
                     "reference solution. `run` replays reference solutions only; evaluate your kernels with "
                     "`kernelgym-gap eval --tasks-dir DIR --task NAME FILE`, or an agent with `kernelgym-gap bench`")
    return total, lines


_CHAT_FLAGS = (("base_url", "base_url"), ("model", "model"), ("api_key_env", "api_key_env"),
               ("temperature", "temperature"), ("max_tokens", "max_tokens"), ("request_timeout", "timeout_s"),
               ("max_retries", "max_retries"))


def agent_kwargs(args, with_seed: bool = True) -> dict:
    """The keyword arguments `load_agent` gets from `episode`'s and `bench`'s flags: the chat endpoint's
    settings for --agent chat, `--seed` (with_seed: `bench` seeds each sample itself), then every
    --agent-arg KEY=VALUE (the value parsed as JSON where it is JSON, else kept as text)."""
    kw: dict = {}
    if args.agent == "chat":
        flags = _CHAT_FLAGS + ((("seed", "seed"),) if with_seed else ())
        kw.update({name: getattr(args, flag) for flag, name in flags if getattr(args, flag) is not None})
    elif args.agent == "search" and with_seed and args.seed is not None:
        kw["seed"] = args.seed
    given: dict = {}
    for item in args.agent_arg:
        if "=" not in item:
            raise KernelGymError(f"--agent-arg {item!r}: expected KEY=VALUE")
        k, v = item.split("=", 1)
        try:
            given[k.strip()] = json.loads(v)
        except ValueError:
            given[k.strip()] = v
    kw.update(coerce_agent_args(args.agent, given))
    return kw


def _agent_parameters(name: str) -> tuple[dict, bool] | None:
    """({parameter: type hint}, takes other keywords too) of what the agent's make_agent builds (its own
    parameters, else, when it only forwards **kwargs, those of the class its return annotation names); None
    when they cannot be read."""
    import inspect
    import typing

    from kernelgym_gap.api.agent import load_agent_module
    try:
        make = load_agent_module(name).make_agent
    except Exception:  # noqa: BLE001 - an agent that does not load is reported by load_agent itself
        return None
    target = make
    params = inspect.signature(make).parameters
    if all(p.kind is p.VAR_KEYWORD for p in params.values()):
        try:
            target = typing.get_type_hints(make).get("return")
        except Exception:  # noqa: BLE001
            return None
        if not inspect.isclass(target):
            return None
        params = inspect.signature(target).parameters
        target = target.__init__
    try:
        hints = typing.get_type_hints(target)
    except Exception:  # noqa: BLE001 - an annotation that does not resolve: no types, names still checked
        hints = {}
    named = {n: hints.get(n) for n, p in params.items()
             if n != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    return named, any(p.kind is p.VAR_KEYWORD for p in params.values())


def _kinds(hint) -> tuple[str, type | None]:
    """("seq", element type) for list/tuple/Sequence hints, ("scalar", type) for int/float/bool/str, else
    ("any", None). Optional[...] is looked through."""
    import collections.abc
    import types
    import typing
    origin, targs = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, getattr(types, "UnionType", typing.Union)):
        inner = [a for a in targs if a is not type(None)]
        return _kinds(inner[0]) if len(inner) == 1 else ("any", None)
    if origin in (list, tuple, collections.abc.Sequence, set, frozenset):
        elem = targs[0] if targs and targs[0] is not Ellipsis else None
        return "seq", (elem if elem in (str, int, float) else None)
    if hint in (int, float, bool, str):
        return "scalar", hint
    return "any", None


def _type_name(t) -> str:
    return {int: "an integer", float: "a number", bool: "true or false", str: "text"}.get(t, str(t))


def coerce_agent_args(agent: str, given: dict) -> dict:
    """--agent-arg values checked and converted against the agent's parameters: a list parameter takes
    `a,b` (or one word, or JSON `["a", "b"]`); a number or a flag must parse as one. An unknown key or a
    value of the wrong kind is a KernelGymError that says what was expected (not the agent iterating a
    string one character at a time)."""
    found = _agent_parameters(agent)
    if found is None:
        return dict(given)
    params, takes_others = found
    out = {}
    for key, value in given.items():
        if key not in params and takes_others:
            out[key] = value            # the agent takes (and may ignore) keywords it does not name
            continue
        if key not in params:
            raise KernelGymError(f"--agent-arg {key}=...: agent {agent!r} has no parameter {key!r}; expected "
                                 f"one of {', '.join(sorted(params)) or '(none)'}")
        kind, elem = _kinds(params[key])
        where = f"--agent-arg {key}={value if isinstance(value, str) else json.dumps(value)}"
        if kind == "seq":
            if isinstance(value, str):
                value = [x.strip() for x in value.split(",") if x.strip()]
            if not isinstance(value, list) or (elem is not None and not all(
                    isinstance(x, elem) and not isinstance(x, bool) for x in value)):
                raise KernelGymError(f"{where}: expected a list of {_type_name(elem) if elem else 'values'}: "
                                     f"{key}=a,b or {key}='[\"a\", \"b\"]'")
            value = tuple(value) if typing_origin_is_tuple(params[key]) else value
        elif kind == "scalar" and elem is not str:
            ok = isinstance(value, bool) if elem is bool else (
                isinstance(value, (int, float) if elem is float else int) and not isinstance(value, bool))
            if not ok:
                raise KernelGymError(f"{where}: expected {_type_name(elem)}")
        elif kind == "scalar" and not isinstance(value, str):
            value = json.dumps(value)
        out[key] = value
    return out


def typing_origin_is_tuple(hint) -> bool:
    import typing
    if typing.get_origin(hint) in (typing.Union, getattr(__import__("types"), "UnionType", typing.Union)):
        return any(typing_origin_is_tuple(a) for a in typing.get_args(hint))
    return typing.get_origin(hint) is tuple
