"""The words of a rejected output's failure: its first rejected elements and how many there are, in public and
held-out wording (judge/checker._judge's messages; a held-out trial's message names no index and no count,
which would tell its shape)."""
from __future__ import annotations

import torch

from kernelgym_gap.core.record import BadElement

SAMPLES = 3          # rejected elements a message shows (expected vs got)


def value(x: float) -> float | str:
    return x if x == x and abs(x) != float("inf") else str(x)


def first_bad(bad: torch.Tensor, o: torch.Tensor, r: torch.Tensor) -> tuple[BadElement, ...]:
    """The first SAMPLES rejected elements in index order."""
    idx = bad.nonzero()[:SAMPLES].tolist()
    return tuple(BadElement(index=tuple(int(i) for i in ix), expected=value(float(r[tuple(ix)])),
                            got=value(float(o[tuple(ix)]))) for ix in idx)


def fmt(v: float | str) -> str:
    return v if isinstance(v, str) else f"{v:.6g}"


def samples_text(first_bad, indices: bool = True) -> str:
    """`(0, 0): expected 0.81, got -0.4; ...` for a failure's first rejected elements; without `indices`
    (a held-out trial: an index tells the shape's extent) `expected 0.81, got -0.4; ...`."""
    return "; ".join((f"{tuple(b.index)}: " if indices else "") + f"expected {fmt(b.expected)}, got {fmt(b.got)}"
                     for b in first_bad)


def counted(n: int, total: int, what: str, public: bool) -> str:
    """`12 of 2048 elements (0.59%)`; for a held-out trial the share alone (the count tells the size)."""
    return f"{n} of {total} {what} ({n / total:.2%})" if public else f"{n / total:.2%} of the {what}"


def not_handed_over(what: str) -> str:
    """A report record naming an output kept on the device that no hand-over brought to this check (issue 35):
    the child exited before it could be held, or forged the record. Never read as a missing file (that would
    say wrong_type) nor skipped (a recheck skipped would leave the timed kernel unjudged)."""
    return (f"{what}: the child reported an output handed over on the device, and it was never handed over "
            f"(the child was not held for it)")
