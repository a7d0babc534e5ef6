"""The child: `python -m kernelgym_gap.child.runner JOB.json`. Runs one submission and writes one ChildReport.

`python -m kernelgym_gap.child.runner --wait --dsl DSL --backend BACKEND` is the same child pre-started
(prestart.py): it does the imports (and, on cuda, creates its CUDA context) first, then reads one job path on
stdin and runs that job. It runs no submission code before the job, and exits after it: single-use.

It runs the submission on fresh inputs per trial, saves each output for the trusted checker, times it on
the cuda backend, and watches for tampering (integrity.py: guards, op recorders, snapshots). Nothing here decides correctness: the parent's checker does,
from the saved outputs and inputs it regenerates itself. This process is assumed compromised once the
submission is imported; what it reports is cross-checked by the parent wherever it can be.
"""
from __future__ import annotations

import errno
import gc
import importlib.util
import os
import sys
import time
import traceback
from pathlib import Path


def _traceback_tail(exc: BaseException, lines: int = 12) -> str:
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _write_report(path: Path, report) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(report.to_json())
    os.replace(tmp, path)


def _device_info(backend: str) -> dict:
    if backend != "cuda":
        return {"kind": "cpu", "name": "cpu (Triton interpreter / TileLang C target)"}
    from kernelgym_gap.judge.calibrate import device_identity
    return device_identity()[0]


def _versions(dsl: str) -> dict:
    import torch
    v = {"python": sys.version.split()[0], "torch": torch.__version__}
    import triton
    v["triton"] = triton.__version__
    if dsl == "tilelang":
        import tilelang
        v["tilelang"] = getattr(tilelang, "__version__", "?")
    if torch.version.cuda:
        v["cuda"] = torch.version.cuda
    return v


def _aliases(out, inputs) -> bool:
    import torch
    ptr = out.untyped_storage().data_ptr()
    size = out.untyped_storage().nbytes()
    for t in inputs:
        if isinstance(t, torch.Tensor) and t.device == out.device:
            p, n = t.untyped_storage().data_ptr(), t.untyped_storage().nbytes()
            if ptr < p + n and p < ptr + size:
                return True
    return False


def _output_type(out) -> str:
    import torch
    if type(out) is torch.Tensor:
        return "torch.Tensor"
    cls = type(out)
    name = f"{type.__getattribute__(cls, '__module__')}.{type.__getattribute__(cls, '__qualname__')}"
    return name if name != "torch.Tensor" else "torch.Tensor (a different class under the same name)"


_OOM_MARKERS = ("can't allocate memory", "not enough memory", "out of memory", "failed to allocate")


def run_job(job_path: Path, preimport_s: float | None = None) -> int:
    from kernelgym_gap.core.record import ChildReport, Job, TrialOutcome
    from kernelgym_gap.core.status import Status

    job = Job.from_json(job_path.read_text())
    try:
        job_path.unlink()       # the seeds are not left lying about for the submission to read
    except OSError:
        pass
    report_path = Path(job.report_file)
    outputs = Path(job.outputs_dir)
    phases: dict[str, float] = {} if preimport_s is None else {"preimport": preimport_s}
    t0 = time.perf_counter()

    def finish(status, message, **kw) -> int:
        phases["total"] = time.perf_counter() - t0
        _write_report(report_path, ChildReport(status=status, message=message, phases=phases, **kw))
        return 0

    import torch
    from kernelgym_gap.core import inputs as inputs_mod
    from kernelgym_gap.child import integrity as integ
    from kernelgym_gap.core.registry import find_task
    from kernelgym_gap.dsl.adapters import KernelUnverified, make_adapter

    task = find_task(job.task_id, job.tasks_dir)
    device = "cuda" if job.backend == "cuda" else "cpu"
    probe = job.mode == "compile_probe"
    # both probe modes run without the interpreter (probe.probe_env) and compile instead of launching
    adapter = make_adapter(job.dsl, job.backend, compile_only=job.mode in ("compile_probe", "compile_specs"))
    adapter.install()
    versions = _versions(job.dsl)
    dev_info = _device_info(job.backend)
    if job.backend == "cuda":
        torch.cuda.init()
        adapter.streams.expected = torch.cuda.current_stream().cuda_stream
    # Automatic collection would run the submission's finalizers in the harness's code: collect only
    # inside watched stretches (see `release`).
    gc.disable()
    integ.install_guards(job.backend)
    integ.watching()            # builds the recorder classes, so that they are in the snapshot
    integrity = integ.Integrity(adapter, task=task)
    phases["setup"] = time.perf_counter() - t0
    common = dict(versions=versions, device=dev_info)

    def classify(exc: BaseException, where: str):
        if integ.WATCH.events or isinstance(exc, integ.SandboxDenied):
            return Status.INTEGRITY_VIOLATION, f"{where}: " + "; ".join(integrity.violations())
        if isinstance(exc, KernelUnverified):
            return Status.UNVERIFIED, str(exc)
        if adapter.is_compile_error(exc):
            return Status.COMPILE_ERROR, f"{where}: {exc}"
        if isinstance(exc, OSError) and exc.errno == errno.EFBIG:
            return Status.OUTPUT_TOO_LARGE, f"{where}: a file over the size limit: {exc}"
        text = str(exc).lower()
        if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError" or \
                (isinstance(exc, RuntimeError) and any(m in text for m in _OOM_MARKERS)):
            return Status.OUT_OF_MEMORY, f"{where}: out of memory: {_first_line(exc)}"
        return Status.RUNTIME_ERROR, f"{where}: {type(exc).__name__}: {exc}"

    def verdict(where: str, watch=None, **kw):
        """The first integrity or library-compute problem after a stretch of submission code, as a report."""
        violations = integrity.violations()
        if adapter.log.side_stream:
            violations.append(f"{adapter.log.side_stream} kernel launch(es) went to a side stream, not the "
                              "harness's current stream")
        if violations:
            return finish(Status.INTEGRITY_VIOLATION, f"{where}: " + "; ".join(violations),
                          integrity=tuple(violations), **kw, **common)
        if watch is not None and watch.ops:
            failed = f" after {adapter.log.failed} failed kernel launch(es)" if adapter.log.failed else ""
            return finish(Status.LIBRARY_COMPUTE,
                          f"{where}: the submission computed with torch outside its {job.dsl} kernel{failed}: "
                          f"{integ.describe_ops(watch.ops)}; the kernel must do the work (allocation, views "
                          "and copies are allowed)", **kw, **common)
        return None

    # -- import the submission (a real file: @triton.jit and @T.prim_func read their source) --
    t = time.perf_counter()
    watch = integ.watching()
    try:
        spec = importlib.util.spec_from_file_location("submission", job.source_file)
        module = importlib.util.module_from_spec(spec)
        sys.modules["submission"] = module
        with watch:
            spec.loader.exec_module(module)
    except SyntaxError as e:
        return finish(Status.SYNTAX_ERROR, f"line {e.lineno}: {e.msg}", **common)
    except BaseException as e:  # noqa: BLE001 - SystemExit from the submission is a runtime error too
        status, msg = classify(e, "while importing the submission")
        return finish(status, msg, traceback=_traceback_tail(e), **common)
    phases["import"] = time.perf_counter() - t
    done = verdict("while importing the submission", watch)
    if done is not None:
        return done
    from kernelgym_gap.child.module_entry import resolve_entry
    try:                        # a function, or a task's module class (ModelNew) built into one
        entry = resolve_entry(module, task, job, device, integ)
    except BaseException as e:  # noqa: BLE001
        status, msg = classify(e, f"while building {task.module_entry_point}")
        return finish(status, msg, traceback=_traceback_tail(e), **common)
    done = verdict("while building the submission's entry point")
    if done is not None:
        return done
    if not callable(entry):
        return finish(Status.ENTRY_POINT_MISSING, f"{task.entry_point!r} is not a callable of the module", **common)

    if probe:
        return _compile_probe(job, task, entry, adapter, device, finish, classify, common)
    if job.mode == "compile_specs":
        return _compile_specs(job, module, adapter, finish, classify, common)

    # -- correctness trials: fresh inputs each, outputs saved for the checker --
    # Trials of one (shape, dtype) reuse the same input buffers, refilled in place: a cache keyed by
    # data_ptr (or by shape) then returns the previous seed's output, and the checker sees a mismatch.
    outcomes = []
    buffers: dict = {}
    t = time.perf_counter()
    for trial in job.trials:
        fresh = inputs_mod.make_trial_inputs(task, trial, device)
        key = (tuple(trial.shape), trial.dtype)
        if key in buffers:
            ins = tuple(b.copy_(f) if isinstance(b, torch.Tensor) else f for b, f in zip(buffers[key], fresh))
        else:
            buffers[key] = ins = fresh
        del fresh
        before = inputs_mod.digest(ins)
        adapter.log.reset()
        watch = integ.watching()
        where = f"trial {trial.index} (shape {list(trial.shape)}, {trial.dtype})"
        start = time.perf_counter()
        try:
            with torch.no_grad(), watch:
                out = entry(*ins)
            if job.backend == "cuda":
                torch.cuda.synchronize()
        except BaseException as e:  # noqa: BLE001
            done = verdict(where, watch, trials=tuple(outcomes), failed_trial=trial.index)
            if done is not None:
                return done
            status, msg = classify(e, where)
            return finish(status, msg, traceback=_traceback_tail(e), trials=tuple(outcomes),
                          failed_trial=trial.index, integrity=tuple(integrity.violations()), **common)
        seconds = time.perf_counter() - start
        done = verdict(where, watch, trials=tuple(outcomes), failed_trial=trial.index)
        if done is not None:
            return done
        launches, programs = adapter.log.launches, adapter.log.max_programs
        is_tensor = type(out) is torch.Tensor
        out_file = None
        aliases = False
        if is_tensor:
            aliases = _aliases(out, ins)
            out_file = f"trial_{trial.index}.pt"
            torch.save(out.detach().to("cpu").contiguous().clone(), outputs / out_file)
        with integ.submission_code():
            output_type = _output_type(out)
            out = None          # the submission's finalizers, if any, run watched
        outcomes.append(TrialOutcome(
            index=trial.index, output_file=out_file, launches=launches, programs=programs, seconds=seconds,
            input_digest_before=before, input_digest_after=inputs_mod.digest(ins), output_aliases_input=aliases,
            output_type=output_type))
        if launches == 0:
            return finish(Status.NO_KERNEL_LAUNCHED,
                          f"the entry point returned without launching a {job.dsl} kernel (trial {trial.index}); "
                          "the kernel must do the work", trials=tuple(outcomes), failed_trial=trial.index, **common)
    del ins
    phases["correctness"] = time.perf_counter() - t

    timings = ()
    if job.timing is not None:
        from kernelgym_gap.child.timing import time_submission

        watched_entry, timing_ops = timing_entry(entry, integ)
        t = time.perf_counter()
        try:
            timings = time_submission(task, job, watched_entry, adapter, outputs)
        except BaseException as e:  # noqa: BLE001
            done = verdict("while timing", timing_ops, trials=tuple(outcomes))
            if done is not None:
                return done
            status, msg = classify(e, "while timing")
            return finish(status, msg, traceback=_traceback_tail(e), trials=tuple(outcomes),
                          integrity=tuple(integrity.violations()), **common)
        phases["timing"] = time.perf_counter() - t
        done = verdict("while timing", timing_ops, trials=tuple(outcomes), timings=timings)
        if done is not None:
            return done

    buffers.clear()
    with integ.submission_code():
        gc.collect()
    done = verdict("after the last call", None, trials=tuple(outcomes), timings=timings)
    if done is not None:
        return done
    notes = "; ".join(sorted(adapter.log.notes))
    return finish(Status.OK, notes, trials=tuple(outcomes), timings=timings,
                  launched=_launched(adapter), **common)


MAX_SPECS = 256     # KernelSpecs a report carries; more only come from a submission that floods the probe


def _launched(adapter) -> tuple:
    specs = list(adapter.log.specs.values())
    return tuple(specs[:MAX_SPECS])


TIMING_WATCH_FRACTION = 0.1     # share of the timed calls run under the op recorders, at random


class _Ops:
    def __init__(self):
        import collections
        self.ops = collections.Counter()


def timing_entry(entry, integ, fraction: float = TIMING_WATCH_FRACTION, rng=None):
    """The entry point as the timing code calls it, and what it recorded.

    Every call runs under the guards (no threads, processes, files, signals). The op recorders cost host
    time per torch op, so they do not run on every timed call: they run on the first call of each input
    shape (the untimed call before warm-up) and on a random `fraction` of the others, so a submission
    that launches its kernel while it is checked and calls torch once the harness starts timing is
    caught (and a timed call that is watched only adds host time, which the spin kernel of timing.py
    hides). A submission that looks for the recorder on torch's mode stack and behaves only while it is
    there is not caught by this: docs/security.md says so."""
    import random as _random
    rng = rng or _random.SystemRandom()
    seen: set = set()
    recorded = _Ops()

    def key_of(args):
        first = args[0] if args else None
        return (tuple(getattr(first, "shape", ())), str(getattr(first, "dtype", "")))

    def watched(*args, **kwargs):
        key = key_of(args)
        if key not in seen or rng.random() < fraction:
            seen.add(key)
            w = integ.watching()
            with w:
                result = entry(*args, **kwargs)
            recorded.ops.update(w.ops)
            return result
        with integ.submission_code():
            return entry(*args, **kwargs)

    return watched, recorded


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:300] if text else type(e).__name__


def _compile_probe(job, task, entry, adapter, device, finish, classify, common) -> int:
    """Calls the entry point once per trial with launches turned into sm_90 compilations. Outputs are
    garbage (no kernel ran), so only compile errors count; anything else leaves the probe inconclusive.
    A compile error counts even when the submission caught it (a try/except fallback to torch)."""
    import torch
    from kernelgym_gap.core import inputs as inputs_mod
    from kernelgym_gap.child import integrity as integ
    from kernelgym_gap.core.status import Status
    for trial in job.trials:
        ins = inputs_mod.make_trial_inputs(task, trial, device)
        try:
            with torch.no_grad(), integ.submission_code():
                entry(*ins)
        except BaseException as e:  # noqa: BLE001
            if adapter.is_compile_error(e):
                status, msg = classify(e, f"shape {list(trial.shape)}, {trial.dtype}")
                return finish(status, msg, failed_trial=trial.index, **common)
            if not adapter.log.compile_errors:
                return finish(Status.OK, "", inconclusive=f"the entry point raised before any "
                              f"launch: {_first_line(e)}", launched=_launched(adapter), **common)
        if adapter.log.compile_errors:
            return finish(Status.COMPILE_ERROR, f"shape {list(trial.shape)}, {trial.dtype}: "
                          f"{adapter.log.compile_errors[0]}", failed_trial=trial.index, **common)
    return finish(Status.OK, "every launched Triton kernel compiled for sm_90", launched=_launched(adapter),
                  **common)


def _locate_kernel(spec, kernels, source_sha256):
    """The JITFunction a KernelSpec names, among the process's live `kernels`: that module, qualified name and
    source (kernels made at import time inside functions, or shadowed by a later one of the same name,
    included). None with the reason when none exists without calling the submission's functions."""
    for obj in kernels:
        if getattr(obj.fn, "__module__", None) == spec.module and getattr(obj.fn, "__qualname__", None) == \
                spec.qualname and source_sha256(obj.fn) == spec.source_sha256:
            return obj, None
    return None, (f"{spec.qualname} exists only once the entry point runs" if "<locals>" in spec.qualname
                  else f"{spec.module}.{spec.qualname} is not among the module's Triton kernels")


def _compile_specs(job, module, adapter, finish, classify, common) -> int:
    """Compiles, for sm_90, the specializations the main child's interpreter launched and the entry-point
    probe did not reach (an entry point that behaves differently without the interpreter). Runs nothing of
    the submission's but its module's top level (already run)."""
    from triton.runtime.jit import JITFunction
    from kernelgym_gap.core.status import Status
    kernels = [obj for obj in gc.get_objects() if isinstance(obj, JITFunction)]
    unreached = []
    for spec in job.specs:
        kernel, why = _locate_kernel(spec, kernels, adapter.source_sha256)
        if kernel is None or not spec.exact:
            unreached.append(why or f"{spec.qualname} has constexpr values that cannot be rebuilt")
            continue
        try:
            adapter.compile_spec(kernel, spec)
        except BaseException as e:  # noqa: BLE001
            if adapter.is_compile_error(e):
                status, msg = classify(e, f"{spec.qualname} as the interpreter launched it")
                return finish(status, msg, **common)
            raise
    if unreached:
        return finish(Status.OK, "", inconclusive="; ".join(sorted(set(unreached))[:3]), **common)
    return finish(Status.OK, f"the {len(job.specs)} launched specialization(s) compiled for sm_90",
                  **common)


def wait_for_job(dsl: str, backend: str) -> int:
    """The pre-started child: the imports a job needs, then one job path on stdin (an empty line or a closed
    pipe: the pool let it go unused, exit)."""
    t = time.perf_counter()
    import torch
    import triton  # noqa: F401
    from kernelgym_gap.dsl import adapters as _dsl  # noqa: F401
    from kernelgym_gap.core import inputs  # noqa: F401
    from kernelgym_gap.child import integrity  # noqa: F401
    from kernelgym_gap.core import record  # noqa: F401
    if dsl == "tilelang":
        import tilelang  # noqa: F401
    if backend == "cuda":
        from kernelgym_gap.judge import calibrate  # noqa: F401
        from kernelgym_gap.child import timing  # noqa: F401
        torch.zeros(1, device="cuda")       # the CUDA context, made before the job instead of in it
        torch.cuda.synchronize()
    preimport_s = time.perf_counter() - t
    line = sys.stdin.readline().strip()
    # the submission reads nothing more from the parent: stdin becomes /dev/null
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    if not line:
        return 0
    return run_job(Path(line), preimport_s=preimport_s)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--wait"] and len(argv) == 5 and argv[1] == "--dsl" and argv[3] == "--backend":
        return wait_for_job(argv[2], argv[4])
    if len(argv) != 1 or argv[0].startswith("--"):
        print("usage: python -m kernelgym_gap.child.runner JOB.json\n"
              "       python -m kernelgym_gap.child.runner --wait --dsl DSL --backend BACKEND   (job path on stdin)",
              file=sys.stderr)
        return 2
    return run_job(Path(argv[0]))


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Leave without running the submission's atexit handlers or waiting for threads it started.
    os._exit(code)
