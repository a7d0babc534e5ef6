"""Imported tasks are first-class everywhere a built-in task is (issue 36): one task source (the built-in
tasks, a directory, or several: core/registry.task_source) threaded through the datasets, every trainer
adapter (TRL, verl, verifiers), the reward server and its slots, `episode`, `bench`, `run` and the env.

Each front end is tested with tests/fixtures/imported_tasks, a tiny imported-style task directory (origin set,
no reference solution, like `import kernelbench`'s output), and the kernel in tests/fixtures/imported_kernels.
Before this change: task_rows gave 0 rows for it, task_dataset(tasks_dir=) and reward_function(tasks_dir=)
raised TypeError, verl's compute_score could not find the task, and serve-reward and episode took no
--tasks-dir."""
import inspect
import json

import pytest

from conftest import FIXTURES
from kernelgym_gap.core.errors import TaskDefinitionError, UnknownTaskError
from kernelgym_gap.core.registry import BUILTIN, DEFAULT_TASKS_DIR, TaskRegistry, default_registry, task_source
from kernelgym_gap.core.task import DSLS

TASKS = FIXTURES / "imported_tasks"
KERNEL = (FIXTURES / "imported_kernels" / "relu_forward.py").read_text()
WRONG = KERNEL.replace("tl.maximum(x, 0.0)", "x")          # a public mismatch: negative values kept
NAME, TASK_ID = "ImportedReLU", "kernelgym_gap/ImportedReLU-v0"


def _reply(source: str = KERNEL) -> str:
    return f"Here it is.\n```python\n{source}```"


# ---- the task source -------------------------------------------------------------------------------

def test_a_source_is_builtin_a_directory_or_several():
    assert task_source() is default_registry() and task_source([BUILTIN]) is default_registry()
    one = task_source(str(TASKS))
    assert one.ids() == [TASK_ID] and one.source() == [str(TASKS.absolute())]
    assert task_source(TASKS) is one                          # loaded once per process, whatever the spelling
    both = task_source([BUILTIN, str(TASKS)])
    assert len(both) == len(default_registry()) + 1 and both.source() == [BUILTIN, str(TASKS.absolute())]
    assert both.get(NAME).tasks_dir == str(TASKS.absolute())   # each task keeps its own directory
    assert both.get("LayerNorm").tasks_dir == str(DEFAULT_TASKS_DIR.absolute())
    assert task_source(both) is both
    assert repr(both) == repr(TaskRegistry([BUILTIN, TASKS]))  # shared_scorer keys Scorers by it


def test_a_bad_source_is_a_typed_error():
    with pytest.raises(TypeError, match="task source"):
        task_source(42)
    with pytest.raises(TypeError, match="task directory"):
        task_source([str(TASKS), None])
    with pytest.raises(TaskDefinitionError, match="empty list"):
        task_source([])
    with pytest.raises(TaskDefinitionError, match="no such directory"):
        task_source([BUILTIN, str(TASKS / "nope")])


def test_an_id_in_two_directories_is_refused(tmp_path):
    import shutil
    shutil.copytree(TASKS / "elementwise", tmp_path / "elementwise")
    with pytest.raises(TaskDefinitionError, match="defined twice"):
        TaskRegistry([TASKS, tmp_path])


def test_an_imported_task_takes_every_dsl_and_a_built_in_one_its_solutions():
    task = task_source(TASKS).get(NAME)
    assert task.origin and not task.solutions and task.dsls == DSLS
    assert task_source(TASKS).get(NAME).contract()["dsls"] == list(DSLS)
    gelu = default_registry().get("GELU")
    assert gelu.dsls == tuple(d for d in DSLS if any(s.dsl == d for s in gelu.solutions))


# ---- datasets ----------------------------------------------------------------------------------------

def test_dataset_rows_of_an_imported_task():
    from kernelgym_gap.integrations.datasets import task_rows, verifiers_rows, verl_rows
    rows = task_rows(tasks_dir=str(TASKS))
    assert [(r["task"], r["dsl"]) for r in rows] == [(NAME, d) for d in DSLS]
    assert "relu_forward" in rows[0]["prompt"][-1]["content"]
    assert [r["extra_info"]["task"] for r in verl_rows(tasks_dir=TASKS, dsls=("triton",))] == [NAME]
    assert verifiers_rows(tasks_dir=TASKS, dsls="triton")[0]["info"]["kernel_task"] == NAME
    mixed = task_rows(tasks_dir=[BUILTIN, TASKS], dsls=("triton",))
    assert NAME in {r["task"] for r in mixed} and "GELU" in {r["task"] for r in mixed}
    with pytest.raises(ValueError, match="not both"):
        task_rows(tasks_dir=TASKS, registry=default_registry())


def test_task_dataset_takes_tasks_dir():
    pytest.importorskip("datasets")
    from kernelgym_gap.integrations.datasets import task_dataset, task_dataset_dict
    ds = task_dataset(tasks_dir=str(TASKS))
    assert ds.num_rows == len(DSLS) and set(ds["task"]) == {NAME}
    dd = task_dataset_dict(tasks_dir=str(TASKS))
    assert dd["train"].num_rows + dd["test"].num_rows == len(DSLS)


# ---- trainer adapters ----------------------------------------------------------------------------------

def test_trl_reward_function_scores_an_imported_task():
    from kernelgym_gap.integrations.trl import environment_factory, reward_function
    f = reward_function(backend="cpu", tasks_dir=str(TASKS), workers=2)
    try:
        rewards = f(prompts=None, completions=[_reply(), _reply(WRONG)], task=[NAME, NAME])
        assert rewards[0] == 1.0 and rewards[1] == 0.0, [r.message for r in f.last_records]
        assert f.last_records[1].status.value == "mismatch"
    finally:
        f.scorer.close()
    env = environment_factory(backend="cpu", tasks_dir=str(TASKS))()
    assert "relu_forward" in env.reset(task=NAME)
    with pytest.raises(ValueError, match="not both"):
        reward_function(backend="cpu", tasks_dir=str(TASKS), scorer=f.scorer)


def test_verl_compute_score_takes_tasks_dir():
    import kernelgym_gap.integrations.verl as kg_verl
    assert "tasks_dir" in inspect.getdoc(kg_verl.compute_score)
    out = kg_verl.compute_score(TASK_ID, _reply(), None, {"task": NAME, "backend": "cpu"}, tasks_dir=str(TASKS))
    assert out["score"] == 1.0 and out["status"] == "ok", out
    # the built-in source does not know it: that sample's failure, never an exception in the trainer
    out = kg_verl.compute_score(TASK_ID, _reply(), None, {"task": NAME, "backend": "cpu"})
    assert out["score"] == 0.0 and out["status"] == "invalid_item" and NAME in out["reason"]


def test_verifiers_environment_of_an_imported_task():
    pytest.importorskip("verifiers")
    from kernelgym_gap.integrations import verifiers as kg_vf
    env = kg_vf.load_environment(backend="cpu", tasks_dir=str(TASKS), split=None, eval_split=None)
    infos = [r["info"] for r in env.dataset]
    assert [i["kernel_task"] for i in infos] == [NAME]


# ---- the reward server -----------------------------------------------------------------------------

def test_serve_reward_takes_tasks_dir_and_its_slots_see_the_tasks():
    pytest.importorskip("starlette")
    httpx = pytest.importorskip("httpx")
    from kernelgym_gap.cli.main import build_parser
    from kernelgym_gap.integrations.reward_app import create_app
    from kernelgym_gap.integrations.scorer import Scorer
    from test_integrations_server import Served
    args = build_parser().parse_args(["serve-reward", "--backend", "cpu", "--tasks-dir", BUILTIN,
                                      "--tasks-dir", str(TASKS)])
    assert args.tasks_dir == [BUILTIN, str(TASKS)]
    scorer = Scorer("cpu", workers=1, registry=task_source(args.tasks_dir))
    app = create_app(scorer, "tok", max_pending=8, max_items=8)
    assert app.service.pool._settings["tasks_dir"] == [BUILTIN, str(TASKS.absolute())]   # what the slots load
    try:
        with Served(app) as srv:
            r = httpx.post(srv.url + "/score", headers={"Authorization": "Bearer tok"}, timeout=600,
                           json={"items": [{"task": NAME, "completion": _reply()},
                                           {"task": NAME, "source": WRONG}]})
            assert r.status_code == 200, r.text
            out = r.json()
            assert out["rewards"] == [1.0, 0.0], out["terms"]
            # the public record names no directory of the scoring machine
            assert str(TASKS.absolute()) not in json.dumps(out)
    finally:
        scorer.close()


# ---- commands --------------------------------------------------------------------------------------

def test_episode_takes_tasks_dir(tmp_path, capsys):
    from kernelgym_gap.cli.main import main
    start = tmp_path / "start.py"
    start.write_text(KERNEL)
    code = main(["episode", "--agent", "search", "--task", NAME, "--tasks-dir", str(TASKS), "--backend", "cpu",
                 "--steps", "1", "--seed", "0", "--agent-arg", f"start_file={start}", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["steps"][0]["status"] == "ok", out
    # replay has nothing to replay on an imported task: said, not a traceback
    code = main(["episode", "--agent", "replay", "--task", NAME, "--tasks-dir", str(TASKS), "--backend", "cpu"])
    assert code != 0 and "ships no reference solution" in capsys.readouterr().err


def test_run_says_imported_tasks_ship_no_solution(capsys):
    from kernelgym_gap.cli.main import main
    assert main(["run", "--backend", "cpu", "--dsl", "triton", "--tasks-dir", str(TASKS)]) == 0
    out, err = capsys.readouterr()
    assert "ship no reference solution" in err and NAME in err
    assert "no reference solution to replay" in out and "reference solutions evaluated" not in out


def test_bench_replay_says_why_an_imported_task_is_skipped(tmp_path, capsys):
    from kernelgym_gap.cli.main import main
    code = main(["bench", "--agent", "replay", "--tasks-dir", str(TASKS), "--backend", "cpu",
                 "--db", str(tmp_path / "b.sqlite3")])
    assert code != 0 and "ships no reference solution" in capsys.readouterr().err


# ---- the env -------------------------------------------------------------------------------------------

def test_env_make_with_several_directories():
    from kernelgym_gap.api.env import make
    env = make("Suite", tasks_dir=[BUILTIN, str(TASKS)], backend="cpu")
    assert {NAME, "LayerNorm"} <= {t.name for t in env.unwrapped.tasks}
    env = make(NAME, tasks_dir=[str(TASKS)], backend="cpu")
    obs, info = env.reset(seed=0)
    assert info["task"] == TASK_ID and "relu_forward" in obs
    with pytest.raises(UnknownTaskError):
        make(NAME, backend="cpu")           # the built-in source has no such task


# ---- no path of the scoring machine in feedback ----------------------------------------------------

def test_a_failure_message_shows_no_tasks_dir_path():
    from kernelgym_gap.core.config import EvalConfig
    from kernelgym_gap.engine.feedback import public_view
    from kernelgym_gap.engine.pipeline import evaluate
    task = task_source(TASKS).get(NAME)
    record = evaluate(task, WRONG, "triton", "cpu", EvalConfig())
    assert record.status.value == "mismatch" and record.failure.trial.split == "public", record.message
    where = str(TASKS.absolute())
    assert where in record.failure.reproduce                   # kept for people: it runs as printed
    assert where not in record.message and "tasks_dir='<tasks_dir>'" in record.message
    assert where not in json.dumps(public_view(record.to_dict()))


@pytest.mark.gpu
def test_cuda_reward_of_an_imported_task_has_its_performance_terms():
    """On a GPU an imported task is scored like a built-in one: correct, timed against its library (E) and
    its floor (U), through the trainer's reward function and the reward server's slots alike."""
    from kernelgym_gap.integrations.scorer import record_terms
    from kernelgym_gap.integrations.trl import reward_function
    f = reward_function(backend="cuda", tasks_dir=[BUILTIN, str(TASKS)], workers=1)
    try:
        rewards = f(prompts=None, completions=[_reply(), _reply(WRONG)], task=[NAME, NAME])
        terms = record_terms(f.last_records[0])
        assert terms["status"] == "ok" and 0.0 < rewards[0] <= 1.0 and rewards[1] == 0.0, terms
        assert terms["E"] is not None and terms["E"] > 0 and terms["U"] is not None and 0 < terms["U"] <= 1.0
        assert str(TASKS.absolute()) not in f.last_records[1].message
    finally:
        f.scorer.close()
