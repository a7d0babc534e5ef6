"""The CUDA IPC calls the outputs' hand-over on the device needs (issue 35; docs/measurement.md, "The outputs handed
over on the device"), for the trusted side only: export a handle to device memory, open a handle another process
exported, check the extent it maps, copy device to device, close. Standard library ctypes only, and nothing is
loaded until an `IpcRuntime` is made, so this module imports on a machine without CUDA (the cpu backend, the tests).

Why raw runtime calls and not torch's CUDA reducer (torch.multiprocessing): the reducer also takes a ref-counter
file name and an event handle from the sender, two more hostile inputs, and it unpickles. Here the only input is
64 opaque bytes, opened by one call whose failure is a typed error.

Every failing call raises `CudaIpcError(call, code, name)` with cudaGetErrorName's text; the failures that mean
"this machine cannot hand outputs over on the device" (no runtime library, no device, cudaErrorNotSupported, no
unified addressing) raise its subclass `IpcUnsupported`: the design's trigger for the fallback to files.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import re
import sys
from typing import Protocol, runtime_checkable

HANDLE_BYTES = 64          # sizeof(cudaIpcMemHandle_t): `char reserved[CUDA_IPC_HANDLE_SIZE]`, 64 in every CUDA
_HEX = re.compile(r"[0-9a-fA-F]{%d}" % (2 * HANDLE_BYTES))

# cudaError_t values this module names itself (driver_types.h; stable since CUDA 4)
CUDA_SUCCESS = 0
CUDA_ERROR_INSUFFICIENT_DRIVER = 35
CUDA_ERROR_NO_DEVICE = 100
CUDA_ERROR_NOT_SUPPORTED = 801
_UNSUPPORTED_CODES = frozenset({CUDA_ERROR_INSUFFICIENT_DRIVER, CUDA_ERROR_NO_DEVICE, CUDA_ERROR_NOT_SUPPORTED})
CU_ERROR_NOT_INITIALIZED = 3        # CUresult, driver API
CUDA_DEV_ATTR_UNIFIED_ADDRESSING = 41   # cudaDevAttrUnifiedAddressing
_MEMCPY_D2H, _MEMCPY_D2D = 2, 3         # cudaMemcpyKind

# cudaIpcOpenMemHandle's flags. The runtime's documentation (mirrored at
# https://docs.rs/rcudnn-sys/0.5.0/rcudnn_sys/fn.cudaIpcOpenMemHandle.html, and the same words for HIP's copy of
# the API) says of `flags`: "Must be specified as cudaIpcMemLazyEnablePeerAccess". The flag only lets the driver
# enable peer access when the exporter's device differs from the opener's; on one GPU (the design's case: child,
# opener and checker all on the lane's device) it enables nothing. So the documented value is the default here,
# and 0 (the design's "no peer-access flag") is offered for the GPU probe to try, which records whether this
# driver accepts it (scripts/ipc_probe.py, the row "open with flags=0").
IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 1


class CudaIpcError(RuntimeError):
    """A CUDA call failed: `call` (the function), `code` (its cudaError_t or CUresult; -1 when there was no call,
    e.g. the library is missing) and `name` (cudaGetErrorName's text, or the reason)."""

    def __init__(self, call: str, code: int, name: str):
        super().__init__(f"{call} failed: {name} ({code})")
        self.call, self.code, self.name = call, int(code), str(name)


class IpcUnsupported(CudaIpcError):
    """CUDA IPC cannot work on this machine (no CUDA runtime or device, cudaErrorNotSupported, no unified
    addressing): the hand-over falls back to files; never a verdict on a submission."""


def handle_hex(handle: bytes) -> str:
    """The handle as 128 lowercase hex digits (what a record carries)."""
    if not isinstance(handle, (bytes, bytearray)) or len(handle) != HANDLE_BYTES:
        raise ValueError(f"a CUDA IPC handle is {HANDLE_BYTES} bytes, got "
                         f"{type(handle).__name__} of {len(handle) if isinstance(handle, (bytes, bytearray)) else '?'}")
    return bytes(handle).hex()


def handle_from_hex(text: str) -> bytes:
    """The 64 bytes of a handle from exactly 128 hex digits (either case); anything else (a str of another length,
    spaces, a 0x prefix, non-hex, not a str) is a ValueError: a record's handle is checked before it is opened."""
    if not isinstance(text, str) or _HEX.fullmatch(text) is None:
        shown = repr(text)[:40]
        raise ValueError(f"a CUDA IPC handle is exactly {2 * HANDLE_BYTES} hex digits, got {shown}")
    return bytes.fromhex(text)


class _IpcMemHandle(ctypes.Structure):
    """cudaIpcMemHandle_t: `struct { char reserved[64]; }`, passed BY VALUE to cudaIpcOpenMemHandle (a 64-byte
    struct argument: the ABI copies it onto the stack; a pointer there would open whatever bytes the address is)."""
    _fields_ = [("reserved", ctypes.c_char * HANDLE_BYTES)]


_vp, _u64, _size = ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t
# (restype, argtypes) of every runtime call used; tests/test_cuda_ipc.py holds the by-value handle to this table
RUNTIME_SIGNATURES: dict[str, tuple[object, list[object]]] = {
    "cudaGetErrorName": (ctypes.c_char_p, [ctypes.c_int]),
    "cudaGetDeviceCount": (ctypes.c_int, [ctypes.POINTER(ctypes.c_int)]),
    "cudaSetDevice": (ctypes.c_int, [ctypes.c_int]),
    "cudaDeviceGetAttribute": (ctypes.c_int, [ctypes.POINTER(ctypes.c_int), ctypes.c_int, ctypes.c_int]),
    "cudaFree": (ctypes.c_int, [_vp]),
    "cudaMalloc": (ctypes.c_int, [ctypes.POINTER(_vp), _size]),
    "cudaMemset": (ctypes.c_int, [_vp, ctypes.c_int, _size]),
    "cudaIpcGetMemHandle": (ctypes.c_int, [ctypes.POINTER(_IpcMemHandle), _vp]),
    "cudaIpcOpenMemHandle": (ctypes.c_int, [ctypes.POINTER(_vp), _IpcMemHandle, ctypes.c_uint]),
    "cudaIpcCloseMemHandle": (ctypes.c_int, [_vp]),
    "cudaMemcpy": (ctypes.c_int, [_vp, _vp, _size, ctypes.c_int]),
    "cudaDeviceSynchronize": (ctypes.c_int, []),
    "cudaGetLastError": (ctypes.c_int, []),
}
DRIVER_SIGNATURES: dict[str, tuple[object, list[object]]] = {
    "cuInit": (ctypes.c_int, [ctypes.c_uint]),
    "cuCtxGetCurrent": (ctypes.c_int, [ctypes.POINTER(_vp)]),
    "cuGetErrorName": (ctypes.c_int, [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]),
    # the _v2 entry point: 64-bit CUdeviceptr and size_t (the unversioned name is the 32-bit one of CUDA 3)
    "cuMemGetAddressRange_v2": (ctypes.c_int, [ctypes.POINTER(_u64), ctypes.POINTER(_size), _u64]),
}


def cudart_candidates(search_path: list[str] | None = None, maps_text: str | None = None) -> list[str]:
    """Where libcudart may be, best first:
    1. the one already mapped into this process (torch loaded it): the same runtime state as torch's;
    2. the pip wheels' places, as torch/__init__.py's _get_cuda_dep_paths looks for them on sys.path:
       nvidia/cuda_runtime/lib (CUDA 12 wheels), nvidia/cu13/lib (CUDA 13 wheels), then torch/lib;
    3. the loader's: ctypes.util.find_library("cudart"), then the bare sonames."""
    out: list[str] = []
    if maps_text is None:
        try:
            with open("/proc/self/maps") as f:
                maps_text = f.read()
        except OSError:
            maps_text = ""
    for line in maps_text.splitlines():
        path = line.split()[-1] if line.split() else ""
        if "/libcudart.so" in path and path not in out:
            out.append(path)
    for root in (sys.path if search_path is None else search_path):
        if not root or not os.path.isdir(root):
            continue
        for pattern in ("nvidia/cuda_runtime/lib/libcudart.so*", "nvidia/cu13/lib/libcudart.so*",
                        "nvidia/cu12/lib/libcudart.so*", "torch/lib/libcudart*.so*"):
            for p in sorted(glob.glob(os.path.join(root, pattern)), reverse=True):
                if p not in out:
                    out.append(p)
    found = ctypes.util.find_library("cudart")
    for name in ([found] if found else []) + ["libcudart.so", "libcudart.so.13", "libcudart.so.12"]:
        if name not in out:
            out.append(name)
    return out


def _load(candidates: list[str], what: str) -> ctypes.CDLL:
    tried = []
    for c in candidates:
        try:
            return ctypes.CDLL(c)
        except OSError as e:
            tried.append(f"{c}: {e}")
    raise IpcUnsupported(f"load {what}", -1, "not found (" + "; ".join(tried[-3:]) + ")")


@runtime_checkable
class IpcRuntimeLike(Protocol):
    """What the opener and the checker use of the runtime; a fake stands in for it on the cpu tests."""
    device: int
    last_error: CudaIpcError | None

    def get_handle(self, ptr: int) -> bytes: ...
    def open(self, handle: bytes, flags: int = IPC_MEM_LAZY_ENABLE_PEER_ACCESS) -> int: ...
    def address_range(self, ptr: int) -> tuple[int, int]: ...
    def copy_d2d(self, dst: int, src: int, nbytes: int) -> None: ...
    def copy_to_host(self, src: int, nbytes: int) -> bytes: ...
    def close(self, ptr: int) -> None: ...
    def synchronize(self) -> None: ...


class IpcRuntime:
    """The CUDA runtime (and the driver's cuMemGetAddressRange) of this process on `device`. Making one selects
    the device and makes its primary context current (cudaSetDevice + cudaFree(0)): the context's creation
    happens here, once. Not thread-safe: the context is current on the constructing thread."""

    def __init__(self, device: int = 0, cudart: str | None = None):
        self.device = int(device)
        self.last_error: CudaIpcError | None = None
        self.rt = _load([cudart] if cudart else cudart_candidates(), "libcudart")
        self.rt_path = getattr(self.rt, "_name", "")
        self.drv = _load(["libcuda.so.1", "libcuda.so"], "libcuda")
        try:
            for name, (res, args) in RUNTIME_SIGNATURES.items():
                f = getattr(self.rt, name)
                f.restype, f.argtypes = res, args
            for name, (res, args) in DRIVER_SIGNATURES.items():
                f = getattr(self.drv, name)
                f.restype, f.argtypes = res, args
        except AttributeError as e:      # a library of that name without the symbol: not a usable CUDA
            raise IpcUnsupported("load symbols", -1, str(e)) from None
        n = ctypes.c_int(0)
        self._rt("cudaGetDeviceCount", ctypes.byref(n))
        if not 0 <= self.device < n.value:
            raise IpcUnsupported("cudaGetDeviceCount", CUDA_ERROR_NO_DEVICE,
                                 f"device {self.device} of {n.value} visible")
        self._rt("cudaSetDevice", self.device)
        self._rt("cudaFree", None)                     # makes the primary context and makes it current
        ua = ctypes.c_int(0)
        self._rt("cudaDeviceGetAttribute", ctypes.byref(ua), CUDA_DEV_ATTR_UNIFIED_ADDRESSING, self.device)
        if not ua.value:
            # the docs: IPC "is restricted to devices with support for unified addressing on Linux"
            raise IpcUnsupported("cudaDeviceGetAttribute", CUDA_ERROR_NOT_SUPPORTED, "no unified addressing")
        ctx = _vp()
        code = self.drv.cuCtxGetCurrent(ctypes.byref(ctx))
        if code == CU_ERROR_NOT_INITIALIZED:         # the runtime normally did cuInit; only then is it needed
            self._drv("cuInit", 0)
            code = self.drv.cuCtxGetCurrent(ctypes.byref(ctx))
        if code != CUDA_SUCCESS:
            self._fail("cuCtxGetCurrent", code, self._drv_name(code))
        if not ctx.value:
            self._fail("cuCtxGetCurrent", -1, "no current context after cudaFree(0)")

    # -- errors
    def _name(self, code: int) -> str:
        try:
            s = self.rt.cudaGetErrorName(code)
            return s.decode() if s else f"cudaError {code}"
        except Exception:                  # the name is for the message; never hide the failure behind it
            return f"cudaError {code}"

    def _drv_name(self, code: int) -> str:
        s = ctypes.c_char_p()
        try:
            if self.drv.cuGetErrorName(code, ctypes.byref(s)) == CUDA_SUCCESS and s.value:
                return s.value.decode()
        except Exception:
            pass
        return f"CUresult {code}"

    def _fail(self, call: str, code: int, name: str):
        cls = IpcUnsupported if code in _UNSUPPORTED_CODES else CudaIpcError
        self.last_error = cls(call, code, name)
        raise self.last_error

    def _rt(self, call: str, *args) -> None:
        code = getattr(self.rt, call)(*args)
        if code != CUDA_SUCCESS:
            self._fail(call, code, self._name(code))

    def _drv(self, call: str, *args) -> None:
        code = getattr(self.drv, call)(*args)
        if code != CUDA_SUCCESS:
            self._fail(call, code, self._drv_name(code))

    # -- the calls
    def get_handle(self, ptr: int) -> bytes:
        """cudaIpcGetMemHandle of the allocation holding `ptr` (the runtime wants its base: pass
        `address_range(p)[0]`); the 64 bytes."""
        h = _IpcMemHandle()
        self._rt("cudaIpcGetMemHandle", ctypes.byref(h), _vp(int(ptr)))
        return bytes(h)

    def open(self, handle: bytes, flags: int = IPC_MEM_LAZY_ENABLE_PEER_ACCESS) -> int:
        """cudaIpcOpenMemHandle: the device pointer, in this process, of the base of the exporter's allocation."""
        if not isinstance(handle, (bytes, bytearray)) or len(handle) != HANDLE_BYTES:
            raise ValueError(f"a CUDA IPC handle is {HANDLE_BYTES} bytes")
        h = _IpcMemHandle.from_buffer_copy(bytes(handle))
        p = _vp()
        self._rt("cudaIpcOpenMemHandle", ctypes.byref(p), h, ctypes.c_uint(int(flags)))
        return int(p.value or 0)

    def address_range(self, ptr: int) -> tuple[int, int]:
        """cuMemGetAddressRange: (base, size) of the allocation holding `ptr`."""
        base, size = _u64(0), _size(0)
        self._drv("cuMemGetAddressRange_v2", ctypes.byref(base), ctypes.byref(size), _u64(int(ptr)))
        return int(base.value), int(size.value)

    def copy_d2d(self, dst: int, src: int, nbytes: int) -> None:
        """cudaMemcpy device to device, then synchronized (a device-to-device cudaMemcpy returns before the copy
        ends: the runtime does no host-side synchronization for it)."""
        self._rt("cudaMemcpy", _vp(int(dst)), _vp(int(src)), _size(int(nbytes)), _MEMCPY_D2D)
        self.synchronize()

    def copy_to_host(self, src: int, nbytes: int) -> bytes:
        """`nbytes` of device memory at `src`, copied to the host (synchronous)."""
        buf = ctypes.create_string_buffer(int(nbytes))
        self._rt("cudaMemcpy", ctypes.cast(buf, _vp), _vp(int(src)), _size(int(nbytes)), _MEMCPY_D2H)
        return buf.raw

    def close(self, ptr: int) -> None:
        """cudaIpcCloseMemHandle of a pointer `open` returned."""
        self._rt("cudaIpcCloseMemHandle", _vp(int(ptr)))

    def synchronize(self) -> None:
        self._rt("cudaDeviceSynchronize")

    # -- for the probe and tests: memory of this process's own
    def malloc(self, nbytes: int) -> int:
        p = _vp()
        self._rt("cudaMalloc", ctypes.byref(p), _size(int(nbytes)))
        return int(p.value or 0)

    def memset(self, ptr: int, value: int, nbytes: int) -> None:
        self._rt("cudaMemset", _vp(int(ptr)), int(value), _size(int(nbytes)))

    def free(self, ptr: int) -> None:
        self._rt("cudaFree", _vp(int(ptr)))

    def alive(self) -> str | None:
        """None when this process can still do CUDA work (a 1 MiB allocation set, read back and freed), else the
        error's name: after a sticky error every call returns it again."""
        try:
            p = self.malloc(1 << 20)
            self.memset(p, 0x5A, 1 << 20)
            ok = self.copy_to_host(p, 16) == b"\x5a" * 16
            self.free(p)
            return None if ok else "read back wrong bytes"
        except CudaIpcError as e:
            return e.name
