"""The child: `python -m kernelgym_gap.runner JOB.json`. Runs one submission and writes one ChildReport.

It runs the submission on fresh inputs per trial, saves each output for the trusted checker, times it on
the cuda backend, and watches for tampering. Nothing here decides correctness: the parent's checker does,
from the saved outputs and inputs it regenerates itself. This process is assumed compromised once the
submission is imported; what it reports is cross-checked by the parent wherever it can be.
"""
from __future__ import annotations

import importlib.util
import os
import sys
import threading
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


class Integrity:
    """Snapshots of what timing and checking rely on, compared after the submission had its chance."""

    def __init__(self, adapter):
        import torch
        self._items = {
            "time.perf_counter": (time, "perf_counter"), "time.time": (time, "time"),
            "time.monotonic": (time, "monotonic"), "time.perf_counter_ns": (time, "perf_counter_ns"),
            "torch.Tensor.data_ptr": (torch.Tensor, "data_ptr"),
            "torch.Tensor.cpu": (torch.Tensor, "cpu"), "torch.Tensor.to": (torch.Tensor, "to"),
            "torch.Tensor.clone": (torch.Tensor, "clone"), "torch.save": (torch, "save"),
            "torch.equal": (torch, "equal"),
            "torch.cuda.synchronize": (torch.cuda, "synchronize"),
            "torch.cuda.Event": (torch.cuda, "Event"),
            "torch.cuda.Event.record": (torch.cuda.Event, "record"),
            "torch.cuda.Event.elapsed_time": (torch.cuda.Event, "elapsed_time"),
            "torch.cuda.Event.synchronize": (torch.cuda.Event, "synchronize"),
            "os._exit": (os, "_exit"),
        }
        if adapter.name == "triton":
            import triton.runtime.jit as jit
            self._items["triton.JITFunction.run"] = (jit.JITFunction, "run")
            try:
                from triton.runtime.interpreter import InterpretedFunction
                self._items["triton.InterpretedFunction.run"] = (InterpretedFunction, "run")
            except ImportError:
                pass
        else:
            from tilelang.jit.kernel import JITKernel
            self._items["tilelang.JITKernel.__call__"] = (JITKernel, "__call__")
            self._items["tilelang.JITKernel.__init__"] = (JITKernel, "__init__")
        self._snap = {k: getattr(obj, attr) for k, (obj, attr) in self._items.items()}
        self.threads = threading.active_count()

    def violations(self) -> list[str]:
        found = [f"{k} was replaced" for k, (obj, attr) in self._items.items()
                 if getattr(obj, attr, None) is not self._snap[k]]
        if threading.active_count() > self.threads:
            found.append(f"the submission left {threading.active_count() - self.threads} thread(s) running")
        return found


def _device_info(backend: str) -> dict:
    if backend != "cuda":
        return {"kind": "cpu", "name": "cpu (Triton interpreter / TileLang C target)"}
    from .calibrate import device_identity
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


def run_job(job_path: Path) -> int:
    from .record import ChildReport, Job, TrialOutcome
    from .status import Status

    job = Job.from_json(job_path.read_text())
    report_path = Path(job.report_file)
    outputs = Path(job.outputs_dir)
    phases: dict[str, float] = {}
    t0 = time.perf_counter()

    def finish(status, message, **kw) -> int:
        phases["total"] = time.perf_counter() - t0
        _write_report(report_path, ChildReport(status=status, message=message, phases=phases, **kw))
        return 0

    import torch
    from . import inputs as inputs_mod
    from .dsl import KernelUnverified, make_adapter
    from .registry import TaskRegistry, DEFAULT_TASKS_DIR

    task = TaskRegistry(Path(job.tasks_dir) if job.tasks_dir else DEFAULT_TASKS_DIR).get(job.task_id)
    device = "cuda" if job.backend == "cuda" else "cpu"
    probe = job.mode == "compile_probe"
    adapter = make_adapter(job.dsl, job.backend, compile_only=probe)
    adapter.install()
    versions = _versions(job.dsl)
    dev_info = _device_info(job.backend)
    integrity = Integrity(adapter)
    phases["setup"] = time.perf_counter() - t0
    common = dict(versions=versions, device=dev_info)

    def classify(exc: BaseException, where: str):
        if isinstance(exc, KernelUnverified):
            return Status.UNVERIFIED, str(exc)
        if adapter.is_compile_error(exc):
            return Status.COMPILE_ERROR, f"{where}: {exc}"
        if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError":
            return Status.RUNTIME_ERROR, f"{where}: out of memory: {exc}"
        return Status.RUNTIME_ERROR, f"{where}: {type(exc).__name__}: {exc}"

    # -- import the submission (a real file: @triton.jit and @T.prim_func read their source) --
    t = time.perf_counter()
    try:
        spec = importlib.util.spec_from_file_location("submission", job.source_file)
        module = importlib.util.module_from_spec(spec)
        sys.modules["submission"] = module
        spec.loader.exec_module(module)
    except SyntaxError as e:
        return finish(Status.SYNTAX_ERROR, f"line {e.lineno}: {e.msg}", **common)
    except BaseException as e:  # noqa: BLE001 - SystemExit from the submission is a runtime error too
        status, msg = classify(e, "while importing the submission")
        return finish(status, msg + "\n" + _traceback_tail(e), **common)
    phases["import"] = time.perf_counter() - t
    entry = getattr(module, task.entry_point, None)
    if not callable(entry):
        return finish(Status.ENTRY_POINT_MISSING, f"{task.entry_point!r} is not a callable of the module", **common)

    if probe:
        return _compile_probe(job, task, entry, adapter, device, finish, classify, common)

    # -- correctness trials: fresh inputs each, outputs saved for the checker --
    outcomes = []
    t = time.perf_counter()
    for trial in job.trials:
        ins = inputs_mod.make_trial_inputs(task, trial, device)
        before = inputs_mod.digest(ins)
        adapter.log.reset()
        start = time.perf_counter()
        try:
            with torch.no_grad():
                out = entry(*ins)
            if job.backend == "cuda":
                torch.cuda.synchronize()
        except BaseException as e:  # noqa: BLE001
            status, msg = classify(e, f"trial {trial.index} (shape {list(trial.shape)}, {trial.dtype})")
            return finish(status, msg + "\n" + _traceback_tail(e), trials=tuple(outcomes),
                          failed_trial=trial.index, integrity=tuple(integrity.violations()), **common)
        seconds = time.perf_counter() - start
        launches, programs = adapter.log.launches, adapter.log.max_programs
        is_tensor = type(out) is torch.Tensor
        out_file = None
        aliases = False
        if is_tensor:
            aliases = _aliases(out, ins)
            out_file = f"trial_{trial.index}.pt"
            torch.save(out.detach().to("cpu").contiguous().clone(), outputs / out_file)
        outcomes.append(TrialOutcome(
            index=trial.index, output_file=out_file, launches=launches, programs=programs, seconds=seconds,
            input_digest_before=before, input_digest_after=inputs_mod.digest(ins), output_aliases_input=aliases,
            output_type=f"{type(out).__module__}.{type(out).__qualname__}"))
        if launches == 0:
            return finish(Status.NO_KERNEL_LAUNCHED,
                          f"the entry point returned without launching a {job.dsl} kernel (trial {trial.index}); "
                          "the kernel must do the work", trials=tuple(outcomes), failed_trial=trial.index, **common)
    phases["correctness"] = time.perf_counter() - t

    timings = ()
    if job.timing is not None:
        from .timing import time_submission
        t = time.perf_counter()
        try:
            timings = time_submission(task, job, entry, adapter, outputs)
        except BaseException as e:  # noqa: BLE001
            status, msg = classify(e, "while timing")
            return finish(status, msg + "\n" + _traceback_tail(e), trials=tuple(outcomes),
                          integrity=tuple(integrity.violations()), **common)
        phases["timing"] = time.perf_counter() - t

    violations = integrity.violations()
    if violations:
        return finish(Status.INTEGRITY_VIOLATION, "; ".join(violations), trials=tuple(outcomes),
                      timings=timings, integrity=tuple(violations), **common)
    notes = "; ".join(sorted(adapter.log.notes))
    return finish(Status.OK, notes, trials=tuple(outcomes), timings=timings, **common)


def _compile_probe(job, task, entry, adapter, device, finish, classify, common) -> int:
    """Calls the entry point once per trial with launches turned into sm_90 compilations. Outputs are
    garbage (no kernel ran), so only compile errors count; anything else leaves the probe inconclusive."""
    import torch
    from . import inputs as inputs_mod
    from .status import Status
    for trial in job.trials:
        ins = inputs_mod.make_trial_inputs(task, trial, device)
        try:
            with torch.no_grad():
                entry(*ins)
        except BaseException as e:  # noqa: BLE001
            if adapter.is_compile_error(e):
                status, msg = classify(e, f"shape {list(trial.shape)}, {trial.dtype}")
                return finish(status, msg, failed_trial=trial.index, **common)
            return finish(Status.OK, f"compile probe inconclusive: {type(e).__name__}", **common)
    return finish(Status.OK, "every launched Triton kernel compiled for sm_90", **common)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m kernelgym_gap.runner JOB.json", file=sys.stderr)
        return 2
    return run_job(Path(argv[0]))


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Leave without running the submission's atexit handlers or waiting for threads it started.
    os._exit(code)
