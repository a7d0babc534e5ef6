"""The static gate: checks made in the parent on the source text, before any process starts."""
import pytest

from kernelgym_gap.core.config import EvalConfig
from kernelgym_gap.engine.pipeline import evaluate
from kernelgym_gap.engine.gate import MAX_SOURCE_BYTES, check_source
from kernelgym_gap.core.status import Status

TRITON = """import triton
import triton.language as tl


@triton.jit
def _k(x_ptr, BLOCK: tl.constexpr):
    pass


def f(x):
    return x
"""

TILELANG = """import tilelang
import tilelang.language as T


@T.prim_func
def _k(A: T.Tensor((4,), "float32")):
    pass


def f(x):
    return x
"""


def test_passes_a_triton_module_and_returns_its_text():
    r = check_source(TRITON, "f", "triton")
    assert r.passed and r.status is Status.OK and r.source == TRITON


def test_passes_bytes_as_well_as_text():
    assert check_source(TRITON.encode(), "f", "triton").passed


def test_passes_a_tilelang_module():
    assert check_source(TILELANG, "f", "tilelang").passed


@pytest.mark.parametrize("decorators", [
    "@triton.autotune(configs=[triton.Config({'BLOCK': 64})], key=[])\n@triton.jit",
    "@triton.heuristics({'BLOCK': lambda a: 64})\n@triton.jit",
])
def test_passes_decorated_triton_kernels(decorators):
    src = TRITON.replace("@triton.jit", decorators)
    assert check_source(src, "f", "triton").passed


def test_passes_from_import_jit():
    src = "from triton import jit\nimport triton.language as tl\n@jit\ndef _k(x):\n    pass\ndef f(x):\n    return x\n"
    assert check_source(src, "f", "triton").passed


@pytest.mark.parametrize("definition", [
    "f = _impl",
    "f: object = _impl",
    "from os.path import join as f",
    "class f:\n    pass",
    "async def f(x):\n    return x",
])
def test_entry_point_may_be_any_top_level_binding(definition):
    src = TRITON.replace("def f(x):\n    return x\n", "def _impl(x):\n    return x\n" + definition + "\n")
    assert check_source(src, "f", "triton").passed, definition


def test_size_limit_is_in_bytes_and_inclusive():
    base = TRITON.encode()
    at_limit = base + b"#" * (1000 - len(base))
    assert len(at_limit) == 1000
    assert check_source(at_limit, "f", "triton", max_bytes=1000).passed
    r = check_source(at_limit + b"#", "f", "triton", max_bytes=1000)
    assert r.status is Status.SOURCE_TOO_LARGE and "1001" in r.message and "1000" in r.message


def test_default_size_limit():
    assert check_source("#" * (MAX_SOURCE_BYTES + 1), "f", "triton").status is Status.SOURCE_TOO_LARGE
    # a multi-byte character counts by its bytes, not as one character
    text = TRITON + "# " + "é" * (MAX_SOURCE_BYTES // 2)
    assert len(text) < MAX_SOURCE_BYTES < len(text.encode())
    assert check_source(text, "f", "triton").status is Status.SOURCE_TOO_LARGE


@pytest.mark.parametrize("raw", [b"\xff\xfe", TRITON.encode() + b"# \xe9\n", b"import triton\x00\n"])
def test_not_utf8(raw):
    r = check_source(raw, "f", "triton")
    assert r.status is Status.SOURCE_NOT_UTF8 and r.message and r.source is None


def test_syntax_error_names_the_line():
    r = check_source("import triton\n\ndef f(:\n", "f", "triton")
    assert r.status is Status.SYNTAX_ERROR and "line 3" in r.message


def test_entry_point_missing():
    r = check_source(TRITON, "layernorm", "triton")
    assert r.status is Status.ENTRY_POINT_MISSING and "layernorm" in r.message


def test_entry_point_nested_in_a_function_does_not_count():
    src = TRITON.replace("def f(x):\n    return x\n", "def outer():\n    def f(x):\n        return x\n")
    assert check_source(src, "f", "triton").status is Status.ENTRY_POINT_MISSING


@pytest.mark.parametrize("src", [
    "import torch\ndef f(x):\n    return x * 2\n",                                  # no DSL at all
    "import triton\ndef f(x):\n    return x\n",                                     # imported, no kernel
    "import torch\ndef jit(fn):\n    return fn\n@jit\ndef _k(x):\n    pass\ndef f(x):\n    return x\n",   # a fake jit
])
def test_wrong_dsl(src):
    assert check_source(src, "f", "triton").status is Status.WRONG_DSL


def test_wrong_dsl_hints_the_other_one():
    r = check_source(TRITON, "f", "tilelang")
    assert r.status is Status.WRONG_DSL and "triton" in r.message
    r = check_source(TILELANG, "f", "triton")
    assert r.status is Status.WRONG_DSL and "tilelang" in r.message


def test_evaluate_stops_at_the_gate_without_a_child(registry):
    task = registry.get("LayerNorm")
    r = evaluate(task, "def layernorm(:\n", "triton", "cpu", EvalConfig())
    assert r.status is Status.SYNTAX_ERROR and r.reward == 0.0 and r.correct is False
    assert "child" not in r.latency and r.sandbox_layers == ()
    r = evaluate(task, TRITON, "triton", "cpu", EvalConfig(max_source_bytes=10))
    assert r.status is Status.SOURCE_TOO_LARGE


@pytest.mark.parametrize("text", ["\udcff", "\ud800", "import triton\n# \udfff\n"])
def test_evaluate_never_raises_on_a_string_with_lone_surrogates(registry, text):
    """A str action (an agent's decoded output) may hold lone surrogates: that is not valid UTF-8 source,
    and `evaluate` promises to never raise for anything the submission does."""
    r = evaluate(registry.get("LayerNorm"), text, "triton", "cpu", EvalConfig())
    assert r.status is Status.SOURCE_NOT_UTF8 and r.reward == 0.0


def test_gate_never_raises_on_a_string_with_lone_surrogates():
    assert check_source("\ud800", "f", "triton").status is Status.SOURCE_NOT_UTF8


def test_a_source_too_deep_for_the_parser_is_a_syntax_error_and_leaves_the_parser_working():
    deep = "def layernorm(x):\n    return " + "+".join(["x"] * 60_000) + "\n"      # 120 KB, under the size limit
    r = check_source(deep, "layernorm", "triton")
    assert r.status is Status.SYNTAX_ERROR and "nests too deeply" in r.message
    ok = check_source("import triton\n@triton.jit\ndef k(x):\n    pass\ndef layernorm(x):\n    return x\n",
                      "layernorm", "triton")
    assert ok.passed


def test_parser_system_error_falls_back_to_a_fresh_interpreter(monkeypatch):
    import ast as ast_mod
    from kernelgym_gap.engine import gate as gate_mod
    calls = []

    def broken(*a, **k):
        calls.append(1)
        raise SystemError("AST constructor recursion depth mismatch (before=132, after=30)")
    monkeypatch.setattr(gate_mod.ast, "parse", broken)
    r = check_source("import triton\n@triton.jit\ndef k(x):\n    pass\ndef layernorm(x):\n    return x\n",
                     "layernorm", "triton")
    assert r.passed and len(calls) == 2
    bad = check_source("def layernorm(:\n", "layernorm", "triton")
    assert bad.status is Status.SYNTAX_ERROR
    assert ast_mod.parse is broken


@pytest.mark.parametrize("reply, status", [("I cannot write this kernel, sorry.", Status.SYNTAX_ERROR),
                                           ("nothing", Status.ENTRY_POINT_MISSING),
                                           ("", Status.ENTRY_POINT_MISSING)])
def test_prose_instead_of_code_is_named_as_such(reply, status):
    """A model's reply with no code block reaches the gate as it is (completions.extract_code): the message
    says that it is not code, not only `line 1: invalid syntax`."""
    r = check_source(reply, "layernorm", "triton")
    assert r.status is status and "prose rather than a kernel file" in r.message, r.message


def test_code_with_a_real_error_gets_no_prose_hint():
    r = check_source("import triton\ndef layernorm(x:\n", "layernorm", "triton")
    assert r.status is Status.SYNTAX_ERROR and "prose" not in r.message
    r = check_source("import torch\n", "layernorm", "triton")
    assert r.status is Status.ENTRY_POINT_MISSING and "prose" not in r.message
