"""A run's report, read back from the store (the same whether the run just finished, was resumed, or is read
by the leaderboard): the metrics of bench/metrics.py per task, per category and overall, the samples, the
errors, and a terminal table.

    report = build_report(store, "my-ckpt")      # one JSON-able dict (the keys of `bench --json`)
    print(format_report(report))
"""
from __future__ import annotations

from kernelgym_gap.bench import metrics
from kernelgym_gap.core import ids

CPU_NOTE = ("cpu backend: no time is measured, so E, U, fast_p, fast_1@k, the geometric means and the diagnosis "
            "are null; correctness and pass@k are reported (run with --backend cuda on a GPU for the rest)")
SELECT_NOTE = ("each sample is its episode's best step by reward (ties: the earliest); fast_p = share of samples "
               "correct with E = t_eager / t_kernel >= p; over tasks, rates are means over tasks")


UNVERIFIED_NOTE = ("not scored (neither correct nor failed): a TileLang kernel that the cpu backend could only "
                   "compile for the GPU, not run; left out of the rates, pass@k and the failures (correct/N counts "
                   "the verified samples). docs/backends.md, \"unverified\"")


class RunNotFound(LookupError):
    pass


def speed_measured(backend: str) -> bool:
    return backend == "cuda"


def build_report(store, label: str, ks: list[int] | None = None) -> dict:
    run = store.bench_run(label)
    if run is None:
        raise RunNotFound(f"no benchmark run is stored as {label!r}")
    episodes = store.bench_episodes(label)
    steps = store.bench_steps(label)
    by_episode: dict[tuple, list[dict]] = {}
    for s in steps:
        by_episode.setdefault((s["task_id"], s["sample"]), []).append(s)
    finished = [e for e in episodes if e["state"] in ("done", "error")]
    samples = [metrics.summarize_episode(e, by_episode.get((e["task_id"], e["sample"]), [])) for e in finished]
    cfg = run["config"]
    n_samples = max([cfg.get("samples", 1)] + [s["sample"] + 1 for s in samples])
    ks = ks or metrics.default_ks(n_samples)
    speed = speed_measured(run["backend"])
    out = metrics.compute(samples, ks, speed)
    planned = {(t, k) for t in cfg.get("tasks", []) for k in range(cfg.get("samples", 1))}
    have = {(e["task_id"], e["sample"]) for e in finished}
    devices = sorted({s["device"] for s in steps if s.get("device")})
    notes = [SELECT_NOTE] + ([] if speed else [CPU_NOTE])
    errors = [{"task": s["task"], "sample": s["sample"], "error": s["error"]} for s in samples if s["error"]]
    if errors:
        notes.append(f"{len(errors)} sample(s) ended in an error (the agent or the harness could not go on); they "
                     "count as failed here, and running the same command again retries them")
    pending = sorted(planned - have)
    if pending:
        notes.append(f"{len(pending)} planned episode(s) have not finished: run the same command again to "
                     "complete the run")
    return {
        "label": label, "agent": run["agent"], "dsl": run["dsl"], "backend": run["backend"], "device": devices,
        "created_at": run["created_at"], "updated_at": run["updated_at"], "settings": cfg,
        "complete": not pending, "pending": [{"task": t, "sample": k} for t, k in pending],
        "speed_measured": speed, "ps": [metrics.pkey(p) for p in metrics.PS], "ks": ks, "notes": notes,
        "overall": out["overall"], "by_category": out["by_category"], "tasks": out["tasks"],
        "errors": errors, "samples": samples,
    }


def fmt_num(x, fmt="{:.3g}") -> str:
    return "-" if x is None else fmt.format(x)


def fmt_pct(x) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def text_table(header, rows) -> list[str]:
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    lines = ["  ".join(str(h).ljust(w) for h, w in zip(header, widths)), "  ".join("-" * w for w in widths)]
    return lines + ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)) for r in rows]


def _cells(m: dict, ks: list[int], unv: bool = False) -> list[str]:
    """One table row; unv: the table has an `unverified` column (the run has unverified samples)."""
    kmax = str(ks[-1])
    fp = m.get("fast_p") or {}
    f1k = m.get("fast_1_at_k") or {}
    diag = m.get("diagnosis")
    fails = m.get("failures") or {}
    top = max(fails.items(), key=lambda kv: kv[1]) if fails else None
    tok = (m.get("tokens") or {}).get("total")
    at_kmax = ks[-1] > 1          # with one sample, pass@K and fast_1@K are pass@1 and fast_1 again: no column
    return [f"{m['correct']}/{m.get('verified', m['samples'])}"] + ([str(m.get("unverified", 0))] if unv else []) \
        + [fmt_pct(m["correctness_rate"]), fmt_pct(m["pass_at_k"].get("1"))] \
        + ([fmt_pct(m["pass_at_k"].get(kmax))] if at_kmax else []) + [fmt_pct(fp.get("1")), fmt_pct(fp.get("2"))] \
        + ([fmt_pct(f1k.get(kmax))] if at_kmax else []) + [
            fmt_num(m["geomean_E"]), fmt_num(m["geomean_U"]),
            "-" if diag is None else f"{diag.get('efficient', 0)}/{diag.get('repairable_defect', 0)}/"
                                     f"{diag.get('structural_residual', 0)}",
            f"{top[0]} x{top[1]}" if top else "-", "-" if tok is None else str(tok), fmt_num(m["seconds"], "{:.0f}")]


def format_report(r: dict) -> str:
    ks = r["ks"]
    kmax = ks[-1]
    unv = bool(r["overall"].get("unverified"))
    header = (["task", "correct"] + (["unverified"] if unv else []) + ["rate", "pass@1"] + ([f"pass@{kmax}"] if kmax > 1 else []) + ["fast_1", "fast_2"]
              + ([f"fast_1@{kmax}"] if kmax > 1 else []) + ["E gm", "U gm", "eff/rep/str", "top failure", "tokens",
                                                              "s"])
    rows = [[ids.short(t)] + _cells(m, ks, unv) for t, m in sorted(r["tasks"].items(), key=lambda kv: (kv[1]["category"],
                                                                                                   kv[0]))]
    rows += [[f"[{c}]"] + _cells(m, ks, unv) for c, m in r["by_category"].items()]
    rows.append(["OVERALL"] + _cells(r["overall"], ks, unv))
    o = r["overall"]
    lines = [f"bench {r['label']}: agent {r['agent']}, dsl {r['dsl']}, backend {r['backend']}"
             + (f" ({', '.join(r['device'])})" if r["device"] and r["backend"] == "cuda" else "")
             + f", {r['settings'].get('samples')} sample(s) x {r['settings'].get('steps')} step(s)", ""]
    lines += text_table(header, rows)
    lines.append("")
    lines.append(f"{o['solved_tasks']}/{o['tasks']} tasks solved at least once; {o['correct']}/{o.get('verified', o['samples'])} "
                 f"verified samples correct; pass@k: " + ", ".join(f"@{k} {fmt_pct(o['pass_at_k'].get(str(k)))}" for k in ks))
    if o.get("unverified"):
        lines.append(f"{o['unverified']} sample(s) unverified: " + UNVERIFIED_NOTE)
    if o.get("too_slow"):
        lines.append(f"{o['too_slow']} sample(s) too_slow: correct on every shape they finished, killed past a "
                     "call's deadline on a larger one (not counted correct: never verified there; no E, only a "
                     "bound)")
    if o.get("fast_p"):
        lines.append("fast_p: " + ", ".join(f"p={p} {fmt_pct(v)}" for p, v in o["fast_p"].items())
                     + f"; geomean E {fmt_num(o['geomean_E'])}, U {fmt_num(o['geomean_U'])}, E_compile "
                       f"{fmt_num(o['geomean_E_compile'])}")
    for e in r["errors"][:10]:
        lines.append(f"error: {ids.short(e['task'])} #{e['sample']}: {e['error'][:200]}")
    if len(r["errors"]) > 10:
        lines.append(f"... and {len(r['errors']) - 10} more errors (--json lists them all)")
    lines += [f"note: {n}" for n in r["notes"]]
    return "\n".join(lines)
