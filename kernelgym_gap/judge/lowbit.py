"""Comparing int8 and float8 outputs in their own units: representable steps (issue 34).

An atol/rtol check does not fit a low-bit format. One float8 e4m3 step is 6-12% of the value (3 mantissa
bits), e5m2's 12-25%, and int8's is one unit of a scale the kernel chose; a correct kernel rounds once, and
where the exact value sits near a rounding midpoint, float32 arithmetic in another order (x * (448 / amax)
against x / (amax / 448)), or another rounding mode at the tie (the GPU's cvt.rn rounds ties to even; a
kernel that rounds by hand may round them up), lands one step over. (Triton 3.7's interpreter casts float32
to float8 wrongly beyond ties, tests/test_lowbit_dtypes.py: the cpu-backend solutions round in float32 first.) So the distance is counted in steps of the output format:

- int8: the reference rounded to the nearest integer (ties to even) and clamped to [-128, 127]; the distance
  is |out - ref| in integers.
- float8: the reference rounded to the format (its finite range first: e4m3fn has no inf, a cast out of
  range is NaN or saturates by build), then both mapped to their ordinal among the format's values. float8
  bits are sign-magnitude with the exponent above the mantissa, so the magnitude bits, read as an unsigned
  integer, grow with the value: ordinal = +magnitude for a positive sign, -magnitude for a negative one
  (+0 and -0 both 0). The distance of two values is the number of representable values between them plus one.

The task's Tolerance.steps says how many steps a trial may be off (0: exact, 1: one rounding decision).
"""
from __future__ import annotations

import torch

INT_FORMATS = {torch.int8: (-128, 127)}
FLOAT8_FORMATS = tuple(getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2") if hasattr(torch, n))


def is_lowbit(dtype: torch.dtype) -> bool:
    return dtype in INT_FORMATS or dtype in FLOAT8_FORMATS


def to_format(ref: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The reference rounded to the output format (unchanged where it already is in it)."""
    if ref.dtype == dtype:
        return ref
    if dtype in INT_FORMATS:
        lo, hi = INT_FORMATS[dtype]
        return ref.double().round().clamp(lo, hi).to(dtype)
    fmax = torch.finfo(dtype).max
    return ref.double().clamp(-fmax, fmax).to(dtype)


def ordinal(t: torch.Tensor) -> torch.Tensor:
    """Each value's position among the format's values, as int64 (consecutive values differ by 1)."""
    if t.dtype in INT_FORMATS:
        return t.to(torch.int64)
    bits = t.view(torch.uint8).to(torch.int64)
    magnitude = bits & 0x7F
    return torch.where(bits >= 0x80, -magnitude, magnitude)


def steps_apart(out: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """|ordinal(out) - ordinal(ref rounded to out's format)| per element, as float64 (the checker's units)."""
    if not is_lowbit(out.dtype):
        raise TypeError(f"steps_apart compares int8 or float8 outputs, not {out.dtype}")
    return (ordinal(out) - ordinal(to_format(ref, out.dtype).to(out.device))).abs().double()
