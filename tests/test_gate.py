from kernelgym_gap.gate import check_source
from kernelgym_gap.status import Status

TRITON = "import triton\n@triton.jit\ndef k(x):\n    pass\ndef f(x):\n    return x\n"


def test_gate_passes_a_triton_module():
    assert check_source(TRITON, "f", "triton").passed


def test_gate_kinds():
    assert check_source(b"\xff\xfe", "f", "triton").status is Status.SOURCE_NOT_UTF8
    assert check_source("def f(:\n", "f", "triton").status is Status.SYNTAX_ERROR
    assert check_source(TRITON, "g", "triton").status is Status.ENTRY_POINT_MISSING
    assert check_source("import torch\ndef f(x):\n    return x\n", "f", "triton").status is Status.WRONG_DSL
    assert check_source("x" * 300_000, "f", "triton").status is Status.SOURCE_TOO_LARGE


def test_wrong_dsl_hints_the_other_one():
    r = check_source(TRITON, "f", "tilelang")
    assert r.status is Status.WRONG_DSL and "triton" in r.message
