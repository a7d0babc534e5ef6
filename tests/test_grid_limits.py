"""No shipped solution launches a grid whose 2nd or 3rd dimension exceeds 65535 at any cuda workload shape.

gridDim.y and gridDim.z are at most 65535 on every NVIDIA GPU (x up to 2^31 - 1); the cpu backend (the Triton
interpreter, TileLang's C target) has no such limit, so a grid (8, 65536) passes every cpu test and then fails
to launch on the GPU (TileLang MoeTokenUnpermute on the H100, 2026-12-06: CUDA_ERROR_INVALID_VALUE).

How it checks, without a GPU: each solution's entry point is called on FAKE cuda tensors of every cuda
workload shape (torch's FakeTensorMode: shapes, dtypes and devices, no storage), with the launches
intercepted:
- Triton: JITFunction.run records the grid (a tuple, or the grid callable evaluated on the launch's bound
  arguments, as Triton does) and launches nothing; an autotuned kernel is recorded under EVERY config
  (the GPU may pick any of them).
- TileLang: tilelang.compile returns a stand-in that, when called, binds the prim_func's symbolic sizes to
  the arguments' shapes and evaluates the blockIdx.y / blockIdx.z extents of the TIR.
What it cannot check, reported per solution by test_grid_rule_reaches_most_solutions: a wrapper that reads
data on the host (`.item()`, `.tolist()`: fake tensors hold none) before a launch stops there, so only the
launches before that point are checked; a TileLang kernel called with Python ints (or other non-tensor
arguments) for symbolic sizes is not bound, and an extent it cannot evaluate is reported, not guessed.
"""
import importlib.util
import inspect
import warnings

import pytest
import torch

from kernelgym_gap.core.registry import default_registry

GRID_YZ_MAX = 65535


def _fake_cuda(mode, shape, dtype):
    with mode:
        return torch.empty(tuple(int(s) for s in shape), dtype=dtype, device="cuda")


# Where make_inputs cannot run on fake tensors (it draws the routing or the page table on the host): the
# inputs' shapes and dtypes as the task's signature states them, built here. (shape, dtype) tuples are
# tensors; anything else is passed as it is.
def _builders():
    i32, i64, f32 = torch.int32, torch.int64, torch.float32

    def paged(s, dt):
        from kernelgym_gap.core.registry import get_task
        import sys
        mod = sys.modules[get_task("PagedDecodeAttention").make_inputs.__module__]
        b, h, lmax, d, page = s
        n_pages = mod.pages_needed(b, lmax, page) + b
        n_pages += max(1, n_pages // 8)
        return ((b, h, d), dt), ((n_pages, page, h, d), dt), ((n_pages, page, h, d), dt), \
            ((b, -(-lmax // page)), i32), ((b,), i32)

    return {
        "MoeTopkRouting": lambda s, dt: (((s[0], s[1]), dt),),
        "MoeTokenPermute": lambda s, dt: (((s[0], s[1]), dt), ((s[0], s[3]), i32), s[2]),
        "MoeTokenUnpermute": lambda s, dt: (((s[0] * s[3], s[1]), dt), ((s[0], s[3]), i32), ((s[0], s[3]), f32)),
        "MoeAlignBlockSize": lambda s, dt: (((s[0], s[2]), i32), s[1], s[3]),
        "FusedMoe": lambda s, dt: (((s[0], s[1]), dt), ((s[0], s[4]), i32), ((s[0], s[4]), f32),
                                   ((s[3], 2 * s[2], s[1]), dt), ((s[3], s[1], s[2]), dt)),
        "EmbeddingGather": lambda s, dt: (((s[0],), i64), ((s[1], s[2]), dt)),
        "CrossEntropyBackward": lambda s, dt: (((s[0], s[1]), dt), ((s[0],), i64), ((s[0],), f32)),
        "CrossEntropy": lambda s, dt: (((s[0], s[1]), dt), ((s[0],), i64)),
        "RotaryEmbedding": lambda s, dt: (((s[0], s[1], s[2]), dt), ((s[0], s[2] // 2), f32),
                                          ((s[0], s[2] // 2), f32)),
        "GroupedGemm": lambda s, dt: (((s[1], s[3]), dt), ((s[0], s[2], s[3]), dt), ((s[0],), i32)),
        "PagedDecodeAttention": paged,
        "LinearBackward": lambda s, dt: (((s[0], s[2]), dt), ((s[1], s[2]), dt), ((s[0], s[1]), dt)),   # (M, N, K)
    }


BUILDERS = _builders()


def fake_inputs(task, shape, dtype, mode):
    dt = getattr(torch, dtype) if isinstance(dtype, str) and hasattr(torch, dtype) else torch.float32
    if task.name in BUILDERS:
        return tuple(_fake_cuda(mode, *a) if isinstance(a, tuple) and len(a) == 2 and isinstance(a[1], torch.dtype)
                     else a for a in BUILDERS[task.name](tuple(shape), dt))
    with mode:
        return tuple(task.make_inputs(tuple(shape), dtype, torch.Generator(), task.timed_distribution, "cuda"))


class Recorder:
    """The grids of one call: (kernel name, grid tuple); and what could not be evaluated."""

    def __init__(self):
        self.grids, self.unknown = [], []


def _patch_triton(monkeypatch, rec):
    import triton.runtime.jit as jit
    from triton.runtime import autotuner

    def run(self, *args, grid, warmup=False, **kwargs):
        meta = {}
        names = list(inspect.signature(self.fn).parameters)
        meta.update(zip(names, args))
        meta.update(kwargs)
        g = grid(meta) if callable(grid) else grid
        g = tuple(int(x) for x in (g if isinstance(g, (tuple, list)) else (g,)))
        rec.grids.append((self.fn.__name__, g))
        return None

    def autotuned_run(self, *args, **kwargs):
        for config in self.configs:         # the GPU may pick any of them
            self.fn.run(*args, **kwargs, **config.all_kwargs())
        return None

    monkeypatch.setattr(jit.JITFunction, "run", run)
    monkeypatch.setattr(autotuner.Autotuner, "run", autotuned_run)


def _tir():
    try:
        from tvm import tir
    except ImportError:                      # tilelang 0.1.15's TVM names it tirx
        from tvm import tirx as tir
    return tir


class _TileLangStandIn:
    def __init__(self, func, rec):
        self.func, self.rec = func, rec

    def __call__(self, *args, **kwargs):
        tir = _tir()
        from tvm import arith
        binds = {}
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        params = [p for p in self.func.params if p in self.func.buffer_map]
        for p, t in zip(params, tensors):
            for dim, size in zip(self.func.buffer_map[p].shape, t.shape):
                if isinstance(dim, tir.Var):
                    binds[dim] = tir.IntImm(dim.dtype, int(size))
        extents = {}

        def visit(node):
            if isinstance(node, tir.For) and node.thread_binding is not None:
                tag = node.thread_binding.thread_tag
                if tag.startswith("blockIdx"):
                    extents[tag] = node.extent

        tir.stmt_functor.post_order_visit(self.func.body, visit)
        ana = arith.Analyzer()
        grid = []
        for tag in ("blockIdx.x", "blockIdx.y", "blockIdx.z"):
            if tag not in extents:
                grid.append(1)
                continue
            v = ana.simplify(tir.stmt_functor.substitute(extents[tag], binds))
            if not isinstance(v, tir.IntImm):
                self.rec.unknown.append(f"{self.func.attrs['global_symbol'] if self.func.attrs else '?'} {tag}={v}")
                grid.append(0)
            else:
                grid.append(int(v))
        name = str(self.func.attrs["global_symbol"]) if self.func.attrs and "global_symbol" in self.func.attrs \
            else "prim_func"
        self.rec.grids.append((name, tuple(grid)))
        return None


def _patch_tilelang(monkeypatch, rec):
    import tilelang
    monkeypatch.setattr(tilelang, "compile", lambda func, *a, **k: _TileLangStandIn(func, rec))
    try:
        import tilelang.jit as tj
        monkeypatch.setattr(tj, "compile", lambda func, *a, **k: _TileLangStandIn(func, rec))
    except (ImportError, AttributeError):
        pass


def _solutions():
    for task in default_registry():
        if task.origin or "cuda" not in task.workloads:
            continue
        for sol in task.solutions:
            yield task, sol


def _load(task, sol, name):
    spec = importlib.util.spec_from_file_location(name, task.directory / "solutions" / sol.file)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return getattr(mod, task.entry_point)


def grids_of(task, sol, monkeypatch):
    """Every (shape, dtype, kernel, grid) the solution launches at the task's cuda shapes, and what stopped
    a call early (a host read of fake data) or could not be evaluated."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    rec = Recorder()
    if sol.dsl == "triton":
        _patch_triton(monkeypatch, rec)
    else:
        _patch_tilelang(monkeypatch, rec)
    fn = _load(task, sol, f"_grid_{task.name}_{sol.file[:-3]}")
    w = task.workloads["cuda"]
    out, stopped = [], []
    for shape in (*w.public, *w.heldout):
        for dtype in w.dtypes:
            mode = FakeTensorMode(allow_non_fake_inputs=True)
            ins = fake_inputs(task, shape, dtype, mode)
            start = len(rec.grids)
            try:
                with mode, warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    fn(*ins)
            except Exception as exc:        # noqa: BLE001 - a host read of fake data ends the call: reported
                stopped.append(f"{tuple(shape)} {dtype}: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
                               if str(exc) else f"{tuple(shape)} {dtype}: {type(exc).__name__}")
            out += [(tuple(shape), dtype, k, g) for k, g in rec.grids[start:]]
    return out, stopped, list(rec.unknown)


CASES = [pytest.param(t, s, id=f"{t.name}-{s.file[:-3]}") for t, s in _solutions()]


@pytest.mark.parametrize("task,sol", CASES)
def test_no_grid_dimension_past_the_gpu_limit(task, sol, monkeypatch):
    if sol.dsl == "tilelang":
        pytest.importorskip("tilelang")
    launches, stopped, unknown = grids_of(task, sol, monkeypatch)
    over = [f"{shape} {dtype} {k}: grid {g}" for shape, dtype, k, g in launches
            if len(g) > 1 and max(g[1:]) > GRID_YZ_MAX]
    assert not over, f"{task.name} {sol.file}: gridDim.y/z above {GRID_YZ_MAX}:\n" + "\n".join(over)
    xs = [f"{shape} {dtype} {k}: grid {g}" for shape, dtype, k, g in launches if g and g[0] > 2 ** 31 - 1]
    assert not xs, xs
    assert not unknown, unknown


def test_the_unpermute_grid_that_failed_on_the_h100_is_caught(monkeypatch, tmp_path):
    """The rule catches the launch that failed: v0's TileLang unpermute put the tokens on gridDim.y."""
    pytest.importorskip("tilelang")
    from kernelgym_gap.core.registry import get_task
    import dataclasses
    task = get_task("MoeTokenUnpermute")
    sol = next(s for s in task.solutions if s.dsl == "tilelang")
    src = (task.directory / "solutions" / sol.file).read_text()
    fixed = "T.Kernel(t, T.ceildiv(h, BLOCK_H), threads=BLOCK_H) as (tok, bx)"
    assert fixed in src
    (tmp_path / "solutions").mkdir()
    (tmp_path / "solutions" / sol.file).write_text(
        src.replace(fixed, "T.Kernel(T.ceildiv(h, BLOCK_H), t, threads=BLOCK_H) as (bx, tok)"))
    old = dataclasses.replace(task, directory=tmp_path)
    launches, _, _ = grids_of(old, sol, monkeypatch)
    assert any(shape == (65536, 2048, 64, 6) and g == (8, 65536, 1) for shape, _, _, g in launches), launches


def test_grid_rule_reaches_most_solutions(monkeypatch, capsys):
    """What the rule could not see: solutions whose calls stopped before a launch (a host read of fake data),
    printed for the report; most solutions must be fully checked, or the rule checks little."""
    pytest.importorskip("tilelang")
    none, partial, n = [], [], 0
    for task, sol in _solutions():
        n += 1
        with monkeypatch.context() as mp:
            launches, stopped, _ = grids_of(task, sol, mp)
        if not launches:
            none.append(f"{task.name} {sol.file}: {stopped[:1]}")
        elif stopped:
            partial.append(f"{task.name} {sol.file}: {stopped[:1]}")
    with capsys.disabled():
        print(f"\n{n} solutions; no launch evaluated: {len(none)}; stopped early on some shapes: {len(partial)}")
        for line in none + partial:
            print("  ", line)
    assert len(none) <= n // 10, none
