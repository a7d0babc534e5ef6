"""kernelgym_gap/judge/cuda_ipc.py: the handle codec, the ctypes layout and the typed failure on a machine without
CUDA (cpu), and an export in one process opened, range-checked, copied and closed in another (gpu)."""
import ctypes
import ctypes.util
import subprocess
import sys
import textwrap

import pytest

from kernelgym_gap.judge import cuda_ipc
from kernelgym_gap.judge.cuda_ipc import (HANDLE_BYTES, CudaIpcError, IpcRuntime, IpcRuntimeLike, IpcUnsupported,
                                          handle_from_hex, handle_hex)


def test_hex_round_trip_either_case():
    raw = bytes(range(64))
    text = handle_hex(raw)
    assert len(text) == 128 and text == text.lower()
    assert handle_from_hex(text) == raw
    assert handle_from_hex(text.upper()) == raw


@pytest.mark.parametrize("bad", [
    "", "0" * 127, "0" * 129, "0" * 126 + "zz", "0x" + "0" * 126, " " + "0" * 127, "0" * 127 + "\n",
    "0" * 64 + " " + "0" * 63, "\u0661" * 128,            # Arabic-indic digits: str.isdigit, not hex
    b"0" * 128, None, 12, ["0" * 128],
])
def test_hex_rejects_every_malformed_form(bad):
    with pytest.raises(ValueError):
        handle_from_hex(bad)


@pytest.mark.parametrize("bad", [b"", b"\0" * 63, b"\0" * 65, "00" * 64, None])
def test_handle_hex_wants_exactly_64_bytes(bad):
    with pytest.raises(ValueError):
        handle_hex(bad)


def test_the_handle_struct_is_64_bytes_and_passed_by_value_to_open():
    assert ctypes.sizeof(cuda_ipc._IpcMemHandle) == HANDLE_BYTES == 64
    restype, args = cuda_ipc.RUNTIME_SIGNATURES["cudaIpcOpenMemHandle"]
    # by value: the struct type itself, not a POINTER to it (a pointer would be read as the handle's first bytes)
    assert args[1] is cuda_ipc._IpcMemHandle
    assert args[0] == ctypes.POINTER(ctypes.c_void_p) and args[2] is ctypes.c_uint
    # the export writes through a pointer to the struct
    assert cuda_ipc.RUNTIME_SIGNATURES["cudaIpcGetMemHandle"][1][0] == ctypes.POINTER(cuda_ipc._IpcMemHandle)
    h = cuda_ipc._IpcMemHandle.from_buffer_copy(bytes(range(64)))
    assert bytes(h) == bytes(range(64))
    # the driver's range call is the 64-bit _v2 entry point
    assert cuda_ipc.DRIVER_SIGNATURES["cuMemGetAddressRange_v2"][1][2] is ctypes.c_uint64


def test_errors_are_typed_and_unsupported_is_a_cuda_ipc_error():
    e = IpcUnsupported("cudaIpcOpenMemHandle", 801, "cudaErrorNotSupported")
    assert isinstance(e, CudaIpcError) and e.code == 801 and e.call == "cudaIpcOpenMemHandle"
    assert "cudaErrorNotSupported" in str(e)


def test_cudart_candidates_prefer_the_mapped_library_then_the_wheels(tmp_path):
    wheel = tmp_path / "nvidia" / "cu13" / "lib"
    wheel.mkdir(parents=True)
    (wheel / "libcudart.so.13").write_bytes(b"")
    maps = "7f00-7f01 r-xp 00000000 08:01 1 /opt/x/libcudart.so.13.0.1\n7f02-7f03 r--p 0 0:0 0 [heap]\n"
    c = cuda_ipc.cudart_candidates([str(tmp_path)], maps_text=maps)
    assert c[0] == "/opt/x/libcudart.so.13.0.1"
    assert c[1] == str(wheel / "libcudart.so.13")
    # then the loader's names (find_library's answer first where it finds one), each once
    assert set(c[2:]) >= {"libcudart.so", "libcudart.so.13", "libcudart.so.12"} and len(c) == len(set(c))


def _no_cuda() -> bool:
    try:
        import torch
        return not torch.cuda.is_available()
    except Exception:
        return True


@pytest.mark.skipif(not _no_cuda(), reason="checks the machine without a CUDA device")
def test_the_runtime_raises_ipc_unsupported_without_cuda():
    # in a fresh process: this one's loaded libraries are not what a cpu machine's opener would see
    code = textwrap.dedent("""
        from kernelgym_gap.judge.cuda_ipc import IpcRuntime, IpcUnsupported
        try:
            IpcRuntime(0)
        except IpcUnsupported as e:
            print("unsupported", e.call)
        """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("unsupported"), r.stdout


def test_a_missing_library_is_ipc_unsupported_not_oserror():
    with pytest.raises(IpcUnsupported) as e:
        IpcRuntime(0, cudart="/nonexistent/libcudart.so.99")
    assert e.value.call == "load libcudart" and e.value.code == -1


def test_a_library_without_the_symbols_is_ipc_unsupported(monkeypatch):
    libc = ctypes.util.find_library("c")
    if libc is None:
        pytest.skip("no libc to stand in")
    # libc loads as libcudart (and as libcuda, below) but has none of the runtime's symbols
    monkeypatch.setattr(cuda_ipc, "_load", lambda cands, what: ctypes.CDLL(libc))
    with pytest.raises(IpcUnsupported) as e:
        IpcRuntime(0)
    assert e.value.call == "load symbols"


def test_the_protocol_admits_the_runtime_and_a_fake():
    class Fake:
        device = 0
        last_error = None

        def get_handle(self, ptr): return b"\0" * 64
        def open(self, handle, flags=1): return 1
        def address_range(self, ptr): return ptr, 1
        def copy_d2d(self, dst, src, nbytes): pass
        def copy_to_host(self, src, nbytes): return b""
        def close(self, ptr): pass
        def synchronize(self): pass

    assert isinstance(Fake(), IpcRuntimeLike)
    assert all(hasattr(IpcRuntime, m) for m in ("get_handle", "open", "address_range", "copy_d2d",
                                               "copy_to_host", "close", "synchronize"))


_EXPORTER = textwrap.dedent("""
    import sys, torch
    from kernelgym_gap.judge.cuda_ipc import IpcRuntime, handle_hex
    t = torch.arange(1 << 20, dtype=torch.int32, device="cuda") * 7 + 3     # 4 MiB
    x = t[1024:].clone()                  # a storage of its own, inside a caching-allocator segment
    torch.cuda.synchronize()
    share = x.untyped_storage()._share_cuda_()     # (device, handle, size, offset, ...): torch's own export
    rt = IpcRuntime(0)
    base, size = rt.address_range(x.data_ptr())
    raw = rt.get_handle(base)
    print(handle_hex(raw), x.data_ptr() - base, x.numel() * 4, size, int(share[3]),
          int(raw in bytes(share[1])), flush=True)
    sys.stdin.readline()                  # keeps the memory exported until the opener is done
    """)
_OPENER = textwrap.dedent("""
    import hashlib, sys
    from kernelgym_gap.judge.cuda_ipc import IpcRuntime, handle_from_hex
    h, off, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rt = IpcRuntime(0)
    p = rt.open(handle_from_hex(h))
    base, size = rt.address_range(p)
    assert base == p and off + n <= size, (base, p, off, n, size)
    dst = rt.malloc(n)
    rt.copy_d2d(dst, p + off, n)
    rt.close(p)
    print(hashlib.sha256(rt.copy_to_host(dst, n)).hexdigest())
    """)


@pytest.mark.gpu
@pytest.mark.timeout(180)      # the exporter's readline has no limit of its own
def test_gpu_a_handle_exported_in_one_process_opens_and_copies_in_another():
    import hashlib

    import numpy as np
    exp = subprocess.Popen([sys.executable, "-c", _EXPORTER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        line = exp.stdout.readline().split()
        assert len(line) == 6, exp.stderr.read() if exp.poll() is not None else line
        h, off, n, seg, torch_off, agrees = line[0], *map(int, line[1:])
        assert n == ((1 << 20) - 1024) * 4 and off + n <= seg
        assert torch_off == off and agrees == 1         # torch's handle holds the raw one, same offset
        r = subprocess.run([sys.executable, "-c", _OPENER, h, str(off), str(n)], capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stderr
        want = (np.arange(1 << 20, dtype=np.int64) * 7 + 3).astype(np.int32)[1024:].tobytes()
        assert r.stdout.strip() == hashlib.sha256(want).hexdigest()
    finally:
        exp.kill()
        exp.wait(timeout=30)
