"""The leaderboard's worker process, supervised by `leaderboard serve` (issue 32, L1).

Before this, the server started the worker once with Popen and never looked at it again: a worker that died
stayed a zombie, nothing was logged, /api/health said ok and new submissions sat in 'queued' forever.

`WorkerSupervisor` starts the worker (python -m kernelgym_gap.web.worker ... --heartbeat-fd N) and watches
it from one thread:
  - the worker writes one byte to the heartbeat pipe every beat (worker.HEARTBEAT_S, idle or busy); the
    supervisor reads them, so it knows the time of the last beat, and an end of file at once (it died);
  - a worker that exited is reaped (wait(): no zombie), its exit status logged, and a new one started after a
    backoff (1 s, doubling to BACKOFF_MAX_S; back to 1 s once a worker has run STABLE_S): a worker that dies
    at start cannot spin the host;
  - a worker alive but silent for STALE_S (every thread stuck) is killed, and restarted the same way.
Submissions the dead worker held go back to the queue when their lease runs out (store/queue.py), so the
new worker evaluates them. `status()` is what /api/health shows: alive, pid, last heartbeat age, restarts,
last exit; health is "degraded" (503) while no live worker beats.
"""
from __future__ import annotations

import logging
import os
import select
import subprocess
import threading
import time

log = logging.getLogger(__name__)

BACKOFF_MIN_S = 1.0
BACKOFF_MAX_S = 30.0
STABLE_S = 60.0          # a worker that ran this long resets the backoff
STALE_S = 60.0           # a live worker silent this long is killed and restarted (its beat is every ~1 s)


def _describe(code: int | None) -> str:
    if code is None:
        return "running"
    return f"killed by signal {-code}" if code < 0 else f"exit status {code}"


class WorkerSupervisor:
    def __init__(self, argv: list[str], *, stale_s: float = STALE_S, backoff_min_s: float = BACKOFF_MIN_S,
                 backoff_max_s: float = BACKOFF_MAX_S, stable_s: float = STABLE_S):
        self.argv = list(argv)
        self.stale_s, self.backoff_min_s, self.backoff_max_s, self.stable_s = (stale_s, backoff_min_s,
                                                                               backoff_max_s, stable_s)
        self.proc: subprocess.Popen | None = None
        self.restarts = 0
        self.last_exit: str | None = None
        self.last_beat: float | None = None       # time.monotonic() of the last heartbeat byte
        self._started_at = 0.0
        self._next_start = 0.0
        self._backoff = backoff_min_s
        self._read_fd: int | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ---- lifecycle ----------------------------------------------------------------------------------
    def start(self) -> "WorkerSupervisor":
        self._spawn()
        self._thread = threading.Thread(target=self._watch, name="kgg-worker-supervisor", daemon=True)
        self._thread.start()
        return self

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def _spawn(self) -> None:
        r, w = os.pipe()
        try:
            # cwd "/": `python -m` puts the working directory on sys.path, and the sandbox binds sys.path in, so a
            # worker started from $HOME would expose (and then rightly refuse) a database under it
            proc = subprocess.Popen(self.argv + ["--heartbeat-fd", str(w)], pass_fds=(w,), start_new_session=True,
                                    cwd="/")
        except OSError as e:
            os.close(r)
            os.close(w)
            log.error("cannot start the leaderboard worker: %s", e)
            with self._lock:
                self.proc, self.last_exit = None, f"could not start: {e}"
            return
        os.close(w)                       # the worker holds the only write end: its death is our EOF
        with self._lock:
            self.proc, self._read_fd = proc, r
            self._started_at = self.last_beat = time.monotonic()
        log.info("leaderboard worker started (pid %d)", proc.pid)

    def _close_pipe(self) -> None:
        if self._read_fd is not None:
            os.close(self._read_fd)
            self._read_fd = None

    def _reap(self, proc: subprocess.Popen, now: float) -> None:
        code = proc.wait()                # it exited (or was killed): reap it, no zombie is left
        self._close_pipe()
        ran = now - self._started_at
        with self._lock:
            self.last_exit, self.proc = _describe(code), None
        if ran >= self.stable_s:
            self._backoff = self.backoff_min_s
        self._next_start = now + self._backoff
        log.error("leaderboard worker (pid %d) died after %.0f s: %s; restarting in %.0f s",
                  proc.pid, ran, _describe(code), self._backoff)
        self._backoff = min(self.backoff_max_s, self._backoff * 2)

    def _watch(self) -> None:
        while not self._stop.is_set():
            proc, fd = self.proc, self._read_fd
            now = time.monotonic()
            if proc is None:
                if now >= self._next_start:
                    self.restarts += 1
                    self._spawn()
                    if self.proc is None:
                        self._next_start = now + self._backoff
                        self._backoff = min(self.backoff_max_s, self._backoff * 2)
                else:
                    self._stop.wait(min(0.2, self._next_start - now))
                continue
            readable = []
            if fd is not None:
                readable, _, _ = select.select([fd], [], [], 0.2)
            else:
                self._stop.wait(0.2)
            if readable:
                data = os.read(fd, 4096)
                if data:
                    self.last_beat = time.monotonic()
                else:                      # EOF: the worker is gone (its write end closed with it)
                    self._close_pipe()
            if self._stop.is_set():
                break
            if proc.poll() is not None:
                self._reap(proc, time.monotonic())
            elif time.monotonic() - (self.last_beat or 0) > self.stale_s:
                log.error("leaderboard worker (pid %d) silent for %.0f s: killing it", proc.pid, self.stale_s)
                proc.kill()

    def stop(self, timeout: float = 10.0) -> None:
        """Ends the worker (SIGTERM, then SIGKILL after `timeout`) and the watch; reaps it."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        proc = self.proc
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        elif proc is not None:
            proc.wait()
        self._close_pipe()

    # ---- what /api/health shows ---------------------------------------------------------------------
    def status(self) -> dict:
        with self._lock:
            proc, beat = self.proc, self.last_beat
        now = time.monotonic()
        alive = proc is not None and proc.poll() is None
        age = None if beat is None else round(now - beat, 3)
        beating = alive and age is not None and age <= self.stale_s
        return {"alive": beating, "pid": proc.pid if alive else None, "last_heartbeat_s_ago": age,
                "restarts": self.restarts, "last_exit": self.last_exit}
