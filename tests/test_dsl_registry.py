"""One registry of DSLs (core/dsls.py): the adapters, the gate, the launcher and every list of DSL names in
the package read it, and nothing else spells the list."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from kernelgym_gap import dsl
from kernelgym_gap.core import dsls, task
from kernelgym_gap.core.errors import UnknownChoiceError
from kernelgym_gap.engine.gate import check_source

PKG = Path(__file__).resolve().parent.parent / "kernelgym_gap"


def test_every_registered_dsl_has_its_adapter_and_they_agree():
    assert tuple(dsl.ADAPTERS) == dsls.NAMES
    for name, adapter in dsl.ADAPTERS.items():
        assert adapter.info is dsls.DSLS[name] and adapter.info.name == name
        for backend in ("cpu", "cuda"):
            assert adapter.needs_compile_probe(backend) == dsls.needs_compile_probe(name, backend)
    assert dsls.DEFAULT in dsls.NAMES and task.DSLS == dsls.NAMES


@pytest.mark.parametrize("bad", ["cuda", "Triton", "", None, ["triton"]])
def test_an_unknown_dsl_is_a_typed_error(bad):
    with pytest.raises(UnknownChoiceError):
        dsls.info(bad)
    with pytest.raises(ValueError):          # UnknownChoiceError is a ValueError, as adapter_class raised
        dsl.adapter_class(bad)


def test_only_triton_on_cpu_runs_the_compile_probe():
    assert dsls.needs_compile_probe("triton", "cpu") and not dsls.needs_compile_probe("triton", "cuda")
    assert not any(dsls.needs_compile_probe("tilelang", b) for b in ("cpu", "cuda"))


def test_the_gate_reads_each_dsls_rule_from_the_registry():
    tl = "import tilelang\nimport tilelang.language as T\n@T.prim_func\ndef k(A):\n    pass\ndef f(x):\n    return x\n"
    assert dsls.DSLS["tilelang"].looks_like(ast.parse(tl))
    r = check_source(tl, "f", "triton")
    assert r.status.value == "wrong_dsl" and "pass dsl='tilelang'" in r.message


def _literal_lists_of_dsl_names(path: Path) -> list[int]:
    """Lines of literal tuples, lists and sets that hold two or more DSL names."""
    names = set(dsls.NAMES)
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            held = {e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in names}
            if len(held) >= 2:
                found.append(node.lineno)
    return found


def test_no_module_spells_the_list_of_dsl_names_itself():
    offenders = {str(p.relative_to(PKG)): lines for p in sorted(PKG.rglob("*.py"))
                 if p.name != "dsls.py" and (lines := _literal_lists_of_dsl_names(p))}
    assert offenders == {}, "read kernelgym_gap.core.dsls.NAMES instead"


def test_the_check_finds_a_spelled_list(tmp_path):
    (tmp_path / "m.py").write_text('CHOICES = ["triton", "tilelang"]\nONE = ("triton",)\n')
    assert _literal_lists_of_dsl_names(tmp_path / "m.py") == [1]
