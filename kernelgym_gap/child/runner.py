"""The child: `python -m kernelgym_gap.child.runner JOB.json`. Runs one submission and writes one ChildReport.

`python -m kernelgym_gap.child.runner --wait --dsl DSL --backend BACKEND` is the same child pre-started
(sandbox/prestart.py): it does the imports (and, on cuda, creates its CUDA context) first, then reads one job
path on stdin and runs that job (with `--bind`, started before its task was known, a line of warm-up JSON first).
It runs no submission code before the job, and exits after it: single-use.

The job itself is run.ChildRun (the import, the correctness trials, the timing, the report); the compile-probe
modes are compile_modes.py; the integrity checks are integrity.py.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path


def run_job(job_path: Path, preimport: dict[str, float] | None = None) -> int:
    from kernelgym_gap.child.run import ChildRun
    return ChildRun.from_file(job_path, preimport).run()


def read_warm(path: str | None) -> dict | None:
    """The pre-start's warm-up (sandbox/prestart.ChildSpec.warm), read from its file and the file removed at
    once, before any import: the timed shapes (held-out ones among them) are not left for the submission to read
    in the scratch directory, as they would be on the command line. Unreadable: no warm-up."""
    if not path:
        return None
    try:
        text = Path(path).read_text()
    except OSError:
        return None
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass
    try:
        warm = json.loads(text)
    except ValueError:
        return None
    return warm if isinstance(warm, dict) else None


def process_age_s() -> float | None:
    """Seconds since this process started (/proc/uptime less /proc/self/stat's start time, 10 ms steps): before
    `wait_for_job` begins, the interpreter's start and the package's imports. None where /proc does not say."""
    try:
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        stat = Path("/proc/self/stat").read_text()
        start_ticks = int(stat[stat.rindex(")") + 2:].split()[19])     # field 22, after the command's parentheses
        return round(max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK")), 3)
    except (OSError, ValueError, IndexError):
        return None


def read_bind(line: str) -> dict | None:
    """The warm-up a child started without its task is given (`--bind`: prestart.PrestartedChild.bind): one line
    of JSON, `{}` for none. Anything else is no warm-up: the job warms what it needs, as a cold child's does."""
    try:
        warm = json.loads(line)
    except ValueError:
        return None
    return warm if isinstance(warm, dict) and warm else None


def warm_on_cuda(warm: dict | None, phases: dict[str, float], context: bool) -> None:
    """On cuda, under the GPU's lane held shared: the CUDA context (`context`), then the library's first calls of
    `warm`. Made during another child's timing they stalled that timing (core/lane.py); GPU work only under the
    same shared hold, or with no lane to hold (seconds of kernels run beside another child's timing would skew
    it; the job warms again, under its own hold). Adds the wait to `preimport_lane_wait`."""
    import torch
    from kernelgym_gap.child import timing
    from kernelgym_gap.core.lane import Hold, hold_if_possible, inherited
    lane, budget = inherited()
    asked = time.perf_counter()
    with hold_if_possible(lane, "shared", budget) as got:
        phases["preimport_lane_wait"] = phases.get("preimport_lane_wait", 0.0) + time.perf_counter() - asked
        if context:
            torch.zeros(1, device="cuda")
            torch.cuda.synchronize()
        if warm is not None and (lane is None or isinstance(got, Hold)):
            phases.update(timing.warm_prestarted(warm))


def wait_for_job(dsl: str, backend: str, warm_path: str | None = None, bind: bool = False) -> int:
    """The pre-started child: the imports a job needs (on cuda with a warm-up file, the task's library's first
    calls too: child/timing.warm_prestarted), then one job path on stdin (an empty line or a closed pipe: the
    pool let it go unused, exit). With `bind` (a child started before its task was known: prestart.ChildPool's
    `start_early`), a line of warm-up JSON comes first (read_bind), and the library's first calls follow it.
    Its phases: `preimport` (from here to ready, less the wait for the bind line), `preimport_startup` (the
    process's age here: what `preimport` does not count), on cuda `preimport_lane_wait` (the waits for the shared
    holds its context and warm-up are made under) and with `bind`, `preimport_bind_wait`."""
    t = time.perf_counter()
    phases: dict[str, float] = {}
    age = process_age_s()
    if age is not None:
        phases["preimport_startup"] = age
    warm = read_warm(warm_path)
    import torch  # noqa: F401
    from kernelgym_gap.child import integrity, run  # noqa: F401
    from kernelgym_gap.core import inputs, record  # noqa: F401
    from kernelgym_gap.dsl import adapter_class
    adapter_class(dsl).preimport()
    if backend == "cuda":
        from kernelgym_gap.device import identity  # noqa: F401
        # the CUDA context, made before the job instead of in it
        warm_on_cuda(warm, phases, context=True)
    if bind:
        asked = time.perf_counter()
        line = sys.stdin.readline()
        phases["preimport_bind_wait"] = time.perf_counter() - asked
        if not line.strip():
            return 0                              # let go before it was given a task
        warm = read_bind(line)
        if backend == "cuda" and warm is not None:
            warm_on_cuda(warm, phases, context=False)
    phases["preimport"] = time.perf_counter() - t - phases.get("preimport_bind_wait", 0.0)
    line = sys.stdin.readline().strip()
    # the submission reads nothing more from the parent: stdin becomes /dev/null
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    if not line:
        return 0
    return run_job(Path(line), preimport=phases)


def keep_import_start_to_itself() -> None:
    """The import-start pipe (core/record.py, IMPORT_START_FD_ENV) is inherited from the parent; from here on
    no process this child starts (a compiler the pre-import runs, say) gets a copy of it. It is written and
    closed just before the submission's module runs (run._signal_import_start)."""
    from kernelgym_gap.core.record import IMPORT_START_FD_ENV
    fd = os.environ.get(IMPORT_START_FD_ENV)
    try:
        os.set_inheritable(int(fd), False)
    except (TypeError, ValueError, OSError):
        pass                                      # none was handed over (a cold child run by hand)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    keep_import_start_to_itself()
    if argv[:1] == ["--wait"] and len(argv) in (5, 6, 7) and argv[1] == "--dsl" and argv[3] == "--backend" \
            and (len(argv) == 5 or (len(argv) == 6 and argv[5] == "--bind")
                 or (len(argv) == 7 and argv[5] == "--warm")):
        return wait_for_job(argv[2], argv[4], argv[6] if len(argv) == 7 else None, bind=len(argv) == 6)
    if len(argv) != 1 or argv[0].startswith("--"):
        print("usage: python -m kernelgym_gap.child.runner JOB.json\n"
              "       python -m kernelgym_gap.child.runner --wait --dsl DSL --backend BACKEND [--warm FILE | --bind]   "
              "(job path on stdin; with --bind, a line of warm-up JSON before it)",
              file=sys.stderr)
        return 2
    return run_job(Path(argv[0]))


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Leave without running the submission's atexit handlers or waiting for threads it started.
    os._exit(code)
