"""The check's outputs read while the child still times (EvalConfig.read_outputs_while_timing, issue 35).

Before its timing the child writes every correctness trial's output and a checkpoint report listing them
(child/run.checkpoint, core/slowness.CHECKPOINT_FILE); the outputs are never written again (O_EXCL). On the
H100 a lone warm env.step spent 1.5 s of its 8.5 s reading those files after the child's ~2.3 s timing. Here a
thread of the parent watches for the checkpoint whose trials cover all of the job's, parses it as hostile input
(ChildReport.from_json, its bounds; anything wrong: no early read) and has the files read while the child
times: by the warm checker, idle then (WarmChecker.read_early, a protocol step of its own), or, for the cpu
check in the parent, by this thread. The check's own prefetch (judge/prefetch.py, `early=`) keeps a file only
where the final report names it for the same trial and its inode, size and mtime are unchanged, and reads the
rest, so the verdict is the one without the switch. The one-shot checker process (cuda without a warm
checker) starts after the child and cannot receive memory read here: it is not served (no early read).

    early = start(job, checkpoint_path, private_dir, checker, timeout)   # before the child runs
    ...                                                                     # the child runs
    early.stop()                                                            # it ended
    early.prefetch / early.in_checker                                       # for the check
    early.discard()                                                         # killed, failed, or closing
"""
from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path

from kernelgym_gap.core import tensor_file
from kernelgym_gap.core.errors import ProtocolError
from kernelgym_gap.core.record import ChildReport, Job
from kernelgym_gap.core.status import Status
from kernelgym_gap.judge.prefetch import Prefetch, prefetch_outputs

log = logging.getLogger(__name__)

POLL_S = 0.02            # how often the checkpoint is looked for: a stat, against a timing of seconds
MAX_CHECKPOINT_BYTES = 8 << 20   # a checkpoint report lists trials only: far under this


def covers(job: Job, report: ChildReport) -> bool:
    """Whether `report` is the pre-timing checkpoint: status ok and an output file for every job trial."""
    if report.status is not Status.OK:
        return False
    named = {o.index for o in report.trials if o.output_file is not None}
    return all(t.index in named for t in job.trials)


def parse_checkpoint(path: Path) -> ChildReport | None:
    """The checkpoint the untrusted child wrote, or None for anything not a bounded, valid report."""
    try:
        with open(path, "rb") as f:
            text = f.read(MAX_CHECKPOINT_BYTES + 1)
        if len(text) > MAX_CHECKPOINT_BYTES:
            return None
        return ChildReport.from_json(text, max_bytes=MAX_CHECKPOINT_BYTES)
    except (OSError, ProtocolError):
        return None


class EarlyRead:
    """One evaluation's early read: a thread from `start` until `stop`. After stop: `prefetch` (the files read
    in the parent) or `in_checker` (the warm checker holds them), and `seconds` (the read, overlapping the
    child: the record's check_prefetch_early)."""

    def __init__(self, job: Job, checkpoint: Path, private: Path, checker=None, timeout: float = 60.0):
        self.job, self.checkpoint, self.private = job, checkpoint, private
        self.checker, self.timeout = checker, timeout
        self.prefetch: Prefetch | None = None
        self.in_checker = False
        self.seconds: float | None = None
        self.done = threading.Event()       # the read finished (tests wait on it)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="kgg-early-prefetch", daemon=True)

    def _watch(self) -> None:
        while not self._stop.is_set():
            report = parse_checkpoint(self.checkpoint) if self.checkpoint.is_file() else None
            if report is not None and covers(self.job, report):
                try:
                    self._read(report)
                except Exception:  # noqa: BLE001 - the early read is an optimisation: the check reads it all
                    log.warning("the early read of the outputs failed; the check reads them", exc_info=True)
                    self.prefetch, self.in_checker = None, False
                finally:
                    self.done.set()
                return
            self._stop.wait(POLL_S)

    def _read(self, report: ChildReport) -> None:
        t = time.perf_counter()
        if self.checker is None:
            self.prefetch = prefetch_outputs(self.job, report)
        else:
            # the checker reads the parent's copy of the report (parsed above), never the child's file
            report_path = self.private / "early_report.json"
            report_path.write_text(report.to_json())
            job_path = self.private / "early_job.json"
            job_path.write_text(self.job.to_json())
            spec = self.private / "early_spec.json"
            spec.write_text(json.dumps({"job": str(job_path), "report": str(report_path)}))
            self.in_checker = self.checker.read_early(spec, self.timeout) is not None
        self.seconds = time.perf_counter() - t

    def stop(self) -> None:
        """The child ended: no new early read starts; one under way is waited for (a read of host files)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def used(self) -> None:
        """The check ran: the warm checker dropped the files at that request whatever came of it (a check
        request always frees what `early` read), and the parent's are released here."""
        self.prefetch, self.in_checker = None, False

    def discard(self) -> None:
        """Frees what was read (a killed or failed child, or the evaluation's end)."""
        self.stop()
        self.prefetch = None
        if self.in_checker:
            self.in_checker = False
            self.checker.drop_early()


def read_for_checker(spec_path: str, read=tensor_file.read_tensor) -> Prefetch:
    """The warm checker's `early EARLY.json` (judge/checker.serve): the files listed by the parent's copy of
    the checkpoint report (parsed by EarlyRead with ChildReport's bounds, never the child's file) read (`read`:
    the server's: into its read arena with one)."""
    spec = json.loads(Path(spec_path).read_text())
    job = Job.from_json(Path(spec["job"]).read_text())
    report = ChildReport.from_json(Path(spec["report"]).read_text())
    return prefetch_outputs(job, report, read=read)


def early_line(line: str, held: Prefetch | None, proto, read=tensor_file.read_tensor) -> Prefetch | None:
    """The warm checker's `drop` and `early EARLY.json` lines (judge/checker.serve): answers on `proto` and
    returns what the server holds next. A failed read answers an error (the parent then ends this process).
    `read`: read_for_checker's."""
    if line == "drop":
        proto.write(json.dumps({"dropped": len(held.files) if held is not None else 0}) + "\n")
        return None
    path = line.removeprefix("early ")
    held = None                      # the older read, if any, is freed before the new one
    try:
        held = read_for_checker(path, read)
    except Exception as e:  # noqa: BLE001 - reported to the parent, which ends this process
        proto.write(json.dumps({"early": path, "error": f"{type(e).__name__}: {e}"[-2000:]}) + "\n")
        return None
    proto.write(json.dumps({"early": path, "read": len(held.files)}) + "\n")
    return held


def start(job: Job, checkpoint: Path, private: Path, checker=None, timeout: float = 60.0) -> EarlyRead:
    early = EarlyRead(job, checkpoint, private, checker, timeout)
    early._thread.start()
    return early
