"""The roofline floor of one timed shape: the least time the hardware allows for the task's work, and the
integrity bound under it (issue 31, finding 6).

A kernel measured faster than `floor_tolerance x floor` is `faster_than_floor` (reward 0): a measurement or
integrity failure, not a speedup. So the floor must be one no honest kernel can beat. Until issue 31 it was
min_bytes over the *copy* bandwidth with the bound at 0.9x, and the best kernels of the corpus measured U
1.00-1.02 on the H200 (torch's decode attention 1.01): a 10% overcount of min_bytes, or any access pattern
that moves bytes faster than a device-to-device copy, zeroed a perfect kernel (CrossEntropy v0 did).

The memory floor, in seconds, is the largest of the forms an honest kernel cannot beat:

    min_bytes / best        best = the fastest rate measured for any access mix (copy, read-only, write-only)
    read / read_bw          read  = the bytes of min_bytes that are reads  (task.bytes_split)
    written / write_bw      written = the bytes that are writes

Why not read / read_bw + written / write_bw: HBM reads and writes share one set of channels, but nothing
says a kernel that mixes them (a copy, an elementwise op) runs at the pure rates one after the other; the
sum is tighter where that holds and an overstated floor where it does not, which is what zeroes an honest
kernel. Each form above is a true lower bound: no access mix moves bytes faster than the fastest measured
one (within the measurement's spread: hence the tolerance), no kernel reads faster than the best pure read,
nor writes faster than the best pure write; the largest of true lower bounds is one too. Measured on an H100
(2026-12-05, docs/measurement.md): copy 2.97 TB/s, read-only 2.98, write-only 3.28, so a mostly-writing
kernel could beat the old copy-only floor by 10%. The H200's read/write rates are owed a run.

Bandwidths not measured yet (a calibration cached before read/write were measured, or the datasheet
fallback: only a copy rate) leave best = the copy rate and no split: the floor of issue 31's corpus rows.
The integrity bound (EvalConfig.floor_tolerance, 0.8) is set so that the best measured U of the corpus under
that copy-only floor, 1.03 (AddReLU), sits 21% under it (U above 1 / 0.8 = 1.25 is faster_than_floor):
`scripts/floor_margins.py` prints the margin per task and tests/test_measure.py holds every task 5% under
it. A measured read or write rate above the copy rate only lowers the floor (more headroom).

The compute floor is flops over the dtype's measured dense matmul peak (fp32 may use tf32), as before.
"""
from __future__ import annotations

from kernelgym_gap.core.task import TaskSpec


def best_bytes_per_s(cal) -> float:
    """The fastest measured rate of any access mix (copy, read-only, write-only)."""
    rates = [cal.copy_bytes_per_s, getattr(cal, "read_bytes_per_s", None), getattr(cal, "write_bytes_per_s", None)]
    return max(r for r in rates if r)


def memory_floor_s(task: TaskSpec, shape, dtype: str, cal) -> float:
    """The least time the task's minimum bytes can move in (the module docstring's forms)."""
    total = task.min_bytes(shape, dtype)
    t = total / best_bytes_per_s(cal)
    read_bw, write_bw = getattr(cal, "read_bytes_per_s", None), getattr(cal, "write_bytes_per_s", None)
    split = task.bytes_split(shape, dtype)
    if split is not None:
        read, written = split
        if read_bw:
            t = max(t, read / read_bw)
        if write_bw:
            t = max(t, written / write_bw)
    return t


def floor_ms(task: TaskSpec, shape, dtype: str, cal) -> tuple[float, str]:
    """(the floor in ms, "memory" or "compute": which bound it is)."""
    t_mem = memory_floor_s(task, shape, dtype, cal)
    t_math = task.flops(shape) / peak_flops(cal, dtype)
    return 1e3 * max(t_mem, t_math), ("memory" if t_mem >= t_math else "compute")


def peak_flops(cal, dtype: str) -> float:
    """The dense matmul rate a kernel of this dtype could use. int8 and float8 (issue 34) are not calibrated:
    Hopper's tensor cores run both at twice the bf16/fp16 rate (H100/H200 datasheet: 1979 against 989
    TFLOPS dense), so twice the measured bf16 peak is taken. It is a bound an honest kernel stays under (the
    measured bf16 rate is itself below the datasheet's); it decides the floor of the scaled GEMMs only, every
    other low-bit task being memory-bound by orders of magnitude."""
    rates = cal.matmul_flops_per_s
    if dtype in rates or dtype in ("float32", "float16", "bfloat16"):
        return cal.peak_for(dtype)
    if dtype in ("int8", "float8_e4m3fn", "float8_e5m2"):
        return 2.0 * max(rates.get("bfloat16", 0.0), rates.get("float16", 0.0))
    raise KeyError(f"no matmul peak for dtype {dtype!r}")


def u_bound(floor_tolerance: float) -> float:
    """The largest U a kernel may measure before it is faster_than_floor: 1 / floor_tolerance."""
    return 1.0 / floor_tolerance
