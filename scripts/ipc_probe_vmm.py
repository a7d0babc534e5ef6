#!/usr/bin/env python3
"""The GPU probe of the second route for the outputs' hand-over (issue 35; docs/measurement.md, "The pid
namespace, and the second route (VMM file descriptors)"): CUDA VMM allocations exported as POSIX fds and handed
over by SCM_RIGHTS on Unix socket pairs, the mechanism alone (kernelgym_gap/core/cuda_vmm.py). One run, never
hanging: every child has a timeout (killed as a process group) and every failure is a row.

  exporter  (torch + core/cuda_vmm) makes N outputs (seeded random int32, 4 KiB .. 256 MiB, ~1.35 GiB for the
            default 24), makes an exported VMM copy of each (create + map + copy + export, timed) and sends one
            record {offset, nbytes, dtype, shape} with its fd per message
  checker   (torch + core/cuda_vmm) allocates one VMM arena for all N, exports it to the opener the same way
            (trusted to trusted), and when the opener says done regenerates every output from its seed and compares
            it with its slot of the arena, bit for bit
  opener    (core/cuda_vmm alone, loaded by its path: `import kernelgym_gap` imports torch) imports and maps the
            arena, then for each record: import + properties + map + copy + unmap/release (timed), fd closed

Rows: (a) all three in the root namespaces; (b) the exporter inside the sandbox's own namespaces, started with
sandbox/isolation.py's bwrap_argv and unshare_argv (a fresh uid when root, as SandboxedChild does) and, where
neither works, a bare `unshare --pid --ipc --net --fork --mount-proc`; its socket end passed with pass_fds;
(c) hostile: a regular file, a pipe, /dev/zero and /dev/nvidiactl sent as the output's fd (with the opener's
pre-filter and without it, so the driver's own answer is seen), an extent past the allocation, nbytes larger than
the allocation, the exporter SIGKILLed after sending while the opener holds the mapping (the memory must stay
valid); after each hostile row, whether the same opener can still do CUDA work and whether a fresh process can.

Tables print last: the parts' medians and p90 (ms), the round trips, the hostile rows. On a machine without CUDA
it exits 2 with one line.

    python scripts/ipc_probe_vmm.py --json /tmp/out/ipc_probe_vmm/ipc_probe_vmm.json   # device_session ipc-probe-vmm
"""
from __future__ import annotations

import argparse
import collections
import ctypes
import fcntl
import importlib.util
import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NO_CUDA_LINE = "ipc_probe_vmm: no CUDA device (libcuda.so.1 not loadable or no device): the probe runs on a GPU " \
               "(scripts/device_session.sh ipc-probe-vmm)"
_MSG = "@@"
MiB = 1 << 20
FD_AT = 300              # the children's socket ends sit here: clear of unshare_argv's shell, which uses fds 3..9
HOSTILE_FILL = 0xA5


def _load(name: str):
    """core/<name>.py by its path (stdlib only), without the package's __init__ (which imports torch)."""
    if f"kgg_{name}" in sys.modules:
        return sys.modules[f"kgg_{name}"]
    spec = importlib.util.spec_from_file_location(f"kgg_{name}", ROOT / "kernelgym_gap" / "core" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[f"kgg_{name}"] = mod
    spec.loader.exec_module(mod)
    return mod


def load_vmm():
    """core/cuda_vmm.py and core/fd_channel.py as one namespace: the driver's calls and the channel's."""
    vmm, ch = _load("cuda_vmm"), _load("fd_channel")
    for k in ("socket_pair", "send_output", "recv_output", "recv_message", "parse_record", "ChannelRefused"):
        setattr(vmm, k, getattr(ch, k))
    return vmm


def cuda_present() -> str | None:
    """None when libcuda loads and sees a device (no context is made), else the reason."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        return str(e)
    n = ctypes.c_int(0)
    if lib.cuInit(0) != 0 or lib.cuDeviceGetCount(ctypes.byref(n)) != 0 or n.value < 1:
        return "cuInit or cuDeviceGetCount failed, or no device"
    return None


def _legacy_probe():
    """scripts/ipc_probe.py by its path (stdlib at import): the sizes, the arena's layout and the summary are
    that probe's, so that the two routes are probed on the same outputs and summarised alike."""
    if "kgg_ipc_probe" not in sys.modules:
        spec = importlib.util.spec_from_file_location("kgg_ipc_probe", Path(__file__).resolve().parent / "ipc_probe.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules["kgg_ipc_probe"] = mod
        spec.loader.exec_module(mod)
    return sys.modules["kgg_ipc_probe"]


_legacy = _legacy_probe()
DEFAULT_SIZES, arena_layout, quantiles = _legacy.DEFAULT_SIZES, _legacy.arena_layout, _legacy.quantiles


def pick_sizes(handles: int | None) -> list[int]:
    return _legacy.pick_sizes(DEFAULT_SIZES, handles)


# ---------------------------------------------------------------------------------------------- child side
def _say(obj) -> None:
    sys.stdout.write(_MSG + json.dumps(obj) + "\n")
    sys.stdout.flush()


def _err(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


def _sock(fd: int) -> socket.socket:
    return socket.socket(fileno=fd)


def _torch_output(torch, n: int, seed: int):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randint(-(2 ** 31), 2 ** 31 - 1, (n // 4,), dtype=torch.int32, device="cuda", generator=g)


def role_exporter(a) -> None:
    import torch
    vmm = load_vmm()
    torch.cuda.init()
    drv = vmm.VmmDriver(0)
    s = _sock(a.sock)
    sizes = [int(x) for x in a.sizes.split(",")]
    held, times = [], []
    stream = torch.cuda.current_stream().cuda_stream
    for i, n in enumerate(sizes):
        t = _torch_output(torch, n, a.seed + i)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        alloc, fd = drv.export_copy(t.data_ptr(), n, stream)
        times.append(time.perf_counter() - t0)
        held.append((alloc, fd))
        del t
    kinds = sorted({vmm.fd_kind(fd) for _, fd in held})
    for i, ((alloc, fd), n) in enumerate(zip(held, sizes)):
        vmm.send_output(s, fd, {"offset": 0, "nbytes": n, "dtype": "int32", "shape": [n // 4], "i": i})
        os.close(fd)                           # the receiver's copy (and the allocation's handle) keep it alive
    _say({"sent": len(sizes), "export_s": times, "fd_kinds": kinds, "granularity": drv.granularity,
          "pid_ns": os.readlink("/proc/self/ns/pid"), "uid": os.getuid()})
    try:                                       # held until the opener is done (a kill row tests the other case)
        vmm.recv_message(s, timeout_s=a.wait_s)
    except vmm.ChannelRefused:
        pass
    for alloc, _ in held:
        drv.free(alloc)


def role_checker(a) -> None:
    import torch
    vmm = load_vmm()
    torch.cuda.init()
    drv = vmm.VmmDriver(0)
    s = _sock(a.sock)
    sizes = [int(x) for x in a.sizes.split(",")]
    offs, total = arena_layout(sizes)
    arena = drv.allocate(total)
    drv.memset(arena.ptr, 0, arena.size)
    fd = drv.export_fd(arena.handle)
    vmm.send_output(s, fd, {"offset": 0, "nbytes": arena.size, "dtype": "uint8", "shape": [arena.size]})
    os.close(fd)
    msg, _ = vmm.recv_message(s, timeout_s=a.wait_s)
    if msg != b"done":
        _say({"error": f"opener said {msg[:80]!r}"})
        return

    # each slot copied out into a torch tensor by the driver (no torch view of driver-owned memory), then
    # compared with the output regenerated from its seed, bit for bit
    bad, t0 = [], time.perf_counter()
    for i, (n, off) in enumerate(zip(sizes, offs)):
        got = torch.empty(n // 4, dtype=torch.int32, device="cuda")
        torch.cuda.synchronize()
        drv.copy_d2d(got.data_ptr(), arena.ptr + off, n)
        if not torch.equal(got, _torch_output(torch, n, a.seed + i)):
            bad.append(i)
    _say({"verified": len(sizes) - len(bad), "mismatched": bad, "verify_s": time.perf_counter() - t0})
    drv.free(arena)


def role_opener(a) -> None:
    t_py = time.time() - a.t0
    vmm = load_vmm()
    t1 = time.perf_counter()
    drv = vmm.VmmDriver(0)
    start = {"python_s": t_py, "context_s": time.perf_counter() - t1, "to_first_cuda_s": time.time() - a.t0}
    arena_sock, s = _sock(a.arena_sock), _sock(a.sock)
    rec, fd = vmm.recv_output(arena_sock, timeout_s=a.wait_s)
    ah = drv.import_fd(fd, prefilter=False)   # the checker's: trusted, and its fd kind is what the probe learns
    os.close(fd)
    arena_size = vmm.round_up(rec["nbytes"], drv.granularity)
    arena_ptr = drv.map(ah, arena_size)
    offs = [int(x) for x in a.offsets.split(",")]
    parts, errors = [], []
    t_first = None
    for i in range(a.n):
        try:
            rec, fd = vmm.recv_output(s, timeout_s=a.wait_s)
        except vmm.ChannelRefused as e:   # silent, closed or broken: the records after it would not come either
            errors.append(f"{i}: channel: {e}")
            break
        try:
            t_first = t_first or time.perf_counter()
            times: dict = {}
            t0 = time.perf_counter()
            drv.copy_from_fd(fd, rec, arena_ptr + offs[i], times=times)
            times["total_s"] = time.perf_counter() - t0
            parts.append(times)
        except Exception as e:     # noqa: BLE001: a failure is data for the row
            errors.append(f"{i}: {_err(e)}")
    handover_s = time.perf_counter() - t_first if t_first else None
    for sk in (arena_sock, s):
        try:
            sk.send(b"done")
        except OSError as e:
            errors.append(f"done: {e}")
    drv.unmap(arena_ptr, arena_size)
    drv.release(ah)
    _say({"start": start, "parts": parts, "errors": errors, "handover_s": handover_s})


def role_hexporter(a) -> None:
    """A hostile exporter: sends one record and fd chosen by --case (no torch)."""
    vmm = load_vmm()
    s = _sock(a.sock)
    rec = {"offset": 0, "nbytes": 4096, "dtype": "uint8", "shape": [4096]}
    if a.case in ("file", "pipe", "devzero", "nvidiactl"):
        if a.case == "file":
            f = tempfile.TemporaryFile()
            f.write(b"\0" * 8192)
            f.flush()
            fd = os.dup(f.fileno())
        elif a.case == "pipe":
            fd, _w = os.pipe()
        elif a.case == "devzero":
            fd = os.open("/dev/zero", os.O_RDONLY)
        else:
            fd = os.open("/dev/nvidiactl", os.O_RDWR)
        socket.send_fds(s, [json.dumps(rec).encode()], [fd])   # raw send: a hostile child need not use send_output
        _say({"sent": a.case, "fd_kind": vmm.fd_kind(fd)})
    else:
        drv = vmm.VmmDriver(0)
        alloc = drv.allocate(a.nbytes)
        drv.memset(alloc.ptr, HOSTILE_FILL, alloc.size)
        fd = drv.export_fd(alloc.handle)
        if a.case == "extent":             # 8 KiB from 4 KiB before the end: past the allocation
            rec = {"offset": alloc.size - 4096, "nbytes": 8192, "dtype": "uint8", "shape": [8192]}
        elif a.case == "nbytes":           # offset 0, one granule more than the allocation
            n = alloc.size + drv.granularity
            rec = {"offset": 0, "nbytes": n, "dtype": "uint8", "shape": [n]}
        else:                              # "kill": an honest record; the parent kills this process later
            rec = {"offset": 0, "nbytes": alloc.size, "dtype": "uint8", "shape": [alloc.size]}
        socket.send_fds(s, [json.dumps(rec).encode()], [fd])
        os.close(fd)
        _say({"sent": a.case, "size": alloc.size, "record": rec})
    time.sleep(a.wait_s)                   # alive until killed or the opener is done


def role_hopener(a) -> None:
    """Receives one record and fd and tries the opener's sequence; with --pause, stops after the map (says
    "mapped") until a line on stdin, then copies and checks the bytes are the hostile exporter's fill."""
    vmm = load_vmm()
    drv = vmm.VmmDriver(0)
    s = _sock(a.sock)
    out: dict = {}
    dst = None
    try:
        rec, fd = vmm.recv_output(s, timeout_s=a.wait_s)
        out["fd_kind"] = vmm.fd_kind(fd)
        dst = drv.allocate(min(rec["nbytes"], 1 << 30))
        if not a.pause:
            drv.copy_from_fd(fd, rec, dst.ptr, prefilter=not a.no_prefilter)
            out["result"] = "copied"
        else:
            size = vmm.round_up(rec["offset"] + rec["nbytes"], drv.granularity)
            h = drv.import_fd(fd)
            os.close(fd)
            ptr = drv.map(h, size)
            _say({"mapped": True})
            sys.stdin.readline()           # the parent killed the exporter meanwhile
            drv.copy_d2d(dst.ptr, ptr + rec["offset"], rec["nbytes"])
            n = rec["nbytes"]
            ok = all(drv.copy_to_host(dst.ptr + o, 4096) == bytes([HOSTILE_FILL]) * 4096
                     for o in (0, max(0, n // 2 - 4096), max(0, n - 4096)))
            drv.unmap(ptr, size)
            drv.release(h)
            out["result"] = "copied, bytes intact" if ok else "copied, BYTES CHANGED"
    except Exception as e:                 # noqa: BLE001: the row's answer
        out["result"] = _err(e)
        out["error_type"] = type(e).__name__
    out["opener_alive"] = drv.alive() or "yes"
    if dst is not None:
        try:
            drv.free(dst)
        except Exception:                  # noqa: BLE001: a poisoned context; the row already says so
            pass
    _say(out)


def role_fresh(a) -> None:
    vmm = load_vmm()
    try:
        _say({"alive": vmm.VmmDriver(0).alive() or "yes"})
    except Exception as e:                 # noqa: BLE001
        _say({"alive": _err(e)})


ROLES = {"exporter": role_exporter, "checker": role_checker, "opener": role_opener, "hexporter": role_hexporter,
         "hopener": role_hopener, "fresh": role_fresh}


# ---------------------------------------------------------------------------------------------- parent side
class Child:
    """A role's process in its own session: "@@" JSON lines read by a thread, stderr's tail kept."""

    def __init__(self, name: str, argv: list[str], env: dict, pass_fds=(), cwd: str | None = None):
        self.name, self.t_start = name, time.perf_counter()
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env=env, cwd=cwd, start_new_session=True, pass_fds=tuple(pass_fds))
        self.q: queue.Queue = queue.Queue()
        self.err: collections.deque = collections.deque(maxlen=20)
        threading.Thread(target=self._out, daemon=True).start()
        threading.Thread(target=self._errs, daemon=True).start()

    def _out(self):
        for raw in self.proc.stdout:
            line = raw.decode(errors="replace").rstrip("\n")
            if line.startswith(_MSG):
                try:
                    self.q.put((time.perf_counter(), json.loads(line[len(_MSG):])))
                except ValueError:
                    self.err.append("bad message: " + line[:200])
        self.q.put((time.perf_counter(), None))

    def _errs(self):
        for raw in self.proc.stderr:
            self.err.append(raw.decode(errors="replace").rstrip("\n")[:300])

    def tail(self, n: int = 4) -> str:
        return " | ".join(list(self.err)[-n:])

    def recv(self, timeout: float) -> tuple[float, dict]:
        try:
            at, msg = self.q.get(timeout=max(timeout, 0.01))
        except queue.Empty:
            raise TimeoutError(f"{self.name}: nothing in {timeout:.0f} s ({self.tail()})") from None
        if msg is None:
            self.q.put((at, None))
            try:
                rc = self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                rc = None
            raise RuntimeError(f"{self.name} exited (rc {rc}) without its report: {self.tail()}")
        return at, msg

    def kill(self, sig=signal.SIGKILL) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def _pair() -> tuple[int, int]:
    """A SOCK_SEQPACKET pair as two fds at or above FD_AT (inheritable only through pass_fds)."""
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    fa = fcntl.fcntl(a.fileno(), fcntl.F_DUPFD_CLOEXEC, FD_AT)
    fb = fcntl.fcntl(b.fileno(), fcntl.F_DUPFD_CLOEXEC, FD_AT)
    a.close()
    b.close()
    return fa, fb


class Probe:
    def __init__(self, args):
        self.args = args
        self.end = time.monotonic() + args.timeout_s
        self.children: list[Child] = []
        self.parts: dict[str, list[float]] = collections.defaultdict(list)
        self.rounds: list[dict] = []
        self.hostile: list[dict] = []
        env = dict(os.environ)
        pp = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        env["PYTHONPATH"] = os.pathsep.join(pp + ([str(ROOT)] if str(ROOT) not in pp else []))
        env["PYTHONUNBUFFERED"] = "1"
        self.env = env

    def left(self, step_s: float) -> float:
        left = self.end - time.monotonic() - 5
        if left <= 1:
            raise TimeoutError("the run's --timeout-s is spent")
        return min(step_s, left)

    def start(self, name: str, role: str, extra: list[str], fds=(), prefix=(), cwd=None, env=None) -> Child:
        argv = list(prefix) + [sys.executable, str(Path(__file__).resolve()), "--role", role,
                               "--wait-s", str(self.args.child_s)] + extra
        c = Child(name, argv, env or self.env, pass_fds=fds, cwd=cwd)
        self.children.append(c)
        return c

    def sandboxes(self) -> list[tuple[str, list[str], dict, str | None]]:
        """(name, argv prefix, env, cwd) for the exporter in the sandbox's namespaces: isolation.py's own argv
        builders where they work here, with a fresh uid when root (SandboxedChild's choice), else bare unshare."""
        out = []
        try:
            from kernelgym_gap.core.config import SandboxConfig
            from kernelgym_gap.sandbox import isolation
        except Exception as e:             # noqa: BLE001
            print(f"note: sandbox/isolation.py not importable ({_err(e)}); bare unshare only", file=sys.stderr)
            isolation = None
        env = dict(self.env, CUDA_VISIBLE_DEVICES=os.environ.get("CUDA_VISIBLE_DEVICES", "0"))
        if isolation is not None:
            cfg = SandboxConfig(gpu_devices=(0,))
            for kind in ("bwrap", "unshare"):
                uid = None
                if os.geteuid() == 0 and isolation.mode_works(kind + "+uid"):
                    uid = isolation._fresh_uid()
                elif not isolation.mode_works(kind):
                    continue
                scratch = tempfile.mkdtemp(prefix="kgg-vmm-")
                os.chmod(scratch, 0o755)
                if uid is not None:
                    os.chown(scratch, uid, uid)
                if kind == "bwrap":
                    prefix = isolation.bwrap_argv(Path(scratch), cfg, uid, privileged=os.geteuid() == 0)
                else:
                    prefix = isolation.unshare_argv(Path(scratch), cfg, uid)
                out.append((f"{kind} (isolation.py{', uid ' + str(uid) if uid else ''})", prefix, env, scratch))
        if not out and shutil.which("unshare") and os.geteuid() == 0:
            # --mount --mount-proc: a fresh /proc, as the sandbox has; without it /proc/<getpid()> inside is the
            # host's pid 1 (tests/test_cuda_vmm.py's gpu test failed on the H200 with the bare form, 2026-12-06)
            out.append(("unshare --pid --ipc --net --fork --mount-proc (bare)",
                        ["unshare", "--mount", "--pid", "--ipc", "--net", "--fork", "--kill-child", "--mount-proc",
                         "--"], env, None))
        return out

    # -- rows (a) and (b)
    def round(self, label: str, prefix=(), env=None, cwd=None) -> dict:
        sizes = pick_sizes(self.args.handles)
        offs, _ = arena_layout(sizes)
        csv = ",".join(map(str, sizes))
        row: dict = {"row": label, "handles": len(sizes), "bytes": sum(sizes),
                     "parent_pid_ns": os.readlink("/proc/self/ns/pid")}
        e_end, o_exp = _pair()
        c_end, o_arena = _pair()
        started = []
        try:
            t0 = time.perf_counter()
            checker = self.start("checker", "checker", ["--sock", str(c_end), "--sizes", csv, "--seed", "7"],
                                 fds=(c_end,))
            exporter = self.start("exporter", "exporter", ["--sock", str(e_end), "--sizes", csv, "--seed", "7"],
                                  fds=(e_end,), prefix=prefix, env=env, cwd=cwd)
            t_open = time.perf_counter()
            opener = self.start("opener", "opener", ["--sock", str(o_exp), "--arena-sock", str(o_arena), "--n",
                                                     str(len(sizes)), "--offsets", ",".join(map(str, offs)),
                                                     "--t0", repr(time.time())], fds=(o_exp, o_arena))
            started = [checker, exporter, opener]
            for fd in (e_end, c_end, o_exp, o_arena):
                os.close(fd)
            e_end = c_end = o_exp = o_arena = None
            _, ex = exporter.recv(self.left(self.args.child_s))
            _, op = opener.recv(self.left(self.args.child_s))
            t_ck, ck = checker.recv(self.left(self.args.child_s))
            row.update(exporter={k: v for k, v in ex.items() if k != "export_s"}, opener_errors=op["errors"],
                       verified=ck.get("verified"), mismatched=ck.get("mismatched"), error=ck.get("error"),
                       round_trip_s=t_ck - t_open, from_first_start_s=t_ck - t0, handover_s=op["handover_s"],
                       start=op["start"])
            self.parts[f"{label}: exporter create+map+copy+export"] += ex["export_s"]
            for p in op["parts"]:
                self.parts[f"{label}: opener import+props+map+copy+unmap/release"].append(p["total_s"])
                for k in ("import_s", "props_s", "map_s", "copy_s", "release_s"):
                    self.parts[f"{label}:   {k[:-2]}"].append(p[k])
            self.parts[f"{label}: opener start (process start -> first CUDA call done)"].append(
                op["start"]["to_first_cuda_s"])
        except Exception as e:             # noqa: BLE001: a failed round is a row
            row["error"] = _err(e) + " | " + " | ".join(f"{c.name}: {c.tail(2)}" for c in started)
        finally:
            for fd in (e_end, c_end, o_exp, o_arena):
                if fd is not None:
                    os.close(fd)
            for c in started:
                c.kill()
        self.rounds.append(row)
        return row

    # -- rows (c)
    def fresh(self) -> str:
        try:
            c = self.start("fresh", "fresh", [])
            try:
                return c.recv(self.left(60))[1]["alive"]
            finally:
                c.kill()
        except Exception as e:             # noqa: BLE001
            return _err(e)

    def hostile_row(self, case: str, no_prefilter: bool = False) -> None:
        label = case + (" (no pre-filter: the driver's answer)" if no_prefilter else "")
        row: dict = {"row": label}
        h_end, o_end = _pair()
        started = []
        try:
            hx = self.start("hexporter", "hexporter", ["--sock", str(h_end), "--case", case, "--nbytes",
                                                       str(64 * MiB)], fds=(h_end,))
            op = self.start("hopener", "hopener", ["--sock", str(o_end)] + (["--no-prefilter"] if no_prefilter
                                                                             else [])
                            + (["--pause"] if case == "kill" else []), fds=(o_end,))
            started = [hx, op]
            os.close(h_end)
            os.close(o_end)
            h_end = o_end = None
            _, sent = hx.recv(self.left(self.args.child_s))
            row["sent"] = sent.get("fd_kind", sent.get("record"))
            _, res = op.recv(self.left(self.args.child_s))
            if case == "kill" and res.get("mapped"):           # it holds the mapping: kill the exporter now
                hx.kill()
                row["exporter_rc"] = hx.proc.returncode
                op.proc.stdin.write(b"go\n")
                op.proc.stdin.flush()
                _, res = op.recv(self.left(self.args.child_s))
            row.update(result=res.get("result"), error_type=res.get("error_type"),
                       opener_alive=res.get("opener_alive"))
        except Exception as e:             # noqa: BLE001
            row["result"] = _err(e) + " | " + " | ".join(f"{c.name}: {c.tail(2)}" for c in started)
        finally:
            for fd in (h_end, o_end):
                if fd is not None:
                    os.close(fd)
            for c in started:
                c.kill()
        row["fresh_alive"] = self.fresh()
        self.hostile.append(row)

    def run(self) -> dict:
        self.round("a: root namespaces")
        for name, prefix, env, cwd in self.sandboxes():
            self.round(f"b: exporter in {name}", prefix=prefix, env=env, cwd=cwd)
            if cwd:
                shutil.rmtree(cwd, ignore_errors=True)
        if not self.args.skip_hostile:
            cases = [("file", False), ("file", True), ("pipe", False), ("pipe", True), ("devzero", False)]
            if os.path.exists("/dev/nvidiactl"):
                cases.append(("nvidiactl", False))
            cases += [("extent", False), ("nbytes", False), ("kill", False)]
            for case, nopf in cases:
                try:
                    self.left(30)
                except TimeoutError:
                    self.hostile.append({"row": case, "result": "not run (time)"})
                    continue
                self.hostile_row(case, nopf)
        return {"rounds": self.rounds, "parts": {k: list(v) for k, v in self.parts.items()},
                "hostile": self.hostile}

    def cleanup(self) -> None:
        for c in self.children:
            c.kill()


def print_tables(report: dict) -> None:
    print("\n== rounds (24 outputs unless --handles). hand-over: the opener's first record received -> its last copy "
          "done (the design's cost; its opener is pre-started); from the starts: the three processes started together "
          "-> the checker's verdict (includes the exporter's torch start and making the outputs)")
    for r in report["rounds"]:
        if r.get("error"):
            print(f"{r['row']}: FAILED: {r['error'][:600]}")
            continue
        print(f"{r['row']}: {r['verified']}/{r['handles']} verified ({r['bytes'] / 2**30:.2f} GiB), "
              f"mismatched {r['mismatched']}, opener errors {len(r['opener_errors'])} "
              f"{r['opener_errors'][:3]}; hand-over {r['handover_s'] or float('nan'):.3f} s, from the starts "
              f"{r['from_first_start_s']:.3f} s, opener start {r['start']}; exporter {r['exporter']} (parent's pid ns "
              f"{r['parent_pid_ns']})")
    print("\n== parts (ms)")
    print(f"{'part':<78} {'n':>4} {'median':>9} {'p90':>9}")
    for k, xs in report["parts"].items():
        n, med, p90 = quantiles(xs)
        print(f"{k:<78} {n:>4} {med:>9.3f} {p90:>9.3f}")
    if report["hostile"]:
        print("\n== hostile rows (result; the same opener after it; a fresh process after it)")
        for h in report["hostile"]:
            print(f"{h['row']:<48} sent {str(h.get('sent'))[:40]:<40} -> {str(h.get('result'))[:150]} | "
                  f"opener alive: {h.get('opener_alive')} | fresh: {h.get('fresh_alive')}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", default=None, help="write the whole report here")
    p.add_argument("--timeout-s", type=float, default=240.0, help="the run's own limit (every child inside it)")
    p.add_argument("--handles", type=int, default=None, help="outputs per round (default 24, 1.35 GiB)")
    p.add_argument("--skip-hostile", action="store_true")
    p.add_argument("--child-s", type=float, default=90.0, help="one child's limit per step")
    p.add_argument("--role", choices=sorted(ROLES), help=argparse.SUPPRESS)
    for flag in ("--sock", "--arena-sock", "--n", "--seed", "--nbytes"):
        p.add_argument(flag, type=int, default=0, help=argparse.SUPPRESS)
    for flag in ("--sizes", "--offsets", "--case"):
        p.add_argument(flag, default="", help=argparse.SUPPRESS)
    p.add_argument("--t0", type=float, default=0.0, help=argparse.SUPPRESS)
    p.add_argument("--wait-s", type=float, default=90.0, help=argparse.SUPPRESS)
    p.add_argument("--pause", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--no-prefilter", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.role:
        ROLES[a.role](a)
        return 0
    why = cuda_present()
    if why is not None:
        print(NO_CUDA_LINE + f" [{why[:200]}]")
        return 2
    if a.handles is not None and a.handles <= 0:
        p.error("--handles must be positive")
    probe = Probe(a)
    report: dict = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "config": {k: v for k, v in vars(a).items() if k in ("timeout_s", "handles", "skip_hostile",
                                                                          "child_s")}}
    try:
        report.update(probe.run())
    except Exception as e:                 # noqa: BLE001: the tables of what ran still print
        report["error"] = _err(e)
        report.setdefault("rounds", probe.rounds)
        report.setdefault("parts", {k: list(v) for k, v in probe.parts.items()})
        report.setdefault("hostile", probe.hostile)
    finally:
        probe.cleanup()
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(report, indent=1))
    print_tables(report)
    if report.get("error"):
        print("run error:", report["error"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
