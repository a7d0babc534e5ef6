"""The leaderboard's JSON reads (/api/...): rankings, tasks, screening points, submissions, device history."""
from __future__ import annotations

import json

from starlette.exceptions import HTTPException
from starlette.requests import Request

from kernelgym_gap.store.db import SCHEMA_VERSION
from kernelgym_gap.web import board
from kernelgym_gap.web.chart import screening_thresholds
from kernelgym_gap.web.context import (backend_of, json_response, page_args, settings_of, submission_id, task_id_of,
                                       task_ids, task_spec)


def api_index(request: Request):
    return json_response({"endpoints": {
        "GET /api/leaderboard?backend=&page=&per_page=": "overall ranking of submitters",
        "GET /api/tasks?backend=": "tasks with submission counts and best results",
        "GET /api/tasks/{Name-vN}?backend=&page=": "ranking of one task (best submission per submitter)",
        "GET /api/tasks/{Name-vN}/screening?backend=": "E and U of every correct submission, and the thresholds",
        "GET /api/submissions?task=&submitter=&page=": "submissions, newest first",
        "POST /api/submissions": "submit {task, name, source, dsl?, backend?, remeasure?} with "
                                 "Authorization: Bearer TOKEN; 202 with the submission id (503 with "
                                 "Retry-After while the database is locked)",
        "GET /api/submissions/{id}": "state (queued, running, done, error), record and source",
        "GET /api/device-cache?task=": "per device: calibrated ceilings and library timings per shape",
        "GET /api/bench": "benchmark runs (kernelgym-gap bench) with their headline metrics",
        "GET /api/bench/compare?labels=a,b": "runs side by side per task, with what changed against the first",
    }, "schema_version": SCHEMA_VERSION})


def api_health(request: Request):
    s = settings_of(request)
    counts = {t: s.store.count(t) for t in ("submissions", "evaluations")}
    body = {"ok": True, "status": "ok", "backend": s.backend, "schema_version": SCHEMA_VERSION,
            "pending": s.store.pending(), **counts}
    if s.worker is not None:        # the supervised worker (web/supervise.py): down is degraded, 503
        body["worker"] = s.worker.status()
        if not body["worker"]["alive"]:
            body.update(ok=False, status="degraded")
            return json_response(body, 503, headers={"Retry-After": str(s.retry_after_s)})
    return json_response(body)


def api_leaderboard(request: Request):
    s = settings_of(request)
    backend = backend_of(request)
    page, per_page = page_args(request)
    return json_response({"backend": backend, **board.overall_ranking(s.store, backend, task_ids(s), page, per_page).to_dict()})


def api_tasks(request: Request):
    s = settings_of(request)
    backend = backend_of(request)
    return json_response({"backend": backend, "tasks": board.tasks_summary(s.store, backend, task_ids(s))})


def api_task(request: Request):
    s = settings_of(request)
    task_id = task_id_of(s, request.path_params["name"])
    backend = backend_of(request)
    page, per_page = page_args(request)
    if task_spec(s, task_id) is None and not board.has_submissions(s.store, task_id):
        raise HTTPException(404, f"no task {task_id!r}")
    return json_response({"task": task_id, "backend": backend,
                  **board.task_ranking(s.store, task_id, backend, page, per_page).to_dict()})


def api_screening(request: Request):
    s = settings_of(request)
    task_id = task_id_of(s, request.path_params["name"])
    backend = backend_of(request)
    if task_spec(s, task_id) is None and not board.has_submissions(s.store, task_id):
        raise HTTPException(404, f"no task {task_id!r}")
    pts = [{"id": p["id"], "submitter": p["submitter"], "E": p["e"], "U": p["u"], "reward": p["reward"],
            "verdict": p["verdict"]} for p in board.screening_points(s.store, task_id, backend)]
    return json_response({"task": task_id, "backend": backend, "thresholds": screening_thresholds(), "points": pts})


def api_submissions(request: Request):
    s = settings_of(request)
    page, per_page = page_args(request)
    task = request.query_params.get("task")
    return json_response(board.submissions_list(s.store, page, per_page, task_id=task_id_of(s, task) if task else None,
                                        submitter=request.query_params.get("submitter")).to_dict())


def api_submission(request: Request):
    s = settings_of(request)
    sub = board.submission_view(s.store, submission_id(request))
    if sub is None:
        raise HTTPException(404, f"no submission #{request.path_params['id']}")
    sub["url"] = f"/submissions/{sub['id']}"
    return json_response(sub)


def api_device_cache(request: Request):
    """Per-device history: calibrated ceilings and library timings per shape, from stored cuda records."""
    s = settings_of(request)
    task = request.query_params.get("task")
    task_id = task_id_of(s, task) if task else None
    baselines = [b["value"] | {"updated_at": b["updated_at"]} for b in s.store.cache_items("library_baseline")
                 if task_id is None or b["value"].get("task") == task_id]
    calibrations = [{"device": json.loads(c["key"])[0], **c["value"], "updated_at": c["updated_at"]}
                    for c in s.store.cache_items("calibration")]
    return json_response({"calibrations": calibrations, "library_baselines": baselines})
