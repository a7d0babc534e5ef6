"""The child's export of one output it keeps on the device (issue 35; the design in docs/measurement.md, "The
outputs handed over on the device", protocol point 1): the CUDA IPC handle of the caching allocator's segment
that holds the output's private device copy (child/outputs.HeldOutputs), where the copy starts in it, and its
bytes, dtype and shape, as the record its report carries (core/output_handle.OutputHandle).

The handle comes from torch's own export, `UntypedStorage._share_cuda_()`, whose handle is c10's
CUDACachingAllocator::shareIpcHandle string: a version byte (2; 3 from torch 2.13, the payload unchanged), a
type byte (b"c": a cudaMalloc segment, followed by its 64-byte cudaIpcMemHandle_t; b"e": an expandable segment,
which has no legacy IPC handle at all), and its offset is the storage's offset in that segment. On the H200
(2026-12-06, scripts/ipc_probe.py) torch's handle held the raw cudaIpcGetMemHandle of the segment's base at
that same offset for all 24 outputs probed.

An output that cannot be exported is not the submission's doing (no legacy IPC on this set-up, expandable
segments, an empty output): `ExportError`, and HeldOutputs writes that output as a file instead, as it would
without the hand-over.

The names used after the submission loads are bound at import; the snapshots cover this module as they cover
every module of the harness (child/snapshots.harness_modules): child/outputs.py imports it before the
snapshot is taken.
"""
from __future__ import annotations

import torch

from kernelgym_gap.core.output_handle import OutputHandle

CUDA_IPC_HANDLE_BYTES = 64               # sizeof(cudaIpcMemHandle_t)
# c10's ShareableHandleType: the type byte after the version byte of torch's handle string
_CUDA_MALLOC_SEGMENT = ord("c")
_EXPANDABLE_SEGMENT = ord("e")


class ExportError(RuntimeError):
    """An output that cannot be handed over by handle; the caller writes it as a file instead."""


class NotOnCuda(ExportError):
    """The tensor is not in CUDA memory: there is no IPC handle to give (a host copy, the cpu backend)."""


def record_from_share(share: tuple, storage_offset: int, itemsize: int, numel: int, dtype: torch.dtype,
                      shape: tuple[int, ...]) -> OutputHandle:
    """The record of a tensor from its storage's `_share_cuda_()` tuple (device, handle, storage bytes,
    the storage's offset in its segment, ...) and the tensor's own storage offset (elements), itemsize,
    element count, dtype and shape. Split from `export_handle` so that the parsing is testable without a GPU."""
    handle = bytes(share[1])
    if len(handle) >= 2 and handle[1] == _EXPANDABLE_SEGMENT:
        raise ExportError("the output lives in an expandable segment (PYTORCH_CUDA_ALLOC_CONF="
                          "expandable_segments:True), which has no legacy CUDA IPC handle")
    if len(handle) != 2 + CUDA_IPC_HANDLE_BYTES or handle[1] != _CUDA_MALLOC_SEGMENT:
        raise ExportError(f"torch's IPC handle is not a cudaMalloc segment's: {len(handle)} bytes, type byte "
                          f"{handle[1:2]!r} (expected {2 + CUDA_IPC_HANDLE_BYTES} bytes, type b'c')")
    nbytes = numel * itemsize
    if nbytes == 0:
        raise ExportError("an empty output has no bytes to hand over")
    return OutputHandle(handle=handle[2:].hex(), offset=int(share[3]) + storage_offset * itemsize, nbytes=nbytes,
                        dtype=str(dtype).removeprefix("torch."), shape=tuple(int(d) for d in shape))


def export_handle(t: torch.Tensor) -> OutputHandle:
    """The hand-over record of `t`, a contiguous CUDA tensor (HeldOutputs' device copies are: core/tensor_file.
    device_copy). NotOnCuda for a tensor elsewhere; ExportError for one that cannot be handed over (not
    contiguous: its bytes would not be one extent; an expandable segment; an empty tensor). torch's own
    errors from the export (a RuntimeError: cudaErrorNotSupported where legacy IPC is refused) pass through."""
    if not isinstance(t, torch.Tensor):
        raise ExportError(f"expected a torch.Tensor, got {type(t).__name__}")
    if not t.is_cuda:
        raise NotOnCuda(f"the output is on {t.device}, not on a CUDA device: it has no IPC handle")
    if not t.is_contiguous():
        raise ExportError("the output is not contiguous: its bytes are not one extent of its storage")
    if t.numel() == 0:
        raise ExportError("an empty output has no bytes to hand over")
    share = t.untyped_storage()._share_cuda_()
    return record_from_share(share, t.storage_offset(), t.element_size(), t.numel(), t.dtype, tuple(t.shape))
