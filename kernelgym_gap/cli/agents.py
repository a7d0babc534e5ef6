"""`kernelgym-gap episode`: one episode of an agent from agents/ in the environment.

    kernelgym-gap episode --agent search --task LayerNorm --backend cpu --steps 6 --seed 0
    kernelgym-gap episode --agent chat --task LayerNorm --base-url http://127.0.0.1:8000/v1 --model my-ckpt
    kernelgym-gap episode --agent replay --task LayerNorm --db results.sqlite3 --ray auto

Every step's record goes to the results store when --db (or $KERNELGYM_GAP_DB) names one (each step is
measured; the store is written, not used as a cache); --ray sends the evaluations to a pool of Ray actors
instead of this machine's engine. Imports stay inside the command. Exit code 3 when the agent could not
act (e.g. the chat endpoint kept failing): the steps taken so far are printed and stored.
"""
from __future__ import annotations

import json
import os
import sys
import time

from kernelgym_gap.cli import options
from kernelgym_gap.core.errors import HarnessError, KernelGymError
from kernelgym_gap.core.terms import Headline

ENV_DB = "KERNELGYM_GAP_DB"


def add_commands(subparsers) -> None:
    s = subparsers.add_parser("episode", help="run one episode of an agent (agents/NAME.py) on a task")
    s.add_argument("--agent", required=True, help="agent name: a file agents/NAME.py (replay, search, chat, ...)")
    s.add_argument("--task", required=True, help="task id (kernelgym_gap/LayerNorm-v1) or name (LayerNorm)")
    options.add_tasks_dir(s)
    options.add_dsl(s)
    options.add_backend(s)
    s.add_argument("--steps", type=int, default=4, help="the episode's step budget (default 4)")
    s.add_argument("--seed", type=int, help="seeds the trial seeds and the agent's own randomness "
                                            "(default: fresh random seeds)")
    s.add_argument("--reward-mode", choices=["full", "correctness"], help=options.REWARD_MODE_HELP)
    s.add_argument("--gpu", type=int, help=options.GPU_HELP)
    stop = s.add_mutually_exclusive_group()
    stop.add_argument("--keep-going", dest="stop_when_correct", action="store_false", default=None,
                      help="use the whole budget even after a correct kernel (the default where speed is scored)")
    stop.add_argument("--stop-when-correct", dest="stop_when_correct", action="store_true",
                      help="end the episode at the first correct kernel (the default on cpu / correctness mode)")
    c = s.add_argument_group("chat agent (any OpenAI-compatible endpoint)")
    c.add_argument("--base-url", help="endpoint URL up to /v1 (default $OPENAI_BASE_URL)")
    c.add_argument("--model", help="model name sent to the endpoint (default $OPENAI_MODEL)")
    c.add_argument("--api-key-env", default="OPENAI_API_KEY",
                   help="environment variable holding the API key (default OPENAI_API_KEY; unset: no key sent)")
    c.add_argument("--temperature", type=float, help="sampling temperature (default 0: greedy)")
    c.add_argument("--max-tokens", type=int, help="completion token limit (default: none sent, the endpoint decides)")
    c.add_argument("--request-timeout", type=float, help="seconds per HTTP request (default 120)")
    c.add_argument("--max-retries", type=int, help="retries on 429/5xx/timeouts (default 4)")
    s.add_argument("--agent-arg", action="append", default=[], metavar="KEY=VALUE",
                   help="extra keyword argument for the agent's make_agent (JSON values are parsed)")
    s.add_argument("--db", help=f"results database to write every step to (default ${ENV_DB}; none: not stored)")
    s.add_argument("--submitter", help="name the store files the steps under (default agent:NAME[:model])")
    s.add_argument("--ray", metavar="auto|ADDRESS",
                   help="evaluate on Ray actors: 'auto' (a running cluster, else a local one) or an address")
    s.add_argument("--save-best", metavar="FILE", help="write the best-rewarded source to FILE")
    s.add_argument("--json", action="store_true", help="print one JSON object (the episode) on stdout")
    s.set_defaults(func=cmd_episode)


def agent_registry(agent: str, registry) -> dict:
    """The registry keyword for the agents that read tasks' solutions (replay, search) when the tasks are not
    the built-in ones; others take no registry."""
    return {"registry": registry} if agent in ("replay", "search") and not registry.is_builtin() else {}


def _open_store(args):
    """The results store named by --db or $KERNELGYM_GAP_DB, or None. The store module is imported only
    when one is named (it is optional for everything else here)."""
    path = args.db or os.environ.get(ENV_DB)
    if not path:
        return None
    try:
        from kernelgym_gap.store.db import Store
    except ImportError as e:
        raise KernelGymError(f"--db needs kernelgym_gap.store.db, which cannot be imported here ({e})") from None
    return Store(path)


def storing_evaluator(evaluator, store, submitter: str, origin: str = "episode"):
    """Wraps an engine.evaluate-shaped callable so that every record it returns is also written to the
    store (`Store.add_record(record, source, submitter)`), whichever pool measured it. Every step is
    measured: an episode is a measurement, not a cache lookup."""
    from kernelgym_gap.store import db as store_mod
    key_for = getattr(store_mod, "cache_key_for", None)

    from kernelgym_gap.api.service import takes_placement
    passes = takes_placement(evaluator)

    def run(task, source, dsl, backend, config, placement=None):
        # the env's service passes its slot's placement; an evaluator that places itself (Ray's) goes without
        where = {"placement": placement} if passes and placement is not None else {}
        record = evaluator(task, source, dsl, backend, config, **where)
        extra = {}
        if key_for is not None:
            try:
                extra["key"] = key_for(task, source, dsl, record.backend, config, placement)
            except Exception:  # noqa: BLE001 - the store's own default key applies
                extra = {}
        try:
            store.add_record(record, source, submitter, origin=origin, **extra)
        except TypeError:     # a store without the keyword arguments
            store.add_record(record, source, submitter)
        return record
    return run


def cmd_episode(args) -> int:
    from kernelgym_gap.cli.options import eval_config
    from kernelgym_gap.api.agent import load_agent
    from kernelgym_gap.api.env import KernelEnv
    if args.steps < 1:
        raise KernelGymError("--steps must be at least 1")
    registry = options.task_registry(args)
    task = registry.get(args.task)
    try:
        agent = load_agent(args.agent, **options.agent_kwargs(args), **agent_registry(args.agent, registry))
    except (TypeError, ValueError) as e:
        raise KernelGymError(f"agent {args.agent!r} cannot be made: {e}") from None
    if args.agent == "replay" and not agent.solutions(task.id, args.dsl):
        raise KernelGymError(options.no_solution_reason(task, args.dsl))
    config = eval_config(args)
    store = _open_store(args)
    submitter = args.submitter or ":".join(["agent", agent.name] + ([str(agent.model)] if args.agent == "chat"
                                                                      and getattr(agent, "model", None) else []))
    pool = None
    try:
        if args.ray:
            from kernelgym_gap.api.ray_pool import RayPool
            pool = RayPool(address=args.ray, backend=args.backend, workers=1)
            evaluator = pool.evaluator()
        else:
            from kernelgym_gap.engine.pipeline import evaluate
            evaluator = evaluate
        if store is not None:
            evaluator = storing_evaluator(evaluator, store, submitter)
        # Default (None): the environment's rule; stop at a correct kernel where the reward is 0/1 (cpu
        # backend, correctness mode), use the whole budget where speed is scored.
        env = KernelEnv(task_id=task.id, dsl=args.dsl, backend=pool.backend if pool else args.backend,
                        max_steps=args.steps, config=config, stop_when_correct=args.stop_when_correct,
                        evaluator=evaluator, registry=registry, placement=options.placement(args))
        episode = run_episode(env, agent, seed=args.seed, progress=not args.json)
    finally:
        if pool is not None:
            pool.close()
        if store is not None:
            store.close()
    episode.update(agent=agent.name, submitter=submitter if store is not None else None,
                   db=str(store.path) if store is not None else None)
    for attr in ("usage", "history"):
        if getattr(agent, attr, None):
            episode[attr] = getattr(agent, attr)
    if args.save_best and episode["best"] is not None:
        with open(args.save_best, "w", encoding="utf-8") as f:
            f.write(episode["best"]["source"])
    if args.json:
        print(json.dumps(episode, indent=2))
    else:
        print(format_episode(episode))
    if episode.get("error"):
        print(f"kernelgym-gap: the episode stopped early: {episode['error']}", file=sys.stderr)
        return 3
    return 0


def run_episode(env, agent, seed: int | None = None, progress: bool = False) -> dict:
    """Runs one episode; returns a JSON-able summary (every step's headline, the best step's source, and
    `stopped`: why it ended before its step budget, when it did). progress: a bar (or one line per step)
    on stderr."""
    from kernelgym_gap.cli.progress import Progress
    max_steps = env.unwrapped.max_steps      # env may be gym.make's: its wrappers do not forward attributes
    obs, info = env.reset(seed=seed)
    agent.reset(obs, info)
    steps, best = [], None
    t_start = time.perf_counter()
    error = finished = stopped = None
    with Progress(max_steps, unit="step", quiet=not progress) as bar:
        for i in range(max_steps):
            bar.start(f"step {i + 1}: the agent writes a kernel")
            try:
                source = agent.act(obs, info)
            except HarnessError as e:      # e.g. the chat endpoint kept failing: not the model's fault
                error = f"{type(e).__name__}: {e}"
                break
            except (RuntimeError, StopIteration) as e:   # the agent has nothing left to submit (replay)
                finished = str(e) or type(e).__name__
                break
            bar.start(f"step {i + 1}: evaluating" + (f" ({agent.last_note})" if getattr(agent, "last_note", None)
                                                     else ""))
            t0 = time.perf_counter()
            obs, reward, terminated, truncated, info = env.step(source)
            rec, head = info["record"], Headline.of(info["terms"])
            step = {"step": i + 1, "status": info["status"], "correct": info["correct"], "reward": reward,
                    "E": head.E, "U": head.U,
                    "verdict": (info["diagnosis"] or {}).get("verdict"),
                    "source_sha256": rec.get("source_sha256"),
                    "seconds": round(time.perf_counter() - t0, 3),
                    "message": (info["message"] or "").splitlines()[0][:200] if info["message"] else ""}
            note = getattr(agent, "last_note", None) or getattr(getattr(agent, "last", None), "file", None)
            if note:
                step["change"] = note
            steps.append(step)
            if best is None or reward > best["reward"]:
                best = {"step": i + 1, "reward": reward, "status": info["status"], "source": source}
            bar.done(f"{info['status']} reward={reward:.4f} ({step['seconds']:.1f} s)")
            if terminated and i + 1 < max_steps:
                stopped = stop_reason(i + 1, max_steps, info.get("backend"), rec.get("reward_mode"))
            if terminated or truncated:
                break
    env.close()
    out = {"task": info.get("task"), "dsl": info.get("dsl"), "backend": info.get("backend"),
           "max_steps": max_steps, "steps": steps, "best": best,
           "seconds": round(time.perf_counter() - t_start, 3)}
    if error:
        out["error"] = error
    if finished:
        out["finished"] = finished
    if stopped:
        out["stopped"] = stopped
    return out


def stop_reason(step: int, max_steps: int, backend: str | None, reward_mode: str | None) -> str:
    """Why an episode ended at a correct kernel before its budget (the env's stop_when_correct rule)."""
    where = ("the cpu backend measures correctness only" if backend == "cpu"
             else f"the reward is in {reward_mode or 'correctness'} mode")
    return (f"the episode ended at step {step} of {max_steps}: the kernel is correct, and {where}, so no "
            f"later step can score higher (reward 1 is the maximum); --keep-going uses every step"
            + (", and --backend cuda scores speed" if backend == "cpu" else ""))


def format_episode(ep: dict) -> str:
    lines = [f"{ep['agent']} on {ep['task']}  dsl={ep['dsl']}  backend={ep['backend']}  "
             f"{len(ep['steps'])}/{ep['max_steps']} steps  {ep['seconds']:.1f} s"]
    header = ("step", "status", "correct", "reward", "E", "U", "change / message")
    rows = []
    for s in ep["steps"]:
        f = (lambda x: "-" if x is None else f"{x:.3g}")
        rows.append((str(s["step"]), s["status"], str(s["correct"]), f"{s['reward']:.4f}", f(s["E"]), f(s["U"]),
                     (s.get("change") or s["message"] or "")[:90]))
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
    lines.append("  ".join(h.ljust(w) for h, w in zip(header, widths)))
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    if ep.get("finished"):
        lines.append(f"the agent stopped: {ep['finished']}")
    if ep.get("stopped"):
        lines.append(ep["stopped"])
    b = ep["best"]
    if b:
        lines.append(f"best: step {b['step']}  reward {b['reward']:.4f}  ({b['status']})")
    if ep.get("db"):
        lines.append(f"stored in {ep['db']} as {ep['submitter']}")
    return "\n".join(lines)
