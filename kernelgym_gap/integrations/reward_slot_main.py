"""One evaluation slot of the reward server, as its own process (`python -m` this module; reward_slots.py
starts it): it reads its settings, then one job at a time from stdin, evaluates it and writes the record back
on the original stdout (pickles: both ends are the server's own code). A process rather than a thread, so
that the server can end a running evaluation whose client went away: SIGTERM ends this process and every
process it started (its sandboxed child, a warm pool's checker and pre-started children), and
PR_SET_PDEATHSIG does the same when the server itself is killed."""
from __future__ import annotations

import ctypes
import os
import pickle
import signal
import sys


def _children(pid: int) -> list[int]:
    """The direct children of `pid` (Linux /proc; a sandboxed child runs in a session of its own, so the
    process group of this process does not reach it)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 1 and int(fields[1]) == pid:
            found.append(int(name))
    return found


def _end(*_args) -> None:
    for child in _children(os.getpid()):
        for kill in (os.killpg, os.kill):      # its session's group (start_new_session), then itself
            try:
                kill(child, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    os._exit(143)


def main() -> int:
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)    # PR_SET_PDEATHSIG
    except OSError:
        pass
    signal.signal(signal.SIGTERM, _end)
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)                                # stray prints go to stderr, never into the channel
    inp = sys.stdin.buffer
    settings = pickle.load(inp)
    if os.getppid() != settings["server_pid"]:   # the server died before the death signal was armed
        _end()
    from kernelgym_gap.core.registry import task_source
    registry = task_source(settings["tasks_dir"])     # the server's task source (None: the built-in tasks)
    backend, config, gpu = settings["backend"], settings["config"], settings["gpu"]
    # this slot's one-slot evaluation service (api/service.py): its GPU, its warm pool when asked for
    from kernelgym_gap.api.service import EvalService
    service = EvalService(backend, config, slots=[gpu or 0] if backend == "cuda" else 1,
                          warm=bool(settings["warm"]), evaluator=settings["evaluator"], registry=registry)
    if settings["warm"]:
        service.warm_parts(0)                    # started now: its imports overlap the server's start
    out.write(pickle.dumps(("ready", None)))
    out.flush()
    while True:
        try:
            task_id, source, dsl = pickle.load(inp)
        except EOFError:
            return 0
        try:
            record = service.submit_task(registry.get(task_id), source, dsl).result()
            answer = ("ok", record.to_dict())
        except Exception as e:  # noqa: BLE001 - a harness error goes back as this item's failure
            answer = ("error", f"{type(e).__name__}: {e}")
        out.write(pickle.dumps(answer))
        out.flush()


if __name__ == "__main__":
    sys.exit(main())
