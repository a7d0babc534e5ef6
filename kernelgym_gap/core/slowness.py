"""One rule for "too slow to time in full" (issue 38), read by both places that stop a slow kernel:

  * the child's early exit (child/timing.time_shape through TimingConfig.hopeless): a kernel whose first
    timed calls take over hopeless_factor x the library's time is not timed further;
  * the parent's call deadlines (sandbox/deadlines.py): a later call's bound is call_factor x the library's
    time (at least call_floor_s), and EvalConfig requires call_factor >= hopeless_factor, so a kernel killed
    past a later call's bound is too slow to time by this same rule; its verdict (engine/too_slow.py) says so.

A leaf module: it imports nothing of the project, so the config, the child and the judge can all use it.
"""
from __future__ import annotations

# The child's checkpoint (child/run.py, ChildRun.checkpoint), beside its report: a ChildReport listing the
# trials finished so far. Its own file, never the report itself: a child that ends any other way (a crash,
# an exit without a report) is judged as before; the parent reads it only for a child killed at a call's
# deadline (engine/too_slow.py).
CHECKPOINT_FILE = "checkpoint.json"
# The file a child handing its outputs over by handle (Job.outputs_by_handle) creates beside its report once
# its FINAL report, status OK, is complete: its device-held outputs now stay alive in its memory for the
# parent to copy out, and it waits for SIGUSR1 (write them as files instead) or its end. The parent stops the
# child when it sees it (sandbox/process.py); it never appears for any other report.
HOLD_MARKER = "outputs_held"


def too_slow_to_time(kernel_ms: float, library_ms: float, hopeless_factor: float) -> bool:
    """Whether a kernel taking `kernel_ms` per call is over `hopeless_factor` x the library's `library_ms`."""
    return library_ms > 0 and kernel_ms > hopeless_factor * library_ms
