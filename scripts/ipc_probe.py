#!/usr/bin/env python3
"""The GPU probe of the outputs' hand-over by CUDA IPC, the mechanism alone (issue 35; docs/measurement.md, "The
outputs handed over on the device", its "Owed before building"). Nothing of the engine runs: four kinds of process
and the raw runtime calls of kernelgym_gap/judge/cuda_ipc.py.

  exporter  (torch) makes N device copies as HeldOutputs.add does (core/tensor_file.device_copy), exports each
            twice (torch's UntypedStorage._share_cuda_() and the raw cudaIpcGetMemHandle of the storage's segment
            base) and sends one record per output {handle hex, offset, nbytes, dtype, shape, checksum}
  checker   (torch) allocates one receive arena and exports it, and after each round checks every copy against
            the output regenerated from its seed (bit-exact) and the exporter's checksum
  opener    (no torch: cuda_ipc.py alone, loaded by path, because `import kernelgym_gap` imports torch for its
            Gymnasium registration) a fresh process per round: opens the arena and each record's handle,
            range-checks it (cuMemGetAddressRange: base = the opened pointer, offset + nbytes <= size), copies
            into the arena, closes, reports every part's seconds
  this      process, the parent: starts them, carries the records, times the round trip, and runs the hostile rows

Hostile rows (each: what the open / copy returned, whether the same opener could still do CUDA work after it, i.e.
sticky or not, and whether a fresh opener works): random handle bytes; a handle of memory freed before the open
(torch.cuda.empty_cache, so it goes back to the driver); freed then allocated again; an extent past the allocation
(the range check must refuse it before any copy; and, in a disposable opener, the copy without the check); the
exporter opening its own handle; the exporter in the sandbox's namespaces (sandbox/isolation.py's own argv) and in
a pid, a net and an ipc namespace alone; the exporter SIGSTOPped while the opener copies, killed after the close;
the exporter SIGKILLed while the opener holds the mapping (and the checker's state after it).

Every child has a timeout and the whole run a deadline (--timeout-s); a failure is a row, never a traceback that
ends the run. The tables print last: the parts (n, median, p90 ms), the hostile rows, and the simulator's
figures (kernelgym_gap/sim/ipc_outputs.py) beside the measured ones. On a machine without CUDA it exits 2.

    python scripts/ipc_probe.py --json /tmp/out/ipc_probe/ipc_probe.json      # scripts/device_session.sh ipc-probe
"""
from __future__ import annotations

import argparse
import collections
import hashlib
import importlib.util
import json
import os
import queue
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NO_CUDA_LINE = "no CUDA device: the probe runs on a GPU (scripts/device_session.sh ipc-probe)"
_MSG = "@@"                 # a child's protocol lines start with this; anything else on its stdout is noise
KiB, MiB = 1 << 10, 1 << 20
# a light-batch evaluation's outputs (docs/measurement.md: ~1.4 GiB of Softmax/LayerNorm correctness outputs in
# 16 calls + the timed shapes' rechecks): 24 outputs, 4 KiB to 256 MiB, 1.35 GiB
DEFAULT_SIZES = ([256 * MiB] * 3 + [128 * MiB] * 2 + [64 * MiB] * 4 + [32 * MiB] * 2
                 + [16 * MiB, 8 * MiB, 4 * MiB, 2 * MiB, 1 * MiB]
                 + [512 * KiB, 256 * KiB, 128 * KiB, 64 * KiB, 32 * KiB, 16 * KiB, 8 * KiB, 4 * KiB])
ARENA_ALIGN = 256
SHA_BYTES = 4 * MiB        # the hostile rows compare the first this-many bytes on the host


def _load_cuda_ipc():
    """judge/cuda_ipc.py by its path: stdlib only, without the package's __init__ (which imports torch)."""
    spec = importlib.util.spec_from_file_location("kgg_cuda_ipc", ROOT / "kernelgym_gap" / "judge" / "cuda_ipc.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["kgg_cuda_ipc"] = mod
    spec.loader.exec_module(mod)
    return mod


def parse_size(text: str) -> int:
    """'4K', '256M', '1G', '4096' -> bytes (a multiple of 4: the outputs are float32)."""
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    mult = {"K": KiB, "M": MiB, "G": 1 << 30}.get(t[-1:], 1)
    n = int(float(t[:-1] if mult > 1 else t) * mult)
    if n <= 0 or n % 4:
        raise argparse.ArgumentTypeError(f"a size must be a positive multiple of 4 bytes: {text!r}")
    return n


def pick_sizes(sizes: list[int], handles: int | None) -> list[int]:
    """`handles` sizes taken from `sizes` in turn (all of them when None)."""
    if handles is None:
        return list(sizes)
    if handles <= 0:
        raise ValueError("--handles must be positive")
    return [sizes[i % len(sizes)] for i in range(handles)]


def arena_layout(nbytes: list[int]) -> tuple[list[int], int]:
    """Each record's offset in the arena (ARENA_ALIGN-aligned) and the arena's bytes."""
    offs, at = [], 0
    for n in nbytes:
        offs.append(at)
        at += -(-n // ARENA_ALIGN) * ARENA_ALIGN
    return offs, max(at, ARENA_ALIGN)


def quantiles(xs: list[float]) -> tuple[int, float, float]:
    """(n, median, p90) of seconds, in ms; NaN when empty."""
    if not xs:
        return 0, float("nan"), float("nan")
    s = sorted(xs)
    p90 = s[min(len(s) - 1, int(round(0.9 * (len(s) - 1))))]
    return len(s), statistics.median(s) * 1e3, p90 * 1e3


# ---------------------------------------------------------------------------------------------- child side
def _send(obj) -> None:
    sys.stdout.write(_MSG + json.dumps(obj) + "\n")
    sys.stdout.flush()


def _serve(handlers: dict) -> None:
    """One JSON command per stdin line, one reply per command; an exception is a reply, not the end."""
    for line in sys.stdin:
        try:
            cmd = json.loads(line)
            op = cmd.get("op")
            if op == "exit":
                _send({"ok": True})
                return
            reply = handlers[op](cmd)
        except Exception as e:          # noqa: BLE001: every failure goes back as data
            reply = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        _send(reply)


def _err(e: BaseException) -> str:
    return getattr(e, "name", None) or f"{type(e).__name__}: {e}"


def role_opener() -> None:
    t0 = time.perf_counter()
    ci = _load_cuda_ipc()
    _send({"hello": True, "pid": os.getpid(), "import_s": time.perf_counter() - t0})
    t = time.perf_counter()
    try:
        rt = ci.IpcRuntime(0)
    except Exception as e:      # noqa: BLE001
        _send({"ready": False, "error": _err(e)})
        return
    _send({"ready": True, "context_s": time.perf_counter() - t, "cudart": rt.rt_path})
    held: dict[int, tuple[int, int]] = {}

    def copy(cmd):
        """The design's opener: the arena, then each record: open, range check, copy, close."""
        clock = time.perf_counter
        flags = int(cmd.get("flags", ci.IPC_MEM_LAZY_ENABLE_PEER_ACCESS))
        t_all = clock()
        a = cmd["arena"]
        arena = rt.open(ci.handle_from_hex(a["handle"]), flags) + int(a["offset"])
        arena_open_s = clock() - t_all
        out = []
        for r in cmd["records"]:
            row = {"i": r["i"]}
            p = None
            try:
                t = clock()
                p = rt.open(ci.handle_from_hex(r["handle"]), flags)
                row["open_s"] = clock() - t
                t = clock()
                base, size = rt.address_range(p)
                row["range_s"] = clock() - t
                row["segment"] = size
                if base != p or int(r["offset"]) + int(r["nbytes"]) > size:
                    row["status"] = f"refused: base {base:#x} pointer {p:#x} offset {r['offset']} " \
                                    f"bytes {r['nbytes']} size {size}"
                else:
                    t = clock()
                    rt.copy_d2d(arena + int(r["arena_offset"]), p + int(r["offset"]), int(r["nbytes"]))
                    row["copy_s"] = clock() - t
                    row["status"] = "copied"
            except ci.CudaIpcError as e:
                row["status"] = f"error: {e}"
            if p is not None:                 # closed whatever happened after the open
                try:
                    t = clock()
                    rt.close(p)
                    row["close_s"] = clock() - t
                except ci.CudaIpcError as e:
                    row["status"] = row.get("status", "") + f"; close error: {e}"
            out.append(row)
        t = clock()
        rt.close(arena - int(a["offset"]))
        rt.synchronize()
        return {"ok": True, "records": out, "arena_open_s": arena_open_s, "arena_close_s": clock() - t,
                "total_s": clock() - t_all}

    def attempt(cmd):
        """A hostile row's open (and range check, copy to scratch, close), each step's result recorded."""
        res: dict = {"ok": True}
        try:
            h = bytes.fromhex(cmd["handle"])     # raw on purpose: the row may be a malformed handle's bytes
            p = rt.open(h, int(cmd.get("flags", ci.IPC_MEM_LAZY_ENABLE_PEER_ACCESS)))
            res["open"] = "ok"
        except ci.CudaIpcError as e:
            res["open"] = _err(e)
            res["alive"] = rt.alive()
            return res
        off, n = int(cmd.get("offset", 0)), int(cmd.get("nbytes", 0))
        try:
            base, size = rt.address_range(p)
            res.update(range="ok", base_is_pointer=base == p, segment=size)
        except ci.CudaIpcError as e:
            res["range"], size = _err(e), -1
        if cmd.get("check_range", True) and (size < 0 or off + n > size):
            res["copy"] = f"refused by the range check: offset {off} + bytes {n} > size {size}"
        elif n > 0 and cmd.get("hold"):
            held[p] = (off, n)
            res["held"] = p
            return res
        elif n > 0:
            res.update(_copy_out(p, off, n))
        return _closed(p, res)

    def _closed(p, res):
        """Closes the opened handle p (whatever failed after its open) and adds the close and whether the
        context is still usable to `res`."""
        try:
            rt.close(p)
            res["close"] = "ok"
        except ci.CudaIpcError as e:
            res["close"] = _err(e)
        res["alive"] = rt.alive()
        return res

    def _copy_out(p, off, n):
        """Copies n bytes at p+off into scratch memory, then their first SHA_BYTES to the host."""
        res = {}
        try:
            dst = rt.malloc(n)
        except ci.CudaIpcError as e:
            return {"copy": "scratch: " + _err(e)}
        try:
            t = time.perf_counter()
            rt.copy_d2d(dst, p + off, n)
            res["copy_s"] = time.perf_counter() - t
            res["copy"] = "ok"
            res["sha"] = hashlib.sha256(rt.copy_to_host(dst, min(n, SHA_BYTES))).hexdigest()
        except ci.CudaIpcError as e:
            res["copy"] = _err(e)
        try:
            rt.free(dst)
        except ci.CudaIpcError as e:
            res["free"] = _err(e)
        return res

    def copy_held(cmd):
        p = int(cmd["held"])
        off, n = held.pop(p)
        return _closed(p, {"ok": True, **_copy_out(p, off, n)})

    _serve({"copy": copy, "try": attempt, "copy_held": copy_held, "alive": lambda c: {"ok": True,
                                                                                        "alive": rt.alive()}})


def _torch_role_start():
    t0 = time.perf_counter()
    import torch
    torch.cuda.init()
    torch.empty(1, device="cuda")
    torch.cuda.synchronize()
    ci = _load_cuda_ipc()
    rt = ci.IpcRuntime(torch.cuda.current_device())
    _send({"hello": True, "ready": True, "pid": os.getpid(), "context_s": time.perf_counter() - t0,
           "device": torch.cuda.get_device_name(0), "torch": torch.__version__, "cudart": rt.rt_path})
    return torch, ci, rt


def _host_sha(torch, t, k: int = SHA_BYTES) -> str:
    import ctypes
    c = t.reshape(-1).view(torch.uint8)[:k].cpu().contiguous()
    return hashlib.sha256(ctypes.string_at(c.data_ptr(), c.numel())).hexdigest()


def _output(torch, n: int, seed: int):
    """What a kernel returned: float32 noise of n bytes, from a seed the checker can regenerate."""
    g = torch.Generator(device="cuda")
    g.manual_seed(seed)
    return torch.randn(n // 4, generator=g, device="cuda")


def _checksum(torch, t) -> int:
    return int(t.reshape(-1).view(torch.int32).to(torch.int64).sum().item())


def role_exporter() -> None:
    try:
        torch, ci, rt = _torch_role_start()
    except Exception as e:      # noqa: BLE001
        _send({"ready": False, "error": _err(e)})
        return
    sys.path.insert(0, str(ROOT))
    keep: list = []

    def export(c, i, seed, with_torch=True):
        clock = time.perf_counter
        n = c.numel() * c.element_size()
        rec = {"i": i, "nbytes": n, "dtype": "float32", "shape": list(c.shape), "seed": seed}
        share = None
        if with_torch:
            # torch's own export also makes a ref-counter file and an event: if that fails here, the raw export
            # below still runs and the row says why torch's did not
            t = clock()
            try:
                share = c.untyped_storage()._share_cuda_()
                rec["torch_share_s"] = clock() - t
                rec.update(torch_handle_len=len(share[1]), torch_offset=int(share[3]), torch_size=int(share[2]))
            except Exception as e:      # noqa: BLE001
                rec["torch_share_error"] = f"{type(e).__name__}: {e}"[:300]
        t = clock()
        base, size = rt.address_range(c.data_ptr())
        raw = rt.get_handle(base)
        rec["raw_handle_s"] = clock() - t
        rec.update(handle=ci.handle_hex(raw), offset=c.data_ptr() - base, segment=size)
        if share is not None:
            # torch's handle (c10's CUDACachingAllocator): a version byte (2; 3 from torch 2.13), b"c" for a
            # cudaMalloc segment (b"e" for an expandable one: no legacy handle at all), then the 64 raw bytes
            rec["torch_holds_raw"] = raw in bytes(share[1])
            rec["offsets_agree"] = rec["torch_offset"] == rec["offset"]
        try:
            rec["interior_handle_same"] = rt.get_handle(c.data_ptr()) == raw
        except ci.CudaIpcError as e:
            rec["interior_handle_same"] = _err(e)
        return rec

    def make(cmd):
        from kernelgym_gap.core.tensor_file import device_copy
        out = []
        for i, n in enumerate(cmd["sizes"]):
            seed = int(cmd.get("seed", 1000)) + i
            src = _output(torch, n, seed)
            torch.cuda.synchronize()
            t = time.perf_counter()
            c = device_copy(src)              # the child's private copy, as HeldOutputs.add makes it
            torch.cuda.synchronize()
            copy_s = time.perf_counter() - t
            del src
            keep.append(c)
            rec = export(c, i, seed)
            rec["device_copy_s"] = copy_s
            rec["checksum"] = _checksum(torch, c)
            out.append(rec)
        return {"ok": True, "records": out}

    def hold(cmd):
        """One output kept exported (a row's victim): its record and its first bytes' digest."""
        c = _output(torch, int(cmd["nbytes"]), int(cmd.get("seed", 7)))
        torch.cuda.synchronize()
        keep.append(c)
        return {"ok": True, "record": export(c, -1, int(cmd.get("seed", 7)), with_torch=False),
                "sha": _host_sha(torch, c)}

    def freed(cmd):
        n = int(cmd["nbytes"])
        torch.cuda.empty_cache()       # no cached free block to split: the allocation is a segment of its own
        t = torch.full((n,), 0x11, dtype=torch.uint8, device="cuda")
        base, size = rt.address_range(t.data_ptr())
        h = rt.get_handle(base)
        reserved = torch.cuda.memory_reserved()
        del t
        torch.cuda.synchronize()
        torch.cuda.empty_cache()              # the segment goes back to the driver (cudaFree)
        res = {"ok": True, "handle": h.hex(), "offset": 0, "nbytes": n, "segment": size,
               "reserved_freed": reserved - torch.cuda.memory_reserved()}
        if cmd.get("again"):
            t2 = torch.full((n,), 0x22, dtype=torch.uint8, device="cuda")
            torch.cuda.synchronize()
            keep.append(t2)
            base2, _ = rt.address_range(t2.data_ptr())
            res.update(same_base=base2 == base, same_handle=rt.get_handle(base2) == h,
                       new_sha=_host_sha(torch, t2),
                       old_sha=hashlib.sha256(b"\x11" * min(n, SHA_BYTES)).hexdigest())
        return res

    def self_open(cmd):
        res = {"ok": True}
        try:
            p = rt.open(bytes.fromhex(cmd["handle"]))
            res["open"] = "ok"
            try:
                rt.close(p)
            except ci.CudaIpcError as e:
                res["close"] = _err(e)
        except ci.CudaIpcError as e:
            res["open"] = _err(e)
        try:
            res["alive"] = None if float((torch.ones(8, device="cuda") * 2).sum().item()) == 16.0 else "wrong"
        except Exception as e:   # noqa: BLE001
            res["alive"] = _err(e)
        return res

    _serve({"make": make, "hold": hold, "freed": freed, "self_open": self_open})


def role_checker() -> None:
    try:
        torch, ci, rt = _torch_role_start()
    except Exception as e:      # noqa: BLE001
        _send({"ready": False, "error": _err(e)})
        return
    state: dict = {}

    def arena(cmd):
        a = torch.zeros(int(cmd["nbytes"]), dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        state["arena"] = a
        base, size = rt.address_range(a.data_ptr())
        return {"ok": True, "handle": ci.handle_hex(rt.get_handle(base)), "offset": a.data_ptr() - base,
                "segment": size}

    def clear(cmd):
        state["arena"].zero_()
        torch.cuda.synchronize()
        return {"ok": True}

    def verify(cmd):
        t = time.perf_counter()
        a, out = state["arena"], []
        for r in cmd["records"]:
            o, n = int(r["arena_offset"]), int(r["nbytes"])
            view = a[o:o + n].view(torch.float32)         # the checker's view: the dtype it expects
            want = _output(torch, n, int(r["seed"]))
            out.append({"i": r["i"], "exact": bool(torch.equal(view.view(torch.int32), want.view(torch.int32))),
                        "checksum": _checksum(torch, view) == int(r["checksum"])})
        torch.cuda.synchronize()
        return {"ok": True, "records": out, "verify_s": time.perf_counter() - t}

    def alive(cmd):
        try:
            ok = float((torch.ones(8, device="cuda") * 2).sum().item()) == 16.0
            return {"ok": True, "alive": None if ok else "wrong"}
        except Exception as e:   # noqa: BLE001
            return {"ok": True, "alive": _err(e)}

    _serve({"arena": arena, "clear": clear, "verify": verify, "alive": alive})


# ---------------------------------------------------------------------------------------------- parent side
class OutOfTime(Exception):
    pass


class ChildGone(Exception):
    pass


class Deadline:
    def __init__(self, seconds: float):
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()

    def limit(self, step_s: float) -> float:
        """A step's timeout: `step_s`, cut to what the run has left (less 5 s for the tables and the JSON)."""
        left = self.left() - 5
        if left <= 1:
            raise OutOfTime("the run's --timeout-s is spent")
        return min(step_s, left)


class Child:
    """A role's process: JSON lines in and out, stderr's tail kept, its own session (killed as a group)."""

    def __init__(self, name: str, argv: list[str], env: dict, cwd: str | None = None):
        self.name = name
        self.t_start = time.perf_counter()
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env=env, cwd=cwd, start_new_session=True)
        self.q: queue.Queue = queue.Queue()
        self.err: collections.deque = collections.deque(maxlen=30)
        threading.Thread(target=self._read_out, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()

    def _read_out(self):
        for raw in self.proc.stdout:
            line = raw.decode(errors="replace").rstrip("\n")
            if line.startswith(_MSG):
                try:
                    self.q.put((time.perf_counter(), json.loads(line[len(_MSG):])))
                except ValueError:
                    self.err.append("bad message: " + line[:200])
        self.q.put((time.perf_counter(), None))        # EOF: the process is gone or closed stdout

    def _read_err(self):
        for raw in self.proc.stderr:
            self.err.append(raw.decode(errors="replace").rstrip("\n")[:300])

    def tail(self, n: int = 6) -> str:
        return " | ".join(list(self.err)[-n:])

    def recv(self, timeout: float) -> tuple[float, dict]:
        try:
            at, msg = self.q.get(timeout=max(timeout, 0.01))
        except queue.Empty:
            raise TimeoutError(f"{self.name}: no reply in {timeout:.0f} s ({self.tail()})") from None
        if msg is None:
            self.q.put((at, None))
            try:
                rc = self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                rc = None                       # stdout closed, the process not yet gone
            raise ChildGone(f"{self.name} exited (rc {rc}): {self.tail()}")
        return at, msg

    def send(self, obj: dict) -> None:
        try:
            self.proc.stdin.write((json.dumps(obj) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as e:
            raise ChildGone(f"{self.name}: {e} ({self.tail()})") from None

    def call(self, obj: dict, timeout: float) -> dict:
        self.send(obj)
        return self.recv(timeout)[1]

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


class Probe:
    def __init__(self, args):
        self.args = args
        self.deadline = Deadline(args.timeout_s)
        self.children: list[Child] = []
        self.scratches: list[Path] = []        # the sandboxed exporters' working directories
        self.parts: dict[str, list[float]] = collections.defaultdict(list)
        self.rows: list[dict] = []
        self.report: dict = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "errors": [],
                             "config": {k: v for k, v in vars(args).items() if k != "json"}}
        env = dict(os.environ)
        pp = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        env["PYTHONPATH"] = os.pathsep.join(pp + ([str(ROOT)] if str(ROOT) not in pp else []))
        env["PYTHONUNBUFFERED"] = "1"
        self.env = env

    # -- processes
    def argv(self, role: str) -> list[str]:
        return [sys.executable, str(Path(__file__).resolve()), "--role", role]

    def start(self, name: str, role: str, prefix: list[str] | None = None, cwd: str | None = None,
              env: dict | None = None) -> Child:
        c = Child(name, (prefix or []) + self.argv(role), env or self.env, cwd=cwd)
        self.children.append(c)
        return c

    def ready(self, c: Child, step_s: float) -> dict:
        """Waits for the child's ready message (an opener's hello first); its start and context seconds."""
        at, msg = c.recv(self.deadline.limit(step_s))
        if msg.get("hello") and "ready" not in msg:
            self.parts["opener start: python up"].append(at - c.t_start)
            at2, msg2 = c.recv(self.deadline.limit(step_s))
            if not msg2.get("ready"):
                raise ChildGone(f"{c.name} not ready: {msg2.get('error')}")
            self.parts["opener start: context (IpcRuntime)"].append(msg2["context_s"])
            self.parts["opener start to ready"].append(at2 - c.t_start)
            return msg2
        if not msg.get("ready"):
            raise ChildGone(f"{c.name} not ready: {msg.get('error')}")
        return msg

    def opener(self, name: str) -> Child:
        c = self.start(name, "opener")
        self.ready(c, 60)
        return c

    def end(self, c: Child | None) -> None:
        if c is None:
            return
        if c.proc.poll() is None:
            try:
                c.send({"op": "exit"})
                c.proc.wait(timeout=5)
            except (ChildGone, subprocess.TimeoutExpired):
                pass
        c.kill()

    def cleanup(self) -> None:
        for c in self.children:
            c.kill()
        for d in self.scratches:
            shutil.rmtree(d, ignore_errors=True)

    # -- the main rounds
    def main_rounds(self, exporter: Child, checker: Child, sizes: list[int]) -> list[dict]:
        lim = self.deadline.limit
        made = exporter.call({"op": "make", "sizes": sizes, "seed": 1000}, lim(120))
        if not made.get("ok"):
            raise ChildGone(f"exporter make: {made.get('error')} ({exporter.tail()})")
        recs = made["records"]
        self.report["exports"] = recs
        for r in recs:
            self.parts["exporter: device_copy (HeldOutputs.add)"].append(r["device_copy_s"])
            if "torch_share_s" in r:
                self.parts["exporter: torch _share_cuda_"].append(r["torch_share_s"])
            self.parts["exporter: range + cudaIpcGetMemHandle"].append(r["raw_handle_s"])
        offs, total = arena_layout([r["nbytes"] for r in recs])
        for r, o in zip(recs, offs):
            r["arena_offset"] = o
        ar = checker.call({"op": "arena", "nbytes": total}, lim(60))
        if not ar.get("ok"):
            raise ChildGone(f"checker arena: {ar.get('error')}")
        self.report["arena"] = {"bytes": total, **ar}
        rounds = []
        wire = [{k: r[k] for k in ("i", "handle", "offset", "nbytes", "arena_offset")} for r in recs]
        for k in range(self.args.rounds):
            checker.call({"op": "clear"}, lim(30))
            op = self.opener(f"opener round {k}")
            t = time.perf_counter()
            res = op.call({"op": "copy", "arena": {"handle": ar["handle"], "offset": ar["offset"]},
                           "records": wire}, lim(120))
            rt_s = time.perf_counter() - t
            self.end(op)
            if not res.get("ok"):
                raise ChildGone(f"opener copy: {res.get('error')}")
            ver = checker.call({"op": "verify", "records": recs}, lim(120))
            bad = [v["i"] for v in ver.get("records", []) if not (v["exact"] and v["checksum"])]
            status = collections.Counter(r["status"].split(":")[0] for r in res["records"])
            rounds.append({"round": k, "round_trip_s": rt_s, "opener": res, "verify": ver, "mismatched": bad,
                           "status": dict(status)})
            self.parts["round trip (parent: copy command to reply)"].append(rt_s)
            self.parts["opener: arena open"].append(res["arena_open_s"])
            self.parts["checker: verify all (regenerate + compare)"].append(ver.get("verify_s", float("nan")))
            for r in res["records"]:
                for part in ("open", "range", "copy", "close"):
                    if f"{part}_s" in r:
                        self.parts[f"per handle: {part}"].append(r[f"{part}_s"])
                if all(f"{p}_s" in r for p in ("open", "range", "close")):
                    self.parts["per handle: open + range + close"].append(r["open_s"] + r["range_s"] + r["close_s"])
        self.report["rounds"] = rounds
        return recs

    # -- hostile rows
    def row(self, case: str, fn) -> None:
        """Runs one row; whatever it raises becomes its result. Then a fresh opener: does one start and work?"""
        row = {"case": case}
        try:
            row.update(fn())
        except OutOfTime:
            row.update(result="not run (time)", sticky="-", fresh="-")
            self.rows.append(row)
            return
        except Exception as e:          # noqa: BLE001
            row.setdefault("result", f"probe error: {type(e).__name__}: {e}"[:300])
        if "fresh" not in row:
            row["fresh"] = self.fresh_ok()
        row.setdefault("sticky", "-")
        self.rows.append(row)
        print(f"  row: {case}: {row.get('result')} | sticky {row['sticky']} | fresh {row['fresh']}", flush=True)

    def fresh_ok(self) -> str:
        c = None
        try:
            c = self.opener("fresh opener")
            a = c.call({"op": "alive"}, self.deadline.limit(30))
            return "yes" if a.get("alive") is None else f"no: {a.get('alive')}"
        except OutOfTime:
            return "not run (time)"
        except Exception as e:          # noqa: BLE001
            return f"no: {e}"[:200]
        finally:
            self.end(c)

    def attempt(self, cmd: dict, expect_sha: str | None = None, opener: Child | None = None) -> dict:
        """A row's open in a new opener (so that one row's sticky error is not the next row's)."""
        op = opener or self.opener("row opener")
        try:
            res = op.call({"op": "try", **cmd}, self.deadline.limit(60))
        except ChildGone as e:
            self.end(op)
            return {"result": f"opener died: {e}"[:300], "sticky": "opener died"}
        finally:
            if opener is None:
                self.end(op)
        return self.describe(res, expect_sha)

    @staticmethod
    def describe(res: dict, expect_sha: str | None, old_sha: str | None = None) -> dict:
        if not res.get("ok", True) and "error" in res:
            return {"result": f"error: {res['error']}", "detail": res}
        parts = [f"open {res.get('open', '-')}"]
        if "range" in res:
            parts.append(f"range {res['range']}" + ("" if res.get("base_is_pointer", True) else " (base != pointer)"))
        if "copy" in res:
            c = res["copy"]
            if c == "ok" and expect_sha is not None and old_sha is None:
                c = "ok, bytes " + ("match" if res.get("sha") == expect_sha else "differ")
            elif c == "ok" and expect_sha is not None:       # freed then allocated again: whose bytes?
                c = "ok, the bytes are " + ("the NEW allocation's" if res.get("sha") == expect_sha else
                                            "the OLD memory's" if res.get("sha") == old_sha else "neither's")
            parts.append(f"copy {c}")
        if "close" in res:
            parts.append(f"close {res['close']}")
        alive = res.get("alive", "?")
        sticky = "no" if alive is None else f"yes: {alive}"
        return {"result": "; ".join(parts), "sticky": sticky, "detail": res}

    def hostile(self, exporter: Child, recs: list[dict], spares: dict[str, Child | str]) -> None:
        lim = self.deadline.limit
        ok_rec = next((r for r in recs if r["nbytes"] <= 4 * MiB), recs[-1])

        def flags0():
            return self.attempt({"handle": ok_rec["handle"], "offset": ok_rec["offset"], "nbytes": ok_rec["nbytes"],
                                 "flags": 0})
        self.row("open with flags=0 (the design's no peer-access flag; the docs say it must be 1)", flags0)

        self.row("random 64 handle bytes", lambda: self.attempt({"handle": os.urandom(64).hex(), "nbytes": 4096}))

        def freed():
            f = exporter.call({"op": "freed", "nbytes": 32 * MiB}, lim(60))
            if not f.get("ok"):
                return {"result": f"exporter: {f.get('error')}"}
            d = self.attempt({"handle": f["handle"], "offset": 0, "nbytes": MiB})
            d["result"] += f" (segment {f['segment']} B, {f['reserved_freed']} B back to the driver)"
            return d
        self.row("handle of memory freed (empty_cache) before the open", freed)

        def realloc():
            f = exporter.call({"op": "freed", "nbytes": 32 * MiB, "again": True}, lim(60))
            if not f.get("ok"):
                return {"result": f"exporter: {f.get('error')}"}
            op = self.opener("row opener")
            try:
                res = op.call({"op": "try", "handle": f["handle"], "offset": 0, "nbytes": MiB}, lim(60))
            finally:
                self.end(op)
            d = self.describe(res, f["new_sha"], f["old_sha"])
            d["result"] += f" (new allocation at the same address: {f['same_base']}; same handle: {f['same_handle']})"
            return d
        self.row("handle of memory freed then allocated again", realloc)

        def extent():
            h = exporter.call({"op": "hold", "nbytes": 32 * MiB, "seed": 11}, lim(60))
            r = h["record"]
            return self.attempt({"handle": r["handle"], "offset": r["offset"], "nbytes": r["segment"] - r["offset"]
                                 + 4096, "check_range": True})
        self.row("extent past the allocation (the range check)", extent)

        for case, ex in spares.items():
            if case.startswith("namespace"):
                self.row(case, lambda ex=ex: self.namespace_row(ex))
        if "victim stop" in spares:
            self.row("exporter SIGSTOPped while the opener copies, SIGKILLed after the close",
                     lambda: self.stop_row(spares["victim stop"]))
        if "victim kill" in spares:
            self.row("exporter SIGKILLed while the opener holds the mapping",
                     lambda: self.kill_row(spares["victim kill"]))

        def unchecked():
            h = exporter.call({"op": "hold", "nbytes": 32 * MiB, "seed": 12}, lim(60))
            r = h["record"]
            return self.attempt({"handle": r["handle"], "offset": r["offset"],
                                 "nbytes": r["segment"] - r["offset"] + 64 * MiB, "check_range": False})
        self.row("copy past the extent WITHOUT the range check (why the check; disposable opener)", unchecked)

        # last: if opening its own handle poisons the exporter's context, no later row needs the exporter
        def self_open():
            r = exporter.call({"op": "self_open", "handle": ok_rec["handle"]}, lim(60))
            alive = r.get("alive")
            return {"result": f"open {r.get('open')}" + (f"; close {r['close']}" if "close" in r else ""),
                    "sticky": "no" if alive is None else f"yes: {alive}", "detail": r, "fresh": "-"}
        self.row("the exporter opening its own handle", self_open)

    def namespace_row(self, ex) -> dict:
        if isinstance(ex, str):
            return {"result": ex, "sticky": "-", "fresh": "-"}
        h = ex.call({"op": "hold", "nbytes": 4 * MiB, "seed": 21}, self.deadline.limit(60))
        if not h.get("ok"):
            return {"result": f"exporter: {h.get('error')}"}
        r = h["record"]
        d = self.attempt({"handle": r["handle"], "offset": r["offset"], "nbytes": r["nbytes"]}, h["sha"])
        self.end(ex)
        return d

    def stop_row(self, ex) -> dict:
        if isinstance(ex, str):
            return {"result": ex, "sticky": "-", "fresh": "-"}
        h = ex.call({"op": "hold", "nbytes": 256 * MiB, "seed": 31}, self.deadline.limit(60))
        r = h["record"]
        os.kill(ex.proc.pid, signal.SIGSTOP)
        try:
            d = self.attempt({"handle": r["handle"], "offset": r["offset"], "nbytes": r["nbytes"]}, h["sha"])
        finally:
            ex.kill()                          # SIGKILL reaches a stopped process
        return d

    def kill_row(self, ex) -> dict:
        if isinstance(ex, str):
            return {"result": ex, "sticky": "-", "fresh": "-"}
        lim = self.deadline.limit
        h = ex.call({"op": "hold", "nbytes": 64 * MiB, "seed": 41}, lim(60))
        r = h["record"]
        op = self.opener("row opener")
        try:
            first = op.call({"op": "try", "handle": r["handle"], "offset": r["offset"], "nbytes": r["nbytes"],
                             "hold": True}, lim(60))
            if "held" not in first:
                return self.describe(first, h["sha"])
            ex.kill()                          # SIGKILL and waitpid: the exporter's context is torn down
            time.sleep(1.0)
            try:
                res = op.call({"op": "copy_held", "held": first["held"]}, lim(60))
                d = self.describe({**first, **res}, h["sha"])
            except ChildGone as e:
                d = {"result": f"opener died at the copy: {e}"[:300], "sticky": "opener died"}
        finally:
            self.end(op)
        chk = self.report.get("_checker")
        if chk is not None:
            try:
                a = chk.call({"op": "alive"}, lim(30))
                v = chk.call({"op": "verify", "records": self.report.get("exports", [])}, lim(120))
                bad = [x["i"] for x in v.get("records", []) if not (x["exact"] and x["checksum"])]
                d["result"] += f"; checker: alive {'yes' if a.get('alive') is None else a.get('alive')}, " \
                               f"its arena {'intact' if not bad else f'{len(bad)} outputs differ'}"
            except Exception as e:      # noqa: BLE001
                d["result"] += f"; checker: {e}"[:200]
        return d

    # -- the namespace exporters (started early: their torch start overlaps the main rounds' set-up)
    def namespace_exporters(self) -> dict[str, Child | str]:
        out: dict[str, Child | str] = {}
        root = os.geteuid() == 0
        try:
            from kernelgym_gap.core.config import SandboxConfig
            from kernelgym_gap.sandbox.isolation import bwrap_argv, choose_isolation, try_mode, unshare_argv
            from kernelgym_gap.sandbox.scratch import prepare_scratch
        except Exception as e:          # noqa: BLE001
            out["namespace: the sandbox's"] = f"not possible here: the sandbox modules: {e}"
            return out
        dev = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0] or "0"
        for label, uid_setting in (("namespace: the sandbox's (its isolation and uid)", "auto"),
                                   ("namespace: the sandbox's, uid kept", None)):
            try:
                cfg = SandboxConfig(gpu_devices=(0,), uid=uid_setting)
                scratch = Path(tempfile.mkdtemp(prefix="kgg-ipc-probe-"))
                self.scratches.append(scratch)
                isolation, uid = choose_isolation(cfg, scratch)
                if isolation == "none":
                    why = "; ".join(f"{k}: {try_mode(k)[1]}" for k in ("bwrap", "unshare"))
                    out[label] = f"not possible here: the sandbox's isolation is none ({why})"
                    continue
                prepare_scratch(scratch, uid)
                prefix = (bwrap_argv(scratch, cfg, uid, privileged=root) if isolation == "bwrap"
                          else unshare_argv(scratch, cfg, uid))
                env = {"PATH": "/usr/bin:/bin", "HOME": str(scratch), "PYTHONPATH": self.env["PYTHONPATH"],
                       "PYTHONUNBUFFERED": "1", "CUDA_VISIBLE_DEVICES": dev}
                if os.environ.get("LD_LIBRARY_PATH"):          # where a CUDA install puts the runtime
                    env["LD_LIBRARY_PATH"] = os.environ["LD_LIBRARY_PATH"]
                out[f"{label}: {isolation}, uid {uid}"] = self.start(label, "exporter", prefix, cwd=str(scratch),
                                                                      env=env)
            except Exception as e:      # noqa: BLE001
                out[label] = f"not possible here: {type(e).__name__}: {e}"[:300]
        for label, flags in (("namespace: pid alone (unshare --pid)", ["--pid", "--fork", "--kill-child",
                                                                       "--mount-proc"]),
                             ("namespace: net alone (unshare --net)", ["--net"]),
                             ("namespace: ipc alone (unshare --ipc)", ["--ipc"])):
            if not (root and shutil.which("unshare")):
                out[label] = "not possible here: needs root and util-linux unshare"
                continue
            out[label] = self.start(label, "exporter", ["unshare", *flags, "--"])
        return out

    # -- the run
    def run(self, sizes: list[int]) -> int:
        rc = 0
        exporter = checker = None
        spares: dict = {}
        try:
            exporter = self.start("exporter", "exporter")
            checker = self.start("checker", "checker")
            if not self.args.skip_hostile:
                spares = self.namespace_exporters()
                spares["victim stop"] = self.start("victim stop", "exporter")
                spares["victim kill"] = self.start("victim kill", "exporter")
            info = self.ready(checker, 120)
            self.report["device"], self.report["torch"] = info.get("device"), info.get("torch")
            self.report["cudart"] = info.get("cudart")
            self.parts["torch process: start to context"].append(info["context_s"])
            self.ready(exporter, 120)
            # every other torch process up before anything is timed: their starts (CUDA contexts made) would
            # overlap the rounds; one that does not start is its row's answer
            spares_end = time.monotonic() + 60          # one wait for all: they started together
            for name, c in list(spares.items()):
                if isinstance(c, Child):
                    try:
                        self.ready(c, max(1.0, spares_end - time.monotonic()))
                    except (ChildGone, TimeoutError) as e:
                        spares[name] = f"the exporter did not start: {e}"[:400]
                        c.kill()
            self.report["_checker"] = checker
            print(f"device {info.get('device')}, torch {info.get('torch')}, libcudart {info.get('cudart')}",
                  flush=True)
            recs = self.main_rounds(exporter, checker, sizes)
            if not self.args.skip_hostile:
                self.hostile(exporter, recs, spares)
        except OutOfTime as e:
            self.report["errors"].append(str(e))
            rc = 1
        except Exception as e:          # noqa: BLE001: the tables still print
            self.report["errors"].append(f"{type(e).__name__}: {e}"[:500])
            rc = 1
        finally:
            self.report.pop("_checker", None)
            self.cleanup()
        return rc

    def tables(self, sizes: list[int]) -> str:
        from kernelgym_gap.sim.ipc_outputs import (COPY_BYTES_PER_S, OPEN_S_PER_OUTPUT, OPENER_FIXED_S,
                                                   measured_figures)
        lines = []
        exports = self.report.get("exports", [])
        if exports:
            agree = sum(1 for r in exports if r.get("torch_holds_raw") and r.get("offsets_agree"))
            failed = [r["torch_share_error"] for r in exports if "torch_share_error" in r]
            if failed:
                lines.append(f"torch's _share_cuda_ failed on {len(failed)} outputs: {failed[0]}")
            inner = sum(1 for r in exports if r.get("interior_handle_same") is True)
            seg = [(r["nbytes"], r["segment"]) for r in exports]
            lines.append(f"exports: {len(exports)}; torch's handle holds the raw one at the same offset: {agree}; "
                         f"an interior pointer's handle = the base's: {inner}; segment/bytes: "
                         + ", ".join(f"{n // KiB}K->{s // KiB}K" for n, s in seg[-8:]))
        for r in self.report.get("rounds", []):
            lines.append(f"round {r['round']}: {r['status']}, mismatched outputs {r['mismatched'] or 'none'}")
        lines.append(f"{'part':<48} {'n':>4} {'median ms':>10} {'p90 ms':>9}")
        for name, xs in self.parts.items():
            n, med, p90 = quantiles(xs)
            lines.append(f"{name:<48} {n:>4} {med:>10.3f} {p90:>9.3f}")
        if self.rows:
            lines.append("")
            lines.append(f"{'case':<80} | result | sticky? | fresh process ok?")
            for r in self.rows:
                lines.append(f"{r['case']:<80} | {r.get('result')} | {r.get('sticky')} | {r.get('fresh')}")
        # the simulator's figures beside this run's, reduced by the simulator's own measured_figures (the same
        # reduction its test applies to the committed probe JSON)
        nbytes = sum(sizes)
        lines.append("")
        lines.append(f"{'figure (kernelgym_gap/sim/ipc_outputs.py)':<58} {'simulator':>10} {'measured':>10}")
        try:
            got = measured_figures(self.parts, nbytes)
        except ValueError as e:
            lines.append(f"no measured figures: {e}")
        else:
            model = OPENER_FIXED_S + OPEN_S_PER_OUTPUT * len(sizes) + 2 * nbytes / COPY_BYTES_PER_S
            whole = f"whole hand-over of {len(sizes)} outputs, {nbytes / (1 << 30):.2f} GiB (ms)"
            for label, sim, meas in (
                    ("per handle: open + range check + close (ms)", OPEN_S_PER_OUTPUT * 1e3,
                     got.open_s_per_output * 1e3),
                    ("opener round trip less handles and copies (ms)", OPENER_FIXED_S * 1e3, got.opener_fixed_s * 1e3),
                    ("copy rate, bytes read + written (TB/s)", COPY_BYTES_PER_S / 1e12, got.copy_bytes_per_s / 1e12),
                    (whole, model * 1e3, got.handover_s * 1e3)):
                lines.append(f"{label:<58} {sim:>10.2f} {meas:>10.2f}")
        for e in self.report["errors"]:
            lines.append(f"error: {e}")
        return "\n".join(lines)


def has_cuda() -> bool:
    try:
        import torch
        return bool(torch.cuda.is_available())
    except Exception:       # noqa: BLE001: no torch or a broken one: no device either way
        return False


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--role", choices=("exporter", "checker", "opener"), help=argparse.SUPPRESS)
    ap.add_argument("--handles", type=int, default=None, help="outputs to hand over (default: one per size)")
    ap.add_argument("--sizes", default=None,
                    help="comma-separated output sizes (4K, 256M, ...); default: 24 from 4 KiB to 256 MiB, 1.35 GiB")
    ap.add_argument("--rounds", type=int, default=3, help="hand-overs, each by a fresh opener (default 3)")
    ap.add_argument("--json", default=None, help="write every row and timing here")
    ap.add_argument("--timeout-s", type=float, default=240.0, help="the whole run's limit (default 240)")
    ap.add_argument("--skip-hostile", action="store_true", help="only the timed hand-overs")
    args = ap.parse_args(argv)
    if args.role:
        {"exporter": role_exporter, "checker": role_checker, "opener": role_opener}[args.role]()
        return 0
    try:
        sizes = [parse_size(s) for s in args.sizes.split(",")] if args.sizes else DEFAULT_SIZES
        sizes = pick_sizes(sizes, args.handles)
    except (ValueError, argparse.ArgumentTypeError) as e:
        ap.error(str(e))
    if args.rounds <= 0:
        ap.error("--rounds must be positive")
    if not has_cuda():
        print(NO_CUDA_LINE)
        return 2
    sys.path.insert(0, str(ROOT))
    probe = Probe(args)
    alloc_conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
    probe.report["PYTORCH_CUDA_ALLOC_CONF"] = alloc_conf
    print(f"ipc probe: {len(sizes)} outputs, {sum(sizes) / (1 << 30):.2f} GiB, {args.rounds} rounds, "
          f"limit {args.timeout_s:.0f} s"
          + (f"; PYTORCH_CUDA_ALLOC_CONF={alloc_conf} (expandable segments have no legacy handle)"
             if alloc_conf else ""), flush=True)
    rc = probe.run(sizes)
    probe.report["parts"] = {k: list(v) for k, v in probe.parts.items()}
    probe.report["rows"] = probe.rows
    try:
        text = probe.tables(sizes)
    except Exception as e:      # noqa: BLE001: the JSON below still keeps every row and timing
        text = f"the tables failed: {type(e).__name__}: {e}"
        rc = 1
    probe.report["table"] = text
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(probe.report, indent=1, default=str))
    print(text, flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
