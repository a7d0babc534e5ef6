"""Frozen, versioned records: what crosses every process boundary.

`Job` goes from the parent to the child, `ChildReport` comes back, and `EvalRecord` is what the harness
returns to callers (the environment's `info`, the CLI's JSON, the store). Each serialises to JSON and is
read back by `from_json`, which rejects anything that does not match the schema: a child's report is
hostile input.
"""
from __future__ import annotations

import dataclasses
import json
import types
import typing
from typing import Any

from kernelgym_gap.core import bounded_json
from kernelgym_gap.core.config import TimingConfig
from kernelgym_gap.core.errors import ProtocolError
from kernelgym_gap.core.output_handle import OutputHandle  # noqa: F401 - a field's type here, and re-exported
from kernelgym_gap.core.status import Status
from kernelgym_gap.core.timing_stats import TimingReadings

SCHEMA_VERSION = 1
MAX_RECORD_BYTES = 64 << 20     # from_json's default size bound (a child's report has its own, smaller)
# ChildReport's own version: 2 since its timings carry the raw readings the parent summarises (issue 31).
# Bumped when a report of the old version would be misread by the new parent. Not for an optional field whose
# absence means what the old report meant (output_handle, recheck_output_handle: None is "no hand-over", the
# file path as before).
CHILD_REPORT_VERSION = 2


def _convert(tp: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return _convert(a, value, where)
            except ProtocolError as e:
                errors.append(str(e))
        # bounded: the value is the child's (a report may hold megabytes), the first error says which rule
        raise ProtocolError(f"{where}: {repr(value)[:200]} matches none of {args}"
                            + (f" ({errors[0][:300]})" if errors else ""))
    if dataclasses.is_dataclass(tp):
        return _from_dict(tp, value, where)
    if isinstance(tp, type) and issubclass(tp, Status):
        try:
            return Status(value)
        except ValueError:
            raise ProtocolError(f"{where}: unknown status {value!r}") from None
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ProtocolError(f"{where}: expected a list, got {type(value).__name__}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_convert(args[0], v, f"{where}[{i}]") for i, v in enumerate(value))
        if len(args) != len(value):
            raise ProtocolError(f"{where}: expected {len(args)} items")
        return tuple(_convert(a, v, f"{where}[{i}]") for i, (a, v) in enumerate(zip(args, value)))
    if origin is dict:
        if not isinstance(value, dict):
            raise ProtocolError(f"{where}: expected an object")
        return {str(k): _convert(args[1], v, f"{where}.{k}") for k, v in value.items()}
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ProtocolError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if tp in (int, str, bool):
        if type(value) is not tp:
            raise ProtocolError(f"{where}: expected {tp.__name__}, got {value!r}")
        return value
    raise ProtocolError(f"{where}: unsupported type {tp}")


def _from_dict(cls, data: Any, where: str):
    if not isinstance(data, dict):
        raise ProtocolError(f"{where}: expected an object for {cls.__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = set(data) - set(fields)
    if unknown:
        raise ProtocolError(f"{where}: unknown fields {sorted(unknown)} for {cls.__name__}")
    kwargs = {}
    for name, f in fields.items():
        if name in data:
            kwargs[name] = _convert(hints[name], data[name], f"{where}.{name}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ProtocolError(f"{where}: missing field {name!r} for {cls.__name__}")
    return cls(**kwargs)


def _to_jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value):
        return {f.name: _to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Status):
        return value.value
    if isinstance(value, (list, tuple)):
        return [_to_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: _to_jsonable(v) for k, v in value.items()}
    if isinstance(value, float) and value != value:  # NaN is not JSON
        return None
    return value


class _Record:
    SCHEMA: typing.ClassVar[str] = ""
    VERSION: typing.ClassVar[int] = SCHEMA_VERSION

    def to_dict(self) -> dict:
        return _to_jsonable(self)

    def to_json(self, **kw) -> str:
        return json.dumps(self.to_dict(), allow_nan=False, **kw)

    @classmethod
    def from_dict(cls, data: Any):
        if not isinstance(data, dict):
            raise ProtocolError(f"{cls.__name__}: expected a JSON object")
        if data.get("schema") != cls.SCHEMA or data.get("schema_version") != cls.VERSION:
            raise ProtocolError(f"{cls.__name__}: schema {data.get('schema')!r} v{data.get('schema_version')!r}"
                                f", expected {cls.SCHEMA!r} v{cls.VERSION}")
        return _from_dict(cls, data, cls.__name__)

    @classmethod
    def from_json(cls, text: str | bytes, max_bytes: int = MAX_RECORD_BYTES):
        """The record `text` holds, or ProtocolError: any parse or validation error, within bounds (size,
        nesting depth: core/bounded_json.py), so that hostile text can raise nothing else."""
        try:
            data = bounded_json.loads(text, max_bytes=max_bytes, what=f"{cls.__name__} text")
        except bounded_json.BoundedJSONError as e:
            raise ProtocolError(f"{cls.__name__}: {e}") from None
        try:
            return cls.from_dict(data)
        except ProtocolError:
            raise
        except (TypeError, ValueError, RecursionError) as e:   # a value the dataclass itself refuses
            raise ProtocolError(f"{cls.__name__}: invalid record: {type(e).__name__}: {str(e)[:200]}") from None


# ---- parent -> child -------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Trial:
    index: int
    shape: tuple[int, ...]
    dtype: str
    seed: int
    distribution: str
    split: str                      # "public" or "heldout"


def first_of_their_shape(trials) -> frozenset[int]:
    """The indices of the trials that come first for their (shape, dtype): the calls that compile (and
    autotune). The parent's call deadlines give them the compile bound (sandbox/deadlines.py); the child lets
    its lane go only inside them (child/lanes.py): one rule for both."""
    seen: set = set()
    firsts = set()
    for t in trials:
        key = (tuple(t.shape), t.dtype)
        if key not in seen:
            seen.add(key)
            firsts.add(t.index)
    return frozenset(firsts)


@dataclasses.dataclass(frozen=True)
class KernelSpec:
    """One Triton specialization as a kernel was launched: the kernel (module and qualified name), its
    argument types (Triton's signature strings) and constexpr values, and the compile options. The cpu
    backend's main child records what the interpreter launched; its compile probe compiles exactly these for
    sm_90 when calling the entry point did not cover them (docs/security.md, the compile probe)."""
    module: str
    qualname: str
    source_sha256: str              # of the kernel function's source: two kernels of one name stay apart
    signature: dict[str, str]
    constexprs: dict[str, Any]      # JSON scalars; anything else is written as "repr:..." and `exact` is False
    options: dict[str, int]
    exact: bool = True              # the constexpr values can be rebuilt from this record

    def key(self) -> str:
        return json.dumps(_to_jsonable(self), sort_keys=True)


@dataclasses.dataclass(frozen=True)
class CallBound:
    """One call of the submission a child makes, in the child's order (the correctness trials, then one per
    timed shape; in a probe, one per compiled shape or specialization), and how long it may run. Computed by
    the parent (sandbox/deadlines.py), which enforces its own copy: the child's marker only says which call runs."""
    what: str                       # for the message: "trial 3: public shape [128, 256], float16"
    bound_s: float
    # a call that compiles: how long it may run once the child marks its compiles done (from then, and never
    # past bound_s); None: bound_s alone (SandboxConfig.launch_bound_after_compile)
    launch_s: float | None = None


@dataclasses.dataclass(frozen=True)
class Job(_Record):
    SCHEMA: typing.ClassVar[str] = "kernelgym_gap.job"
    task_id: str
    dsl: str
    backend: str
    source_file: str
    outputs_dir: str
    report_file: str
    trials: tuple[Trial, ...]
    timing: TimingConfig | None     # None: no timing (cpu backend, correctness-only)
    timing_trials: tuple[Trial, ...] = ()   # one per (shape, dtype) timed, on fresh seeds
    mode: str = "evaluate"          # or "compile_probe": compile each launched kernel for sm_90, run nothing;
    #                                 or "compile_specs": compile `specs` for sm_90 without calling the entry point
    specs: tuple[KernelSpec, ...] = ()
    tasks_dir: str | None = None    # the registry directory the task came from (None: the default tasks/)
    # the library's time per timed (shape, dtype) from the parent's cache (judge/library_cache.py), one
    # entry per timing trial it knows, as (shape, dtype, ms); empty: none known (cpu, or not measured yet)
    library_hint: tuple[tuple[tuple[int, ...], str, float], ...] = ()
    # the (shape, dtype) of library_hint whose hint stands unchecked (TimingConfig.library_check_shapes,
    # judge/library_trust.py): the child times the kernel alone there, with no library check
    library_trusted: tuple[tuple[tuple[int, ...], str], ...] = ()
    call_bounds: tuple[CallBound, ...] = ()     # the stage deadline of each call (empty: wall_s alone)
    # host memory the child may hold outputs in until its lanes are released (child/outputs.py); past it an
    # output is written as soon as it comes. 0: every output written at once.
    held_output_bytes: int = 0
    # GPU memory the child may keep correctness outputs in until its next checkpoint (Placement.held_device_bytes);
    # 0: each is copied to the host right after its call
    held_device_bytes: int = 0
    # a device copy is written through a pinned host buffer of this many bytes, a chunk at a time
    # (Placement.output_staging_bytes, child/outputs.py); 0: copied whole to pageable host memory first
    output_staging_bytes: int = 0
    # each copy of a device-held output off the GPU in the child's unlaned writes holds the shared lane
    # (Placement.outputs_copy_laned, child/lanes.ChildLane.copying); False: the copies run with the lanes let go
    outputs_copy_laned: bool = False
    # the DSL's compiles in a shape's first correctness call run with the shared lane let go
    # (EvalConfig.compile_outside_lane, child/lanes.py)
    compile_outside_lane: bool = False
    # the child hands its device-held correctness outputs over by CUDA IPC handle (OutputHandle in its report)
    # instead of writing them as files, and holds them after its final OK report until the parent kills it or
    # asks for the files (SIGUSR1: child/run.py). Set by the engine only on cuda with a warm checker and a
    # device budget (docs/measurement.md, "The outputs handed over on the device"); False: files, as before.
    outputs_by_handle: bool = False
    schema: str = "kernelgym_gap.job"
    schema_version: int = SCHEMA_VERSION


# ---- child -> parent -------------------------------------------------------------------------------

# The variable naming the write end of a pipe the parent hands every child (sandbox/process.py): the child
# writes one byte to it and closes it just before the submission's module runs, and the parent's stage
# deadline for the import (SandboxConfig.import_s) starts when it reads that byte, not when it handed the
# job over. A pre-started child may still be importing torch or waiting for the GPU's shared lane to make
# its CUDA context then (20-40 s under load on the H200, 2026-12-05), which is not the submission's time.
# A pipe, not a file: the submission runs right after the write and could delete a file before the parent
# saw it, but cannot take back a byte. Until the byte arrives, the wall-clock deadline alone applies.
IMPORT_START_FD_ENV = "KGG_IMPORT_START_FD"
# The file a child creates beside its report once the submission's import is done (SandboxConfig.import_s):
# the parent's stage deadline for the import ends there. A child that creates it early only gets the whole
# wall-clock deadline back, which every child had before.
IMPORT_MARKER = "import.done"
# The file a child rewrites before and after each call of the submission ("call <i> <bound_s>", "done <i>"):
# the parent's call deadlines (sandbox/deadlines.py) read which call runs from it, never its bound.
CALL_MARKER = "call.now"

@dataclasses.dataclass(frozen=True)
class TrialOutcome:
    index: int
    output_file: str | None         # relative to outputs_dir
    launches: int                   # DSL kernel launches observed during the call
    programs: int                   # largest grid (programs of one launch) observed
    seconds: float                  # wall time of the call (cpu: interpreter time; never a GPU figure)
    input_digest_before: str
    input_digest_after: str
    output_aliases_input: bool = False
    output_type: str = "torch.Tensor"
    output_handle: OutputHandle | None = None   # handed over on the device (core/output_handle.py), not a file


@dataclasses.dataclass(frozen=True)
class ShapeTiming:
    shape: tuple[int, ...]
    dtype: str
    split: str
    kernel_ms: float
    kernel_spread: float            # (p75 - p25) / median of the repetitions
    kernel_reps: int
    library_ms: float
    library_spread: float
    library_reps: int
    launches_per_call: int
    programs: int
    recheck_output_file: str | None = None   # output of a call made after timing, checked again
    recheck_trial: Trial | None = None
    recheck_output_handle: OutputHandle | None = None   # that output handed over on the device instead
    side_stream: bool = False                 # the device-wide reading far exceeded the stream's
    stream_ms: float | None = None            # median of the current-stream readings
    device_ms: float | None = None            # median of the device-wide readings
    handed_bytes: int | None = None           # bytes of the distinct tensors handed to the kernels, one call
    # the library's time: "measured" in full here, "cached" (the parent's Job.library_hint, confirmed by a
    # short check; the parent re-derives that decision and puts its own hint into library_ms), or "trusted"
    # (the hint of a shape in Job.library_trusted, not checked: no check readings)
    library_source: str = "measured"
    library_check_ms: float | None = None     # median of the short library check interleaved with the kernel
    library_hint_ms: float | None = None      # the hint the child was sent for this shape, echoed
    early_exit: bool = False                  # kernel timing stopped after its first calls: hopelessly slow
    # every raw reading (core/timing_stats.py): the parent recomputes the fields above from them
    # (judge/measure.trusted_timings) and does not believe a summary they do not give
    readings: TimingReadings | None = None


@dataclasses.dataclass(frozen=True)
class ChildReport(_Record):
    SCHEMA: typing.ClassVar[str] = "kernelgym_gap.child_report"
    VERSION: typing.ClassVar[int] = CHILD_REPORT_VERSION
    status: Status
    message: str
    trials: tuple[TrialOutcome, ...] = ()
    timings: tuple[ShapeTiming, ...] = ()
    integrity: tuple[str, ...] = ()             # violations seen in the child
    phases: dict[str, float] = dataclasses.field(default_factory=dict)   # seconds per phase
    device: dict[str, Any] = dataclasses.field(default_factory=dict)
    versions: dict[str, str] = dataclasses.field(default_factory=dict)
    failed_trial: int | None = None
    traceback: str | None = None                # the submission's own traceback, trimmed to its frames
    inconclusive: str | None = None             # a compile probe (status ok) that could not tell: why
    launched: tuple[KernelSpec, ...] = ()      # cpu + triton: the specializations launched (or, in the
    #                                            compile probe, compiled); see KernelSpec
    schema: str = "kernelgym_gap.child_report"
    schema_version: int = CHILD_REPORT_VERSION


# ---- what callers get ------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class BadElement:
    """One output element the checker rejected: where, what the reference gives, what the kernel gave
    (non-finite values as the strings "inf", "-inf", "nan": JSON has no such numbers)."""
    index: tuple[int, ...]
    expected: float | str
    got: float | str


@dataclasses.dataclass(frozen=True)
class FailureDetail:
    """What a failure's message says, as data. The trial (shape, dtype, seed, distribution) regenerates its
    inputs: kernelgym_gap.reproduce(task, trial). Fields after traceback_tail are newer (defaults: older
    records still parse)."""
    trial: Trial | None = None
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    mismatched_fraction: float | None = None
    traceback_tail: str | None = None
    first_bad: tuple[BadElement, ...] = ()      # the first few rejected elements, in index order
    atol: float | None = None                   # the tolerance the output was judged with
    rtol: float | None = None
    bad_elements: int | None = None             # how many elements were rejected
    # the call that regenerates the trial's inputs, for people: a held-out trial's message (the agent's
    # feedback) leaves it out, and its shape and seed (engine/feedback.py); `kernelgym-gap eval` prints it
    reproduce: str | None = None


@dataclasses.dataclass(frozen=True)
class EvalRecord(_Record):
    SCHEMA: typing.ClassVar[str] = "kernelgym_gap.record"
    task: str
    task_version: int
    dsl: str
    backend: str
    status: Status
    correct: bool | None            # None: not verified (compile-only)
    reward: float
    reward_mode: str
    terms: dict[str, Any]
    message: str
    failure: FailureDetail | None = None
    diagnosis: dict[str, Any] | None = None
    trials_checked: int = 0
    device: dict[str, Any] = dataclasses.field(default_factory=dict)
    versions: dict[str, str] = dataclasses.field(default_factory=dict)
    sandbox_layers: tuple[str, ...] = ()
    latency: dict[str, float] = dataclasses.field(default_factory=dict)
    source_sha256: str = ""
    created_at: str = ""
    stage: str = ""                 # the stage that decided the status (engine.stages; "" in older records)
    schema: str = "kernelgym_gap.record"
    schema_version: int = SCHEMA_VERSION

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    @property
    def typed_terms(self):
        """`terms` parsed into core/terms.Terms (ProtocolError where they do not follow it); `terms` itself
        stays the JSON object on the wire and in the store."""
        from kernelgym_gap.core.terms import Terms
        return Terms.from_dict(self.terms, "EvalRecord.terms")


@dataclasses.dataclass(frozen=True)
class CheckResult(_Record):
    """The trusted checker's verdict on the outputs a child saved."""
    SCHEMA: typing.ClassVar[str] = "kernelgym_gap.check"
    status: Status
    message: str
    trials_checked: int
    failure: FailureDetail | None = None
    # KernelBench's own check, allclose(atol=rtol=1e-2) against the same-dtype reference, on the trials of the
    # task's timed distribution (KernelBench's inputs) only; None when the check failed or checked none of them
    kernelbench_allclose: bool | None = None
    # where the check's seconds went (inputs, reference, read, compare, allclose), for the record's latency
    seconds: dict[str, float] = dataclasses.field(default_factory=dict, compare=False)   # not the verdict
    schema: str = "kernelgym_gap.check"
    schema_version: int = SCHEMA_VERSION
