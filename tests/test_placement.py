"""Placement (core/placement.py) left EvalConfig (issue 33): where an evaluation runs is a Placement passed beside
the config; a config written before the split is refused with a typed error or split by the loader."""
import dataclasses
import json
import pickle

import pytest

from kernelgym_gap.core.config import EvalConfig, SandboxConfig, config_from_dict
from kernelgym_gap.core.placement import FIELDS, Placement, PlacementFieldError

# an EvalConfig as dataclasses.asdict wrote it before the split (the placement keys beside the measured ones)
LEGACY = {"seeds_per_shape": 3, "trial_seed": 5, "gpu_index": 2, "scratch_root": "/scratch", "keep_scratch": True,
          "calibration_path": "/c.json", "baselines_path": "/b.json", "library_cache_path": "/l.json",
          "held_output_bytes": 0, "sandbox": {"wall_s": 30.0, "lane_dir": "/lanes", "extra_ro_paths": ["/ro"]},
          "timing": {"min_reps": 7}}


def test_placement_lists_every_field_it_holds_and_none_is_on_the_config():
    assert FIELDS == ("gpu_index", "lane_dir", "scratch_root", "keep_scratch", "calibration_path", "baselines_path",
                      "library_cache_path", "held_output_bytes", "held_device_bytes", "output_staging_bytes",
                      "outputs_copy_laned", "disk_wait_s", "prestart_for_next", "prestart_early", "read_arena_bytes")
    config_fields = {f.name for f in dataclasses.fields(EvalConfig)} | {f.name for f in dataclasses.fields(SandboxConfig)}
    assert not config_fields & set(FIELDS)


@pytest.mark.parametrize("name", [f for f in FIELDS if f != "lane_dir"])
def test_a_placement_keyword_on_evalconfig_is_a_typed_error_that_says_where_it_went(name):
    with pytest.raises(PlacementFieldError) as e:
        EvalConfig(**{name: Placement().__getattribute__(name)})
    assert isinstance(e.value, TypeError) and repr(name) in str(e.value) and "Placement(" in str(e.value)
    with pytest.raises(PlacementFieldError, match=name):
        EvalConfig().replace(**{name: getattr(Placement(), name)})
    again = pickle.loads(pickle.dumps(e.value))        # crosses a process (a Ray actor) intact
    assert type(again) is PlacementFieldError and str(again) == str(e.value)


def test_lane_dir_on_sandboxconfig_is_refused_the_same_way():
    with pytest.raises(PlacementFieldError, match="'lane_dir'"):
        SandboxConfig(lane_dir="/x")
    with pytest.raises(PlacementFieldError):
        dataclasses.replace(SandboxConfig(), lane_dir="/x")


def test_a_legacy_config_dict_is_split_into_config_and_placement_losing_nothing():
    config, where = config_from_dict(LEGACY)
    assert where == Placement(gpu_index=2, lane_dir="/lanes", scratch_root="/scratch", keep_scratch=True,
                              calibration_path="/c.json", baselines_path="/b.json", library_cache_path="/l.json",
                              held_output_bytes=0)
    assert config == EvalConfig(seeds_per_shape=3, trial_seed=5,
                                sandbox=SandboxConfig(wall_s=30.0, extra_ro_paths=("/ro",)),
                                timing=dataclasses.replace(EvalConfig().timing, min_reps=7))


def test_a_config_dict_round_trips_through_json():
    config = EvalConfig(trial_seed=9, sandbox=SandboxConfig(extra_ro_paths=("/a",), gpu_devices=(1,)))
    back, where = config_from_dict(json.loads(json.dumps(dataclasses.asdict(config))))
    assert back == config and where == Placement()


def test_an_unknown_key_or_a_non_mapping_is_a_type_error_naming_it():
    with pytest.raises(TypeError, match="no_such_field"):
        config_from_dict({"no_such_field": 1})
    with pytest.raises(TypeError, match="mapping"):
        config_from_dict(["gpu_index", 1])


def test_a_placement_validates_what_it_holds():
    for bad in ({"gpu_index": -1}, {"gpu_index": True}, {"gpu_index": "0"}, {"held_output_bytes": -1},
                {"prestart_for_next": 1}, {"prestart_for_next": "yes"}):
        with pytest.raises(ValueError):
            Placement(**bad)
    assert Placement().replace(gpu_index=3).gpu_index == 3
    assert Placement(lane_dir="/x").lanes_for("cuda") == "/x" and Placement(lane_dir="/x").lanes_for("cpu") is None


def test_the_childs_sandbox_carries_the_placements_gpu_and_lanes(registry):
    """launch.child_spec puts the Placement where the sandbox acts on it: the GPU's device nodes, the lanes'
    directory (a ChildSandbox field, not a SandboxConfig one) and the scratch root; a pre-started child made
    for one placement never serves another."""
    from kernelgym_gap.sandbox.launch import child_spec
    from kernelgym_gap.sandbox.process import ChildSandbox
    task = registry.get("AddReLU")
    config = EvalConfig()
    spec = child_spec(task, "triton", "cuda", config, Placement(gpu_index=3, lane_dir="/lanes", scratch_root="/s"))
    assert isinstance(spec.sandbox, ChildSandbox) and spec.sandbox.gpu_devices == (3,)
    assert spec.sandbox.lane_dir == "/lanes" and spec.scratch_root == "/s"
    assert spec.sandbox.wall_s == config.sandbox.wall_s
    assert child_spec(task, "triton", "cpu", config).sandbox.gpu_devices is None
    assert child_spec(task, "triton", "cpu", config) != child_spec(task, "triton", "cpu", config,
                                                                    Placement(lane_dir="/elsewhere"))


def test_the_env_and_the_vector_envs_copies_take_a_placement(tmp_path, monkeypatch):
    from kernelgym_gap.api import lanes
    from kernelgym_gap.api.env import KernelEnv
    from kernelgym_gap.api.service import place_copies
    where = Placement(scratch_root=str(tmp_path), library_cache_path=str(tmp_path / "lib.json"))
    env = KernelEnv(task_id="AddReLU", backend="cpu", placement=where, evaluator=lambda *a, **k: None)
    try:
        assert env.service.placement(0) == where and env.placement == where
    finally:
        env.close()
    monkeypatch.setattr(lanes, "visible_gpus", lambda: [0, 1])
    copies, lane_dir = place_copies(4, where)
    try:
        assert [c.gpu_index for c in copies] == [0, 1, 0, 1] and {c.lane_dir for c in copies} == {lane_dir}
        assert lane_dir.startswith(str(tmp_path)) and all(c.replace(gpu_index=0, lane_dir="auto") == where
                                                          for c in copies)
    finally:
        import shutil
        shutil.rmtree(lane_dir, ignore_errors=True)
    own, made = place_copies(4, where.replace(lane_dir="/mine"), gpus=[0])
    assert made is None and {c.lane_dir for c in own} == {"/mine"}


def test_the_clis_gpu_flag_builds_a_placement_and_leaves_the_config_alone():
    from kernelgym_gap.cli.main import build_parser
    from kernelgym_gap.cli.options import eval_config, placement
    parser = build_parser()
    args = parser.parse_args(["eval", "--task", "AddReLU", "--gpu", "3", "--seed", "4", "k.py"])
    assert placement(args) == Placement(gpu_index=3)
    assert eval_config(args) == EvalConfig(trial_seed=4)
    assert placement(parser.parse_args(["eval", "--task", "AddReLU", "k.py"])) == Placement()


@pytest.mark.gpu
def test_gpu_a_placement_reaches_the_child_the_checker_and_the_caches(registry, tmp_path):
    """On a GPU: an evaluation placed with its own lanes, scratch root, calibration and library caches (and no
    held outputs) is ok, uses every one of them, and leaves its scratch root empty; the same kernel placed by
    default has the same cache key."""
    from kernelgym_gap.engine.pipeline import evaluate
    from kernelgym_gap.store.cache_key import cache_key_for
    task = registry.get("AddReLU")
    sol = next(s for s in task.solutions if s.dsl == "triton" and s.kind == "optimized")
    source = task.solution_path(sol).read_text()
    (tmp_path / "scratch").mkdir()
    where = Placement(gpu_index=0, lane_dir=str(tmp_path / "lanes"), scratch_root=str(tmp_path / "scratch"),
                      calibration_path=str(tmp_path / "cal.json"), library_cache_path=str(tmp_path / "lib.json"),
                      held_output_bytes=0)
    config = EvalConfig(trial_seed=0, compile_baseline="off")
    record = evaluate(task, source, "triton", "cuda", config, placement=where)
    assert record.status.value == "ok", record.message
    assert (tmp_path / "lanes" / "gpu0.gate").exists()                  # the child's and checker's lane
    assert (tmp_path / "cal.json").is_file() and (tmp_path / "lib.json").is_file()
    assert "child_outputs_write_in_lane" in record.latency      # held_output_bytes=0 reached the child's job
    assert list((tmp_path / "scratch").iterdir()) == []
    assert cache_key_for(task, source, "triton", "cuda", config, where) == \
        cache_key_for(task, source, "triton", "cuda", config)
