"""The Ray evaluation pool on a local Ray instance started here with 2 CPUs: one actor per CPU slot, the
same sandboxed engine, and the same records as the local pool for the same submissions."""
import json

import pytest

ray = pytest.importorskip("ray")

from kernelgym_gap.cli import main as cli  # noqa: E402
from kernelgym_gap.api.batch import EvalRequest, evaluate_many  # noqa: E402
from kernelgym_gap.core.config import EvalConfig  # noqa: E402
from kernelgym_gap.api.env import KernelEnv  # noqa: E402
from kernelgym_gap.api.ray_pool import RayPool  # noqa: E402
from kernelgym_gap.core.status import Status  # noqa: E402

pytestmark = pytest.mark.slow

CONFIG = EvalConfig(trial_seed=0)
WALL_CLOCK_FIELDS = ("latency", "created_at")


@pytest.fixture(scope="module")
def local_ray():
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()


def _batch(registry):
    task = registry.get("AddReLU")
    fast = task.solution_path(task.solutions[0]).read_text()
    wrong = fast.replace("tl.maximum(s, 0.0)", "s")          # no ReLU: a mismatch
    return [EvalRequest("AddReLU", fast, backend="cpu"), EvalRequest("AddReLU", wrong, backend="cpu"),
            EvalRequest("AddReLU", "def add_relu(x, y):\n    return (\n", backend="cpu")]


def _comparable(record):
    d = record.to_dict()
    for k in WALL_CLOCK_FIELDS:
        d.pop(k)
    return d


def test_ray_records_equal_the_local_pool_records(local_ray, registry):
    reqs = _batch(registry)
    local = evaluate_many(reqs, workers=2, config=CONFIG)
    with RayPool(address="auto", backend="cpu") as pool:
        assert pool.size == 2 and pool.backend == "cpu" and not pool.owns_ray
        assert len({p["pid"] for p in pool.actor_placements}) == 2
        remote = pool.evaluate(reqs, config=CONFIG)
        assert len({p["pid"] for p in pool.placements}) >= 1
    assert [r.status for r in remote] == [Status.OK, Status.MISMATCH, Status.SYNTAX_ERROR]
    for a, b in zip(local, remote):
        assert _comparable(a) == _comparable(b)
    assert ray.is_initialized()          # a pool that did not start Ray leaves it running


def test_evaluate_many_and_the_env_through_ray(local_ray, registry):
    reqs = _batch(registry)[1:]
    recs = evaluate_many(reqs, ray="auto", config=CONFIG)
    assert [r.status for r in recs] == [Status.MISMATCH, Status.SYNTAX_ERROR]
    with pytest.raises(ValueError):
        evaluate_many(reqs, ray="auto", gpus=[0])
    with RayPool(address="auto", backend="cpu", workers=1) as pool:
        with pytest.raises(ValueError, match="evaluates on cpu"):
            pool.evaluate([EvalRequest("AddReLU", "x", backend="cuda")])
        again = evaluate_many(reqs[1:], ray=pool, config=CONFIG)         # a pool kept across batches
        assert _comparable(again[0]) == _comparable(recs[1])
        env = KernelEnv(task_id="AddReLU", backend="cpu", evaluator=pool.evaluator(), config=CONFIG)
        env.reset(seed=0)
        _, reward, terminated, _, info = env.step(reqs[1].source)
        assert info["status"] == "syntax_error" and reward == 0.0 and not terminated


def test_async_vector_env_evaluates_through_ray(local_ray, registry):
    """What an RL trainer does: vectorize the environment, and score the batch of actions through Ray
    (each AsyncVectorEnv copy is a spawned process with its own actor on the cluster this test started)."""
    from kernelgym_gap.api.vector import make_vector_env
    reqs = _batch(registry)
    envs = make_vector_env(2, "AddReLU", backend="cpu", ray="auto", config=CONFIG, max_steps=2)
    try:
        envs.reset(seed=0)
        _, reward, term, _, info = envs.step((reqs[0].source, reqs[2].source))
        assert list(info["status"]) == ["ok", "syntax_error"] and list(reward) == [1.0, 0.0]
        assert list(term) == [True, False]
    finally:
        envs.close()
    assert ray.is_initialized()


def test_episode_cli_with_ray(local_ray, capsys):
    rc = cli.main(["episode", "--agent", "replay", "--task", "AddReLU", "--backend", "cpu", "--steps", "1",
                   "--seed", "0", "--ray", "auto", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["steps"][0]["status"] == "ok" and out["best"]["reward"] == 1.0
    assert ray.is_initialized()


def test_ray_per_gpu_places_several_actors_on_each_gpu(local_ray):
    """Two pretended GPUs, per_gpu=2: four cuda actors, two per GPU, one lane directory for the pool on the
    node (removed when the pool closes). Last in this file: it restarts Ray with GPU resources."""
    ray.shutdown()
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        with RayPool(address="auto", backend="cuda", per_gpu=2) as pool:
            placed = pool.actor_placements
            assert pool.size == 4
            assert sorted(p["gpu_index"] for p in placed) == [0, 0, 1, 1]
            (lane_dir,) = {p["lane_dir"] for p in placed}
            assert lane_dir is not None
        with RayPool(address="auto", backend="cuda", per_gpu=2, workers=3) as pool:
            assert pool.size == 3
        with RayPool(address="auto", backend="cuda") as pool:
            assert pool.size == 2 and {p["lane_dir"] for p in pool.actor_placements} == {None}
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def users_tasks():
    """A user's task directory (AddReLU copied under another name), readable by the sandbox's user."""
    import shutil
    import tempfile
    from pathlib import Path

    from kernelgym_gap.core.registry import DEFAULT_TASKS_DIR
    root = Path(tempfile.mkdtemp(prefix="kgg-users-tasks-"))
    shutil.copytree(DEFAULT_TASKS_DIR / "elementwise" / "add_relu", root / "elementwise" / "my_add_relu")
    task_py = root / "elementwise" / "my_add_relu" / "task.py"
    task_py.write_text(task_py.read_text().replace('name="AddReLU"', 'name="MyAddReLU"'))
    for p in [root, *root.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def test_a_users_tasks_dir_reaches_the_actors(local_ray, registry, users_tasks):
    """tasks_dir= with ray=: the actor loads the task from the user's directory (it looked only in tasks/
    before and answered UnknownTaskError, which then failed to cross back from the actor)."""
    from kernelgym_gap.api.completions import score_completions
    good, wrong = (r.source for r in _batch(registry)[:2])
    recs = evaluate_many([EvalRequest("MyAddReLU", good, backend="cpu"), EvalRequest("MyAddReLU", wrong,
                                                                                      backend="cpu")],
                         ray="auto", tasks_dir=str(users_tasks), config=CONFIG)
    assert [r.status for r in recs] == [Status.OK, Status.MISMATCH] and recs[0].task == "kernelgym_gap/MyAddReLU-v0"
    (rec,) = score_completions("MyAddReLU", [f"```python\n{good}```"], backend="cpu", tasks_dir=str(users_tasks),
                               ray="auto", config=CONFIG)
    assert rec.status is Status.OK
    with RayPool(address="auto", backend="cpu", workers=1) as pool:
        env = KernelEnv(task_id="MyAddReLU", tasks_dir=str(users_tasks), backend="cpu", config=CONFIG,
                        evaluator=pool.evaluator())
        env.reset(seed=0)
        assert env.step(good)[4]["status"] == "ok"


def test_errors_of_the_harness_cross_back_from_an_actor():
    import pickle

    from kernelgym_gap.core.errors import UnknownChoiceError, UnknownTaskError
    e = pickle.loads(pickle.dumps(UnknownTaskError("Sq", ["AddReLU", "GELU"])))
    assert isinstance(e, UnknownTaskError) and "no task is registered as 'Sq'" in str(e)
    e = pickle.loads(pickle.dumps(UnknownChoiceError("dsl", "trit", ["triton"])))
    assert isinstance(e, UnknownChoiceError) and "Did you mean 'triton'" in str(e)
