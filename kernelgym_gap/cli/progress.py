"""Progress of a long command on stderr: items done of the total, the item in flight, elapsed time and ETA.

On a terminal it is a tqdm bar, refreshed every second so that the elapsed time moves while one long item
runs; when stderr is not a terminal (a log file, CI, a pipe) it is one plain line per item; under --json
(quiet) nothing at all. stdout is left to the command's own output.

    with Progress(total=39, unit="solution", quiet=args.json) as bar:
        bar.start("LayerNorm triton_rowwise.py")   # the item now in flight
        ...
        bar.done("ok 1.000")                       # it finished (optionally: how)
"""
from __future__ import annotations

import sys
import threading
import time


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class Progress:
    """See the module docstring. Thread-safe: suite workers report from their own threads."""

    def __init__(self, total: int, unit: str = "item", quiet: bool = False, stream=None,
                 tty: bool | None = None):
        self.total, self.unit, self.quiet = total, unit, quiet
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.finished = 0
        self.current = ""
        self.t0 = time.monotonic()
        self._lock = threading.Lock()
        self._bar = None
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    # -- context -------------------------------------------------------------------------------------
    def __enter__(self):
        if self.quiet or not self.tty:
            return self
        try:
            from tqdm import tqdm
        except ImportError:             # no tqdm: the plain lines
            self.tty = False
            return self
        self._bar = tqdm(total=self.total, unit=self.unit, file=self.stream, dynamic_ncols=True, leave=True,
                         bar_format="{n_fmt}/{total_fmt} {unit}s |{bar:24}| elapsed {elapsed}, ETA {remaining}{postfix}")
        self._ticker = threading.Thread(target=self._tick, name="progress", daemon=True)
        self._ticker.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(timeout=2)
        if self._bar is not None:
            self._bar.close()
        elif not self.quiet and not exc[0]:
            self._line(f"done: {self.finished}/{self.total} {self.unit}s in {_clock(self.elapsed())}")
        return False

    def _tick(self):
        while not self._stop.wait(1.0):
            with self._lock:
                self._bar.refresh()

    # -- reporting -----------------------------------------------------------------------------------
    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def eta(self) -> float | None:
        """Seconds left at the mean pace of the items finished so far (None before the first one)."""
        if not self.finished:
            return None
        return self.elapsed() / self.finished * max(0, self.total - self.finished)

    def start(self, item: str) -> None:
        """`item` is now in flight."""
        with self._lock:
            self.current = item
            if self._bar is not None:
                self._bar.set_postfix_str(item, refresh=True)
                return
        if not self.quiet:
            eta = self.eta()
            self._line(f"[{self.finished + 1}/{self.total}] {item}  (elapsed {_clock(self.elapsed())}"
                       + (f", ETA {_clock(eta)})" if eta is not None else ")"))

    def done(self, how: str = "") -> None:
        """The item in flight finished (`how`: its result, shown on the bar)."""
        with self._lock:
            self.finished += 1
            if self._bar is not None:
                self._bar.update(1)
                if how:
                    self._bar.set_postfix_str(f"{self.current}: {how}", refresh=True)

    def _line(self, text: str) -> None:
        print(text, file=self.stream, flush=True)
