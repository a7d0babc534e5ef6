"""Ending a warm checker's server process (api/warm.WarmChecker): its process group killed, the process reaped
within a bounded wait, its pipes closed; and the finalizer that does what WarmChecker.close() does when a
checker is garbage collected unclosed (the process ended, its scratch directory removed)."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess


def kill_group(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)     # its own session: start_new_session=True
        except (ProcessLookupError, PermissionError):
            proc.kill()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    for f in (proc.stdin, proc.stdout):
        try:
            f.close()
        except (OSError, AttributeError):
            pass


def cleanup(state: dict) -> None:
    """Finalizer: what close() does, also run if a WarmChecker is garbage collected unclosed."""
    proc = state.get("proc")
    if proc is not None:
        kill_group(proc)
        state["proc"] = None
    shutil.rmtree(state["dir"], ignore_errors=True)
