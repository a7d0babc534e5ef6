"""A host-memory stand-in for judge/cuda_ipc.IpcRuntime (IpcRuntimeLike), for the opener's cpu tests. It lives
in tests/ only: the trusted code has no switch that selects it.

A "handle" is the name of a registered host buffer, padded to 64 bytes. Opening one maps the buffer at a fake
device address of its own; `address_range` gives the registered allocation's size; `copy_d2d` moves bytes
between the bytearrays and, as the real runtime does, fails on an address outside any mapping. It counts
opens and closes and records every copy; `fail_*` make chosen names fail at that call."""
from __future__ import annotations

from kernelgym_gap.judge.cuda_ipc import HANDLE_BYTES, CudaIpcError, handle_hex

INVALID_VALUE = 1          # cudaErrorInvalidValue
ILLEGAL_ADDRESS = 700      # cudaErrorIllegalAddress


def fake_handle(name: str) -> str:
    raw = name.encode()
    assert 0 < len(raw) <= HANDLE_BYTES
    return handle_hex(raw.ljust(HANDLE_BYTES, b"\0"))


class HostIpcRuntime:
    device = 0

    def __init__(self, buffers: dict[str, bytearray] | None = None, *, fail_open=(), fail_range=(), fail_copy=(),
                 shift_base=(), fail_close=()):
        self.last_error: CudaIpcError | None = None
        self.buffers: dict[str, bytearray] = dict(buffers or {})
        self.fail_open, self.fail_range, self.fail_copy = set(fail_open), set(fail_range), set(fail_copy)
        self.shift_base, self.fail_close = set(shift_base), set(fail_close)
        self.mapped: dict[int, str] = {}          # base address -> buffer name
        self.opens: list[str] = []
        self.closes: list[str] = []
        self.copies: list[tuple[str, str, int]] = []    # (source name, destination name, nbytes)
        self.synchronized = 0
        self._next = 1 << 40

    def _raise(self, call: str, code: int, name: str):
        self.last_error = CudaIpcError(call, code, name)
        raise self.last_error

    def _where(self, ptr: int) -> tuple[str, int]:
        for base, name in self.mapped.items():
            if base <= ptr < base + len(self.buffers[name]):
                return name, ptr - base
        self._raise("cudaMemcpy", ILLEGAL_ADDRESS, "cudaErrorIllegalAddress")

    def get_handle(self, ptr: int) -> bytes:
        raise AssertionError("the opener exports nothing")

    def open(self, handle: bytes, flags: int = 1) -> int:
        name = bytes(handle).rstrip(b"\0").decode(errors="replace")
        self.opens.append(name)
        if name not in self.buffers or name in self.fail_open:
            self._raise("cudaIpcOpenMemHandle", INVALID_VALUE, "cudaErrorInvalidValue")
        base = self._next
        self._next += 1 << 32
        self.mapped[base] = name
        return base

    def address_range(self, ptr: int) -> tuple[int, int]:
        name, off = self._where(ptr)
        if name in self.fail_range:
            self._raise("cuMemGetAddressRange_v2", INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE")
        base = ptr - off
        return (base + 256 if name in self.shift_base else base), len(self.buffers[name])

    def copy_d2d(self, dst: int, src: int, nbytes: int) -> None:
        (sname, soff), (dname, doff) = self._where(src), self._where(dst)
        if sname in self.fail_copy:
            self._raise("cudaMemcpy", ILLEGAL_ADDRESS, "cudaErrorIllegalAddress")
        s, d = self.buffers[sname], self.buffers[dname]
        if soff + nbytes > len(s) or doff + nbytes > len(d):
            self._raise("cudaMemcpy", INVALID_VALUE, "cudaErrorInvalidValue")
        d[doff:doff + nbytes] = s[soff:soff + nbytes]
        self.copies.append((sname, dname, nbytes))

    def copy_to_host(self, src: int, nbytes: int) -> bytes:
        name, off = self._where(src)
        return bytes(self.buffers[name][off:off + nbytes])

    def close(self, ptr: int) -> None:
        name = self.mapped.pop(ptr, None)
        if name is None:
            self._raise("cudaIpcCloseMemHandle", INVALID_VALUE, "cudaErrorInvalidValue")
        self.closes.append(name)
        if name in self.fail_close:
            self._raise("cudaIpcCloseMemHandle", INVALID_VALUE, "cudaErrorInvalidValue")

    def synchronize(self) -> None:
        self.synchronized += 1
