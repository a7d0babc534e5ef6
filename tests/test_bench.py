"""`kernelgym-gap bench`: the metrics against hand-computed values (a synthetic cuda run written through the
store's bench API), the replay agent and the chat agent (a real OpenAI-compatible HTTP server on loopback
answering with a correct kernel for one task and a broken one for another) on the cpu backend with real
sandboxed evaluations, resuming a killed run without evaluating anything twice, and `bench compare`."""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from kernelgym_gap.bench import metrics
from kernelgym_gap.bench.compare import compare
from kernelgym_gap.bench.report import build_report
from kernelgym_gap.bench.runner import BenchError, BenchSpec, run_bench, select_tasks
from kernelgym_gap.cli import main as cli
from kernelgym_gap.core.record import EvalRecord
from kernelgym_gap.core.status import Status
from kernelgym_gap.store.cache_key import key_from_record
from kernelgym_gap.store.db import Store

ROOT = Path(__file__).resolve().parent.parent
GELU, ADD = "kernelgym_gap/GELU-v1", "kernelgym_gap/AddReLU-v0"   # GELU v1: its tolerances were re-derived (issue 31)


# ---- a synthetic cuda run, written through the store's bench API ------------------------------------------

def _rec(task, status="ok", E=None, U=None, verdict=None, reward=None) -> EvalRecord:
    ok = status == "ok"
    return EvalRecord(task=task, task_version=0, dsl="triton", backend="cuda", status=Status(status), correct=ok,
                      reward=(reward if reward is not None else 0.5) if ok else 0.0, reward_mode="full",
                      terms={"E": E, "U": U, "E_compile": E / 2 if E else None}, message="synthetic",
                      diagnosis={"verdict": verdict} if verdict else None, device={"name": "NVIDIA H200"})


# task -> sample -> list of step records (None: the episode ended in an endpoint error before any step)
SYNTHETIC = {
    GELU: [[_rec(GELU, "mismatch"), _rec(GELU, E=2.0, U=0.5, verdict="efficient", reward=0.9)],
           [_rec(GELU, E=0.9, U=0.4, verdict="repairable_defect", reward=0.5)],
           [_rec(GELU, E=1.2, U=0.6, verdict="efficient", reward=0.7), _rec(GELU, E=0.6, U=0.3, reward=0.4)],
           [_rec(GELU, "compile_error"), _rec(GELU, "mismatch")]],
    ADD: [[_rec(ADD, E=0.5, U=0.2, verdict="structural_residual", reward=0.3)],
          [_rec(ADD, "mismatch")], [_rec(ADD, "mismatch")], None],
}


def write_synthetic(store: Store, label: str, data=SYNTHETIC) -> None:
    store.bench_put_run(label, "chat", "triton", "cuda", {"agent": "chat", "samples": 4, "steps": 2,
                                                          "tasks": list(data), "agent_kwargs": {"model": "m"}})
    for task, samples in data.items():
        for k, steps in enumerate(samples):
            store.bench_start_episode(label, task, k, "elementwise", 1)
            for i, rec in enumerate(steps or [], 1):
                src = f"# {label} {task} {k} {i}\n"
                store.bench_put_step(label, task, k, i, rec, src, key_from_record(rec, src), f"bench:{label}")
            store.bench_finish_episode(label, task, k, state="error" if steps is None else "done",
                                       steps=len(steps or []), error="ChatEndpointError: HTTP 503" if steps is None
                                       else None, usage={"prompt_tokens": 100, "completion_tokens": 50}, seconds=2.0)


def test_pass_at_k_is_the_unbiased_estimator():
    assert metrics.pass_at_k(4, 1, 2) == pytest.approx(1 - 3 / 6)
    assert metrics.pass_at_k(4, 2, 2) == pytest.approx(1 - 1 / 6)
    assert metrics.pass_at_k(4, 3, 2) == 1.0 and metrics.pass_at_k(4, 0, 3) == 0.0
    assert metrics.pass_at_k(10, 3, 5) == pytest.approx(1 - math.comb(7, 5) / math.comb(10, 5))
    assert metrics.pass_at_k(2, 1, 3) is None
    assert metrics.default_ks(1) == [1] and metrics.default_ks(8) == [1, 5, 8] and metrics.default_ks(16) == [1, 5, 10, 16]


def test_report_metrics_match_hand_computed_values(tmp_path):
    store = Store(tmp_path / "r.sqlite3")
    write_synthetic(store, "ckpt-a")
    r = build_report(store, "ckpt-a", ks=[1, 2, 4])
    g, a, o = r["tasks"][GELU], r["tasks"][ADD], r["overall"]
    # GELU: 4 samples, 3 correct (best steps E = 2.0, 0.9, 1.2), one compile_error (its first zero-reward step)
    assert (g["samples"], g["correct"], g["correctness_rate"]) == (4, 3, 0.75)
    assert g["fast_p"] == pytest.approx({"0": .75, "0.5": .75, "0.8": .75, "1": .5, "1.5": .25, "2": .25})
    assert g["pass_at_k"] == pytest.approx({"1": .75, "2": 1.0, "4": 1.0})
    assert g["fast_1_at_k"] == pytest.approx({"1": .5, "2": 1 - 1 / 6, "4": 1.0})
    assert g["geomean_E"] == pytest.approx((2.0 * 0.9 * 1.2) ** (1 / 3))
    assert g["geomean_U"] == pytest.approx((0.5 * 0.4 * 0.6) ** (1 / 3))
    assert g["geomean_E_compile"] == pytest.approx((1.0 * 0.45 * 0.6) ** (1 / 3))
    assert g["diagnosis"] == {"efficient": 2, "repairable_defect": 1, "structural_residual": 0}
    assert g["failures"] == {"compile_error": 1}
    assert g["step_statuses"] == {"mismatch": 2, "ok": 4, "compile_error": 1}
    assert g["tokens"] == {"prompt": 400, "completion": 200, "total": 600} and g["seconds"] == 8.0
    # AddReLU: 1 of 4 correct (E 0.5), two mismatches, one endpoint error recorded as a failed sample
    assert (a["correct"], a["correctness_rate"], a["errors"]) == (1, .25, 1)
    assert a["fast_p"] == pytest.approx({"0": .25, "0.5": .25, "0.8": 0, "1": 0, "1.5": 0, "2": 0})
    assert a["pass_at_k"] == pytest.approx({"1": .25, "2": .5, "4": 1.0})
    assert a["fast_1_at_k"] == pytest.approx({"1": 0, "2": 0, "4": 0})
    assert a["failures"] == {"mismatch": 2, "agent_error": 1}
    # overall: means over the two tasks, geomean of the tasks' geomeans, counts summed
    assert o["correctness_rate"] == pytest.approx(.5) and o["solved_tasks"] == 2 and o["samples"] == 8
    assert o["fast_p"]["1"] == pytest.approx(.25) and o["fast_p"]["0"] == pytest.approx(.5)
    assert o["pass_at_k"] == pytest.approx({"1": .5, "2": .75, "4": 1.0})
    assert o["fast_1_at_k"]["2"] == pytest.approx((1 - 1 / 6) / 2)
    assert o["geomean_E"] == pytest.approx(math.sqrt((2.0 * 0.9 * 1.2) ** (1 / 3) * 0.5))
    assert o["diagnosis"] == {"efficient": 2, "repairable_defect": 1, "structural_residual": 1}
    assert r["by_category"]["elementwise"]["correctness_rate"] == pytest.approx(.5)
    assert r["errors"] == [{"task": ADD, "sample": 3, "error": "ChatEndpointError: HTTP 503"}]
    assert r["speed_measured"] and r["device"] == ["NVIDIA H200"] and r["complete"]
    assert json.loads(json.dumps(r)) == r


def test_compare_shows_both_runs_and_what_changed(tmp_path, capsys):
    db = tmp_path / "r.sqlite3"
    store = Store(db)
    write_synthetic(store, "ckpt-a")
    better = dict(SYNTHETIC)
    better[ADD] = [[_rec(ADD, E=1.1, U=0.5, verdict="efficient", reward=0.8)]] * 4
    write_synthetic(store, "ckpt-b", better)
    c = compare([build_report(store, "ckpt-a"), build_report(store, "ckpt-b")])
    add = next(t for t in c["tasks"] if t["task"] == ADD)
    assert add["changes"]["ckpt-b"][0] == "correct 25%->100%" and any("faster" in x for x in add["changes"]["ckpt-b"])
    gelu = next(t for t in c["tasks"] if t["task"] == GELU)
    assert gelu["changes"]["ckpt-b"] == []
    assert cli.main(["bench", "compare", "ckpt-a", "ckpt-b", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "ckpt-a" in out and "ckpt-b" in out and "correct 25%->100%" in out
    assert cli.main(["bench", "compare", "ckpt-a", "ckpt-b", "--db", str(db), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["labels"] == ["ckpt-a", "ckpt-b"]
    assert cli.main(["bench", "compare", "ckpt-a", "nope", "--db", str(db)]) == 2
    assert cli.main(["bench", "list", "--db", str(db)]) == 0
    assert "ckpt-b" in capsys.readouterr().out


def test_plots_are_written(tmp_path):
    pytest.importorskip("matplotlib")
    from kernelgym_gap.bench.plots import fast_p_curve, write_run_plots
    store = Store(tmp_path / "r.sqlite3")
    write_synthetic(store, "ckpt-a")
    report = build_report(store, "ckpt-a")
    plots = write_run_plots(report, tmp_path / "out")
    for key in ("fast_p", "e_vs_u"):
        assert Path(plots[key]).read_text().lstrip().startswith("<?xml")
    assert fast_p_curve([report, report], tmp_path / "both.png").read_bytes()[:4] == b"\x89PNG"
    assert metrics.fast_p_curve(report["samples"], [0.0, 1.0, 2.0]) == pytest.approx([.5, .25, .125])


def test_task_selector(registry):
    assert select_tasks(registry, "AddReLU,gelu") == [ADD, GELU]
    assert all(registry.get(t).category == "normalization" for t in select_tasks(registry, "normalization"))
    assert all(registry.get(t).level == 1 for t in select_tasks(registry, "level1"))
    assert len(select_tasks(registry, "all")) == len(list(registry))
    with pytest.raises(BenchError):
        select_tasks(registry, "level9")


# ---- real runs on the cpu backend -----------------------------------------------------------------------

def test_replay_bench_on_two_tasks(tmp_path, capsys):
    db, out = tmp_path / "r.sqlite3", tmp_path / "out"
    argv = ["bench", "--agent", "replay", "--tasks", "AddReLU,GELU", "--backend", "cpu", "--samples", "2",
            "--steps", "2", "--workers", "2", "--name", "replay-cpu", "--db", str(db), "--out", str(out), "--json"]
    assert cli.main(argv) == 0
    r = json.loads(capsys.readouterr().out)
    assert set(r["tasks"]) == {ADD, GELU} and r["complete"] and not r["speed_measured"]
    for t in r["tasks"].values():        # the optimized solution is correct; cpu ends the episode there
        assert (t["samples"], t["correct"], t["correctness_rate"], t["steps_mean"]) == (2, 2, 1.0, 1.0)
        assert t["fast_p"] is None and t["fast_1_at_k"] is None and t["geomean_E"] is None
    assert r["overall"]["pass_at_k"] == {"1": 1.0, "2": 1.0} and r["overall"]["failures"] == {}
    assert r["this_call"]["evaluations"] == 4
    assert any("cpu backend" in n for n in r["notes"])
    assert json.loads((out / "report.json").read_text())["plots"]["skipped"].startswith("the cpu backend")
    # the same command again: everything is stored, nothing is evaluated
    assert cli.main(argv) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["this_call"]["evaluations"] == 0 and again["this_call"]["already_done"] == 4
    assert again["overall"] == r["overall"]


class ChatServer:
    """An OpenAI-compatible chat-completions endpoint on loopback: AddReLU gets the reference solution,
    GELU a broken kernel (half the GELU), and GELU's sample 1 (seed 1) an HTTP 400 the agent cannot retry;
    every first request of a conversation is answered 429 once (Retry-After: 0)."""

    def __init__(self, good: str, broken: str):
        self.requests: list[dict] = []
        srv = self
        seen: set = set()

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                srv.requests.append(body)
                task_msg = body["messages"][1]["content"]
                key = (task_msg[:60], body.get("seed"), len(body["messages"]))
                if key not in seen:
                    seen.add(key)
                    return self._send(429, b'{"error": "slow down"}', {"Retry-After": "0"})
                if "GELU" in task_msg and body.get("seed") == 1:
                    return self._send(400, b'{"error": {"message": "context length exceeded"}}')
                code = good if "AddReLU" in task_msg else broken
                payload = json.dumps({"id": "x", "object": "chat.completion", "model": body["model"],
                                      "choices": [{"index": 0, "finish_reason": "stop", "message": {
                                          "role": "assistant", "content": f"Here:\n```python\n{code}```"}}],
                                      "usage": {"prompt_tokens": 10, "completion_tokens": 5}}).encode()
                self._send(200, payload)

            def _send(self, code, payload, headers=None):
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(payload)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_chat_bench_against_a_loopback_endpoint(tmp_path, capsys, registry):
    add, gelu = registry.get("AddReLU"), registry.get("GELU")
    good = add.solution_path(next(s for s in add.solutions if s.file == "triton_blocked.py")).read_text()
    broken = gelu.solution_path(next(s for s in gelu.solutions if s.file == "triton_blocked.py")).read_text()
    broken = broken.replace("0.5 * x", "0.25 * x")
    server = ChatServer(good, broken)
    db = tmp_path / "r.sqlite3"
    try:
        rc = cli.main(["bench", "--agent", "chat", "--base-url", server.base_url, "--model", "scripted",
                       "--agent-arg", "backoff_s=0.01", "--tasks", "AddReLU,GELU", "--backend", "cpu",
                       "--samples", "2", "--steps", "2", "--workers", "2", "--name", "chat-cpu", "--db", str(db),
                       "--out", str(tmp_path / "out"), "--json"])
    finally:
        server.close()
    assert rc == 3                        # an episode ended in an endpoint error: reported, exit 3
    r = json.loads(capsys.readouterr().out)
    a, g = r["tasks"][ADD], r["tasks"][GELU]
    assert (a["correct"], a["correctness_rate"], a["steps_mean"]) == (2, 1.0, 1.0)
    assert (g["correct"], g["errors"], g["failures"]) == (0, 1, {"mismatch": 1, "agent_error": 1})
    assert g["step_statuses"] == {"mismatch": 2}          # sample 0: two broken kernels; sample 1: none
    assert r["overall"]["correctness_rate"] == .5 and r["overall"]["pass_at_k"] == {"1": .5, "2": .5}
    assert a["tokens"] == {"prompt": 20, "completion": 10, "total": 30}
    assert g["tokens"]["total"] == 30                     # two answered requests of sample 0
    (err,) = r["errors"]
    assert err["task"] == GELU and err["sample"] == 1 and "HTTP 400" in err["error"]
    gelu_requests = [q for q in server.requests if "GELU" in q["messages"][1]["content"] and q.get("seed") == 0]
    assert len(gelu_requests) == 4                       # 429 + answer, twice: retried, then the second turn
    assert "mismatch" in gelu_requests[-1]["messages"][-1]["content"]     # the feedback reached the model
    # the two real runs side by side; a cpu run draws no fast_p curve (it would lie flat at 0), as `report` says
    capsys.readouterr()
    plot = tmp_path / "fast_p.svg"
    assert cli.main(["bench", "compare", "chat-cpu", "chat-cpu", "--db", str(db), "--plot", str(plot)]) == 0
    assert "no plot: chat-cpu" in capsys.readouterr().err and not plot.exists()


KILLED_RUN = textwrap.dedent("""
    import sys, time
    from kernelgym_gap.bench.runner import BenchSpec, run_bench
    from kernelgym_gap.core.record import EvalRecord
    from kernelgym_gap.core.status import Status
    from kernelgym_gap.store.db import Store
    log, db, delay = sys.argv[1], sys.argv[2], float(sys.argv[3])
    def slow(task, source, dsl, backend, config, **kw):
        import hashlib
        with open(log, "a") as f:
            f.write(task.id + " " + hashlib.sha256(source.encode()).hexdigest() + "\\n")
        time.sleep(delay)
        return EvalRecord(task=task.id, task_version=task.version, dsl=dsl, backend=backend, status=Status.MISMATCH,
                          correct=False, reward=0.0, reward_mode="correctness", terms={}, message="scripted")
    spec = BenchSpec(label="killed", agent="replay", task_ids=["AddReLU", "GELU"], backend="cpu", samples=3,
                     steps=2, workers=2, parallel=2)
    print(run_bench(spec, Store(db), evaluator=slow))
""")


def test_a_killed_run_resumes_without_evaluating_anything_twice(tmp_path):
    script, log1, log2, db = tmp_path / "run.py", tmp_path / "calls1", tmp_path / "calls2", tmp_path / "r.sqlite3"
    script.write_text(KILLED_RUN)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.Popen([sys.executable, str(script), str(log1), str(db), "0.4"], env=env, cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while time.time() < deadline and (not log1.exists() or len(log1.read_text().splitlines()) < 5):
        time.sleep(0.05)
    p.send_signal(signal.SIGKILL)                     # no clean-up: the store keeps what was committed
    p.wait()
    store = Store(db)
    before = {(s["task_id"], s["sample"], s["step"]) for s in store.bench_steps("killed")}
    open_episodes = {(e["task_id"], e["sample"]) for e in store.bench_episodes("killed") if e["state"] != "done"}
    assert 0 < len(before) < 12 and open_episodes
    out = subprocess.run([sys.executable, str(script), str(log2), str(db), "0"], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    summary = eval(out.stdout.strip().splitlines()[-1])     # the dict run_bench returned
    assert len(store.bench_steps("killed")) == 12
    assert all(e["state"] == "done" for e in store.bench_episodes("killed"))
    # the second call evaluated exactly the steps the first had not stored; the stored steps of the episodes
    # the kill interrupted were answered from the store (replay re-submits the same sources)
    assert summary["evaluations"] == 12 - len(before) == len(log2.read_text().splitlines())
    assert summary["reused_steps"] == sum(1 for k in before if k[:2] in open_episodes)


def test_a_label_in_use_with_other_settings_is_refused(tmp_path):
    store = Store(tmp_path / "r.sqlite3")

    def fake(task, source, dsl, backend, config, **kw):
        return EvalRecord(task=task.id, task_version=task.version, dsl=dsl, backend=backend, status=Status.OK,
                          correct=True, reward=1.0, reward_mode="correctness", terms={}, message="")
    spec = BenchSpec(label="x", agent="replay", task_ids=["AddReLU"], backend="cpu", steps=1, workers=1)
    assert run_bench(spec, store, evaluator=fake)["evaluations"] == 1
    with pytest.raises(BenchError, match="steps"):
        run_bench(BenchSpec(label="x", agent="replay", task_ids=["AddReLU"], backend="cpu", steps=2), store,
                  evaluator=fake)
    # more samples under the same label: only the new ones run
    assert run_bench(BenchSpec(label="x", agent="replay", task_ids=["AddReLU"], backend="cpu", steps=1, samples=3),
                     store, evaluator=fake)["evaluations"] == 2
    with pytest.raises(BenchError):
        run_bench(BenchSpec(label="bad label", agent="replay", task_ids=["AddReLU"], backend="cpu"), store,
                  evaluator=fake)


def test_bench_maps_compile_baseline_into_the_config():
    """`bench --compile-baseline off`: a replay over the corpus need not compile 40 references first."""
    from kernelgym_gap.cli.main import build_parser
    from kernelgym_gap.cli.options import eval_config
    parser = build_parser()
    assert eval_config(parser.parse_args(["bench", "--agent", "replay", "--compile-baseline", "off"])) \
        .compile_baseline == "off"
    assert eval_config(parser.parse_args(["bench", "--agent", "replay"])).compile_baseline == "measure"


def test_the_report_table_has_one_column_per_metric(tmp_path):
    """With k up to 1 (one sample), pass@K and fast_1@K would repeat pass@1 and fast_1: no second column."""
    from kernelgym_gap.bench.report import format_report
    store = Store(tmp_path / "r.sqlite3")
    write_synthetic(store, "ckpt-a")
    for ks, header_has in (([1], ["pass@1", "fast_1", "fast_2"]), ([1, 2, 4], ["pass@1", "pass@4", "fast_1@4"])):
        text = format_report(build_report(store, "ckpt-a", ks=ks))
        header = next(line for line in text.splitlines() if line.startswith("task"))
        cols = [c.strip() for c in header.split("  ") if c.strip()]
        assert len(cols) == len(set(cols)) and all(h in cols for h in header_has), header
        row = next(line for line in text.splitlines() if line.startswith("OVERALL"))
        assert row.count("%") == 4 + 2 * (ks[-1] > 1)       # rate, pass@1, fast_1, fast_2 (+ the @K ones)
    assert "pass@4" not in format_report(build_report(store, "ckpt-a", ks=[1]))
