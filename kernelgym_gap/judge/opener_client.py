"""The parent's side of the per-evaluation opener (judge/opener.py; issue 35, docs/measurement.md, "The outputs
handed over on the device", point 4). Built, NOT wired into the engine yet.

`start_opener` starts one (pre-startable: it makes its CUDA context while it waits), `wait_ready` reads its
ready line, and `hand_over` sends it the Plan's Planned entries (judge/ipc_records.plan_outputs; Refused and
NeedsFile entries never reach it) with the checker's arena, and returns one typed CopyResult per Planned entry.
Every read and write on its pipes has the caller's deadline: an opener that dies, stays silent (it is killed)
or writes a malformed line is an `OpenerFailed`, the design's trigger for the fallback to files while the child
is alive. The opener is trusted, so a response that breaks the schema is our bug, and the error says so.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import selectors
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from kernelgym_gap.core import bounded_json
from kernelgym_gap.judge.ipc_records import OutputKey, Plan
from kernelgym_gap.judge.opener import (MAX_ERROR_CHARS, MAX_LINE_BYTES, SchemaError, encode_line, parse_request,
                                        parse_response)

log = logging.getLogger(__name__)

OPENER_PATH = Path(__file__).resolve().with_name("opener.py")
# The opener's own deadline_s is this share of hand_over's timeout_s: it stops attempting copies (and reports
# them not_attempted) before the parent's deadline kills it, whose clock started earlier.
OPENER_DEADLINE_SHARE = 0.8


class OpenerFailed(RuntimeError):
    """The opener gave no usable response: it died, stayed silent past the timeout (then it was killed), could
    not start CUDA (`unsupported` when that was IpcUnsupported), or wrote a malformed line. Never a verdict on
    a submission."""

    def __init__(self, message: str, unsupported: bool = False):
        super().__init__(message)
        self.unsupported = unsupported


@dataclasses.dataclass(frozen=True)
class CopyResult:
    key: OutputKey
    result: str               # one of opener.RESULTS
    error: str | None         # the CUDA error's text, or why refused / not attempted
    code: int | None          # the CUDA error's code, when there was one


@dataclasses.dataclass(frozen=True)
class HandOver:
    """The opener's report: one result per Planned entry in the plan's order. `arena_error` set means the arena
    could not be opened or torn down cleanly: its contents are not to be trusted, whatever the copies say."""
    results: tuple[CopyResult, ...]
    arena_error: str | None
    seconds: dict[str, float]

    @property
    def all_copied(self) -> bool:
        return self.arena_error is None and all(r.result == "copied" for r in self.results)


def start_opener(device: int = 0, argv: list[str] | None = None, **popen: Any) -> subprocess.Popen:
    """Starts an opener by its file's path (no torch in it); `argv` replaces the command (the tests' launchers
    run the opener's loop with a fake runtime: nothing in the trusted code selects one). Binary pipes."""
    cmd = argv or [sys.executable, str(OPENER_PATH), "--device", str(device)]
    return subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            bufsize=0, **popen)


KILL_WAIT_S = 10.0      # after SIGKILL; a process in the driver's uninterruptible sleep may outlast it


def kill_opener(proc: subprocess.Popen, keep_stderr: bool = False) -> None:
    """The one way an opener is ended (here and engine/handover.py): SIGKILL, a bounded wait (an opener stuck in
    the driver must not hold the evaluation), its pipes closed (stderr kept open for `_gone` to read)."""
    if proc.poll() is None:
        proc.kill()
    try:
        proc.wait(timeout=KILL_WAIT_S)
    except subprocess.TimeoutExpired:   # unkillable for now (in the driver); nothing more to do from here
        log.warning("the opener (pid %d) did not exit within %.0f s of SIGKILL", proc.pid, KILL_WAIT_S)
    for pipe in (proc.stdin, proc.stdout) + (() if keep_stderr else (proc.stderr,)):
        if pipe is not None:
            pipe.close()


_kill = kill_opener


def _gone(proc: subprocess.Popen, what: str) -> OpenerFailed:
    """The opener ended without the line: its exit status and the tail of its stderr (read only once it has
    exited: a live one's stderr would never end)."""
    kill_opener(proc, keep_stderr=True)
    err = ""
    if proc.stderr is not None:
        if proc.returncode is not None:
            err = proc.stderr.read()[-MAX_ERROR_CHARS:].decode(errors="replace")
        proc.stderr.close()
    return OpenerFailed(f"the opener died before {what} (exit status {proc.returncode}): {err.strip()}")


def _silent(proc: subprocess.Popen, what: str) -> OpenerFailed:
    _kill(proc)
    return OpenerFailed(f"the opener was silent past the timeout at {what}; killed")


def _write_all(proc: subprocess.Popen, data: bytes, deadline: float) -> None:
    """`data` to the opener's stdin, then closed; non-blocking, so an opener that does not read cannot hold the
    parent past its deadline (a request is larger than a pipe's 64 KiB buffer from ~250 copies)."""
    fd = proc.stdin.fileno()
    os.set_blocking(fd, False)
    view = memoryview(data)
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_WRITE)
        while view:
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(left):
                raise _silent(proc, "the request")
            try:
                view = view[os.write(fd, view):]
            except BlockingIOError:
                continue
            except OSError:                 # BrokenPipeError: it died
                raise _gone(proc, "the request") from None
    proc.stdin.close()


def _read_line(proc: subprocess.Popen, deadline: float, what: str) -> bytes:
    """One line of the opener's stdout, at most MAX_LINE_BYTES; the bytes after it are kept on `proc` for the
    next read (the ready line and the response may come in one read)."""
    buf = getattr(proc, "_opener_buf", b"")
    fd = proc.stdout.fileno()
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while b"\n" not in buf:
            if len(buf) > MAX_LINE_BYTES:
                _kill(proc)
                raise OpenerFailed(f"the opener's {what} passed {MAX_LINE_BYTES} bytes without a newline: a bug "
                                   f"in the trusted opener")
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(left):
                raise _silent(proc, what)
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise _gone(proc, what)
            buf += chunk
    line, _, rest = buf.partition(b"\n")
    proc._opener_buf = rest
    return line + b"\n"


def wait_ready(proc: subprocess.Popen, timeout_s: float) -> dict:
    """The opener's ready line (read once: a pool may wait for it before hand_over, which then does not);
    OpenerFailed when it could not start CUDA, died or stayed silent."""
    if getattr(proc, "_opener_ready", None) is not None:
        return proc._opener_ready
    line = _read_line(proc, time.monotonic() + timeout_s, "its ready line")
    try:
        msg = bounded_json.loads(line, max_bytes=MAX_LINE_BYTES, max_depth=2, what="the ready line")
    except bounded_json.BoundedJSONError as e:
        _kill(proc)
        raise OpenerFailed(f"{e}: a bug in the trusted opener") from None
    if not isinstance(msg, dict) or msg.get("ready") is not True:
        _kill(proc)
        unsupported = isinstance(msg, dict) and msg.get("unsupported") is True
        raise OpenerFailed(f"the opener did not start CUDA: {str(msg)[:MAX_ERROR_CHARS]}", unsupported=unsupported)
    proc._opener_ready = msg
    return msg


def build_request(plan: Plan, arena_handle: str, deadline_s: float, arena_offset: int = 0) -> dict:
    """The request for the plan's Planned entries in its order; each copy's key is its output's file name.
    `arena_offset`: the arena tensor's offset in the checker's allocator segment whose handle is given."""
    return {"arena": {"handle": arena_handle, "offset": arena_offset, "nbytes": max(plan.arena_bytes, 1)},
            "copies": [{"key": e.key.file_name, "handle": e.record.handle, "offset": e.record.offset,
                        "nbytes": e.record.nbytes, "arena_offset": e.arena_offset} for e in plan.planned],
            "deadline_s": deadline_s}


def hand_over(proc: subprocess.Popen, plan: Plan, arena_handle: str, timeout_s: float,
              arena_offset: int = 0) -> HandOver:
    """Sends the started opener `proc` the plan's copies and the checker's arena; one CopyResult per Planned
    entry, keyed by its OutputKey, in the plan's order. OpenerFailed when the opener dies, stays silent past
    `timeout_s` (it is killed) or writes a malformed line; SchemaError when the plan itself breaks the schema
    (the caller's bug: nothing is sent)."""
    deadline = time.monotonic() + timeout_s
    req = build_request(plan, arena_handle, OPENER_DEADLINE_SHARE * timeout_s, arena_offset)
    parse_request(line := encode_line(req))
    wait_ready(proc, max(deadline - time.monotonic(), 0.0))
    _write_all(proc, line, deadline)
    got = _read_line(proc, deadline, "its response")
    try:
        resp = parse_response(got, [c["key"] for c in req["copies"]])
    except SchemaError as e:
        _kill(proc)
        raise OpenerFailed(f"the opener's response breaks the schema ({e}): a bug in the trusted opener, "
                           f"not the child's doing") from None
    try:
        proc.wait(timeout=max(deadline - time.monotonic(), 1.0))
    except subprocess.TimeoutExpired:
        _kill(proc)
    results = tuple(CopyResult(key=e.key, result=c["result"], error=c["error"], code=c["code"])
                    for e, c in zip(plan.planned, resp["copies"]))
    return HandOver(results=results, arena_error=resp["arena_error"], seconds=dict(resp["seconds"]))
