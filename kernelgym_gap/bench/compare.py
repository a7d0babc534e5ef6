"""Two or more runs side by side (`bench compare A B ...`, /bench/compare): the headline metrics of each, and
per task each run's numbers with what changed against the first run (the baseline)."""
from __future__ import annotations

from kernelgym_gap.bench.report import fmt_num, fmt_pct, text_table
from kernelgym_gap.core import ids

HEADLINE = ("correctness_rate", "pass_at_1", "fast_1", "fast_1_at_k", "geomean_E", "geomean_U")
E_CHANGE = 0.10            # a geometric-mean E that moved by more than 10% is reported as faster / slower


def _headline(m: dict | None, kmax: str) -> dict:
    if m is None:
        return {k: None for k in HEADLINE} | {"correct": None, "samples": None, "verified": None, "unverified": None}
    return {"correct": m["correct"], "samples": m["samples"], "verified": m.get("verified", m["samples"]),
            "unverified": m.get("unverified", 0), "correctness_rate": m["correctness_rate"],
            "pass_at_1": m["pass_at_k"].get("1"), "fast_1": (m.get("fast_p") or {}).get("1"),
            "fast_1_at_k": (m.get("fast_1_at_k") or {}).get(kmax),
            "geomean_E": m["geomean_E"], "geomean_U": m["geomean_U"],
            "failures": m.get("failures") or {}}


def changes(a: dict, b: dict) -> list[str]:
    """What changed from run a's numbers to run b's on one task (or overall)."""
    if a["samples"] is None:
        return ["new task"]
    if b["samples"] is None:
        return ["not run"]
    out = []
    # unverified samples are not scored (docs/backends.md): a run with none verified neither solved nor lost
    va, vb = a.get("verified", a["samples"]), b.get("verified", b["samples"])
    if va and vb and a["correct"] == 0 and b["correct"] > 0:
        out.append("solved")
    elif va and vb and a["correct"] > 0 and b["correct"] == 0:
        out.append("lost")
    elif va and not vb:
        out.append("unverified (not scored)")
    elif vb and not va:
        out.append(f"verified: {b['correct']}/{vb} correct")
    ra, rb = a["correctness_rate"], b["correctness_rate"]
    if ra is not None and rb is not None and abs(ra - rb) > 1e-9:
        out.append(f"correct {fmt_pct(ra)}->{fmt_pct(rb)}")
    fa, fb = a["fast_1"], b["fast_1"]
    if fa is not None and fb is not None and abs(fa - fb) > 1e-9:
        out.append(f"fast_1 {fmt_pct(fa)}->{fmt_pct(fb)}")
    ea, eb = a["geomean_E"], b["geomean_E"]
    if ea and eb and abs(eb / ea - 1) > E_CHANGE:
        out.append(f"{'faster' if eb > ea else 'slower'}: E {fmt_num(ea)}->{fmt_num(eb)} (x{eb / ea:.2f})")
    fail_a = max(a["failures"].items(), key=lambda kv: kv[1])[0] if a["failures"] else None
    fail_b = max(b["failures"].items(), key=lambda kv: kv[1])[0] if b["failures"] else None
    if fail_a != fail_b and (fail_a or fail_b):
        out.append(f"failure {fail_a or 'none'}->{fail_b or 'none'}")
    return out


def compare(reports: list[dict]) -> dict:
    """{"labels", "runs": [{label, agent, backend, ...}], "overall": {label: headline}, "by_category",
    "tasks": [{task, category, runs: {label: headline}, changes: {label: [...]}}]} (changes against the first)."""
    if not reports:
        raise ValueError("compare needs at least one run (two to see changes)")
    labels = [r["label"] for r in reports]
    kmax = {r["label"]: str(r["ks"][-1]) for r in reports}
    base = labels[0]
    task_ids = list(dict.fromkeys(t for r in reports for t in sorted(r["tasks"])))
    cats = list(dict.fromkeys(c for r in reports for c in r["by_category"]))

    def block(get):
        runs = {r["label"]: _headline(get(r), kmax[r["label"]]) for r in reports}
        return {"runs": runs, "changes": {lab: changes(runs[base], runs[lab]) for lab in labels[1:]}}

    tasks = []
    for t in task_ids:
        cat = next(r["tasks"][t]["category"] for r in reports if t in r["tasks"])
        tasks.append({"task": t, "category": cat, **block(lambda r, t=t: r["tasks"].get(t))})
    return {
        "labels": labels, "baseline": base,
        "runs": [{k: r[k] for k in ("label", "agent", "dsl", "backend", "device", "created_at", "complete",
                                    "speed_measured", "ks")} | {"settings": r["settings"]} for r in reports],
        "overall": block(lambda r: r["overall"]),
        "by_category": {c: block(lambda r, c=c: r["by_category"].get(c)) for c in cats},
        "tasks": tasks,
    }


def _correct_cell(h: dict) -> str:
    """correct/verified, and the unverified samples (not scored) beside them when there are any."""
    if h["samples"] is None:
        return "-"
    cell = f"{h['correct']}/{h.get('verified', h['samples'])}"
    return cell + (f" +{h['unverified']} unverified" if h.get("unverified") else "")


def format_compare(c: dict) -> str:
    labels = c["labels"]
    lines = [f"compare: {', '.join(labels)} (changes against {c['baseline']})", ""]
    header = ["task"]
    for lab in labels:
        header += [f"{lab} correct", "fast_1", "E gm"]
    header.append("changed")
    rows = []

    def row(name, blk):
        cells = [name]
        for lab in labels:
            h = blk["runs"][lab]
            cells += [_correct_cell(h), fmt_pct(h["fast_1"]),
                      fmt_num(h["geomean_E"])]
        ch = "; ".join(f"{lab}: {', '.join(v)}" if len(labels) > 2 else ", ".join(v)
                       for lab, v in blk["changes"].items() if v)
        cells.append(ch or "=")
        rows.append(cells)
    for t in c["tasks"]:
        row(ids.short(t["task"]), t)
    for cat, blk in c["by_category"].items():
        row(f"[{cat}]", blk)
    row("OVERALL", c["overall"])
    lines += text_table(header, rows)
    lines.append("")
    for lab in labels:
        h = c["overall"]["runs"][lab]
        lines.append(f"{lab}: correctness {fmt_pct(h['correctness_rate'])}, pass@1 {fmt_pct(h['pass_at_1'])}, "
                     f"fast_1 {fmt_pct(h['fast_1'])}, geomean E {fmt_num(h['geomean_E'])}, U {fmt_num(h['geomean_U'])}")
    return "\n".join(lines)
