"""Runs one child process under every isolation layer this machine offers, with a wall-clock deadline.

The layers (each named in `ChildOutcome.layers` only when it was active; docs/security.md says what each
stops and what it does not):
  session          own session and process group; the deadline kills the group (and the cgroups, below)
  clean_env        the environment is an allow-list (scratch.py, `child_env`): no secret of the parent passes
  scratch          a fresh directory as cwd, HOME, TMPDIR and every cache (Triton, TileLang, TVM)
  rlimit_*         CPU seconds, file size, open files, core dumps (0), processes (nproc, with an
                   unprivileged uid), address space (`rlimit_as`, cpu path only: RLIMIT_AS breaks cuInit)
  cgroup_pids      a pids limit per child (fork bombs), cgroup v1 or v2, under this process's own cgroup
  cgroup_memory    a memory limit per child (the GPU path's memory limit; both paths' OOM detection)
  unprivileged_uid a fresh uid per child (when the harness is root): no signals to the harness, no
                   /proc/<pid>/mem or environ of it, no write to anything it owns
  bwrap            bubblewrap: pid/net/ipc/uts(/cgroup) namespaces, a new root of read-only binds (system
                   dirs, a few /etc files, the Python in use, the project and its venv; no /root, /home,
                   or other /work content), a private /tmp, its own /proc, GPU nodes only when asked for
  unshare          fallback when bwrap is absent and we are root: the same namespaces through util-linux,
                   tmpfs over /tmp, /var/tmp, /dev/shm, /root, /home and the project's parent with only
                   what the child needs bound back (read-only but the scratch), GPU nodes masked on cpu
  output_bounded   stdout/stderr drained into bounded tails; a child writing more than the limit is killed
  scratch_quota    the scratch directory's size and entry count watched; over quota, the child is killed
  scratch_sanitized symlinks and special files the child left in its scratch are removed before the
                   parent reads anything from it
isolation.py builds the bwrap and unshare command lines and chooses the isolation and uid; scratch.py the
environment and the scratch directory; this module
starts the child under them (SandboxedChild) and enforces the deadline and limits while it runs.
"""
from __future__ import annotations

import dataclasses
import fcntl
import os
import random
import resource
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from kernelgym_gap.sandbox.cgroup import ChildCgroups
from kernelgym_gap.sandbox.deadlines import CallWatch
from kernelgym_gap.sandbox.isolation import bwrap_argv, choose_isolation, unshare_argv
# the outcome record lives apart so that held.py can name it; its callers import it from here
from kernelgym_gap.sandbox.outcome import ChildOutcome
# the child's environment and scratch directory (scratch.py); child_env is read here by the callers too
from kernelgym_gap.sandbox.scratch import child_env, prepare_scratch, scratch_usage  # noqa: F401
from kernelgym_gap.core.config import SandboxConfig
from kernelgym_gap.core.lane import FD_BASE, child_fds
from kernelgym_gap.core.record import CALL_MARKER, IMPORT_MARKER, IMPORT_START_FD_ENV
from kernelgym_gap.core.slowness import HOLD_MARKER
from kernelgym_gap.sandbox import held as _held

# SandboxedChild.send_before's bound: less than Linux's 64 KiB pipe buffer, so the write never waits for the child
MAX_LINE_BEFORE = 60 * 1024


@dataclasses.dataclass(frozen=True)
class ChildSandbox(SandboxConfig):
    """One child's sandbox as launch.child_spec builds it: the evaluation's SandboxConfig plus where it runs
    that the sandbox itself acts on, its GPU's lane directory (core/placement.Placement.lane_dir). The lanes
    are not a SandboxConfig field, so that the cache key hashes the EvalConfig whole; a plain SandboxConfig
    gives its child no lanes."""
    lane_dir: str | None = None

    def __new__(cls, *args, **kwargs):      # lane_dir is this type's own field (SandboxConfig refuses it)
        return object.__new__(cls)


class _TailReader(threading.Thread):
    def __init__(self, stream, limit: int, total: list, lock: threading.Lock, stop_at: int | None,
                 over: threading.Event):
        super().__init__(daemon=True)
        self.stream, self.limit = stream, limit
        self.buf = bytearray()
        self.total = 0
        self._shared, self._lock, self._stop_at, self._over = total, lock, stop_at, over

    def run(self):
        while True:
            try:
                chunk = self.stream.read1(65536) if hasattr(self.stream, "read1") else self.stream.read(65536)
            except (OSError, ValueError):
                break
            if not chunk:
                break
            self.total += len(chunk)
            self.buf += chunk
            if len(self.buf) > 2 * self.limit:
                del self.buf[: len(self.buf) - self.limit]
            with self._lock:
                self._shared[0] += len(chunk)
                if self._stop_at is not None and self._shared[0] > self._stop_at:
                    self._over.set()

    def text(self) -> str:
        return bytes(self.buf[-self.limit:]).decode("utf-8", "replace")


# ------------------------------------------------------------------------------------------ the child

def _preexec(config: SandboxConfig, cgroups: ChildCgroups | None, uid: int | None, drop_here: bool, gpu: bool):
    limits = [(resource.RLIMIT_CPU, config.cpu_s), (resource.RLIMIT_FSIZE, config.fsize_bytes),
              (resource.RLIMIT_NOFILE, config.nofile), (resource.RLIMIT_CORE, 0)]
    if config.address_space_bytes is not None and not gpu:
        limits.append((resource.RLIMIT_AS, config.address_space_bytes))
    if uid is not None:
        # counted per uid (a fresh one per child; the cgroup is per child too)
        limits.append((resource.RLIMIT_NPROC, 2 * config.pids_max))

    def apply():
        if cgroups is not None:
            cgroups.enter()
        for which, value in limits:
            resource.setrlimit(which, (value, value))
        if drop_here:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)

    names = {resource.RLIMIT_CPU: "rlimit_cpu", resource.RLIMIT_FSIZE: "rlimit_fsize",
             resource.RLIMIT_NOFILE: "rlimit_nofile", resource.RLIMIT_CORE: "rlimit_core",
             resource.RLIMIT_AS: "rlimit_as", resource.RLIMIT_NPROC: "rlimit_nproc"}
    return apply, [names[w] for w, _ in limits]


class SandboxedChild:
    """A child started under every layer this machine offers. `wait()` enforces the deadline and returns
    its ChildOutcome; nothing of the child survives `wait()` or `kill()`.

    stdin_pipe=True starts it with a pipe on stdin and the deadline not yet running: the child can do its
    imports first (prestart.py's pre-started children), then `send_line` hands it its job, which starts the
    deadline. Otherwise stdin is /dev/null and the deadline runs from the start."""

    def __init__(self, argv: Sequence[str], scratch: Path, env: dict[str, str], config: SandboxConfig,
                 stdin_pipe: bool = False):
        scratch = Path(scratch)
        self.scratch, self.config = scratch, config
        gpu = config.gpu_devices is not None
        isolation, uid = choose_isolation(config, scratch)
        self.isolation, self.uid = isolation, uid
        prepare_scratch(scratch, uid)
        layers = ["session", "clean_env", "scratch"]
        cgroups = ChildCgroups(f"c{os.getpid()}-{random.SystemRandom().randrange(1 << 40):x}", config.pids_max,
                               config.gpu_memory_bytes if gpu else config.memory_bytes)
        preexec, limit_layers = _preexec(config, cgroups, uid, drop_here=(isolation == "none" and uid is not None),
                                         gpu=gpu)
        layers += limit_layers + cgroups.layers
        if uid is not None:
            layers.append("unprivileged_uid")
        if isolation == "bwrap":
            argv = bwrap_argv(scratch, config, uid, privileged=os.geteuid() == 0) + list(argv)
            layers += ["bwrap", "pid_ns", "net_ns", "ipc_ns", "uts_ns", "mount_ns", "ro_binds", "private_tmp"]
            if os.geteuid() != 0:
                layers.append("user_ns")
        elif isolation == "unshare":
            argv = unshare_argv(scratch, config, uid) + list(argv)
            layers += ["unshare", "pid_ns", "net_ns", "ipc_ns", "uts_ns", "mount_ns", "hidden_dirs", "private_tmp"]
        env = dict(env, KGG_SANDBOX=isolation, KGG_SANDBOX_CGROUP="1" if cgroups.layers else "0")
        if gpu:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(d) for d in config.gpu_devices)
            layers.append("gpu_devices")
        elif isolation != "none":
            layers.append("no_gpu_nodes")
        layers += ["output_bounded"] + (["scratch_quota"] if config.scratch_quota_bytes is not None else [])
        layers.append("scratch_sanitized")
        self.layers = tuple(layers)
        self._cgroups = cgroups
        self._total, self._over = [0], threading.Event()
        self.started = time.monotonic()
        self.begun: float | None = None if stdin_pipe else self.started
        lane_fds: tuple[int, ...] = ()
        # the numbers of the child's lane descriptors and their files' (device, inode): what a held child's lane
        # descriptions are found by (held.take_lane); nothing of them is kept open here
        self.lane_fds: tuple[int, int] | None = None
        self.lane_ids: tuple[tuple[int, int], ...] = ()
        self.held: _held.HeldChild | None = None
        # the import's start comes back as one byte on this pipe (core/record.py, IMPORT_START_FD_ENV)
        self._import_start, w = os.pipe()
        os.set_blocking(self._import_start, False)
        import_w = fcntl.fcntl(w, fcntl.F_DUPFD_CLOEXEC, FD_BASE)   # beside the lane's, clear of 0-2's reuse
        os.close(w)
        try:
            # its GPU's lane, on descriptors of its own (core/lane.py); the default lanes ("auto") are the
            # GPUs' only: a cpu child gets none
            lane_dir = config.lane_dir if isinstance(config, ChildSandbox) else None
            if lane_dir is not None and (gpu or lane_dir != "auto"):
                lane_fds, lane_env = child_fds(lane_dir, config.gpu_devices[0] if gpu else 0,
                                               config.wall_s / 2)
                env.update(lane_env)
                if len(lane_fds) == 2:
                    self.lane_fds = (lane_fds[0], lane_fds[1])
                    self.lane_ids = tuple((st.st_dev, st.st_ino) for st in map(os.fstat, lane_fds))
            env[IMPORT_START_FD_ENV] = str(import_w)
            self.proc = subprocess.Popen(list(argv), cwd=scratch, env=env,
                                         stdin=subprocess.PIPE if stdin_pipe else subprocess.DEVNULL,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                                         preexec_fn=preexec, close_fds=True, pass_fds=lane_fds + (import_w,))
        except BaseException:
            cgroups.close()
            os.close(self._import_start)
            raise
        finally:
            for fd in lane_fds + (import_w,):   # the child's copies alone hold its locks and the pipe's end
                os.close(fd)
        lock = threading.Lock()
        self._readers = [_TailReader(s, config.max_output_bytes, self._total, lock, config.kill_output_bytes,
                                     self._over) for s in (self.proc.stdout, self.proc.stderr)]
        for r in self._readers:
            r.start()
        self._ended = False

    def alive(self) -> bool:
        return not self._ended and self.proc.poll() is None and not self._over.is_set()

    def send_line(self, text: str) -> bool:
        """Hands the child one line on stdin, closes the pipe and starts the deadline. False when the child
        is gone (it died while it waited)."""
        if self.proc.stdin is None or not self.alive():
            return False
        try:
            self.proc.stdin.write(text.encode() + b"\n")
            self.proc.stdin.close()
        except (BrokenPipeError, OSError, ValueError):
            return False
        self.begun = time.monotonic()
        return True

    def send_before(self, text: str) -> bool:
        """One line on stdin ahead of the job's (a late-bound child's warm-up: prestart.PrestartedChild.bind): the
        pipe stays open and the deadline does not start. Refused (False) past MAX_LINE_BEFORE bytes, which the
        pipe's buffer holds while the child still imports (a longer write would block the caller), and when the
        child is gone."""
        data = text.encode() + b"\n"
        if len(data) > MAX_LINE_BEFORE or b"\n" in data[:-1] or self.proc.stdin is None or not self.alive():
            return False
        try:
            self.proc.stdin.write(data)
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            return False
        return True

    def _import_started(self) -> bool:
        """Whether the child has signalled that the submission's module is about to run."""
        try:
            return os.read(self._import_start, 1) != b""
        except OSError:                         # BlockingIOError: nothing yet
            return False

    def _end(self) -> dict:
        # Whatever happened, nothing of this child survives it: its process group, then its cgroups
        # (a child that left its group with setsid is still in them), then the namespace dies with bwrap.
        self._ended = True
        try:
            os.close(self._import_start)
        except OSError:
            pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        self._cgroups.kill_all()
        for r in self._readers:
            r.join(timeout=5)
        if self.proc.stdin is not None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        stats = self._cgroups.stats()
        self._cgroups.close()
        if self.held is not None:
            self.held._released()       # every process of it is dead: its lane descriptions go now
        return stats

    def kill(self) -> None:
        """Ends a child that will not be waited for (a pre-started one never used, or a held one)."""
        if not self._ended:
            self._end()

    def wait(self, calls=(), hold: bool = False) -> ChildOutcome:
        """`calls`: the parent's own copy of the job's call deadlines (Job.call_bounds), enforced from the
        child's call marker (sandbox/deadlines.py). `hold` (the outputs handed over by handle, Job.outputs_by_handle):
        a child that writes the hold marker, or runs past a call's deadline, is stopped instead of ended and
        returned with `held` (sandbox/held.py); `self.held` is then its HeldChild."""
        if self._ended or self.held is not None:
            raise RuntimeError("this child was already waited for, held or killed")
        start = self.begun if self.begun is not None else time.monotonic()
        self._start = start
        return self._finish(start + self.config.wall_s, calls, hold, import_watch=True)

    def _finish(self, deadline: float, calls=(), hold: bool = False, import_watch: bool = False) -> ChildOutcome:
        """The wait loop until `deadline` (monotonic), then the outcome: `wait`'s, and a held child's resumed
        wait (HeldChild.resume_for_files, without the import's and calls' deadlines: both are past)."""
        config, scratch, proc = self.config, self.scratch, self.proc
        start = self._start
        limits_hit: list[str] = []
        timed_out = False
        # the import's deadline counts from the child's import-start marker (core/record.py), not from `start`
        import_pending, import_deadline = import_watch and config.import_s is not None, None
        stage_timeout = stage_detail = None
        call_watch = CallWatch(scratch / CALL_MARKER, calls) if calls else None
        next_quota = time.monotonic() + 1.0
        stopped = False
        # with hold the marker is on the step's path (the check waits for the stop): 0.02 s polls, not 0.1 s
        # (measured marker to stop: median 0.073 s at 0.1 s, docs/journal.md 2026-12-06 23:17)
        poll_s = 0.02 if hold else 0.1
        try:
            while True:
                now = time.monotonic()
                if now >= deadline:
                    timed_out = True
                    break
                if import_pending and import_deadline is None and self._import_started():
                    import_deadline = now + config.import_s
                if import_deadline is not None and now >= import_deadline:
                    # lexists: never raises and follows no link (the child made the entry; its kind is moot)
                    if not os.path.lexists(scratch / IMPORT_MARKER):
                        timed_out, stage_timeout = True, "import"
                        break
                    import_pending, import_deadline = False, None
                if call_watch is not None:
                    stage_detail = call_watch.overdue(now)
                    if stage_detail is not None:
                        timed_out, stage_timeout = True, "call"
                        # held: its checkpoint's outputs live in its memory; one that died meanwhile is
                        # killed as before (its stop found nothing of it alive)
                        stopped = hold and self._stop(deadline)
                        break
                try:
                    proc.wait(timeout=min(poll_s, deadline - now))
                    break
                except subprocess.TimeoutExpired:
                    pass
                if self._over.is_set():
                    limits_hit.append("output")
                    break
                if config.scratch_quota_bytes is not None and time.monotonic() >= next_quota:
                    used, entries, _ = scratch_usage(scratch, config.scratch_max_entries)
                    if used > config.scratch_quota_bytes or entries > config.scratch_max_entries:
                        limits_hit.append("scratch_quota")
                        break
                    next_quota = time.monotonic() + 1.0
                # lexists: never raises and follows no link. The marker is the hostile child's: a link, a
                # directory or one written before (or without) the report only stops the child where it stands,
                # which gives it nothing an exit at that moment would not; the report is still read, bounded
                # and validated by the caller (child_io.read_report), and a held child is killed in the end.
                if hold and os.path.lexists(scratch / HOLD_MARKER):
                    if self._stop(deadline):
                        stopped = True
                        break
                    hold = False        # it exited as it wrote the marker: waited to its end, stopped no more
        finally:
            stats = self._cgroups.stats() if stopped else self._end()
        if self._over.is_set() and "output" not in limits_hit:
            limits_hit.append("output")
        if stats.get("oom_killed"):
            limits_hit.append("memory")
        if stats.get("forks_refused"):
            limits_hit.append("pids")
        used, entries, removed = scratch_usage(scratch, config.scratch_max_entries, remove_special=True)
        if (config.scratch_quota_bytes is not None and "scratch_quota" not in limits_hit
                and (used > config.scratch_quota_bytes or entries > config.scratch_max_entries)):
            limits_hit.append("scratch_quota")    # filled and exited between two looks: still over (disk.py)
        rc = proc.returncode
        sig = None
        if rc is not None and rc < 0:
            sig = signal.Signals(-rc).name
        elif self.isolation in ("bwrap", "unshare") and rc is not None and rc > 128 and rc - 128 < 65:
            # bwrap and unshare report a signalled child as 128 + signal
            try:
                sig = signal.Signals(rc - 128).name
            except ValueError:
                sig = None
        r_out, r_err = self._readers
        if stopped:
            rc = sig = None                   # not ended: its readers keep draining, its cgroups stay
        return ChildOutcome(returncode=rc, signal=None if timed_out else sig, timed_out=timed_out,
                            wall_s=time.monotonic() - start, stdout_tail=r_out.text(),
                            stderr_tail=r_err.text(), output_bytes=self._total[0], layers=self.layers,
                            limits_hit=tuple(limits_hit), memory_peak_bytes=stats.get("memory_peak_bytes"),
                            pids_peak=stats.get("pids_peak"), forks_refused=int(stats.get("forks_refused") or 0),
                            removed_from_scratch=removed, stage_timeout=stage_timeout,
                            stage_detail=stage_detail,
                            stage_overrun=call_watch.overrun if stage_timeout == "call" else None,
                            held=stopped)

    def _stop(self, deadline: float) -> bool:
        """SIGSTOP every process of the child and take over its lane descriptions (HeldChild in `self.held`);
        False when nothing of the child lived any more after the stop (it exited between the marker's check and
        the SIGSTOP): everything is continued and the child ends as any other (an ordinary ending)."""
        stopped = _held.stop_all(self)
        if not _held.harness_alive(self):
            _held.continue_all(self)
            return False
        skip = _held.wrappers(self)
        lane = _held.take_lane(self, [p for p in stopped if p not in skip])
        self.held = _held.HeldChild(self, deadline, lane)
        return True


def run_sandboxed(argv: Sequence[str], scratch: Path, env: dict[str, str], config: SandboxConfig,
                  calls=()) -> ChildOutcome:
    """Runs `argv` in `scratch` under every layer this machine offers, until it exits or its deadline (and
    its calls' deadlines, `calls`: Job.call_bounds)."""
    return SandboxedChild(argv, scratch, env, config).wait(calls)
