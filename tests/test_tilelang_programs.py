"""dsl/tilelang._tilelang_programs: the blocks a TileLang kernel launches, which the record's `programs` and the
"too few programs" diagnosis read. TileLang 0.1.15 binds T.Kernel's blocks as a `For` over blockIdx in
`tvm.tirx`, where older versions wrote an AttrStmt in `tvm.tir`: reading only the old form returned 0 for
every kernel, so the diagnosis never fired for TileLang."""
import textwrap

import pytest

tilelang = pytest.importorskip("tilelang")


def test_the_blocks_of_a_two_axis_kernel_are_counted(tmp_path):
    # TileLang reads the kernel's source with inspect: it has to live in a file
    module = tmp_path / "two_axis.py"
    module.write_text(textwrap.dedent('''
        import tilelang
        import tilelang.language as T

        @tilelang.jit(target="c")
        def copy(N: int, M: int):
            @T.prim_func
            def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
                with T.Kernel(T.ceildiv(N, 128), M, threads=128) as (bx, by):
                    for i in T.Parallel(128):
                        B[by, bx * 128 + i] = A[by, bx * 128 + i]
            return main
    '''))
    import importlib.util
    spec = importlib.util.spec_from_file_location("two_axis", module)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    from kernelgym_gap.dsl.tilelang import _tilelang_programs
    assert _tilelang_programs(mod.copy(1024, 6).prim_func) == 8 * 6
    assert _tilelang_programs(object()) == 0            # not a prim_func: a diagnosis aid never raises
