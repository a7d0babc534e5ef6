"""The agents under agents/ and `kernelgym-gap episode`: the search agent's constant finder, rewriter and
climb (against a scored double of the engine), the replay agent through the CLI, and one real episode on
the cpu backend."""
import hashlib
import json
import math

import pytest

from kernelgym_gap.cli import main as cli
from kernelgym_gap.api.agent import available_agents, load_agent
from kernelgym_gap.api.env import KernelEnv
from kernelgym_gap.core.record import EvalRecord
from kernelgym_gap.core.status import Status


@pytest.fixture(scope="module")
def search_mod():
    import sys
    load_agent("search")
    return sys.modules["kernelgym_gap_agents.search"]


SOURCE = '''\
import triton
import triton.language as tl

# a comment with non-ASCII text: größe µs (offsets are UTF-8 bytes)
@triton.autotune(configs=[triton.Config({"BLOCK_M": 64, "BLOCK_N": 32}, num_warps=4, num_stages=3)], key=["n"])
@triton.jit
def _kernel(x_ptr, n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EPS: tl.constexpr = 3):
    pass


def entry(x, tile_k=16):
    block = 1024  # größe
    warps = min(max(block // 256, 1), 16)
    for bm, w in ((128, 4), (64, 8)):
        launch(x, BLOCK=bm, num_warps=w)
    offset = x + 1
    return helper(x, block_size=block, threads=128)
'''


def test_find_tunables_sees_every_kind_of_site(search_mod):
    sites = search_mod.find_tunables(SOURCE)
    got = {(s.name, s.value) for s in sites}
    assert {("BLOCK_M", 64), ("BLOCK_N", 32), ("num_warps", 4), ("num_stages", 3), ("tile_k", 16),
            ("block", 1024), ("threads", 128), ("bm", 128), ("bm", 64), ("w", 4), ("w", 8)} <= got
    # literals inside a tunable's expression (min/max bounds), but not plain offsets or other constants
    assert ("warps", 256) in got and ("warps", 16) in got
    assert not any(s.name in ("EPS", "offset") for s in sites)
    kinds = {s.name: s.kind for s in sites}
    assert kinds["num_warps"] == "warps" and kinds["num_stages"] == "stages" and kinds["threads"] == "threads"
    assert search_mod.find_tunables("def broken(:\n") == []


def test_rewrite_changes_only_the_literals(search_mod):
    sites = search_mod.find_tunables(SOURCE)
    by = {(s.name, s.value): s for s in sites}
    block, bm = by[("block", 1024)], by[("BLOCK_M", 64)]
    out = search_mod.rewrite(SOURCE, {block.key: 2048, bm.key: 128}, sites)
    assert "block = 2048  # größe" in out and '{"BLOCK_M": 128, "BLOCK_N": 32}' in out
    assert out.replace("2048", "1024", 1).replace('"BLOCK_M": 128', '"BLOCK_M": 64') == SOURCE
    assert search_mod.rewrite(SOURCE, {}, sites) == SOURCE


def test_neighbours_stay_in_bounds_and_powers_of_two(search_mod):
    Site = search_mod.Site
    assert Site("num_warps", "warps", 32, 1, 0, 2).neighbours() == [16]
    assert Site("BLOCK", "size", 1, 1, 0, 1).neighbours() == [2]
    assert Site("num_stages", "stages", 3, 1, 0, 1).neighbours() == [1, 2, 4, 6]


def _scored_evaluator(search_mod, target: int, calls: list):
    """A double of engine.evaluate: reward peaks when the first BLOCK of the source equals `target`."""
    def evaluate(task, source, dsl, backend, config):
        calls.append(source)
        first = search_mod.find_tunables(source)[0]
        reward = 1.0 / (1.0 + abs(math.log2(first.value) - math.log2(target)))
        return EvalRecord(task=task.id, task_version=task.version, dsl=dsl, backend=backend, status=Status.OK,
                          correct=True, reward=reward, reward_mode="full", terms={}, message="")
    return evaluate


def test_search_climbs_on_the_reward_within_its_budget(search_mod, registry):
    calls: list[str] = []
    env = KernelEnv(task_id="AddReLU", backend="cpu", max_steps=16, stop_when_correct=False,
                    evaluator=_scored_evaluator(search_mod, 8192, calls))
    agent = load_agent("search", seed=3)
    from kernelgym_gap.cli.agents import run_episode
    ep = run_episode(env, agent, seed=0)
    assert len(ep["steps"]) == 16 == len(calls)
    assert calls[0] == registry.get("AddReLU").solution_path(
        registry.get("AddReLU").solutions[0]).read_text()          # starts from the optimized reference
    assert len(set(calls)) == len(calls)                              # never the same source twice
    assert ep["best"]["reward"] == 1.0                                # 1024 -> 2048 -> 4096 -> 8192
    assert search_mod.find_tunables(ep["best"]["source"])[0].value == 8192
    rewards = [h["reward"] for h in agent.history if h["improved"]]
    assert rewards == sorted(rewards) and len(rewards) >= 4
    assert all(h["change"] for h in agent.history)


def test_search_is_deterministic_for_a_seed(search_mod):
    def run(seed):
        calls: list[str] = []
        env = KernelEnv(task_id="AddReLU", backend="cpu", max_steps=5, stop_when_correct=False,
                        evaluator=_scored_evaluator(search_mod, 256, calls))
        from kernelgym_gap.cli.agents import run_episode
        run_episode(env, load_agent("search", seed=seed), seed=0)
        return calls
    assert run(1) == run(1)
    assert run(1) != run(2)


def test_search_resubmits_the_best_when_nothing_is_left(search_mod, registry, tmp_path):
    start = tmp_path / "start.py"
    start.write_text("def add_relu(x, y):\n    BLOCK = 2\n    return x\n")
    calls: list[str] = []

    def evaluate(task, source, dsl, backend, config):
        calls.append(source)
        return EvalRecord(task=task.id, task_version=0, dsl=dsl, backend=backend, status=Status.OK, correct=True,
                          reward=0.5, reward_mode="full", terms={}, message="")
    env = KernelEnv(task_id="AddReLU", backend="cpu", max_steps=4, stop_when_correct=False, evaluator=evaluate)
    from kernelgym_gap.cli.agents import run_episode
    run_episode(env, load_agent("search", start_file=str(start)), seed=0)
    blocks = [c.split("BLOCK = ")[1][0] for c in calls]
    # start, its two neighbours (a tie keeps the incumbent), then nothing is left: the best again
    assert blocks[0] == "2" and sorted(blocks[1:3]) == ["1", "4"] and blocks[3] == "2"


def test_every_agent_is_listed():
    assert {"replay", "search", "chat"} <= set(available_agents())


def _fake_engine(monkeypatch, reward=1.0, calls=None):
    def evaluate(task, source, dsl="triton", backend="auto", config=None):
        if calls is not None:
            calls.append((task.id, source, dsl, backend, config))
        return EvalRecord(task=task.id, task_version=task.version, dsl=dsl, backend=backend, status=Status.OK,
                          correct=True, reward=reward, reward_mode="correctness", terms={"E": None, "U": None},
                          message="fake", source_sha256=hashlib.sha256(source.encode()).hexdigest())
    monkeypatch.setattr("kernelgym_gap.engine.pipeline.evaluate", evaluate)


def test_episode_cli_replay_runs_until_the_agent_has_nothing_left(monkeypatch, capsys):
    calls = []
    _fake_engine(monkeypatch, calls=calls)
    rc = cli.main(["episode", "--agent", "replay", "--task", "AddReLU", "--backend", "cpu", "--steps", "4",
                   "--keep-going", "--seed", "5", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert [s["change"] for s in out["steps"]] == ["triton_blocked.py", "triton_single_program.py"]
    assert "no reference solution left" in out["finished"]
    assert all(c[4].trial_seed == 5 for c in calls)


def test_episode_cli_search_takes_agent_args_and_saves_the_best(monkeypatch, capsys, tmp_path):
    _fake_engine(monkeypatch)
    best = tmp_path / "best.py"
    rc = cli.main(["episode", "--agent", "search", "--task", "AddReLU", "--backend", "cpu", "--steps", "3",
                   "--keep-going", "--agent-arg", "pairs=false", "--save-best", str(best)])
    text = capsys.readouterr().out
    assert rc == 0 and "search on kernelgym_gap/AddReLU-v0" in text and "start: the reference solution" in text
    assert "def add_relu" in best.read_text()


def test_episode_cli_usage_errors(capsys, monkeypatch):
    assert cli.main(["episode", "--agent", "nosuch", "--task", "AddReLU", "--backend", "cpu"]) == 2
    assert "unknown agent" in capsys.readouterr().err
    assert cli.main(["episode", "--agent", "replay", "--task", "AddReLU", "--steps", "0"]) == 2
    monkeypatch.delenv("OPENAI_MODEL", raising=False)
    assert cli.main(["episode", "--agent", "chat", "--task", "AddReLU", "--backend", "cpu"]) == 2
    assert "needs a model name" in capsys.readouterr().err


@pytest.mark.slow
def test_episode_cli_real_cpu_evaluation(capsys):
    """One real evaluation through the sandboxed engine: the optimized AddReLU is correct and, on the cpu
    backend, ends the episode (reward 1, correctness only)."""
    rc = cli.main(["episode", "--agent", "replay", "--task", "AddReLU", "--backend", "cpu", "--steps", "3",
                   "--seed", "0", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert len(out["steps"]) == 1 and out["steps"][0]["status"] == "ok" and out["steps"][0]["reward"] == 1.0


def test_episode_cli_writes_every_step_to_the_store(monkeypatch, capsys, tmp_path):
    import sqlite3
    _fake_engine(monkeypatch)
    db = tmp_path / "results.sqlite3"
    rc = cli.main(["episode", "--agent", "search", "--task", "AddReLU", "--backend", "cpu", "--steps", "3",
                   "--keep-going", "--db", str(db), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["db"] == str(db) and out["submitter"] == "agent:search"
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT submitter, task_id, source_sha256 FROM submissions ORDER BY id").fetchall()
        n_eval = conn.execute("SELECT COUNT(*) FROM evaluations").fetchone()[0]
    assert n_eval == 3 and [r[:2] for r in rows] == [("agent:search", "kernelgym_gap/AddReLU-v0")] * 3
    assert [r[2] for r in rows] == [s["source_sha256"] for s in out["steps"]] and len({r[2] for r in rows}) == 3
    # the environment variable names the store too
    monkeypatch.setenv("KERNELGYM_GAP_DB", str(db))
    assert cli.main(["episode", "--agent", "replay", "--task", "AddReLU", "--backend", "cpu", "--steps", "1",
                     "--submitter", "me"]) == 0
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT submitter FROM submissions ORDER BY id DESC LIMIT 1").fetchone() == ("me",)


def test_an_episode_runs_on_an_env_from_gym_make(search_mod):
    """docs/agents.md: run_episode(env, agent, seed) with the env a user gets from gym.make, whose wrappers
    do not forward `max_steps` (gymnasium 1.x): it failed with an AttributeError before (2026-12-05)."""
    import gymnasium as gym

    import kernelgym_gap  # noqa: F401 - registers the ids
    from kernelgym_gap.cli.agents import run_episode
    calls: list[str] = []
    env = gym.make("kernelgym_gap/AddReLU-v0", backend="cpu", max_steps=3, stop_when_correct=False,
                   evaluator=_scored_evaluator(search_mod, 8192, calls))
    assert type(env) is not KernelEnv                 # wrapped, as gym.make returns it
    ep = run_episode(env, load_agent("search", seed=3), seed=0)
    assert ep["max_steps"] == 3 and len(ep["steps"]) == 3 == len(calls)
