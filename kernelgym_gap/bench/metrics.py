"""The metrics of a benchmark run, from its samples (pure functions: no store, no engine).

A *sample* is one episode (task, sample index): up to S steps of one agent. Its kernel is its best step by
reward (ties: the earliest), the one an agent would ship; the sample is correct when that kernel is (on the
cuda backend every correct kernel earns more than any failure, so this is "some step was correct"). E, U,
E_compile and the verdict are that step's.

Per task, over its n samples (c of them correct):
  correctness_rate   c / n
  fast_p             share of samples correct with E >= p, p in PS (E = t_eager / t_kernel); null on a
                     backend that measures no time (cpu)
  pass_at_k          1 - C(n - c, k) / C(n, k) (the unbiased estimator of the chance that at least one of k
                     samples drawn from the n is correct); null where k > n
  fast_1_at_k        the same with c = samples correct and E >= 1; null where no time is measured
  geomean_E/U        geometric mean over the correct samples with a measured E (U, E_compile)
  diagnosis          the verdicts of the correct samples (efficient / repairable_defect / structural_residual)
  failures           the status of each sample that is not correct (its best step's; agent_error when the
                     agent could not submit anything); step_statuses counts every step
  too_slow           samples whose best step is too_slow (issue 38: correct on every shape it finished,
                     killed past a call's deadline on a larger one). Not correct here, so in neither
                     correctness_rate nor pass@k: those mean verified on every trial, and a too_slow kernel
                     never ran the shapes it was killed on. Never in fast_p (no E was measured, only a
                     bound). Counted apart so that "correct but hopelessly slow" is not lost among failures.
  unverified         samples whose best step is unverified (a TileLang kernel the cpu backend could only
                     compile for the GPU, not run: docs/backends.md, "unverified"). Not scored: neither
                     correct nor failed, so they are left out of every denominator (correctness_rate,
                     pass@k and fast_p are over the n - u verified samples; null when none is verified) and
                     out of `failures`; `verified` = n - u.
  tokens, seconds    sums over the samples, where the agent reports usage

Over tasks (overall, per category): rates and estimators are the mean over the tasks (each task counts the
same, whatever its number of samples); geomean_E/U the geometric mean of the tasks' geometric means; counts
are summed.
"""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence

PS: tuple[float, ...] = (0.0, 0.5, 0.8, 1.0, 1.5, 2.0)
VERDICTS = ("efficient", "repairable_defect", "structural_residual")


def pkey(p: float) -> str:
    """A threshold as a JSON key: 0, 0.5, 0.8, 1, 1.5, 2."""
    return f"{p:g}"


def default_ks(samples: int) -> list[int]:
    return sorted({k for k in (1, 5, 10) if k <= samples} | {max(samples, 1)})


def pass_at_k(n: int, c: int, k: int) -> float | None:
    """The unbiased pass@k estimator (Chen et al. 2021): 1 - C(n-c, k) / C(n, k); None when k > n."""
    if k < 1 or k > n:
        return None
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def geomean(xs: Iterable[float | None]) -> float | None:
    vals = [float(x) for x in xs if isinstance(x, (int, float)) and x is not None and x > 0 and math.isfinite(x)]
    if not vals:
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def _mean(xs: Iterable[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return sum(vals) / len(vals) if vals else None


def summarize_episode(episode: dict, steps: Sequence[dict]) -> dict:
    """One sample from its episode row and its stored steps (store.bench_steps rows, in step order)."""
    best = None
    for s in steps:       # by reward; at equal reward an unverified step (not scored) outranks a failed one
        if best is None or _rank(s) > _rank(best):
            best = s
    usage = episode.get("usage") or {}
    tokens = None
    if any(isinstance(usage.get(k), int) for k in ("prompt_tokens", "completion_tokens")):
        tokens = {"prompt": usage.get("prompt_tokens") or 0, "completion": usage.get("completion_tokens") or 0}
        tokens["total"] = tokens["prompt"] + tokens["completion"]
    if best is None:
        status = "agent_error" if episode.get("error") else "no_submission"
    else:
        status = best["status"]
    correct = bool(best is not None and best["correct"] is True)
    return {"task": episode["task_id"], "sample": episode["sample"], "category": episode.get("category") or "",
            "level": episode.get("level"), "state": episode.get("state"), "correct": correct,
            "unverified": bool(best is not None and best["status"] == "unverified"),
            "too_slow": bool(best is not None and best["status"] == "too_slow"),
            "status": status, "best_step": best["step"] if best else None,
            "reward": best["reward"] if best else 0.0,
            "E": best["e"] if best and correct else None, "U": best["u"] if best and correct else None,
            "E_compile": best.get("e_compile") if best and correct else None,
            "verdict": best["verdict"] if best and correct else None,
            "steps": len(steps), "step_statuses": [s["status"] for s in steps],
            "tokens": tokens, "requests": usage.get("requests"), "retries": usage.get("retries"),
            "seconds": episode.get("seconds"), "error": episode.get("error"), "finished": episode.get("finished")}


def _rank(step: dict) -> tuple:
    return (step["reward"] or 0.0, step["status"] == "unverified")


def _verdicts(correct: Sequence[dict]) -> dict:
    seen = Counter(s["verdict"] for s in correct if s["verdict"])
    return {**{v: seen.get(v, 0) for v in VERDICTS}, **{v: n for v, n in seen.items() if v not in VERDICTS}}


def _fast(s: dict, p: float) -> bool:
    return s["correct"] and s["E"] is not None and s["E"] >= p


def task_metrics(samples: Sequence[dict], ks: Sequence[int], speed: bool) -> dict:
    """The metrics of one task's samples (see the module docstring). speed: the backend measures time."""
    u = sum(s["unverified"] for s in samples)
    n = len(samples) - u                # the verified samples: unverified ones are not scored
    c = sum(s["correct"] for s in samples)
    c_fast = sum(_fast(s, 1.0) for s in samples)
    correct = [s for s in samples if s["correct"]]
    tokens = [s["tokens"] for s in samples if s["tokens"]]
    secs = [s["seconds"] for s in samples if s["seconds"] is not None]
    first = samples[0] if samples else {}
    return {
        "category": first.get("category", ""), "level": first.get("level"), "samples": len(samples), "correct": c,
        "verified": n, "unverified": u, "errors": sum(bool(s["error"]) for s in samples),
        "too_slow": sum(s.get("too_slow", False) for s in samples),
        "correctness_rate": c / n if n else None,
        "fast_p": {pkey(p): sum(_fast(s, p) for s in samples) / n for p in PS} if speed and n else None,
        "pass_at_k": {str(k): pass_at_k(n, c, k) for k in ks},
        "fast_1_at_k": {str(k): pass_at_k(n, c_fast, k) for k in ks} if speed else None,
        "geomean_E": geomean(s["E"] for s in correct) if speed else None,
        "geomean_U": geomean(s["U"] for s in correct) if speed else None,
        "geomean_E_compile": geomean(s["E_compile"] for s in correct) if speed else None,
        "diagnosis": _verdicts(correct) if speed else None,
        "failures": dict(Counter(s["status"] for s in samples if not s["correct"] and not s["unverified"])),
        "step_statuses": dict(Counter(st for s in samples for st in s["step_statuses"])),
        "steps_mean": _mean(s["steps"] for s in samples),
        "tokens": {k: sum(t[k] for t in tokens) for k in ("prompt", "completion", "total")} if tokens else None,
        "seconds": sum(secs) if secs else None,
        "seconds_per_sample": _mean(secs),
    }


def _merge_counts(dicts: Iterable[dict | None]) -> dict | None:
    dicts = [d for d in dicts if d is not None]
    if not dicts:
        return None
    total: Counter = Counter()
    for d in dicts:
        total.update(d)
    return dict(total)


def _mean_map(maps: Sequence[dict | None]) -> dict | None:
    maps = [m for m in maps if m is not None]
    if not maps:
        return None
    return {k: _mean(m.get(k) for m in maps) for k in maps[0]}


def aggregate(per_task: Sequence[dict], speed: bool) -> dict:
    """Metrics over several tasks' task_metrics (overall, or one category)."""
    tokens = [t["tokens"] for t in per_task if t["tokens"]]
    secs = [t["seconds"] for t in per_task if t["seconds"] is not None]
    return {
        "tasks": len(per_task), "samples": sum(t["samples"] for t in per_task),
        "correct": sum(t["correct"] for t in per_task), "unverified": sum(t["unverified"] for t in per_task),
        "verified": sum(t.get("verified", t["samples"]) for t in per_task),
        "errors": sum(t["errors"] for t in per_task), "too_slow": sum(t.get("too_slow", 0) for t in per_task),
        "solved_tasks": sum(t["correct"] > 0 for t in per_task),
        "correctness_rate": _mean(t["correctness_rate"] for t in per_task),
        "fast_p": _mean_map([t["fast_p"] for t in per_task]) if speed else None,
        "pass_at_k": _mean_map([t["pass_at_k"] for t in per_task]),
        "fast_1_at_k": _mean_map([t["fast_1_at_k"] for t in per_task]) if speed else None,
        "geomean_E": geomean(t["geomean_E"] for t in per_task) if speed else None,
        "geomean_U": geomean(t["geomean_U"] for t in per_task) if speed else None,
        "geomean_E_compile": geomean(t["geomean_E_compile"] for t in per_task) if speed else None,
        "diagnosis": _merge_counts(t["diagnosis"] for t in per_task) if speed else None,
        "failures": _merge_counts(t["failures"] for t in per_task) or {},
        "step_statuses": _merge_counts(t["step_statuses"] for t in per_task) or {},
        "tokens": {k: sum(t[k] for t in tokens) for k in ("prompt", "completion", "total")} if tokens else None,
        "seconds": sum(secs) if secs else None,
    }


def compute(samples: Sequence[dict], ks: Sequence[int], speed: bool) -> dict:
    """{"tasks": {task: metrics}, "by_category": {category: aggregate}, "overall": aggregate}."""
    by_task: dict[str, list[dict]] = {}
    for s in samples:
        by_task.setdefault(s["task"], []).append(s)
    tasks = {t: task_metrics(ss, ks, speed) for t, ss in by_task.items()}
    cats: dict[str, list[dict]] = {}
    for t in tasks.values():
        cats.setdefault(t["category"], []).append(t)
    return {"overall": aggregate(list(tasks.values()), speed),
            "by_category": {c: aggregate(ts, speed) for c, ts in sorted(cats.items())}, "tasks": tasks}


def fast_p_curve(samples: Sequence[dict], grid: Sequence[float]) -> list[float]:
    """fast_p at each p of `grid` (the mean over tasks, as `compute` reports it)."""
    by_task: dict[str, list[dict]] = {}
    for s in samples:
        if not s.get("unverified"):     # not scored: out of the denominators, as in task_metrics
            by_task.setdefault(s["task"], []).append(s)
    if not by_task:
        return [0.0 for _ in grid]
    return [sum(sum(_fast(s, p) for s in ss) / len(ss) for ss in by_task.values()) / len(by_task) for p in grid]
