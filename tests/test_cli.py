"""The console script, run as a user runs it: a subprocess, its stdout, its exit code."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES, ROOT

SCRIPT = Path(sys.executable).parent / "kernelgym-gap"
RECORD_KEYS = {"task", "dsl", "backend", "status", "correct", "reward", "terms", "message"}


def cli(*args, timeout=600):
    argv = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "kernelgym_gap.cli.main"]
    return subprocess.run(argv + [str(a) for a in args], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout)


def one_json_object(stdout: str) -> dict:
    obj = json.loads(stdout)            # the whole of stdout is one JSON document ("Extra data" otherwise)...
    assert isinstance(obj, dict)        # ...and it is an object
    return obj


def test_console_script_is_installed():
    assert SCRIPT.exists() or shutil.which("kernelgym-gap"), "pip install -e . installs kernelgym-gap"


def test_help():
    p = cli("--help")
    assert p.returncode == 0 and "tasks" in p.stdout and "eval" in p.stdout and "run" in p.stdout


def test_tasks_json(registry):
    p = cli("tasks", "--json")
    assert p.returncode == 0, p.stderr
    data = json.loads(p.stdout)
    assert isinstance(data, list) and len(data) == len(registry)
    by_id = {obj["id"]: obj for obj in data}
    assert set(by_id) == set(registry.ids())
    for task in registry:
        obj = by_id[task.id]
        assert {"id", "category", "dsls", "entry_point", "signature"} <= set(obj)
        assert obj["category"] == task.category and obj["entry_point"] == task.entry_point
        assert obj["dsls"] == list(task.dsls) and obj["signature"] == task.signature


def test_tasks_table(registry):
    p = cli("tasks")
    assert p.returncode == 0
    for task in registry:
        assert task.id in p.stdout


@pytest.mark.parametrize("fixture,status", [("ok", "ok"), ("mismatch", "mismatch"), ("syntax_error", "syntax_error"),
                                            ("source_not_utf8", "source_not_utf8")])
def test_eval_json_prints_exactly_one_record(registry, fixture, status):
    task = registry.get("LayerNorm")
    if fixture == "ok":
        path = task.solution_path(next(s for s in task.solutions if s.dsl == "triton" and s.kind == "optimized"))
    else:
        path = FIXTURES / "failures" / f"{fixture}.py"
    p = cli("eval", "--task", "LayerNorm", "--backend", "cpu", "--seed", "3", path, "--json")
    assert p.returncode == 0, p.stderr            # a failing submission is still a command that ran
    obj = one_json_object(p.stdout)
    assert RECORD_KEYS <= set(obj)
    assert obj["task"] == task.id and obj["dsl"] == "triton" and obj["backend"] == "cpu"
    assert obj["status"] == status
    assert isinstance(obj["terms"], dict) and isinstance(obj["message"], str)
    if status == "ok":
        assert obj["correct"] is True and obj["reward"] == 1.0
    else:
        assert obj["correct"] is False and obj["reward"] == 0.0 and obj["message"]
    from kernelgym_gap.core.record import EvalRecord
    EvalRecord.from_dict(obj)                     # the JSON is the record itself, schema and all


def test_eval_text_output(registry):
    p = cli("eval", "--task", "kernelgym_gap/LayerNorm-v1", "--backend", "cpu", FIXTURES / "failures" / "wrong_dsl.py")
    assert p.returncode == 0, p.stderr
    assert "status: wrong_dsl" in p.stdout and "reward: 0.0000" in p.stdout


def test_unknown_task_exits_nonzero_with_a_hint():
    p = cli("eval", "--task", "LayerNrom", "--backend", "cpu", FIXTURES / "failures" / "mismatch.py", "--json")
    assert p.returncode == 2
    assert "Did you mean 'LayerNorm'" in p.stderr
    assert p.stdout == ""


def test_missing_file_exits_nonzero():
    p = cli("eval", "--task", "LayerNorm", "--backend", "cpu", "does/not/exist.py")
    assert p.returncode == 2 and "exist.py" in p.stderr


def test_bad_choice_is_a_usage_error():
    p = cli("eval", "--task", "LayerNorm", "--backend", "tpu", "x.py")
    assert p.returncode == 2 and "invalid choice" in p.stderr


@pytest.mark.skipif(os.path.exists("/dev/nvidia0"), reason="this machine has a GPU")
def test_cuda_backend_without_a_gpu_exits_3():
    p = cli("eval", "--task", "LayerNorm", "--backend", "cuda", FIXTURES / "failures" / "mismatch.py")
    assert p.returncode == 3 and "--backend cpu" in p.stderr


def test_run_prints_a_table(registry):
    task = registry.get("LayerNorm")
    p = cli("run", "--backend", "cpu", "--task", "LayerNorm", "--seed", "1")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    header = lines[0].split()
    assert header[:6] == ["task", "dsl", "solution", "kind", "status", "reward"]
    assert set(lines[1].replace(" ", "")) == {"-"}
    for sol in task.solutions:
        row = next((ln for ln in lines if sol.file in ln), None)
        assert row is not None, f"{sol.file} missing from the table"
        assert f" {sol.cpu_status} " in row and sol.dsl in row
    assert f"{len(task.solutions)} reference solutions evaluated" in p.stdout
    assert "0 failed" in p.stdout
    assert "cpu backend: correctness only" in p.stdout and "E, U and the verdict need --backend cuda" in p.stdout
    if any(s.cpu_status == "unverified" for s in task.solutions):
        assert "unverified: a TileLang kernel" in p.stdout and "not scored" in p.stdout
    # progress goes to stderr, not into the table: one line per solution (stderr is a pipe), from 1, not 0
    assert f"[1/{len(task.solutions)}] LayerNorm " in p.stderr and "[0/" not in p.stderr
    assert "elapsed" in p.stderr and "ETA" in p.stderr


def test_suite_runs_episodes_in_parallel_and_keeps_plan_order(registry):
    """Two workers on the cpu backend, with a stub evaluator (the real path is test_run_prints_a_table):
    every solution of the chosen tasks gets one row, in plan order, whichever worker finished first."""
    import threading
    import time as time_mod
    from kernelgym_gap.engine.pipeline import evaluate
    from kernelgym_gap.api.suite import run_suite
    seen = set()

    def stub(task, source, dsl, backend, config):
        seen.add(threading.current_thread().name)
        time_mod.sleep(0.2)
        return evaluate(task, "def broken(:\n", dsl, backend, config)      # fails at the gate, no child
    rows = run_suite(backend="cpu", dsls=("triton",), task_ids=["LayerNorm", "RMSNorm", "GELU"], evaluator=stub,
                     workers=2)
    expected = [(t, s.file) for t in ("LayerNorm", "RMSNorm", "GELU") for s in registry.get(t).solutions
                if s.dsl == "triton"]
    assert [(registry.get(r.task).name, r.solution) for r in rows] == expected
    assert all(r.status == "syntax_error" for r in rows)
    assert len(seen) == 2


def _options(parser, path="kernelgym-gap"):
    import argparse
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _options(sub, f"{path} {name}")
        elif not isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
            yield path, parser, action


def test_help_documents_every_option_and_its_default():
    """Every option and positional of every command has a help text, and one with a default says it."""
    import argparse
    from kernelgym_gap.cli.main import build_parser
    seen = 0
    for path, parser, action in _options(build_parser()):
        name = "/".join(action.option_strings) or action.dest
        assert action.help, f"{path} {name}: no help"
        text = parser.formatter_class(prog="x")._get_help_string(action) % {"default": action.default}
        if action.option_strings and action.default not in (None, False, argparse.SUPPRESS):
            assert "default" in text, f"{path} {name}: the help does not name the default {action.default!r}"
        seen += 1
    assert seen > 40


def test_top_level_help_is_for_users_and_version():
    from kernelgym_gap import __version__
    p = cli("--help")
    assert p.returncode == 0
    assert "Triton or TileLang" in p.stdout and "cpu backend checks correctness only" in p.stdout
    for command in ("tasks", "eval", "run", "episode", "submit", "results", "leaderboard", "calibrate"):
        assert f"\n    {command} " in p.stdout, command          # one line each under `commands`
    v = cli("--version")
    assert v.returncode == 0 and v.stdout.strip() == f"kernelgym-gap {__version__}"


def test_tasks_table_shows_level_and_statement(registry):
    p = cli("tasks")
    task = registry.get("LayerNorm")
    row = next(ln for ln in p.stdout.splitlines() if ln.startswith(task.id + " "))
    assert row.split()[1:3] == [task.category, str(task.level)]
    assert task.summary() in row and task.summary().startswith("Normalize each row of x")


def test_tasks_json_is_the_whole_contract(registry):
    data = {obj["id"]: obj for obj in json.loads(cli("tasks", "--json").stdout)}
    task = registry.get("LayerNorm")
    obj = data[task.id]
    for key in ("statement", "signature", "entry_point", "workloads", "tolerances", "distributions",
                "timed_distribution", "level", "tags", "motivation", "version", "changelog", "solutions",
                "output_dtypes"):
        assert key in obj, key
    cpu = obj["workloads"]["cpu"]
    assert cpu["dtypes"] == list(task.workload("cpu").dtypes)
    first = cpu["shapes"][0]
    assert first["shape"] == list(task.workload("cpu").public[0]) and first["split"] == "public"
    assert first["flops"] == task.flops(task.workload("cpu").public[0])
    assert first["min_bytes"]["float32"] == task.min_bytes(task.workload("cpu").public[0], "float32")
    assert obj["tolerances"]["float32"] == {"atol": 1e-4, "rtol": 1e-4}


def test_seed_reaches_the_trials_and_the_message_prints_the_trials_own(registry):
    """--seed N seeds the trial seeds (EvalConfig.trial_seed): the failing trial is the first one make_trials
    derives from N in the correctness order (smallest shape first, issue 38), and its seed is the one the
    record keeps; the message prints it for a public trial only (held-out seeds never reach the agent)."""
    from kernelgym_gap.core.config import EvalConfig
    from kernelgym_gap.engine.correctness_order import order_for_correctness
    from kernelgym_gap.engine.trials import make_trials, trial_rng
    task = registry.get("LayerNorm")
    p = cli("eval", "--task", "layernorm", "--backend", "cpu", "--seed", "3", FIXTURES / "failures" / "mismatch.py",
            "--json")
    obj = one_json_object(p.stdout)
    cfg = EvalConfig(trial_seed=3)
    first = order_for_correctness(task, make_trials(task, "cpu", cfg, trial_rng(cfg)))[0]
    assert obj["failure"]["trial"]["seed"] == first.seed
    assert f"seed={first.seed}" in obj["failure"]["reproduce"]
    if first.split == "public":
        assert f"seed {first.seed}" in obj["message"] and f"seed={first.seed}" in obj["message"]
    else:
        assert str(first.seed) not in obj["message"]


def test_run_skips_a_dsl_that_is_not_installed(monkeypatch, capsys):
    """A minimal install has no tilelang: `run` replays the rest and says what it skipped and why."""
    import importlib.util
    from kernelgym_gap.cli import main as cli_main
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "tilelang" else real(name, *a))
    assert cli_main.missing_dsls(("triton", "tilelang")).keys() == {"tilelang"}
    monkeypatch.setattr("kernelgym_gap.api.suite.run_suite", lambda **kw: [])
    assert cli_main.main(["run", "--backend", "cpu", "--task", "LayerNorm"]) == 0
    out = capsys.readouterr().out
    assert "skipped: 3 tilelang solutions: tilelang is not installed" in out
    assert cli_main.main(["run", "--backend", "cpu", "--dsl", "tilelang"]) == 3


def test_progress_lines_when_stderr_is_not_a_terminal():
    import io
    from kernelgym_gap.cli.progress import Progress
    out = io.StringIO()
    with Progress(2, unit="solution", stream=out, tty=False) as bar:
        bar.start("LayerNorm a.py")
        bar.done("ok")
        bar.start("LayerNorm b.py")
        bar.done("ok")
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("[1/2] LayerNorm a.py  (elapsed 0:00)")
    assert lines[1].startswith("[2/2] LayerNorm b.py  (elapsed 0:00, ETA 0:00)")
    assert lines[2].startswith("done: 2/2 solutions")
    quiet = io.StringIO()
    with Progress(2, stream=quiet, tty=False, quiet=True) as bar:
        bar.start("x")
        bar.done()
    assert quiet.getvalue() == ""


def test_episode_on_cpu_says_why_it_ended_early():
    p = cli("episode", "--agent", "replay", "--task", "LayerNorm", "--backend", "cpu", "--steps", "3", "--seed", "0")
    assert p.returncode == 0, p.stderr
    assert "1/3 steps" in p.stdout
    assert "the episode ended at step 1 of 3: the kernel is correct, and the cpu backend measures correctness only" \
        in p.stdout
    assert "[1/3] step 1" in p.stderr                  # progress, one line per step (stderr is a pipe here)


def test_eval_text_escapes_terminal_control_sequences_in_submission_text(registry):
    """Issue 32 L6: a submission's error text with ANSI escapes (clear screen, cursor home, a forged
    'reward 1.0000', a carriage return) is printed escaped by `eval`: no control character reaches the
    terminal, the escapes are visible, and the only status line is the real one."""
    p = cli("eval", "--task", "LayerNorm", "--backend", "cpu", FIXTURES / "hostile" / "ansi_message.py")
    assert p.returncode == 0, p.stderr
    controls = [c for c in p.stdout if (ord(c) < 32 and c not in "\n\t") or 0x7f <= ord(c) < 0xa0 or c == "\u202e"]
    assert controls == [], p.stdout
    assert "\\x1b[2J" in p.stdout and "\\r" in p.stdout and "\\x9b" in p.stdout and "\\u202e" in p.stdout
    # the real verdict comes first and the screen is never cleared, so the forged line stays visibly
    # part of the message below it
    status_lines = [ln for ln in p.stdout.splitlines() if ln.startswith("status:")]
    assert status_lines and "reward: 0.0000" in status_lines[0], p.stdout
    assert p.stdout.index(status_lines[0]) < p.stdout.index("\\x1b[2J")
