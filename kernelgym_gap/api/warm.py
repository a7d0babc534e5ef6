"""The warm pool: a trusted checker process kept alive across evaluations (WarmChecker), and, bundled with
pre-started submission children (prestart.ChildPool), the warm pool of one worker (WarmPool).

On the cuda backend every evaluation used to start `python -m kernelgym_gap.judge.checker CHECK.json`, a fresh
process that imports torch and creates a CUDA context (4-6 s of a ~20 s step on the H200) to regenerate the
inputs on the device and judge the child's outputs. The checker is trusted code: it never imports a
submission, it only reads the tensors the child saved (raw tensor files, core/tensor_file.py). So its process
can be reused; the submission's own child stays one fresh sandboxed process per submission.

    with WarmChecker(gpu_index=0) as checker:              # starts `checker --serve` now, in the background
        record = evaluate(task, source, "triton", "cuda", config, checker=checker)

A WarmChecker answers one check at a time (a lock serialises callers). If its process died between two
checks it is restarted before the next one; if it dies during a check, the check is retried once on a fresh
process (the check is deterministic: inputs are regenerated from the trial seeds). A check that does not
answer within its timeout kills the process (its whole process group) and raises subprocess.TimeoutExpired,
as the per-evaluation checker's subprocess.run does; the next check starts a fresh process. A check that
raises inside the server ends that process too (no state of a failed check is reused) and gives the same
PROTOCOL_ERROR record as a per-evaluation checker that crashed.

Where it is held: KernelEnv(warm=True) (one WarmPool per env, closed by env.close()), evaluate_many(...,
warm=True) (one per worker: per GPU of a cuda batch), run_suite(..., warm=True) (one per worker). Nothing is
global.
"""
from __future__ import annotations

import contextlib
import json
import os
import selectors
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from pathlib import Path

from kernelgym_gap.api.warm_cleanup import cleanup, kill_group
from kernelgym_gap.core.record import CheckResult
from kernelgym_gap.core.status import Status

READY_TIMEOUT_S = 120.0        # the first check waits at most this long for the server's imports


class _Died(Exception):
    """The server's stdout closed before it answered."""


class WarmChecker:
    """A persistent `python -m kernelgym_gap.judge.checker --serve` for one device.

    device "cuda": pinned to host GPU `gpu_index` (CUDA_VISIBLE_DEVICES, as the per-evaluation checker);
    device "cpu": the same server on the cpu (what the tests use). The process starts in __init__ (its
    imports overlap the first submission's child) and is replaced whenever it died."""

    def __init__(self, gpu_index: int = 0, device: str = "cuda", scratch_root: str | None = None,
                 read_arena_bytes: int = 0):
        """`read_arena_bytes` (Placement.read_arena_bytes; 0: none): the server reads output files into memory
        it keeps from one evaluation to the next (judge/read_arena.py)."""
        if device not in ("cuda", "cpu"):
            raise ValueError(f"device must be 'cuda' or 'cpu', not {device!r}")
        from kernelgym_gap.core.placement import check_read_arena_bytes
        self.read_arena_bytes = check_read_arena_bytes(read_arena_bytes)
        self.last_arena: dict | None = None
        self.device, self.gpu_index = device, gpu_index
        self.starts = 0                 # processes started so far (1 + restarts)
        self._lock = threading.Lock()
        self._dir = Path(tempfile.mkdtemp(prefix="kgg-warm-", dir=scratch_root))
        self._log = self._dir / "stderr.log"
        self._state: dict = {"proc": None, "dir": self._dir}
        self._ready = False
        self._buf = b""
        self._closed = False
        self._finalizer = weakref.finalize(self, cleanup, self._state)
        self._start()

    # ---- process management ------------------------------------------------------------------------

    def _env(self) -> dict[str, str]:
        from kernelgym_gap.sandbox.child_io import backend_env
        from kernelgym_gap.sandbox.process import child_env
        extra = backend_env(self.device)
        if self.device == "cuda":
            extra["CUDA_VISIBLE_DEVICES"] = str(self.gpu_index)
        return child_env(self._dir, extra)

    def _start(self) -> None:
        self._log.write_bytes(b"")
        with open(self._log, "ab") as log:
            arena = ["--read-arena", str(self.read_arena_bytes)] if self.read_arena_bytes else []
            proc = subprocess.Popen([sys.executable, "-m", "kernelgym_gap.judge.checker", "--serve", "--device",
                                     self.device, *arena], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                    cwd=self._dir, env=self._env(), start_new_session=True, bufsize=0)
        self._state["proc"] = proc
        self._ready, self._buf = False, b""
        self.starts += 1

    def _stop(self) -> None:
        proc = self._state.get("proc")
        if proc is not None:
            kill_group(proc)
        self._state["proc"] = None
        self._ready = False

    @property
    def pid(self) -> int | None:
        proc = self._state.get("proc")
        return proc.pid if proc is not None and proc.poll() is None else None

    def alive(self) -> bool:
        return self.pid is not None

    def _readline(self, deadline: float) -> dict:
        proc = self._state["proc"]
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            while b"\n" not in self._buf:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise subprocess.TimeoutExpired(proc.args, 0)
                if not sel.select(timeout=left):
                    continue
                chunk = os.read(proc.stdout.fileno(), 65536)
                if not chunk:
                    raise _Died()
                self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        try:
            return json.loads(line)
        except ValueError:
            raise _Died() from None

    def _stderr_tail(self) -> str:
        try:
            return self._log.read_bytes()[-2000:].decode(errors="replace")
        except OSError:
            return ""

    # ---- checks ------------------------------------------------------------------------------------

    def _ask(self, spec_path: Path, deadline: float, lane=None) -> dict:
        if self._state.get("proc") is None or self._state["proc"].poll() is not None:
            self._stop()
            self._start()
        proc = self._state["proc"]
        if not self._ready:
            reply = self._readline(min(deadline, time.monotonic() + READY_TIMEOUT_S))
            if not reply.get("ready"):
                raise _Died()
            self._ready = True
        os.truncate(self._log, 0)          # O_APPEND: the server's next writes start the file again
        try:
            proc.stdin.write(str(spec_path).encode() + b"\n")
        except (BrokenPipeError, OSError):
            raise _Died() from None
        reply = self._readline(deadline)
        if reply.get("spec") != str(spec_path):
            raise _Died()
        if "read" not in reply:
            return reply
        # the spec asked for the prefetch (judge/prefetch.py): the outputs are in the server's memory; the
        # copy to the device and the comparison run once this process holds the GPU's shared lane
        try:
            with lane() if lane is not None else contextlib.nullcontext():
                try:
                    proc.stdin.write(b"go\n")
                except (BrokenPipeError, OSError):
                    raise _Died() from None
                reply = self._readline(deadline)
        except (_Died, subprocess.TimeoutExpired):
            raise
        except BaseException:
            self._stop()        # the lane could not be taken: the server waits for a go line that never comes
            raise
        if reply.get("spec") != str(spec_path) or "read" in reply:
            raise _Died()
        return reply

    def check_spec(self, spec_path: Path, result_path: Path, timeout: float, lane=None) -> CheckResult:
        """Checks CHECK.json at `spec_path` (the per-evaluation checker's input) and reads `result_path`.
        `lane`: for a spec with `"prefetch": true`, a function whose context manager holds the GPU's shared
        lane (engine/evaluation.checked_alone_if_failed), entered once the server has read the outputs; the
        caller holds no lane then. A server that dies or hangs in either step is handled as one that dies or
        hangs today. The lane is taken with this checker's lock held: one WarmChecker serves one worker's
        evaluations in turn."""
        if self._closed:
            raise RuntimeError("this WarmChecker is closed")
        with self._lock:
            for attempt in (0, 1):
                try:
                    reply = self._ask(spec_path, time.monotonic() + timeout, lane)
                except subprocess.TimeoutExpired:
                    args = self._state["proc"].args
                    self._stop()
                    raise subprocess.TimeoutExpired(args, timeout) from None
                except _Died:
                    tail = self._stderr_tail()
                    self._stop()
                    if attempt == 0:
                        continue            # died under us (killed, OOM): once more on a fresh process
                    return CheckResult(status=Status.PROTOCOL_ERROR, trials_checked=0,
                                       message="the trusted checker failed: " + tail)
                return self._result(reply, result_path)
        raise AssertionError("unreachable")

    def _result(self, reply: dict, result_path: Path) -> CheckResult:
        """The CheckResult a check's last reply announces (`{"spec": PATH, "ok": ...}`)."""
        if not reply.get("ok"):
            self._stop()            # the server exits after a failed check; reap it now
            return CheckResult(status=Status.PROTOCOL_ERROR, trials_checked=0,
                               message="the trusted checker failed: " + str(reply.get("error"))[-2000:])
        self.last_arena = reply.get("arena")      # its read arena's state, when it has one (judge/read_arena.py)
        if not result_path.is_file():
            return CheckResult(status=Status.PROTOCOL_ERROR, trials_checked=0,
                               message="the trusted checker failed: it wrote no result")
        return CheckResult.from_json(result_path.read_text())

    def hand_over_check(self, spec_path: Path, result_path: Path, timeout: float, lane, exchange,
                        prefetch: bool = False) -> CheckResult | None:
        """A CHECK.json with `"handover": true` (the outputs handed over on the device, issue 35;
        judge/checker.run_handover): sends it, reads the handover line, calls `exchange(handover)` with its
        `{"arena": ..., "planned": rows}` (the parent's opener work) and sends what it returns, `{"copies":
        {FILE_NAME: RESULT}}` or `{"abort": true}`, as the go line. Returns the CheckResult, or None after an
        abort (the parent then checks by files). A report the checker refuses as a whole is the result at once,
        without an exchange.

        `lane`, a zero-argument context manager factory as check_spec's, is held from before the checker's GPU
        work until the result: the references, the arena, the copies and the check. With `prefetch` (the spec
        says `"prefetch": true`) the checker first reads the outputs that are files (those past the device
        budget: about half on the H100 light batch of 2026-12-07, read under the lane until then) and says
        `{"spec": PATH, "read": N}`; the lane is taken then and "go" sent, as check_spec does. Without it the
        lane is entered before the spec is sent (a child held at a call's deadline: its cover comes first).
        `timeout` bounds each of the two waits for the server (the handover line, the result); the exchange
        keeps its own deadlines. A server that dies before the exchange is retried once on a fresh process,
        as check_spec does. Once the exchange ran (the outputs copied, the child killed) it cannot be: a death
        then is check_spec's PROTOCOL_ERROR result, and the next check starts a fresh server. A server past
        `timeout` is killed and subprocess.TimeoutExpired raised; an exchange that raises, or returns neither
        line, ends the server (it waits for a go line) and the error propagates."""
        if self._closed:
            raise RuntimeError("this WarmChecker is closed")
        with self._lock, contextlib.ExitStack() as held:
            if not prefetch and lane is not None:
                held.enter_context(lane())
            for attempt in (0, 1):
                exchanged = False
                try:
                    self._ensure_ready(time.monotonic() + timeout)
                    self._send(str(spec_path).encode())
                    reply = self._readline(time.monotonic() + timeout)
                    if reply.get("spec") != str(spec_path) or prefetch != ("read" in reply):
                        raise _Died()
                    if prefetch:
                        self._enter_lane(held, lane)        # the server waits for "go" until it holds
                        self._send(b"go")
                        reply = self._readline(time.monotonic() + timeout)
                        if reply.get("spec") != str(spec_path) or "read" in reply:
                            raise _Died()
                    if "handover" in reply:
                        exchanged = True
                        go = self._exchange(exchange, reply["handover"])
                        self._send(json.dumps(go).encode())
                        if "abort" in go:
                            return None
                        reply = self._readline(time.monotonic() + timeout)
                        if reply.get("spec") != str(spec_path) or "handover" in reply:
                            raise _Died()
                except subprocess.TimeoutExpired:
                    args = self._state["proc"].args
                    self._stop()
                    raise subprocess.TimeoutExpired(args, timeout) from None
                except _Died:
                    tail = self._stderr_tail()
                    self._stop()
                    if attempt == 0 and not exchanged:
                        if prefetch:
                            held.close()            # the retry reads before its lane again
                        continue
                    return CheckResult(status=Status.PROTOCOL_ERROR, trials_checked=0,
                                       message="the trusted checker failed: " + tail)
                return self._result(reply, result_path)
        raise AssertionError("unreachable")

    def _enter_lane(self, held: contextlib.ExitStack, lane) -> None:
        """The lane entered into `held` once the server has read its files; one that cannot be taken ends the
        server (it waits for a "go" that never comes) and its error propagates, as check_spec's."""
        if lane is None:
            return
        try:
            held.enter_context(lane())
        except BaseException:
            self._stop()
            raise

    def _exchange(self, exchange, handover: dict) -> dict:
        try:
            go = exchange(handover)
        except BaseException:
            self._stop()            # the server waits for a go line that never comes
            raise
        if go != {"abort": True} and not (isinstance(go, dict) and set(go) == {"copies"}
                                          and isinstance(go["copies"], dict)):
            self._stop()
            raise ValueError(f"the exchange must return {{\"copies\": {{...}}}} or {{\"abort\": true}}, got {go!r}")
        return go

    def _send(self, line: bytes) -> None:
        try:
            self._state["proc"].stdin.write(line + b"\n")
        except (BrokenPipeError, OSError):
            raise _Died() from None

    def read_early(self, spec_path: Path, timeout: float) -> int | None:
        """EvalConfig.read_outputs_while_timing (judge/early_prefetch.py): asks the idle server to read the
        files that EARLY.json's checkpoint report lists into its memory, while the child still times; the next
        check_spec whose spec has `"early": true` starts from them. Returns the files read, or None when the
        server died, hung past `timeout` or failed: that process is ended (the next check starts a fresh one,
        as after today's deaths) and the check then simply reads every file itself."""
        if self._closed:
            return None
        with self._lock:
            try:
                self._ensure_ready(time.monotonic() + timeout)
                try:
                    self._state["proc"].stdin.write(b"early " + str(spec_path).encode() + b"\n")
                except (BrokenPipeError, OSError):
                    raise _Died() from None
                reply = self._readline(time.monotonic() + timeout)
            except (_Died, subprocess.TimeoutExpired):
                self._stop()
                return None
            if reply.get("early") != str(spec_path) or not isinstance(reply.get("read"), int):
                self._stop()        # it failed inside (and exits) or answered out of turn
                return None
            return reply["read"]

    def drop_early(self) -> int | None:
        """Frees what read_early read (a killed or failed child: no check will use it); returns the files the
        server dropped (0: it held none), or None when it did not answer: it is ended then, and holds nothing."""
        if self._closed:
            return None
        with self._lock:
            proc = self._state.get("proc")
            if proc is None or proc.poll() is not None or not self._ready:
                return 0
            try:
                proc.stdin.write(b"drop\n")
                reply = self._readline(time.monotonic() + READY_TIMEOUT_S)
            except (BrokenPipeError, OSError, _Died, subprocess.TimeoutExpired):
                self._stop()
                return None
            if not isinstance(reply.get("dropped"), int):
                self._stop()
                return None
            return reply["dropped"]

    def _ensure_ready(self, deadline: float) -> None:
        if self._state.get("proc") is None or self._state["proc"].poll() is not None:
            self._stop()
            self._start()
        if not self._ready:
            reply = self._readline(min(deadline, time.monotonic() + READY_TIMEOUT_S))
            if not reply.get("ready"):
                raise _Died()
            self._ready = True
        os.truncate(self._log, 0)

    def warm_up(self, timeout: float = READY_TIMEOUT_S) -> float:
        """Waits until the server is ready (imports done, device initialised); returns the seconds waited."""
        t = time.perf_counter()
        with self._lock:
            if self._state.get("proc") is None or self._state["proc"].poll() is not None:
                self._stop()
                self._start()
            if not self._ready:
                try:
                    reply = self._readline(time.monotonic() + timeout)
                except _Died:
                    tail = self._stderr_tail()
                    self._stop()
                    raise RuntimeError("the warm checker did not start: " + tail) from None
                if not reply.get("ready"):
                    self._stop()
                    raise RuntimeError(f"the warm checker did not start: {reply!r}")
                self._ready = True
        return time.perf_counter() - t

    def close(self) -> None:
        self._closed = True
        with self._lock:
            self._finalizer()

    def __enter__(self) -> "WarmChecker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"WarmChecker(device={self.device!r}, gpu_index={self.gpu_index}, pid={self.pid}, "
                f"starts={self.starts})")


class WarmPool:
    """The warm pool of one worker on one device: a WarmChecker and a prestart.ChildPool.

        with WarmPool("cuda", gpu_index=0) as warm:
            record = evaluate(task, source, "triton", "cuda", config, checker=warm.checker,
                              children=warm.children)
    """

    def __init__(self, device: str = "cuda", gpu_index: int = 0, scratch_root: str | None = None, plan=None,
                 start_early: bool = False, read_arena_bytes: int = 0):
        """`plan` and `start_early`: the children's (prestart.ChildPool's): the spec of the owner's next
        evaluation, and whether the next child's process starts as a child starts (Placement.prestart_early).
        `read_arena_bytes`: the checker's (Placement.read_arena_bytes)."""
        from kernelgym_gap.sandbox.prestart import ChildPool
        self.checker = WarmChecker(gpu_index=gpu_index, device=device, scratch_root=scratch_root,
                                   read_arena_bytes=read_arena_bytes)
        self.children = ChildPool(plan=plan, start_early=start_early)

    def close(self) -> None:
        self.children.close()
        self.checker.close()

    def __enter__(self) -> "WarmPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"WarmPool({self.checker!r}, {self.children!r})"
