"""The warm checker's receive arena for the outputs handed over on the device (issue 35; docs/measurement.md,
"The outputs handed over on the device", point 4): one contiguous uint8 allocation of the checker's own, into
which the trusted opener copies each planned output (judge/opener.py), and which the checker then views with
the task's dtype and the reference's shape (judge/ipc_records.views_from_arena).

The opener opens the arena through a legacy CUDA IPC handle. torch's caching allocator places the tensor
inside a segment; the handle names the segment, so `export` gives the tensor's offset in it as well
(`_share_cuda_`'s storage offset, which the IPC probe found equal to the raw cudaIpcGetMemHandle route).

The CUDA parts (torch.cuda, judge/cuda_ipc's handle encoding) are touched only by `allocate` on a cuda device
and by `export`: importing this module needs neither a GPU nor a CUDA runtime. Which arena the checker uses is
chosen by the checker's Python caller (judge/checker.run_handover's `arena_factory`), never by a check spec or
the environment, which a child could reach.
"""
from __future__ import annotations

import dataclasses
import sys
from typing import Protocol

import torch

# torch's _share_cuda_ handle for a cudaMalloc segment: a version byte, b"c", then the 64 bytes of the
# cudaIpcMemHandle_t (seen as 66 bytes with torch 2.11 on the H200; b"e" would be an expandable segment,
# which has no legacy handle)
_TORCH_SEGMENT_KIND = b"c"


class ArenaError(RuntimeError):
    """The arena could not be allocated or exported: the hand-over falls back to files (not the child's
    doing, never a verdict on a submission)."""


class ArenaLike(Protocol):
    """What the checker needs of an arena: its 1-D contiguous uint8 tensor, its export record for the
    opener, and its release."""
    tensor: torch.Tensor | None

    def export(self) -> dict: ...

    def free(self) -> None: ...


@dataclasses.dataclass
class Arena:
    """A contiguous uint8 device tensor of `nbytes` (tensor None once freed). `ref_counter`: torch's IPC
    reference counter of the export, (its shared-memory handle, its offset), released in `free`."""
    tensor: torch.Tensor | None
    ref_counter: tuple | None = None

    @classmethod
    def allocate(cls, nbytes: int, device: str) -> "Arena":
        if type(nbytes) is not int or nbytes <= 0:
            raise ValueError(f"an arena holds a positive integer number of bytes, got {nbytes!r}")
        if not str(device).startswith("cuda"):
            raise ArenaError(f"an arena is device memory another process opens by CUDA IPC: device {device!r} "
                             f"has none")
        try:
            tensor = torch.empty(nbytes, dtype=torch.uint8, device=device)
        except (RuntimeError, torch.cuda.OutOfMemoryError) as e:    # OutOfMemoryError is a RuntimeError too
            raise ArenaError(f"the arena of {nbytes} bytes could not be allocated: {e}") from None
        return cls(tensor=tensor)

    def export(self) -> dict:
        """{"handle": 128 lower-case hex digits, "offset": the tensor's first byte from the segment's base,
        "nbytes": its size}: the opener request's `arena` (judge/opener.py)."""
        from kernelgym_gap.judge.cuda_ipc import HANDLE_BYTES, handle_hex
        if self.tensor is None:
            raise ArenaError("the arena was freed: nothing to export")
        try:
            share = self.tensor.untyped_storage()._share_cuda_()
        except RuntimeError as e:
            raise ArenaError(f"torch could not export the arena's segment: {e}") from None
        raw = bytes(share[1])
        if len(raw) == HANDLE_BYTES + 2 and raw[1:2] == _TORCH_SEGMENT_KIND:
            raw = raw[2:]
        elif len(raw) != HANDLE_BYTES:
            raise ArenaError(f"torch's export of the arena is {len(raw)} bytes of kind {raw[1:2]!r}, not a legacy "
                             f"CUDA IPC handle of a cudaMalloc segment (expandable segments have none)")
        offset = int(share[3]) + self.tensor.storage_offset() * self.tensor.element_size()
        # torch counts one consumer per _share_cuda_ (the counter starts at 1) and keeps the exported block out
        # of its allocator ("limbo") until a consumer's rebuild releases it. The opener is no torch consumer,
        # so without the release in `free` every arena of the warm checker stayed allocated to its end.
        if len(share) > 5 and share[4]:
            self.ref_counter = (share[4], int(share[5]))
        if self.tensor.is_cuda:
            # The opener writes the arena from another process, ordered with nothing on this one's streams.
            # torch hands out a block freed by kernels still queued (stream order: safe for this process only),
            # and the checker frees such blocks just before (run_handover makes the plan's references and
            # inputs, some of them dropped at once). A torch consumer would wait on the export's event; the
            # opener does not, so queued kernels could run AFTER its copies and overwrite them: the hand-over's
            # false non_finite of 2026-12-07 (float32 values read as float16 outputs; docs/measurement.md, "the
            # cause found and mended": gone with this wait, and a gpu test shows the hazard without it).
            torch.cuda.synchronize(self.tensor.device)
        return {"handle": handle_hex(raw), "offset": offset, "nbytes": int(self.tensor.numel())}

    def free(self) -> None:
        """Drops the tensor (idempotent). On cuda the device is synchronized first, so no kernel of the check
        still reads it when the allocator hands its memory to the next one."""
        if self.tensor is None:
            return
        if self.tensor.is_cuda:
            torch.cuda.synchronize(self.tensor.device)
        if self.ref_counter is not None:
            # the opener closed its mapping and exited before the go line: nothing else uses the export now
            handle, offset = self.ref_counter
            self.ref_counter = None
            try:
                torch.UntypedStorage._release_ipc_counter(handle, offset, device=self.tensor.device)
            except RuntimeError as e:    # the block stays out of the allocator (torch's limbo): memory, not a verdict
                sys.stderr.write(f"the hand-over's arena: its IPC counter was not released ({e})\n")
        self.tensor = None


def device_arena(nbytes: int, device: str) -> Arena | None:
    """The warm checker's arena factory: a CUDA arena, or None on a device without CUDA IPC (cpu): the parent
    then falls back to files for every planned output (the handover line's `arena` is null)."""
    if not str(device).startswith("cuda"):
        return None
    return Arena.allocate(nbytes, device)
