"""Stage deadlines of the submission's calls: how long each call a child makes may run (`call_bounds`,
computed by the parent into `Job.call_bounds`), and the parent's watch over them (`CallWatch`, polled by
process.SandboxedChild.wait beside the import deadline).

A child rewrites its marker (record.CALL_MARKER, beside its report) before and after each call: `call <i>
<bound_s>`, `done <i>`. The marker only says which call runs; the parent times it on its own clock from when
it first saw it, against its own copy of the bounds. A child that writes the marker itself (the submission
can reach it: same uid, its own scratch) can therefore not lengthen a call's bound nor restart its clock; at
most it claims to be between calls, which leaves it the whole wall deadline every child had before.
"""
from __future__ import annotations

import os
import re
import stat
from collections.abc import Sequence
from pathlib import Path

from kernelgym_gap.core.config import SandboxConfig
from kernelgym_gap.core.record import CallBound, Job, Trial, first_of_their_shape

# A timed shape (cuda) is one mark, not one per repetition: its bound covers the calls timing.py makes at
# most beyond min_reps (the untimed first call, two warm-up calls, the recheck, the last round of five) at
# the per-call bound, plus the warm-up and budget time of the kernel and the library, interleaved.
TIMING_EXTRA_CALLS = 10

_LINE = re.compile(r"(call|done|compiling|compiled) (\d{1,6})(?: (\S{1,32}))?\n?")
_MAX_READ = 64


def _shape_text(trial: Trial) -> str:
    return f"{trial.split} shape {list(trial.shape)}, {trial.dtype}"


def call_bounds(job: Job, sandbox: SandboxConfig) -> tuple[CallBound, ...]:
    """The stage deadline of every call `job`'s child makes, in the child's order (child/marks.py): the
    correctness trials, then one per timed shape; in a compile probe, one per trial (each a compilation);
    in a specs probe, one per specialization; with TimingConfig.recheck_outside_exclusive, one per timed shape's
    recheck after those. Empty when call deadlines are off."""
    compile_s = sandbox.compile_call_s
    if compile_s is None:
        return ()
    if job.mode == "compile_specs":
        return tuple(CallBound(f"compiling {spec.qualname} for sm_90", compile_s) for spec in job.specs)
    if job.mode == "compile_probe":
        return tuple(CallBound(f"probe of trial {t.index}: {_shape_text(t)}", compile_s) for t in job.trials)
    library_ms = {(tuple(shape), dtype): ms for shape, dtype, ms in job.library_hint}

    def later_call_s(key) -> float:
        ms = library_ms.get(key)
        if ms is None:
            return sandbox.call_unknown_s
        return max(sandbox.call_floor_s, sandbox.call_factor * ms / 1e3)

    def has_launch_bound(key) -> bool:
        """Whether a compiling call of `key` is held to less once its compiles are done (the switch is on and
        the library's time for the shape is known)."""
        return sandbox.launch_bound_after_compile and key in library_ms

    def launch_s(key, bound_s: float) -> float | None:
        """A first call's bound once its compiles are done (None: no launch bound)."""
        return min(bound_s, later_call_s(key) * sandbox.launch_calls) if has_launch_bound(key) else None

    firsts = first_of_their_shape(job.trials)
    seen = {(tuple(t.shape), t.dtype) for t in job.trials}
    bounds = []
    for trial in job.trials:
        key = (tuple(trial.shape), trial.dtype)
        first = trial.index in firsts
        what = f"trial {trial.index}{' (first call of its shape)' if first else ''}: {_shape_text(trial)}"
        bounds.append(CallBound(what, compile_s, launch_s(key, compile_s)) if first
                      else CallBound(what, later_call_s(key)))
    if job.timing is not None:
        t = job.timing
        for trial in job.timing_trials:
            key = (tuple(trial.shape), trial.dtype)
            runs = later_call_s(key) * (t.min_reps + TIMING_EXTRA_CALLS) + 2 * (t.budget_ms + t.warmup_ms) / 1e3
            compiles = key not in seen
            # once its compiles are done, a timed shape's call has its repetitions' worth left
            after = runs if compiles and has_launch_bound(key) else None
            bounds.append(CallBound(f"timing of {_shape_text(trial)}", runs + (compile_s if compiles else 0.0),
                                    after))
        if t.recheck_outside_exclusive:
            # the rechecks after the exclusive stretch (child/run.py, recheck_calls): one call each, on a shape
            # its timing has compiled, so a later call's bound, as a correctness call of that shape has; the
            # timed shapes' bounds above still count one recheck among TIMING_EXTRA_CALLS (a little slack)
            for trial in job.timing_trials:
                bounds.append(CallBound(f"recheck after the timing of {_shape_text(trial)}",
                                        later_call_s((tuple(trial.shape), trial.dtype))))
    return tuple(bounds)


def read_marker(path: Path) -> str | None:
    """The marker's text: a regular file (not followed if a link), read without blocking (a FIFO the child
    put there cannot hang the parent), at most a few bytes; None when there is none."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, _MAX_READ).decode("ascii", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)


class CallWatch:
    """The parent's view of a child's calls: which one runs (from the marker) and since when (the parent's
    clock, when it first saw it). Calls only move forward: a call's clock starts once and never restarts,
    and a marker naming an earlier call, an unknown one, or anything else is ignored. A done or compile mark of a
    later call than the last one seen ends the one being timed (its own marks fell between two polls)."""

    def __init__(self, marker: Path, bounds: Sequence[CallBound]):
        self.marker, self.bounds = Path(marker), tuple(bounds)
        self.current: tuple[int, float] | None = None     # (call, when the parent first saw it)
        self.last = -1                                     # the latest call started
        # the current call's launch clock (CallBound.launch_s): (the child's compile count, when the parent
        # first saw that compile marked done), or None while it compiles or before its first compile ends
        self.launched: tuple[str, float] | None = None
        # the call that ran past its bound: (call, its bound, seconds it had run when seen), for the
        # verdict on a kernel correct where it finished (engine/stages.TooSlow)
        self.overrun: tuple[int, float, float] | None = None

    def _update(self, now: float) -> None:
        text = read_marker(self.marker)
        m = _LINE.fullmatch(text) if text else None
        if m is None:
            return
        kind, i = m.group(1), int(m.group(2))
        if self.last < i < len(self.bounds):
            # Any mark of a later call than the last one seen starts that call, on the parent's clock from now: its
            # own `call` mark, or its done or compile mark where the child moved on between two polls (0.1 s apart;
            # a later call takes milliseconds). Ignoring those left the previous call's clock running while the
            # child waited for the lane in its next checkpoint, and killed honest kernels as too_slow on the H100
            # (2026-12-06, docs/journal.md). A skipped call is not timed: the child could always claim to be
            # between calls (module doc).
            self.current, self.last, self.launched = (i, now), i, None
        if self.current is None or self.current[0] != i:
            return                                      # about no call that runs: ignored
        if kind == "done":
            self.current = self.launched = None
        # what the child says of its compiles can only shorten a call: its compile bound from the call's start
        # holds whatever it writes; "compiled" starts the shorter launch clock, "compiling" stops it again
        elif kind == "compiling":
            self.launched = None
        elif kind == "compiled" and (self.launched is None or self.launched[0] != m.group(3)):
            self.launched = (m.group(3), now)

    def overdue(self, now: float) -> str | None:
        """What ran past its bound ("call 3 (trial 3: ...) ran past 2.0 s"), or None."""
        self._update(now)
        if self.current is None:
            return None
        i, since = self.current
        bound = self.bounds[i]
        if now - since > bound.bound_s:
            self.overrun = (i, bound.bound_s, now - since)
            return f"call {i} ({bound.what}) ran past {bound.bound_s:.1f} s"
        if bound.launch_s is not None and self.launched is not None and now - self.launched[1] > bound.launch_s:
            self.overrun = (i, bound.launch_s, now - self.launched[1])
            return f"call {i} ({bound.what}) ran past {bound.launch_s:.1f} s after its compiles"
        return None
