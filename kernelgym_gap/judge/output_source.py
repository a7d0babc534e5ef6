"""Where the output a check judges comes from (judge/checker._judge reads it through `output_for`): the file
the child wrote, the copy of it read before the GPU's lane (judge/prefetch.py), or the hand-over's view of the
arena or its verdict (judge/handover_check.py). And CheckFailure, what every step of the check raises on the
first problem: the checker turns it into the CheckResult."""
from __future__ import annotations

from pathlib import Path

import torch

from kernelgym_gap.core import inputs as inputs_mod
from kernelgym_gap.core import tensor_file
from kernelgym_gap.core.record import Trial
from kernelgym_gap.core.registry import users_tasks_dir
from kernelgym_gap.core.status import Status
from kernelgym_gap.core.task import TaskSpec
from kernelgym_gap.judge.handover_check import Handed
from kernelgym_gap.judge.ipc_records import Refused
from kernelgym_gap.judge.output_rules import oversize_message
from kernelgym_gap.judge.prefetch import Fetched


class CheckFailure(Exception):
    def __init__(self, status: Status, message: str, **detail):
        super().__init__(message)
        self.status, self.message, self.detail = status, message, detail


def load_output(path: Path, max_bytes: int) -> torch.Tensor:
    """The output the child wrote (core/tensor_file.py); a file the child wrote is hostile input."""
    if not path.is_file():
        raise CheckFailure(Status.PROTOCOL_ERROR, f"the child reported an output file it did not write ({path.name})")
    size = path.stat().st_size
    if size > max_bytes + tensor_file.MAX_HEADER + 16:
        raise CheckFailure(Status.WRONG_SHAPE, oversize_message(size))
    try:
        return tensor_file.read_tensor(path, max_bytes)
    except (tensor_file.TensorFileError, OSError) as e:
        raise CheckFailure(Status.PROTOCOL_ERROR, f"output file {path.name} unreadable: {e}") from None


def prefetched_or_load(path: Path, max_bytes: int, fetched: Fetched | None) -> torch.Tensor:
    """The output as load_output gives it, from the file read before the lane (judge/prefetch.py) when
    there is one. The prefetch read it with its own bound; the rules that depend on this output's expected
    size are applied here: a file too large gets load_output's own verdict (it stats and refuses it the same
    way), and a tensor over `max_bytes` is read again by load_output, which raises exactly as without the
    prefetch. Every other rule of read_tensor does not depend on the bound, and the prefetch passed them."""
    if fetched is None or fetched.size > max_bytes + tensor_file.MAX_HEADER + 16 \
            or fetched.tensor.numel() * fetched.tensor.element_size() > max_bytes:
        return load_output(path, max_bytes)
    return fetched.tensor


def output_for(task: TaskSpec, trial: Trial, device: str, got: Handed | None, fetched: Fetched | None
               ) -> Fetched | None:
    """What `_judge` reads for an output handed over on the device (judge/handover_check.py): its view of the
    arena, as one more output read before the check (its size is its view's: the plan refused any record past
    the bound), or the verdict its record got (a Refused), raised here at its trial's turn with the words the
    file path gives. Without a hand-over, the file as read before the lane, if it was."""
    if isinstance(got, Refused):
        where = {} if got.status is Status.PROTOCOL_ERROR else dict(
            trial=trial, reproduce=inputs_mod.reproduce_call(task.id, trial, device, users_tasks_dir(task)))
        raise CheckFailure(got.status, got.message, **where)
    if got is not None:
        return Fetched(size=got.numel() * got.element_size(), tensor=got)
    return fetched
