"""The trusted per-evaluation opener of the outputs' hand-over by CUDA IPC, and its protocol's schema (issue 35;
docs/measurement.md, "The outputs handed over on the device", point 4, and "Which process opens the handles").
Built, NOT wired into the engine yet; the parent's side is judge/opener_client.py.

Pre-started per evaluation, it makes its CUDA context (cuda_ipc.IpcRuntime) and writes one "ready" line; then it
reads ONE request line, opens the checker's arena and, for each copy in the request's order: open the child's
handle -> range check (the base must be the opened pointer and offset + nbytes <= the allocation's size, else
`extent_refused`, nothing copied) -> copy into the arena at the planned offset -> close (always, whatever failed
after the open). An open error is that copy's `open_failed` and the loop goes on (the H200 probe: open errors are
not sticky); a copy error is `copy_failed` and ENDS the loop (a copy fault may be sticky: the rest are
`not_attempted`). Then it synchronizes, closes the arena, writes one response line and exits. It exports
nothing, so it never opens its own export (the probe's sticky self-open).

Stdlib only, and loadable by its path (`python kernelgym_gap/judge/opener.py --device 0`): `import kernelgym_gap`
imports torch (4 s), which a process started per evaluation must not pay. Both lines are bounded JSON
(core/bounded_json), schema-checked on both sides (`parse_request` here and in the parent before it sends,
`parse_response` in the parent).
"""
from __future__ import annotations

import importlib.util
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import IO, Callable

if __package__:
    from kernelgym_gap.core import bounded_json
    from kernelgym_gap.judge import cuda_ipc
else:       # loaded by path (the opener's own process): the two stdlib-only siblings, by path too
    def _by_path(name: str, rel: str):
        if name not in sys.modules:
            spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parents[1] / rel)
            sys.modules[name] = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(sys.modules[name])
        return sys.modules[name]
    bounded_json = _by_path("kgg_bounded_json", "core/bounded_json.py")
    cuda_ipc = _by_path("kgg_cuda_ipc", "judge/cuda_ipc.py")

MAX_LINE_BYTES = 1 << 20     # a request of MAX_COPIES copies is ~0.5 MiB (each ~250 bytes)
MAX_COPIES = 2048            # above any plan: plan_outputs bounds the records by the job's trials + timed shapes
MAX_KEY_CHARS = 64           # a key is an output's file name ("recheck_1000003.tensor")
MAX_ERROR_CHARS = 300
MAX_OFFSET = 1 << 48         # as core/output_handle.MAX_OFFSET
RESULTS = ("copied", "open_failed", "extent_refused", "copy_failed", "not_attempted")
SECONDS_PARTS = ("arena_open", "open", "range", "copy", "close", "teardown", "total")


class SchemaError(ValueError):
    """A request or response line that breaks the protocol's schema."""


# ---------------------------------------------------------------------------------------------- the schema
def _is_int(v: object) -> bool:
    return type(v) is int          # bool is an int subclass: True is not an offset


def _keys(obj: object, want: set[str], what: str) -> dict:
    if not isinstance(obj, dict):
        raise SchemaError(f"{what} must be an object, got {type(obj).__name__}")
    if set(obj) != want:
        raise SchemaError(f"{what} must have exactly the keys {sorted(want)}, got {sorted(obj)}")
    return obj


def _int(obj: dict, name: str, what: str, lo: int, hi: int = MAX_OFFSET) -> int:
    v = obj[name]
    if not _is_int(v) or not lo <= v <= hi:
        raise SchemaError(f"{what}.{name} must be an integer in [{lo}, {hi}], got {v!r}")
    return v


def _handle(obj: dict, what: str) -> bytes:
    try:
        return cuda_ipc.handle_from_hex(obj["handle"])
    except ValueError as e:
        raise SchemaError(f"{what}.handle: {e}") from None


def _opt_str(v: object, what: str) -> str | None:
    if v is not None and (not isinstance(v, str) or len(v) > MAX_ERROR_CHARS):
        raise SchemaError(f"{what} must be null or a string of at most {MAX_ERROR_CHARS} characters")
    return v


def _loads(line: bytes, what: str) -> object:
    if not line.endswith(b"\n"):
        raise SchemaError(f"{what} is not one line of at most {MAX_LINE_BYTES} bytes")
    try:
        return bounded_json.loads(line, max_bytes=MAX_LINE_BYTES, max_depth=4, what=what)
    except bounded_json.BoundedJSONError as e:
        raise SchemaError(str(e)) from None


def parse_request(line: bytes) -> dict:
    """The request, checked: {arena: {handle, offset, nbytes}, copies: [{key, handle, offset, nbytes,
    arena_offset}], deadline_s}; every copy inside the arena, distinct keys. (The arena has an offset: the
    checker's arena is a tensor inside one of its caching allocator's segments.)"""
    req = _keys(_loads(line, "the request"), {"arena", "copies", "deadline_s"}, "the request")
    arena = _keys(req["arena"], {"handle", "offset", "nbytes"}, "arena")
    _handle(arena, "arena")
    _int(arena, "offset", "arena", 0)
    size = _int(arena, "nbytes", "arena", 1)
    d = req["deadline_s"]
    if type(d) not in (int, float) or not math.isfinite(d) or d <= 0:
        raise SchemaError(f"deadline_s must be a positive number, got {d!r}")
    copies = req["copies"]
    if not isinstance(copies, list) or len(copies) > MAX_COPIES:
        raise SchemaError(f"copies must be a list of at most {MAX_COPIES}")
    seen = set()
    for i, c in enumerate(copies):
        what = f"copies[{i}]"
        _keys(c, {"key", "handle", "offset", "nbytes", "arena_offset"}, what)
        if not isinstance(c["key"], str) or not 0 < len(c["key"]) <= MAX_KEY_CHARS or c["key"] in seen:
            raise SchemaError(f"{what}.key must be a distinct string of 1 to {MAX_KEY_CHARS} characters")
        seen.add(c["key"])
        _handle(c, what)
        _int(c, "offset", what, 0)
        n = _int(c, "nbytes", what, 1)
        if _int(c, "arena_offset", what, 0) + n > size:
            raise SchemaError(f"{what}: arena_offset {c['arena_offset']} + nbytes {n} passes the arena's {size}")
    return req


def parse_response(line: bytes, keys: list[str]) -> dict:
    """The response to a request whose copies had `keys`, checked: one result per key in that order."""
    resp = _loads(line, "the response")
    if isinstance(resp, dict) and set(resp) == {"request_error"}:
        raise SchemaError(f"the opener refused the request: {str(resp['request_error'])[:MAX_ERROR_CHARS]}")
    resp = _keys(resp, {"copies", "arena_error", "seconds"}, "the response")
    _opt_str(resp["arena_error"], "arena_error")
    secs = _keys(resp["seconds"], set(SECONDS_PARTS), "seconds")
    if any(type(v) not in (int, float) or not math.isfinite(v) or v < 0 for v in secs.values()):
        raise SchemaError(f"seconds must be finite non-negative numbers, got {secs}")
    copies = resp["copies"]
    if not isinstance(copies, list) or [c.get("key") if isinstance(c, dict) else None for c in copies] != keys:
        raise SchemaError(f"the response's copies must answer the request's {len(keys)} keys in order")
    for i, c in enumerate(copies):
        what = f"copies[{i}]"
        _keys(c, {"key", "result", "error", "code"}, what)
        if c["result"] not in RESULTS:
            raise SchemaError(f"{what}.result must be one of {RESULTS}, got {c['result']!r}")
        _opt_str(c["error"], f"{what}.error")
        if c["code"] is not None and not _is_int(c["code"]):
            raise SchemaError(f"{what}.code must be null or an integer, got {c['code']!r}")
    return resp


def encode_line(obj: object) -> bytes:
    return (json.dumps(obj, allow_nan=False, separators=(",", ":")) + "\n").encode()


# ---------------------------------------------------------------------------------------------- the opener
_NOT_ATTEMPTED = "not attempted: an earlier copy failed, the deadline passed or the arena did not open"


def _short(text: str) -> str:
    return text[:MAX_ERROR_CHARS]


def _failed(row: dict, result: str, e: "cuda_ipc.CudaIpcError") -> None:
    row.update(result=result, error=_short(str(e)), code=e.code)


def run_copies(rt: "cuda_ipc.IpcRuntimeLike", req: dict, clock: Callable[[], float] = time.perf_counter) -> dict:
    """The request's copies through `rt` (module docstring); the response object. Catches only CUDA errors."""
    Err = cuda_ipc.CudaIpcError
    t_all = clock()
    secs = dict.fromkeys(SECONDS_PARTS, 0.0)
    out = [{"key": c["key"], "result": "not_attempted", "error": _NOT_ATTEMPTED, "code": None}
           for c in req["copies"]]
    arena, arena_error = None, None
    a = req["arena"]
    try:
        t = clock()
        arena = rt.open(cuda_ipc.handle_from_hex(a["handle"]))
        secs["arena_open"] = clock() - t
        base, size = rt.address_range(arena)
        if base != arena or a["offset"] + a["nbytes"] > size:
            arena_error = f"the arena's extent: base {base:#x} pointer {arena:#x} offset {a['offset']} bytes " \
                          f"{a['nbytes']} size {size}"
    except Err as e:
        arena_error = _short(f"the arena: {e}")
    deadline = t_all + req["deadline_s"]
    for c, row in zip(req["copies"], out) if arena_error is None else ():
        if clock() > deadline:
            row["error"] = f"the opener's deadline of {req['deadline_s']} s passed"
            break
        try:
            t = clock()
            p = rt.open(cuda_ipc.handle_from_hex(c["handle"]))
            secs["open"] += clock() - t
        except Err as e:                # not sticky (the probe): the next copy is tried
            _failed(row, "open_failed", e)
            continue
        try:
            t = clock()
            try:
                base, size = rt.address_range(p)
                ok = base == p and c["offset"] + c["nbytes"] <= size
                if not ok:
                    row.update(result="extent_refused", error=f"base {base:#x} pointer {p:#x} offset "
                                                              f"{c['offset']} bytes {c['nbytes']} size {size}")
            except Err as e:            # an extent that cannot be checked is not copied
                _failed(row, "extent_refused", e)
                ok = False
            secs["range"] += clock() - t
            if ok:
                t = clock()
                try:
                    rt.copy_d2d(arena + a["offset"] + c["arena_offset"], p + c["offset"], c["nbytes"])
                    row.update(result="copied", error=None)
                except Err as e:        # may be sticky: nothing more is attempted in this process
                    _failed(row, "copy_failed", e)
                secs["copy"] += clock() - t
        finally:                        # closed whatever happened after the open
            t = clock()
            try:
                rt.close(p)
            except Err as e:            # the result stands; the error says the mapping may be left
                row["error"] = _short("; ".join(filter(None, (row["error"], f"close: {e}"))))
            secs["close"] += clock() - t
        if row["result"] == "copy_failed":
            break
    t = clock()
    try:
        rt.synchronize()
    except Err as e:
        arena_error = arena_error or _short(f"synchronize: {e}")
    if arena is not None:
        try:
            rt.close(arena)
        except Err as e:
            arena_error = arena_error or _short(f"the arena's close: {e}")
    secs["teardown"] = clock() - t
    secs["total"] = clock() - t_all
    return {"copies": out, "arena_error": arena_error, "seconds": secs}


def serve(make_runtime: Callable[[], "cuda_ipc.IpcRuntimeLike"], inp: IO[bytes], out: IO[bytes]) -> int:
    """The opener's life: the runtime (its context) and the ready line, ONE request, its response; the exit
    status. `make_runtime` is IpcRuntime in production; the cpu tests pass a host-memory fake."""
    def say(obj: dict) -> None:
        out.write(encode_line(obj))
        out.flush()
    t = time.perf_counter()
    try:
        rt = make_runtime()
    except cuda_ipc.CudaIpcError as e:
        say({"ready": False, "error": _short(str(e)), "unsupported": isinstance(e, cuda_ipc.IpcUnsupported)})
        return 2
    say({"ready": True, "pid": os.getpid(), "context_s": time.perf_counter() - t})
    try:
        req = parse_request(inp.readline(MAX_LINE_BYTES + 1))
    except SchemaError as e:            # the parent's bug: no copy is made, the parent's parse fails loudly
        say({"request_error": _short(str(e))})
        return 3
    say(run_copies(rt, req))
    return 0


def main(argv: list[str] | None = None) -> int:
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", type=int, default=0)
    device = ap.parse_args(argv).device
    return serve(lambda: cuda_ipc.IpcRuntime(device), sys.stdin.buffer, sys.stdout.buffer)


if __name__ == "__main__":
    sys.exit(main())
