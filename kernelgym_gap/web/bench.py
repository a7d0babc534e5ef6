"""The benchmark pages: /bench (the stored runs, headline metrics, pick runs to compare) and
/bench/compare?labels=a,b (two or more runs side by side per task, with what changed against the first; one
label shows that run alone); JSON at /api/bench and /api/bench/compare?labels=a,b. Reads only (the store's
bench tables through bench/report.py); runs are made by `kernelgym-gap bench`."""
from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.requests import Request

from kernelgym_gap.bench.compare import compare
from kernelgym_gap.bench.report import RunNotFound, build_report
from kernelgym_gap.bench.runner import LABEL_RE
from kernelgym_gap.web.context import json_response, render, settings_of

MAX_LABELS = 8


def _runs(request: Request) -> list[dict]:
    s = settings_of(request)
    out = []
    for r in s.store.bench_runs():
        try:
            rep = build_report(s.store, r["label"])
        except RunNotFound:          # deleted between the two reads
            continue
        o = rep["overall"]
        out.append({**{k: r[k] for k in ("label", "agent", "dsl", "backend", "created_at", "updated_at", "done",
                                          "errors", "running")},
                    "settings": r["config"], "complete": rep["complete"], "tasks": o["tasks"], "samples": o["samples"],
                    "correct": o["correct"], "correctness_rate": o["correctness_rate"],
                    "pass_at_1": o["pass_at_k"].get("1"), "fast_1": (o["fast_p"] or {}).get("1"),
                    "geomean_E": o["geomean_E"], "geomean_U": o["geomean_U"]})
    return out


def _labels(request: Request) -> list[str]:
    raw = request.query_params.getlist("labels") or []
    labels = [x.strip() for part in raw for x in part.split(",") if x.strip()]
    labels = list(dict.fromkeys(labels))
    if not labels:
        raise HTTPException(400, "give the runs to compare: ?labels=a,b")
    if len(labels) > MAX_LABELS:
        raise HTTPException(400, f"at most {MAX_LABELS} runs at once")
    for lab in labels:
        if not LABEL_RE.match(lab):
            raise HTTPException(400, f"{lab!r} is not a run label")
    return labels


def _compare(request: Request) -> dict:
    s = settings_of(request)
    try:
        reports = [build_report(s.store, lab) for lab in _labels(request)]
    except RunNotFound as e:
        raise HTTPException(404, str(e)) from None
    return compare(reports)


def bench_page(request: Request):
    return render(request, "bench.html", runs=_runs(request))


def bench_compare_page(request: Request):
    return render(request, "bench_compare.html", c=_compare(request))


def api_bench(request: Request):
    return json_response({"runs": _runs(request)})


def api_bench_compare(request: Request):
    return json_response(_compare(request))
