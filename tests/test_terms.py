"""The record's terms as a typed, versioned structure (issue 33, core/terms.py).

Real records (reference solutions and failing fixtures through the real engine on cpu, the too_slow
fixture, the harness's own failure record) and the cuda producers' terms on synthetic timings (the path
tests/test_measure.py and tests/test_too_slow.py drive) all parse into `Terms`, and the dict round-trips
exactly both ways: stored records, the web page and the trainers see the same object as before. Bad terms
are a ProtocolError. A grep-level check keeps literal-key access to the terms out of the package, with the
files not yet moved to typed access listed in PENDING, which may only shrink."""
import ast
import dataclasses
import json
import time
from pathlib import Path

import pytest

from conftest import FIXTURES
from kernelgym_gap.core.config import EvalConfig
from kernelgym_gap.core.errors import ProtocolError
from kernelgym_gap.core.record import EvalRecord
from kernelgym_gap.core.status import Status
from kernelgym_gap.core.terms import (TERMS_VERSION, ChildCounts, ScoreTerms, ShapeTerms, Terms, TooSlowTerms,
                                      TrainerTerms)
from kernelgym_gap.engine.evaluation import assemble_terms, harness_failure_record
from kernelgym_gap.engine.pipeline import evaluate

CPU = EvalConfig(trial_seed=1234, seeds_per_shape=1)
PKG = Path(__file__).resolve().parent.parent / "kernelgym_gap"


def round_trips(terms: dict) -> Terms:
    """`terms` parses, writes back to the same dict, and what it writes parses to the same Terms; through
    JSON too (the store's and the wire's form)."""
    typed = Terms.from_dict(terms)
    assert typed.to_dict() == terms
    assert Terms.from_dict(typed.to_dict()) == typed
    assert Terms.from_dict(json.loads(json.dumps(terms))).to_dict() == json.loads(json.dumps(terms))
    return typed


# ---------------------------------------------------------------- real records through the engine (cpu)

@pytest.fixture(scope="module")
def cpu_records(registry):
    out = {}
    for name in ("AddReLU", "GELU"):
        task = registry.get(name)
        out[name] = evaluate(task, task.solution_path(task.solutions[0]).read_bytes(), "triton", "cpu", CPU)
    layernorm = registry.get("LayerNorm")
    for fixture in ("mismatch", "syntax_error", "wrong_shape"):
        out[fixture] = evaluate(layernorm, (FIXTURES / "failures" / f"{fixture}.py").read_bytes(), "triton",
                                "cpu", CPU)
    return out


def test_reference_solutions_records_round_trip(cpu_records):
    for name in ("AddReLU", "GELU"):
        record = cpu_records[name]
        assert record.status is Status.OK, record.message
        typed = round_trips(record.terms)
        assert record.typed_terms == typed
        assert typed.terms_version == TERMS_VERSION == record.terms["terms_version"]
        # cpu: correctness only, every performance figure absent (no CPU time as a GPU figure)
        assert typed.correctness == 1.0 and typed.E is None and typed.U is None and typed.performance is None
        assert typed.score is None and typed.too_slow is None and typed.per_shape is None
        assert typed.counts is not None and typed.counts.launches_per_call >= 1
        assert typed.kernelbench_allclose is True
        # the record itself, through its JSON, keeps the same terms
        assert EvalRecord.from_json(record.to_json()).typed_terms == typed


def test_failing_fixtures_records_round_trip(cpu_records):
    expected = {"mismatch": Status.MISMATCH, "syntax_error": Status.SYNTAX_ERROR,
                "wrong_shape": Status.WRONG_SHAPE}
    for name, status in expected.items():
        record = cpu_records[name]
        assert record.status is status, record.message
        typed = round_trips(record.terms)
        assert typed.correctness == 0.0 and typed.counts is None and typed.score is None


def test_the_harness_failure_record_round_trips(registry):
    record = harness_failure_record(registry.get("GELU"), "x = 1", "triton", "cpu", CPU, KeyError("boom"))
    typed = round_trips(record.terms)
    assert typed.flags == ("harness_error: KeyError",) and typed.correctness == 0.0


def test_a_too_slow_record_round_trips(registry):
    """The too_slow fixture through the engine, as tests/test_too_slow.py runs it (a tight call bound)."""
    from test_too_slow import CPU_CONFIG
    start = time.monotonic()
    record = evaluate(registry.get("LayerNorm"), (FIXTURES / "failures" / "too_slow_serial.py").read_bytes(),
                      "triton", "cpu", CPU_CONFIG)
    assert record.status is Status.TOO_SLOW, record.message
    assert time.monotonic() - start < 90
    typed = round_trips(record.terms)
    bound = typed.too_slow
    assert isinstance(bound, TooSlowTerms) and bound.trials_finished == record.terms["trials_finished"] == 4
    assert bound.E_upper is None and bound.U_upper is None            # cpu: not even a bound
    assert bound.bound_s == CPU_CONFIG.sandbox.compile_call_s and bound.reached_s >= bound.bound_s


# ------------------------------------------------------------ the cuda producers, on synthetic timings

def test_cuda_performance_terms_round_trip_with_compile_and_alternatives(registry, tmp_path):
    from test_measure import CAL, _cache_baselines, report, timing
    from kernelgym_gap.judge.calibrate import save_cached
    from kernelgym_gap.judge.measure import floor_ms, performance_terms
    save_cached(CAL, tmp_path / "calibration.json")
    from kernelgym_gap.core.placement import Placement
    config = EvalConfig(compile_baseline="cached")
    where = Placement(calibration_path=str(tmp_path / "calibration.json"), baselines_path=str(tmp_path / "baselines.json"))
    task = dataclasses.replace(registry.get("LayerNorm"), e_baseline="fused_lib",
                               alternatives={"fused_lib": lambda x, w, b: x})
    fl, _ = floor_ms(task, (8192, 4096), "float16", CAL)
    _cache_baselines(where, task, (8192, 4096), "float16", compile_ms=1.5 * fl, alternatives={"fused_lib": 2.2 * fl})
    timings = [timing((8192, 4096), "float16", 2 * fl, 6 * fl, library_hint_ms=6 * fl),
               timing((1024, 4096), "float16", 2 * fl, 6 * fl)]
    status, _, perf, _ = performance_terms(task, report(*timings), config, placement=where)
    assert status is Status.OK
    parts = {"kernelbench_allclose": True, **ChildCounts(launches_per_call=1, programs=8192).to_dict(), **perf}
    terms = assemble_terms(True, parts, ["a flag of the evaluation"]).to_dict()
    typed = round_trips(terms)
    # the second shape has no cached baselines: the reward falls back to eager, saying so in the flags
    assert isinstance(typed.score, ScoreTerms) and typed.score.reward_baseline == "torch"
    assert any("fused_lib" in f for f in typed.flags) and typed.score.E_compile is None
    assert typed.E == perf["E"] and typed.score.calibration.device == "Test GPU"
    first, second = typed.per_shape
    assert isinstance(first, ShapeTerms) and first.compile.E_alt == {"fused_lib": pytest.approx(1.1)}
    assert second.compile.E_alt == {"fused_lib": None} and second.compile.compile_ms is None
    assert first.library_hint_ms == pytest.approx(6 * fl) and second.library_hint_ms is None
    assert typed.flags[-1] == "a flag of the evaluation"
    # the per-shape keys only some shapes carry stay absent where absent: no compile baseline cached
    _, _, plain, _ = performance_terms(registry.get("LayerNorm"), report(timings[1]),
                                       config.replace(compile_baseline="off"), placement=where)
    row = round_trips(assemble_terms(True, plain, []).to_dict()).per_shape[0]
    assert row.compile is not None and row.compile.E_alt is None
    assert "E_alt" not in row.to_dict()


def test_cuda_failure_terms_round_trip(registry, tmp_path):
    """A timing failure (faster than the floor) writes only per_shape, without the compile keys."""
    from test_measure import CAL, report, timing
    from kernelgym_gap.judge.calibrate import save_cached
    from kernelgym_gap.judge.measure import floor_ms, performance_terms
    save_cached(CAL, tmp_path / "calibration.json")
    from kernelgym_gap.core.placement import Placement
    config = EvalConfig(compile_baseline="off")
    task = registry.get("LayerNorm")
    fl, _ = floor_ms(task, (8192, 4096), "float16", CAL)
    status, _, perf, _ = performance_terms(task, report(timing((8192, 4096), "float16", 0.5 * fl, fl)), config,
                                           placement=Placement(calibration_path=str(tmp_path / "calibration.json")))
    assert status is Status.FASTER_THAN_FLOOR
    typed = round_trips(assemble_terms(False, {"kernelbench_allclose": True, **perf}, []).to_dict())
    assert typed.per_shape[0].compile is None and "compile_ms" not in typed.to_dict()["per_shape"][0]


def test_cuda_too_slow_terms_round_trip(registry, monkeypatch):
    from test_too_slow import _synthetic
    from kernelgym_gap.engine import too_slow
    from kernelgym_gap.judge.calibrate import Calibration
    cal = Calibration(device_key="k", device_name="NVIDIA H100 80GB HBM3", copy_bytes_per_s=3.0e12,
                      matmul_flops_per_s={"float32": 6e13, "tf32": 4e14, "float16": 8e14, "bfloat16": 8e14},
                      source="datasheet")
    monkeypatch.setattr("kernelgym_gap.judge.measure.get_calibration", lambda report, config: cal)
    monkeypatch.setattr("kernelgym_gap.judge.measure.best_known_efficiency", lambda *a: None)
    ev, trials = _synthetic(registry.get("LayerNorm"), "cuda", finished=[0, 1], killed_at=2)
    ev.job = dataclasses.replace(ev.job, library_hint=((trials[2].shape, trials[2].dtype, 0.02),))
    status, _, fields = too_slow.decide(ev)
    assert status is Status.TOO_SLOW
    typed = round_trips(assemble_terms(fields["correct"], fields["terms"], ev.flags).to_dict())
    assert typed.too_slow.E_upper == pytest.approx(0.02 / 2.05e3) and typed.too_slow.too_slow_by_rule is True
    assert typed.correctness == 0.0


# ----------------------------------------------------------------------- what from_dict refuses

def _cpu_terms() -> dict:
    return assemble_terms(True, {"kernelbench_allclose": True, "launches_per_call": 1, "programs": 4}, []).to_dict()


@pytest.mark.parametrize("change", [
    {"Eff": 1.0},                                   # an unknown key
    {"E": "fast"}, {"E": True},                     # a number that is not one (a bool is not a number)
    {"flags": [1]}, {"flags": "x"},                 # flags are a list of strings
    {"correctness": None},                          # every record has its correctness
    {"kernelbench_allclose": 1},                    # a bool, not 1
    {"programs": 4.0},                              # a count is an int
    {"trials_finished": 3},                         # one key of a group: the group's others are missing
    {"terms_version": TERMS_VERSION + 1},           # newer than this reader
    {"terms_version": "1"},
    {"per_shape": [{"shape": [1], "ms": 0.5}]},     # a shape row missing its keys, with an unknown one
    {"per_shape": {"shape": [1]}},
])
def test_bad_terms_are_a_protocol_error(change):
    with pytest.raises(ProtocolError):
        Terms.from_dict({**_cpu_terms(), **change})


def test_missing_base_keys_and_non_objects_are_a_protocol_error():
    terms = _cpu_terms()
    del terms["E"]
    for bad in (terms, None, [], "terms"):
        with pytest.raises(ProtocolError):
            Terms.from_dict(bad)


def test_terms_stored_before_the_version_round_trip_unchanged():
    """A record stored before terms_version existed reads back, and writes back without it."""
    old = {k: v for k, v in _cpu_terms().items() if k != "terms_version"}
    typed = round_trips(old)
    assert typed.terms_version is None and "terms_version" not in typed.to_dict()


def test_typed_terms_of_a_record_with_bad_terms_is_a_protocol_error(cpu_records):
    record = dataclasses.replace(cpu_records["AddReLU"], terms={"E": float("inf"), "per_shape": []})
    with pytest.raises(ProtocolError, match="EvalRecord.terms"):
        record.typed_terms


# ----------------------------------------------------------------------- what a trainer logs

def test_trainer_terms_round_trip(cpu_records):
    from kernelgym_gap.integrations.reward_items import invalid_terms
    from kernelgym_gap.integrations.terms import record_terms as trainer_terms
    for terms in (trainer_terms(cpu_records["AddReLU"]), trainer_terms(cpu_records["mismatch"], -1.0),
                  invalid_terms("not evaluated: unknown task 'X'", -0.5)):
        typed = TrainerTerms.from_dict(terms)
        assert typed.to_dict() == terms and TrainerTerms.from_dict(typed.to_dict()) == typed
        assert set(terms) == TrainerTerms.keys()      # the same keys every time (verl stacks them)
    with pytest.raises(ProtocolError):
        TrainerTerms.from_dict({**invalid_terms("r", 0.0), "terms_version": 1})


# ------------------------------------------------------------- no literal-key access to the terms

# Files under kernelgym_gap/ still reading or writing the terms by literal key, and why they are not
# moved yet. An entry may only go: the test fails when a listed file no longer has such an access.
PENDING: dict[str, str] = {}


def _is_terms(node: ast.AST, aliases: set[str]) -> bool:
    """Whether `node` is the record's terms: a name `terms` or an alias of it, `x.terms`, `x["terms"]`,
    `x.get("terms")` (or that `or {}`)."""
    if isinstance(node, ast.BoolOp):
        return any(_is_terms(v, aliases) for v in node.values)
    if isinstance(node, ast.Name):
        return node.id == "terms" or node.id in aliases
    if isinstance(node, ast.Attribute):
        return node.attr == "terms"
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "terms"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
        return bool(node.args) and isinstance(node.args[0], ast.Constant) and node.args[0].value == "terms"
    return False


def literal_key_accesses(source: str) -> list[str]:
    """`terms["E"]`, `terms.get("E")`, `record.terms["E"]`, `info["terms"].get("E")`, and the same through
    a name the terms were assigned to (`t = record.terms or {}` ... `t["E"]`): one line per access."""
    tree = ast.parse(source)
    aliases = {t.id for node in ast.walk(tree) if isinstance(node, ast.Assign) and _is_terms(node.value, set())
               for t in node.targets if isinstance(t, ast.Name)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) \
                and isinstance(node.slice.value, str) and _is_terms(node.value, aliases):
            found.append(f"{node.lineno}: [{node.slice.value!r}]")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str) \
                and node.args[0].value != "terms" and _is_terms(node.func.value, aliases):
            found.append(f"{node.lineno}: .get({node.args[0].value!r})")
    return found


def test_the_scanner_sees_each_form_and_not_docstrings():
    src = ('"""terms["E"] in a docstring"""\n'
           'a = record.terms["E"]\nb = terms.get("U")\nc = info["terms"].get("E")\n'
           't = record.terms or {}\nd = t["performance"]\ne = out.get("terms")["flags"]\n'
           'f = other["E"]\ng = terms.get(name)\n')
    assert [x.split(":")[0] for x in literal_key_accesses(src)] == ["2", "3", "4", "6", "7"]


def test_no_literal_key_access_to_the_terms_outside_core_terms():
    found = {}
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG.parent).as_posix()
        if rel == "kernelgym_gap/core/terms.py":
            continue
        hits = literal_key_accesses(path.read_text())
        if hits:
            found[rel] = hits
    new = {f: hits for f, hits in found.items() if f not in PENDING}
    assert not new, f"literal-key access to the terms (read them through EvalRecord.typed_terms): {new}"
    done = sorted(set(PENDING) - set(found))
    assert not done, f"no literal-key access left in {done}: take them off PENDING"


# ----------------------------------------------------------------------------- on a GPU (H200 later)

@pytest.mark.gpu
def test_cuda_records_round_trip(registry, tmp_path):
    """Real cuda records: the optimized LayerNorm twice (the second with the library time cached, so that
    library_source/library_hint_ms take their other values) and the scalar-loop one (slow: ok, or too_slow);
    every key they carry is typed and round-trips."""
    from kernelgym_gap.core.placement import Placement
    config = EvalConfig(trial_seed=7)
    where = Placement(calibration_path=str(tmp_path / "calibration.json"),
                      library_cache_path=str(tmp_path / "library_times.json"))
    task = registry.get("LayerNorm")
    records = []
    for file in ("triton_rowwise.py", "triton_rowwise.py", "triton_scalar_loop.py"):
        sol = next(s for s in task.solutions if s.file == file)
        records.append(evaluate(task, task.solution_path(sol).read_text(), sol.dsl, "cuda", config, placement=where))
    assert records[0].status is Status.OK, records[0].message
    for record in records:
        typed = round_trips(record.terms)
        if record.status is Status.OK:
            assert typed.score is not None and typed.score.calibration.device and typed.per_shape
            assert typed.E == record.terms["E"] and all(s.kernel_ms > 0 for s in typed.per_shape)
