"""The rules on an output's form that the trusted checker applies before it compares any value: the size bound
on what it reads, the dtype and the shape, with their messages, and how a message names a trial.

One place for them because two paths judge the same output: the file a child wrote (judge/checker._judge) and
the output it handed over on the device (judge/ipc_records.py, which decides them from the child's records
before any handle is opened). A kernel must get the same verdict and the same words either way (docs/
measurement.md, "The outputs handed over on the device", point 3), in public and held-out wording alike.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from kernelgym_gap.core.record import Trial
from kernelgym_gap.core.task import itemsize, numel

READ_SLACK_BYTES = 1 << 16


def max_output_bytes(ref_shape: Sequence[int]) -> int:
    """The most data bytes the checker reads for an output whose reference has `ref_shape`: twice the
    reference's elements at float64, plus 64 KiB. Past it the checker refuses the output unread (a wrong
    output, however large the child made it, costs the checker no more than this)."""
    return 2 * numel(ref_shape) * itemsize("float64") + READ_SLACK_BYTES


def oversize_message(nbytes: int, what: str = "output file") -> str:
    """The words for an output far past `max_output_bytes` (status WRONG_SHAPE)."""
    return f"the {what} is {nbytes} bytes, far larger than the expected output"


def trial_label(trial: Trial) -> str:
    """How a message names a trial: a public one by its shape, dtype, input distribution and seed; a
    held-out one in kind only (held-out shape, dtype, distribution): its shape and seed are the record's
    (failure.trial, failure.reproduce), never the agent's feedback (engine/feedback.py)."""
    if trial.split != "public":
        return f"held-out shape, {trial.dtype}, {trial.distribution} inputs"
    return (f"{trial.split} shape {list(trial.shape)}, {trial.dtype}, {trial.distribution} inputs, "
            f"seed {trial.seed}")


def trial_what(trial: Trial) -> str:
    """A correctness trial's output, as a message names it."""
    return f"trial {trial.index} ({trial_label(trial)})"


def recheck_what(trial: Trial) -> str:
    """The output of a timed shape's call after its timing, as a message names it."""
    return f"the output of a call after timing ({trial_label(trial)})"


def dtype_problem(what: str, got: torch.dtype, expected: torch.dtype, trial_dtype: str) -> str | None:
    """The WRONG_DTYPE message for an output of dtype `got` where the task expects `expected` for inputs of
    `trial_dtype`; None when they are the same."""
    if got == expected:
        return None
    return f"{what}: the output is {got}, expected {expected} (the task's output dtype for {trial_dtype} inputs)"


def shape_problem(what: str, got: Sequence[int], expected: Sequence[int], public: bool) -> str | None:
    """The WRONG_SHAPE message for an output of shape `got` where the reference has `expected`; None when
    they are the same. A held-out trial's message names the number of dimensions only: the sizes would tell
    the held-out shape."""
    got, expected = tuple(int(d) for d in got), tuple(int(d) for d in expected)
    if got == expected:
        return None
    hint = " (the same number of elements, another shape)" if numel(got) == numel(expected) else ""
    shapes = (f"has shape {list(got)}, expected {list(expected)}" if public else
              f"does not have the expected shape ({len(got)} dimensions, expected {len(expected)})")
    return f"{what}: the output {shapes}{hint}"
