"""int8 and float8 in the task contract (issue 34): sampling, byte counts, the floor's compute peak, the
checker's comparison in representable steps, and what the Triton interpreter does with float8."""
import dataclasses
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from kernelgym_gap.core import inputs as inputs_mod
from kernelgym_gap.core.task import DTYPES, LOWBIT_DTYPES, Tolerance, itemsize
from kernelgym_gap.judge import lowbit
from kernelgym_gap.judge.calibrate import DATASHEET, Calibration
from kernelgym_gap.judge.floor import peak_flops

FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)


def test_lowbit_dtypes_are_in_the_contract_with_their_bytes():
    assert set(LOWBIT_DTYPES) <= set(DTYPES)
    assert [itemsize(d) for d in LOWBIT_DTYPES] == [1, 1, 1]
    assert itemsize("int32") == 4 and itemsize("int64") == 8


@pytest.mark.parametrize("dtype", LOWBIT_DTYPES)
@pytest.mark.parametrize("dist", inputs_mod.DISTRIBUTIONS)
def test_sample_gives_finite_values_of_the_format(dtype, dist):
    x = inputs_mod.sample((16, 40), dtype, inputs_mod.generator(3, "cpu"), dist, "cpu")
    assert x.dtype == getattr(torch, dtype)
    assert bool(torch.isfinite(x.double()).all())
    y = inputs_mod.sample((16, 40), dtype, inputs_mod.generator(3, "cpu"), dist, "cpu")
    assert torch.equal(x.view(torch.uint8), y.view(torch.uint8))     # a pure function of the seed
    if dtype == "int8":
        # the whole range is used: the largest magnitude is 127, never -128 (symmetric quantization)
        assert int(x.abs().max()) == 127 and int(x.min()) >= -127


def test_large_draws_saturate_instead_of_turning_nan():
    x = inputs_mod.sample((64, 64), "float8_e4m3fn", inputs_mod.generator(1, "cpu"), "large", "cpu", scale=100.0)
    assert float(x.double().abs().max()) == 448.0 and bool(torch.isfinite(x.double()).all())


@pytest.mark.parametrize("fmt", FP8)
def test_float8_ordinal_counts_every_representable_value(fmt):
    bits = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(fmt)
    vals = bits.double()
    finite = torch.isfinite(vals)
    order = torch.argsort(vals[finite], stable=True)
    ords = lowbit.ordinal(bits[finite])[order]
    # sorted by value, ordinals never decrease and advance by exactly one between distinct values
    # (+0 and -0 share ordinal 0)
    steps = ords[1:] - ords[:-1]
    assert bool((steps >= 0).all()) and bool((steps <= 1).all())
    assert int(lowbit.ordinal(torch.tensor([0.0, -0.0]).to(fmt)).abs().sum()) == 0


def test_steps_apart_in_the_formats_own_units():
    # e4m3: 1.0, 1.125 and 1.25 are consecutive; -1.0 and 1.0 are 2 x 56 steps apart (0x38 = 56)
    out = torch.tensor([1.125, 1.25, -1.0, 448.0]).to(torch.float8_e4m3fn)
    ref = torch.tensor([1.0, 1.0, 1.0, 1e4], dtype=torch.float64)       # 1e4 saturates to 448
    assert lowbit.steps_apart(out, ref).tolist() == [1.0, 2.0, 112.0, 0.0]
    q = torch.tensor([3, -127, 127, 0], dtype=torch.int8)
    r = torch.tensor([2.5, -126.4, 300.0, -0.49], dtype=torch.float64)   # 2.5 rounds to 2 (ties to even)
    assert lowbit.steps_apart(q, r).tolist() == [1.0, 1.0, 0.0, 0.0]
    with pytest.raises(TypeError):
        lowbit.steps_apart(torch.zeros(2), torch.zeros(2))


def test_a_lowbit_output_needs_a_step_tolerance(registry):
    task = registry.get("Int8TokenQuant")
    assert task.validate() == []
    loose = dataclasses.replace(task, tolerances={d: Tolerance(0.0, 0.0) for d in task.tolerances})
    assert any("needs steps" in p for p in loose.validate())
    assert task.contract()["tolerances"]["float32"]["steps"] == 1


def test_the_floor_takes_twice_the_bf16_peak_for_int8_and_float8():
    d = DATASHEET["NVIDIA H200"]
    cal = Calibration("h200", "NVIDIA H200", d["copy_bytes_per_s"], d["matmul_flops_per_s"], "datasheet")
    for dtype in LOWBIT_DTYPES:
        assert peak_flops(cal, dtype) == 2 * d["matmul_flops_per_s"]["bfloat16"]
    assert peak_flops(cal, "bfloat16") == cal.peak_for("bfloat16")
    with pytest.raises(KeyError):
        peak_flops(cal, "float64")


def _interpreted(code: str) -> str:
    env = dict(os.environ, TRITON_INTERPRET="1")
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def test_what_the_interpreter_does_with_float8_and_bfloat16():
    """What the cpu backend can do (Triton 3.7's interpreter), measured, so that a Triton upgrade that changes
    it shows here: float8 loads, stores and tl.dot run, and a float32 -> e4m3 cast of an exactly representable
    value is exact; but the cast rounds a tie away from zero (the GPU's cvt.rn and torch round to even), drops
    the carry when a round-up crosses a power of two (127.9 -> 64, 1.99 -> 1) and mis-rounds subnormals; and a
    float32 -> bfloat16 cast truncates. The float8 reference solutions therefore round to e4m3 in float32
    first, and bfloat16-output tasks allow one bfloat16 ulp."""
    out = _interpreted("""
        import torch, triton, triton.language as tl
        @triton.jit
        def k(x_ptr, y_ptr, z_ptr, a_ptr, c_ptr, N: tl.constexpr):
            o = tl.arange(0, N)
            x = tl.load(x_ptr + o)
            tl.store(y_ptr + o, x.to(tl.float8e4nv))
            tl.store(z_ptr + o, x.to(tl.bfloat16))
            a = tl.load(a_ptr + o[:, None] * N + o[None, :])
            tl.store(c_ptr + o[:, None] * N + o[None, :], tl.dot(a, a))
        x = torch.tensor([1.0625, 17.0, 127.9, 1.99, 0.001, 1.125, 0.59624] + [0.0] * 9)
        y = torch.empty(16, dtype=torch.float8_e4m3fn)
        z = torch.empty(16, dtype=torch.bfloat16)
        a = (torch.arange(256, dtype=torch.float32).reshape(16, 16) % 7 - 3).to(torch.float8_e4m3fn)
        c = torch.empty(16, 16)
        k[(1,)](x, y, z, a, c, 16)
        print(y.float()[:6].tolist(), x.to(torch.float8_e4m3fn).float()[:6].tolist(),
              z[6].item(), x[6:7].to(torch.bfloat16).item(), bool(torch.equal(c, a.float() @ a.float())))
    """)
    assert out == ("[1.125, 18.0, 64.0, 1.0, 0.0, 1.125] [1.0, 16.0, 128.0, 2.0, 0.001953125, 1.125] "
                   "0.59375 0.59765625 True")


FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "lowbit")


@pytest.mark.parametrize("task_name,fixture,words", [
    ("Fp8TokenQuant", "fp8_token_quant_per_tensor_scale.py", "representable float8_e4m3fn step"),
    ("TopK", "top_k_repeats_the_max.py", "appears twice"),
])
def test_a_wrong_lowbit_or_index_kernel_is_a_mismatch(task_name, fixture, words):
    """Through the real environment on the cpu backend: a per-tensor scale where the task asks for a per-row
    one is rejected in e4m3 steps, and top-k indices that repeat the argmax are rejected by the view's
    validity check (their gathered values would match on tied rows)."""
    from kernelgym_gap.api.env import KernelEnv
    from kernelgym_gap.core.config import EvalConfig
    env = KernelEnv(task_id=task_name, dsl="triton", backend="cpu", max_steps=1,
                    config=EvalConfig(trial_seed=20261202))
    env.reset(seed=0)
    with open(os.path.join(FIXTURES, fixture)) as f:
        _, reward, _, _, info = env.step(f.read())
    assert info["status"] == "mismatch" and reward == 0.0, info["message"]
    assert words in info["message"]


@pytest.mark.gpu
def test_on_the_gpu_the_float8_cast_rounds_ties_to_even_and_the_library_paths_agree():
    """On the GPU (run by the lead on the H200): Triton's float32 -> e4m3 cast rounds to nearest even, as the
    one-step tolerance assumes; and ScaledGemm's library paths (torch._scaled_mm for float8, torch._int_mm for
    int8, both with B given as B^T of a row-major [N, K]) agree with its float64 math within the task's
    tolerance plus error bound, on a cuda-workload-like shape with N and K multiples of 16."""
    import triton
    import triton.language as tl
    from kernelgym_gap.core.registry import get_task
    from kernelgym_gap.judge.checker import _float64

    @triton.jit
    def cast(x_ptr, y_ptr, N: tl.constexpr):
        o = tl.arange(0, N)
        tl.store(y_ptr + o, tl.load(x_ptr + o).to(tl.float8e4nv))

    x = torch.tensor([1.0625, 17.0, 400.0, 127.9, 1.99, 0.001] + [0.0] * 10, device="cuda")
    y = torch.empty(16, dtype=torch.float8_e4m3fn, device="cuda")
    cast[(1,)](x, y, 16)
    assert torch.equal(y.float(), x.to(torch.float8_e4m3fn).float())
    task = get_task("ScaledGemm")
    for dtype in ("float8_e4m3fn", "int8"):
        ins = task.make_inputs((256, 512, 1024), dtype, inputs_mod.generator(5, "cuda"), "normal", "cuda")
        lib = task.reference(*ins).double()
        exact = task.reference(*_float64(ins))
        tol = task.tolerances[dtype]
        allowed = tol.atol + tol.rtol * exact.abs() + task.error_bound(_float64(ins), dtype)
        assert bool(((lib - exact).abs() <= allowed).all()), dtype
