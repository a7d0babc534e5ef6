"""The verdict on a kernel killed past a call's stage deadline after it finished smaller shapes (issue 38).

The trials run smallest first (engine/correctness_order.py) and the child checkpoints the finished trials'
outputs and outcomes before each new group of calls (child/run.py, ChildRun.checkpoint). When the parent
kills it for a call past its bound (sandbox/deadlines.py), the Sandbox stage lets the evaluation go on
with the checkpoint as the child's report (`read_checkpoint`) and the trusted checker judges the finished trials alone
(Evaluation.check). A wrong one stops the evaluation there, as it would have anyway (mismatch etc.); if
they are all correct, this stage decides:

  too_slow   the finished trials cover the smallest shape of every dtype: correct where checked, and too
             slow to time in full by the same rule as the timing's early exit (core/slowness.py); the
             message says how slow (the call time reached, E <= t_library / reached, U <= t_floor / reached
             on cuda where they are known), the diagnosis runs on what was seen (judge/diagnosis.
             diagnose_bound), the reward is judge/reward.too_slow_reward
  timeout    they do not (too little was checked to call it correct)

`correct` is None on too_slow: verified where checked, never on the shapes it did not finish (bench
counts it apart: bench/metrics.py).
"""
from __future__ import annotations

import logging
from pathlib import Path

from kernelgym_gap.core.record import Trial, first_of_their_shape
from kernelgym_gap.core.slowness import CHECKPOINT_FILE, too_slow_to_time
from kernelgym_gap.core.status import Status
from kernelgym_gap.engine.correctness_order import shape_size

log = logging.getLogger(__name__)


def read_checkpoint(ev):
    """The checkpoint a child killed at a call's deadline left (core/slowness.CHECKPOINT_FILE), read as
    hostile input like its report (bounded, parsed as the record: sandbox/child_io.read_report); None when
    there is none, it does not parse, or it lists no finished trial."""
    from kernelgym_gap.core.errors import ProtocolError
    from kernelgym_gap.sandbox.child_io import read_report
    out = ev.child.outcome
    if out.stage_timeout != "call" or out.stage_overrun is None:
        return None
    try:
        report = read_report(Path(ev.job.report_file).parent / CHECKPOINT_FILE, out)
    except (ProtocolError, OSError) as e:
        log.info("%s: no usable checkpoint after a call's deadline: %s", ev.task.id, str(e)[:200])
        return None
    return report if report.status is Status.OK and report.trials and not report.timings else None


def finished_trials(ev) -> frozenset[int]:
    """The indices of the trials the child's checkpoint lists (what the trusted check judges)."""
    known = {t.index for t in ev.job.trials}
    return frozenset(o.index for o in ev.child.report.trials if o.index in known)


def _where(t: Trial) -> str:
    """A trial's case as terms and the diagnosis may name it: a held-out shape never by its dimensions (the
    message is scrubbed as the record is made, engine/feedback.py; these fields are not)."""
    shape = f"shape {list(t.shape)}" if t.split == "public" else "held-out shape"
    return f"{t.split} {shape}, {t.dtype}" if t.split == "public" else f"{shape}, {t.dtype}"


def _killed_call(ev) -> tuple[str, Trial | None, bool]:
    """What the killed call was: its description, its trial (a correctness trial, or a timed shape's for a
    recheck after the timing; None in the timing, whose bound covers many calls), whether it was a shape's
    first call (its time includes the compilation)."""
    i, _, _ = ev.child.outcome.stage_overrun
    trials = ev.job.trials
    if i < len(trials):
        t = trials[i]
        first = t.index in first_of_their_shape(trials)
        return f"trial {t.index} ({_where(t)})", t, first
    k = i - len(trials)
    timed = ev.job.timing_trials
    if k < len(timed):
        t = timed[k]
        return f"the timing of {_where(t)}", None, False
    k -= len(timed)
    if k < len(timed) and ev.job.timing is not None and ev.job.timing.recheck_outside_exclusive:
        # a recheck after the timing (sandbox/deadlines.call_bounds): one later call on the timed shape, so the
        # bound on E and U holds for it as for a correctness trial's later call
        t = timed[k]
        return f"the recheck after the timing of {_where(t)}", t, False
    return f"call {i}", None, False


def _uncovered(ev, done: frozenset[int]) -> list[str]:
    """The dtypes whose smallest shape has no finished trial."""
    missing = []
    for dtype in dict.fromkeys(t.dtype for t in ev.job.trials):
        of_dtype = [t for t in ev.job.trials if t.dtype == dtype]
        smallest = min(shape_size(ev.task, t.shape) for t in of_dtype)
        if not any(t.index in done for t in of_dtype if shape_size(ev.task, t.shape) == smallest):
            missing.append(dtype)
    return missing


def decide(ev) -> tuple[Status, str, dict] | None:
    """(status, message, the Verdict's other fields) for a kernel killed past a call's deadline after its
    finished trials checked correct: too_slow, or timeout when too little was checked (the TooSlow stage,
    engine/stages.py, stops with it). None for every evaluation whose child was not killed that way."""
    if ev.killed is None:
        return None
    _, bound_s, reached_s = ev.killed
    done = finished_trials(ev)
    what, trial, first = _killed_call(ev)
    checked = ev.check_result.trials_checked if ev.check_result is not None else 0
    missing = _uncovered(ev, done)
    detail = ev.child.outcome.stage_detail or f"{what} ran past {bound_s:.1f} s"
    if missing:
        return (Status.TIMEOUT, f"{detail}, its stage deadline, and the child was killed; the {len(done)} "
                                f"trial(s) it finished were correct but do not include the smallest shape in "
                                f"{', '.join(missing)}", dict(trials_checked=checked))
    from kernelgym_gap.judge.reward import too_slow_reward
    measured = measure_bound(ev, trial, first, reached_s)
    how = (f"{detail}, its stage deadline, and the child was killed ({reached_s:.1f} s into the call"
           f"{', compilation included' if first else ''}")
    if ev.backend.measures_time:
        e_up, u_up = measured["E_upper"], measured["U_upper"]
        why = ("the call's time includes compilation" if first else "a timing stretch, many calls"
               if trial is None else "no library time for the shape")
        how += f"; E <= {e_up:.2g}" if e_up is not None else f"; E not bounded ({why})"
        how += f", U <= {u_up:.2g})" if u_up is not None else ")"
    else:
        how += "; cpu backend: interpreter wall time, not a GPU figure)"
    rule = measured.get("too_slow_by_rule")
    if rule:
        how += (f": over {ev.config.timing.hopeless_factor:g}x the library's time, too slow to time in "
                "full (the timing's early-exit rule)")
    message = (f"correct on the {len(done)} trial(s) it finished (the smallest shapes, every dtype), "
               f"then too slow: {how}; the larger shapes were not checked")
    from kernelgym_gap.core.terms import TooSlowTerms
    bound = TooSlowTerms(E_upper=measured["E_upper"], U_upper=measured["U_upper"],
                         library_ms=measured["library_ms"], floor_ms=measured["floor_ms"],
                         too_slow_by_rule=measured["too_slow_by_rule"], trials_finished=len(done),
                         killed_call=what, bound_s=bound_s, reached_s=reached_s, first_call=first)
    terms = {**bound.to_dict(),         # KernelBench-style allclose on the finished trials
             "kernelbench_allclose": ev.check_result.kernelbench_allclose if ev.check_result else None}
    return (Status.TOO_SLOW, message,
            dict(correct=None, terms=terms, reward=too_slow_reward(ev.config.reward, ev.backend.measures_time),
                 diagnosis=measured.get("diagnosis"), trials_checked=checked))


def measure_bound(ev, trial: Trial | None, first: bool, reached_s: float) -> dict:
    """What the kill says of the kernel's speed: E_upper = t_library / reached and U_upper = t_floor /
    reached for the killed call's shape (cuda; None where unknown, and for a first call, whose time may be
    compilation, or a timing call, whose bound covers many calls), and the diagnosis on what was seen
    (judge/diagnosis.diagnose_bound). On cpu: no performance figure at all."""
    out: dict = {"E_upper": None, "U_upper": None, "library_ms": None, "floor_ms": None, "too_slow_by_rule": None}
    if not ev.backend.measures_time:
        return out
    from kernelgym_gap.judge.diagnosis import causes, diagnose_bound
    from kernelgym_gap.judge.measure import best_known_efficiency, floor_ms, get_calibration
    report = ev.child.report
    reached_ms = reached_s * 1e3
    single = trial is not None and not first
    library = {(tuple(s), d): ms for s, d, ms in ev.job.library_hint}
    lib_ms = library.get((tuple(trial.shape), trial.dtype)) if trial is not None else None
    fl = None
    device_name = report.device.get("name", "")
    try:
        if trial is not None:
            cal = get_calibration(report, ev.placement)
            fl, _ = floor_ms(ev.task, trial.shape, trial.dtype, cal)
            device_name = cal.device_name
    except Exception as e:      # noqa: BLE001 - no ceilings: the bound goes without U, said in the flags
        log.warning("%s: no calibration for the too_slow bound: %s", ev.task.id, e)
        ev.flags.append(f"too_slow: no device ceilings, U bound unknown ({str(e).splitlines()[0][:160]})")
    out.update(library_ms=lib_ms, floor_ms=fl)
    if single:
        out["E_upper"] = lib_ms / reached_ms if lib_ms else None
        out["U_upper"] = fl / reached_ms if fl else None
        out["too_slow_by_rule"] = (too_slow_to_time(reached_ms, lib_ms, ev.config.timing.hopeless_factor)
                                   if lib_ms else None)
    library_U = fl / lib_ms if fl and lib_ms else None
    biggest = max((o for o in report.trials), key=lambda o: o.programs, default=None)
    sizes = [t for t in ev.job.trials if t.index in {o.index for o in report.trials}]
    largest = max(sizes, key=lambda t: shape_size(ev.task, t.shape)) if sizes else None
    evidence = causes(ev.source, {t.dtype for t in ev.job.trials}, biggest.programs if biggest else 0,
                      max((o.launches for o in report.trials), default=0), report.device.get("sm_count"), None,
                      ev.task.min_bytes(largest.shape, largest.dtype) if largest else None, ev.config.diagnosis)
    reached = (f"a call on {_where(trial)} ran past {reached_s:.1f} s" if trial is not None
               else f"killed while timing, after {reached_s:.1f} s")
    out["diagnosis"] = diagnose_bound(out["E_upper"], out["U_upper"], library_U,
                                      best_known_efficiency(ev.task.id, ev.dsl, device_name), evidence, reached,
                                      ev.config.diagnosis)
    return out
