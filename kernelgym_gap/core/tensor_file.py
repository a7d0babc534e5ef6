"""The file in which a child hands one output tensor to the trusted checker: a short header (magic, dtype,
shape) and the tensor's bytes, nothing else.

Until 2026-12-04 outputs went through torch.save and torch.load(weights_only=True). A raw file is cheaper
(no zip container, no CRC over every byte, no defensive clone: `scripts/handoff_bench.py`) and simpler to
read safely: the checker parses a bounded header, allows a fixed list of dtypes and checks that the file's
size is exactly what the header implies, so a file the child forged (it can: same uid, its own scratch)
is rejected before a byte of data is read, and no unpickler ever sees it.

Layout: MAGIC, a 4-byte little-endian header length, the header (JSON {"dtype": "float16", "shape": [..]}),
then numel x itemsize bytes in the tensor's row-major order, native (little-endian) byte order.

The child uses `write_tensor` after the submission has run: the names it needs are bound at import, and
the snapshots cover this module, as every harness module (child/snapshots.harness_modules).
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import stat
import struct
from collections.abc import Callable

import torch

from kernelgym_gap.core import bounded_json

MAGIC = b"KGGT\x01"
MAX_HEADER = 4096
MAX_DIMS = 16
SUFFIX = ".tensor"
# every whole-byte dtype a kernel might return, so that a wrong one reaches the checker and is named there
# (`wrong_dtype`); those an older torch lacks are left out
DTYPES = {name: getattr(torch, name) for name in (
    "float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
    "uint64", "bool", "complex32", "complex64", "complex128", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz",
    "float8_e5m2fnuz", "float8_e8m0fnu") if isinstance(getattr(torch, name, None), torch.dtype)}
_NAMES = {v: k for k, v in DTYPES.items()}

_open, _write, _close, _fstat, _read = os.open, os.write, os.close, os.fstat, os.read
_W_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
_R_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
_CHUNK = 1 << 30          # os.write of more than ~2 GiB at once is not portable


class TensorFileError(ValueError):
    """The file is not a tensor file this module wrote, or not one consistent with its own header."""


def host_copy(t: torch.Tensor) -> torch.Tensor:
    """A contiguous cpu tensor that shares no memory with `t`: what is written later must be what `t` held
    now, even if its owner (the submission) overwrites `t` in a later call."""
    return t.detach().to("cpu", copy=True).contiguous()


def device_copy(t: torch.Tensor) -> torch.Tensor:
    """A contiguous copy of `t` on its own device that shares no memory with it (host_copy's reason, without
    the trip to the host: that comes when the copy is written)."""
    return t.detach().clone(memory_format=torch.contiguous_format)


def _bytes_view(t: torch.Tensor):
    return memoryview(t.reshape(-1).view(torch.uint8).numpy())


def write_tensor(path: str | os.PathLike, t: torch.Tensor, staging: torch.Tensor | None = None,
                 guard: Callable[[], contextlib.AbstractContextManager] | None = None) -> int:
    """Writes `t` (any device; copied to the host if needed) to a new file at `path`; the bytes written.

    `staging` (a contiguous uint8 host tensor, pinned on cuda: child/outputs.py, Placement.output_staging_bytes):
    a tensor on a device is copied to the host through it, one chunk of its size at a time, each chunk written
    from there, instead of being copied whole into fresh pageable memory first. The file's bytes are the same
    either way; a cpu tensor is written directly and ignores it. `guard` (Placement.outputs_copy_laned: the GPU's
    shared lane, child/lanes.ChildLane.copying): entered around each copy off the device (the whole tensor's, or
    each chunk's), never around a file write."""
    if t.dtype not in _NAMES:
        raise TensorFileError(f"dtype {t.dtype} has no tensor-file encoding")
    guard = guard or contextlib.nullcontext
    on_device = _on_device(t)
    staged = staging is not None and on_device and t.numel() > 0
    if staged:
        t = t.detach().contiguous()
    elif on_device:
        with guard():
            t = t.detach().to("cpu").contiguous()
    else:
        t = t.detach().contiguous()         # no copy when it already is
    header = json.dumps({"dtype": _NAMES[t.dtype], "shape": list(t.shape)}).encode()
    fd = _open(os.fspath(path), _W_FLAGS, 0o644)
    try:
        _write_all(fd, MAGIC + struct.pack("<I", len(header)) + header)
        if staged:
            return _write_staged(fd, t.reshape(-1).view(torch.uint8), staging, guard)
        data = _bytes_view(t) if t.numel() else memoryview(b"")
        for start in range(0, len(data), _CHUNK):
            _write_all(fd, data[start:start + _CHUNK])
    finally:
        _close(fd)
    return len(data)


def _on_device(t: torch.Tensor) -> bool:
    """Whether `t` must be copied off a device to be written (one name, so that the cpu tests can pretend one)."""
    return t.device.type != "cpu"


def _write_staged(fd: int, flat: torch.Tensor, staging: torch.Tensor,
                  guard: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext) -> int:
    """`flat` (uint8, contiguous, on any device) written to `fd` through `staging`, a chunk at a time: each
    chunk copied into the staging buffer (a pinned buffer takes a device's copy by DMA, without faulting in
    fresh pageable pages), then written from it. The copy is synchronous: the chunk is on the host before its
    write, and before `guard` (entered around each chunk's copy alone) is left. The bytes written."""
    if staging.dtype != torch.uint8 or staging.device.type != "cpu" or not staging.is_contiguous() \
            or staging.dim() != 1 or staging.numel() == 0:
        raise ValueError("the staging buffer must be a non-empty, contiguous, 1-D uint8 host tensor")
    size, step = flat.numel(), min(staging.numel(), _CHUNK)
    view = memoryview(staging.numpy())
    for start in range(0, size, step):
        n = min(step, size - start)
        with guard():
            staging[:n].copy_(flat[start:start + n])
        _write_all(fd, view[:n])
    return size


def _write_all(fd: int, buf) -> None:
    view = memoryview(buf)
    while view:
        n = _write(fd, view)
        view = view[n:]


def _read_exact(fd: int, n: int) -> bytes:
    parts, got = [], 0
    while got < n:
        chunk = _read(fd, n - got)
        if not chunk:
            raise TensorFileError(f"the file ends {n - got} bytes early")
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def _parse_header(raw: bytes) -> tuple[torch.dtype, tuple[int, ...]]:
    # bounded: a 4 KiB header of `[[[[...` made json.loads raise RecursionError in the checker (issue 31)
    try:
        header = bounded_json.loads(raw, max_bytes=MAX_HEADER, max_depth=2, what="the header")
    except bounded_json.BoundedJSONError as e:
        raise TensorFileError(str(e)) from None
    if not isinstance(header, dict) or set(header) != {"dtype", "shape"}:
        raise TensorFileError("the header must hold exactly 'dtype' and 'shape'")
    dtype, shape = header["dtype"], header["shape"]
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise TensorFileError(f"dtype {dtype!r} is not one of {sorted(DTYPES)}")
    if (not isinstance(shape, list) or len(shape) > MAX_DIMS
            or not all(type(d) is int and 0 <= d < 1 << 48 for d in shape)):
        raise TensorFileError(f"shape {shape!r} is not a list of at most {MAX_DIMS} non-negative ints")
    return DTYPES[dtype], tuple(shape)


def read_tensor(path: str | os.PathLike, max_bytes: int,
                into: Callable[[int], torch.Tensor] | None = None) -> torch.Tensor:
    """The tensor in `path`: a regular file (a link is not followed, a FIFO cannot block), a valid header, a
    data size of at most `max_bytes` and exactly the header's numel x itemsize. Raises TensorFileError
    (or OSError when the file cannot be opened).

    `into(nbytes)`: the host buffer the data is read into (a contiguous 1-D uint8 cpu tensor of exactly that
    size whose pages are resident, such as pinned memory: it is not zeroed first); by default a new one."""
    fd = _open(os.fspath(path), _R_FLAGS)
    try:
        st = _fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise TensorFileError("not a regular file")
        os.set_blocking(fd, True)
        head = _read_exact(fd, len(MAGIC) + 4)
        if head[:len(MAGIC)] != MAGIC:
            raise TensorFileError("not a tensor file (bad magic)")
        (header_len,) = struct.unpack("<I", head[len(MAGIC):])
        if header_len > MAX_HEADER:
            raise TensorFileError(f"a header of {header_len} bytes (at most {MAX_HEADER})")
        dtype, shape = _parse_header(_read_exact(fd, header_len))
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes > max_bytes:
            raise TensorFileError(f"the header declares {nbytes} bytes of data, over the {max_bytes} expected")
        data_at = len(MAGIC) + 4 + header_len
        if st.st_size != data_at + nbytes:
            raise TensorFileError(f"the file holds {st.st_size - data_at} bytes of data, the header declares "
                                  f"{nbytes}")
        flat = torch.empty(nbytes, dtype=torch.uint8) if into is None else _given(into, nbytes)
        if nbytes:
            if into is None:
                # pages faulted in by a memset first, not one by one inside the read: 0.15 s against 0.19 s for
                # 256 MiB on the 2-core CI host (scripts/handoff_bench.py)
                flat.zero_()
            view, done = memoryview(flat.numpy()), 0
            while done < nbytes:
                n = os.readv(fd, [view[done:done + _CHUNK]])
                if n == 0:
                    raise TensorFileError("the file shrank while it was read")
                done += n
    finally:
        _close(fd)
    return flat.view(dtype).reshape(shape)


def _given(into: Callable[[int], torch.Tensor], nbytes: int) -> torch.Tensor:
    flat = into(nbytes)
    if not isinstance(flat, torch.Tensor) or flat.dtype != torch.uint8 or flat.device.type != "cpu" \
            or flat.dim() != 1 or flat.numel() != nbytes or not flat.is_contiguous():
        raise ValueError(f"`into` must give a contiguous 1-D uint8 host tensor of {nbytes} bytes")
    return flat


def output_name(kind: str, index: int) -> str:
    """The file name of an output: `trial_3.tensor`, `recheck_3.tensor`."""
    return f"{kind}_{index}{SUFFIX}"
