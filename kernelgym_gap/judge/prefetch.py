"""The child's output files read into host memory before the trusted check takes the GPU's shared lane
(EvalConfig.read_outputs_outside_lane, issue 35).

Reading a file is host work: on the H100 light batch of 2026-12-06 it was 1.86 s of the 2.4 s the check held
the shared lane per evaluation (docs/measurement.md). With the switch on, the checker reads the output files
here first, in the order the check judges them, and then, under the lane, copies them to the device and
compares. The verdict must stay the one without the switch, so this module only ever keeps files that the
check would have read successfully: the first file that is missing, unreadable, or does not fit the bound
ends the prefetch, and the check reads it (and everything after it) itself, under the lane, as before, so
its failure is reported by the very same code at its own trial's turn, after the earlier trials' verdicts.
The check re-applies the one limit that depends on the reference (the expected output size) to every
prefetched tensor (judge/output_source.prefetched_or_load).

EvalConfig.read_outputs_while_timing (judge/early_prefetch.py) reads the pre-timing checkpoint's files while
the child still times; `prefetch_outputs(..., early=)` then keeps a file read early only where the final report
names it for the same trial and the file's inode, size, mtime and ctime are the ones seen when it was read (the
child writes each output once, with O_EXCL, but a hostile child could replace one); anything else is read
again here, by the same rule as without the early read."""
from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from pathlib import Path

import torch

from kernelgym_gap.core import tensor_file
from kernelgym_gap.core.record import ChildReport, Job

# Host memory the prefetch may hold per check. 4 GiB: the largest outputs of the corpus (a float32 attention
# output at S = 16384) are hundreds of MiB each, and a worker runs up to four checks at once on a host with
# 128+ GiB; files past the bound are read under the lane, as without the switch.
PREFETCH_BYTES = 4 << 30


@dataclasses.dataclass(frozen=True)
class Fetched:
    """One output file as read: its size on disk when read (the check's size rule uses it) and its tensor."""
    size: int
    tensor: torch.Tensor
    # what os.stat said before and after the read (inode, size, mtime_ns, ctime_ns) and the trial it was read
    # for (-1: a call after timing): an early read is kept only if both still hold at the final prefetch
    stamp: tuple[int, ...] = ()
    index: int = -1


@dataclasses.dataclass
class Prefetch:
    """The files read before the lane, by the name the child's report gives, and the seconds it took."""
    files: dict[str, Fetched]
    seconds: float
    kept_early: int = 0          # files of them read while the child timed (read_outputs_while_timing)


def named_outputs(job: Job, report: ChildReport) -> list[tuple[str, int]]:
    """(file, trial index) in the order judge/checker.check reads them: each trial's, in the job's order, then
    each call after timing's (index -1)."""
    by_index = {o.index: o for o in report.trials}
    names = [(by_index[t.index].output_file, t.index) for t in job.trials
             if t.index in by_index and by_index[t.index].output_file is not None]
    names += [(t.recheck_output_file, -1) for t in report.timings
              if t.recheck_output_file is not None and t.recheck_trial is not None]
    return names


def output_names(job: Job, report: ChildReport) -> list[str]:
    """The output files in the order judge/checker.check reads them."""
    return [name for name, _ in named_outputs(job, report)]


def _stamp(path: Path) -> tuple[int, int, int, int]:
    # ctime too: utime can set a file's mtime back after a rewrite in place, nothing sets its ctime back
    st = os.stat(path)
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def prefetch_outputs(job: Job, report: ChildReport, max_bytes: int = PREFETCH_BYTES,
                     read: Callable[[Path, int], torch.Tensor] = tensor_file.read_tensor,
                     early: Prefetch | None = None) -> Prefetch:
    """Reads the job's output files in the check's order until one fails or the next would pass `max_bytes`
    in all. `read` is tensor_file.read_tensor (a test passes its own to see when it runs). Never raises for
    what the child wrote: a file it cannot keep is left to the check. `early`: the files read while the child
    timed (judge/early_prefetch.py), kept where the same trial names the same unchanged file; their memory is
    released here otherwise. `seconds` is this call's own reading only."""
    t = time.perf_counter()
    outputs = Path(job.outputs_dir)
    before = dict(early.files) if early is not None else {}
    files: dict[str, Fetched] = {}
    held = kept = 0
    for name, index in named_outputs(job, report):
        if name in files:
            continue
        path = outputs / name
        try:
            if not path.is_file():
                break
            stamp = _stamp(path)
            size = stamp[1]
            if held + size > max_bytes:
                break
            was = before.pop(name, None)
            if was is not None and was.index == index and was.stamp == stamp:
                fetched, kept = was, kept + 1
            else:
                tensor = read(path, max_bytes - held)
                if _stamp(path) != stamp:       # replaced while it was read: the check reads it itself
                    break
                fetched = Fetched(size=size, tensor=tensor, stamp=stamp, index=index)
        except (tensor_file.TensorFileError, OSError, ValueError):
            break
        held += size
        files[name] = fetched
    before.clear()
    return Prefetch(files=files, seconds=time.perf_counter() - t, kept_early=kept)


def told_go(proto, stdin, spec_path: str):
    """The prefetch's step of the warm checker's protocol (judge/checker.serve): `{"spec": PATH, "read": N}`
    on the protocol channel, then a line from stdin once the parent holds the lane (an empty read: the parent
    went away)."""
    import json

    def before_lane(n: int) -> bool:
        proto.write(json.dumps({"spec": spec_path, "read": n}) + "\n")
        return bool(stdin.readline().strip())
    return before_lane


def wants_prefetch(spec_path: str) -> bool:
    """Whether a one-shot checker's CHECK.json asks for the prefetch's two steps (judge/checker.main)."""
    import json
    try:
        return bool(json.loads(Path(spec_path).read_text()).get("prefetch"))
    except (OSError, ValueError, AttributeError):
        return False        # judge/checker._check_spec reports the unreadable spec as before
