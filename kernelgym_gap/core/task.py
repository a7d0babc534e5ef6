"""The task contract: an operator as data.

A task file (`tasks/<category>/<name>/task.py`) defines `TASK = TaskSpec(...)`. Everything the harness
needs about an operator lives there: the library reference, an input generator, shapes per backend (public
ones shown to the agent, held-out ones only evaluated), dtypes, tolerances, flops and minimal bytes, and the
reference solutions that ship with it.
"""
from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kernelgym_gap.core import dsls
from kernelgym_gap.core.backend import BACKENDS  # noqa: F401 - task files and callers read it here
from kernelgym_gap.core.ids import task_id

CATEGORIES = ("elementwise", "reduction", "normalization", "gemm", "convolution", "attention",
              "moe", "backward", "quantization", "indexing")
# Categories only imported tasks take (importers/analysis.category: KernelBench's pooling and loss problems,
# and its level-3 whole networks); the built-in corpus need not cover them.
IMPORTED_CATEGORIES = ("pooling", "loss", "architecture")
# 1: one memory-bound op; 2: a fused op or a reduction with a numerical trap; 3: compute-bound or
# multi-stage (tiling, pipelining, online algorithms).
LEVELS = (1, 2, 3)
DSLS = dsls.NAMES       # the registry of DSLs (core/dsls.py) names them
SOLUTION_KINDS = ("optimized", "slow")
# The authoring defects the source paper names (a slow solution carries one of them).
DEFECTS = ("sequential_reduction", "scalar_loop", "needless_dtype_conversion", "too_few_programs",
           "uncoalesced_access", "no_tiling")
DTYPES = ("float32", "float16", "bfloat16", "int8", "float8_e4m3fn", "float8_e5m2")
# Low-bit formats (issue 34): an output in one of them is compared in its own representable steps
# (Tolerance.steps, judge/lowbit.py), not by atol/rtol, since one rounding there is a 6-25% relative step.
LOWBIT_DTYPES = ("int8", "float8_e4m3fn", "float8_e5m2")

Shape = tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float
    # For an int8 or float8 output (LOWBIT_DTYPES): how many representable steps of the output format the
    # output may sit from the reference rounded to that format (0: exact); atol/rtol are not used there.
    steps: int | None = None
    # Added to atol per unit of the trial's float64 reference output's root-mean-square (issue 36): a tolerance
    # that follows each shape's own output scale, for tasks whose outputs grow or shrink with the shape (imported
    # ones); 0: atol alone. The checker applies it per trial (judge/scaled_tolerance.py).
    atol_per_rms: float = 0.0


@dataclasses.dataclass(frozen=True)
class Workload:
    """The shapes and dtypes one backend evaluates. The interpreter is slow: cpu workloads stay small."""
    public: tuple[Shape, ...]
    heldout: tuple[Shape, ...]
    dtypes: tuple[str, ...]

    def all_shapes(self) -> tuple[Shape, ...]:
        return self.public + self.heldout


@dataclasses.dataclass(frozen=True)
class Solution:
    """A reference solution shipped with a task (a real file under the task's solutions/ folder)."""
    file: str
    dsl: str
    kind: str                      # "optimized" or "slow"
    defect: str | None = None      # for slow ones: which authoring defect it carries
    note: str = ""
    # What the cpu backend can do with it: "ok" (runs and is verified) or "unverified" (TileLang kernels
    # that do not lower to the C target: lowered to CUDA sm_90a and compiled with nvcc, never run).
    cpu_status: str = "ok"


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    name: str
    version: int
    category: str
    statement: str
    entry_point: str
    signature: str
    reference: Callable[..., Any]
    make_inputs: Callable[..., tuple]          # (shape, dtype, generator, distribution, device) -> inputs
    distributions: tuple[str, ...]
    workloads: dict[str, Workload]             # backend -> Workload
    tolerances: dict[str, Tolerance]           # dtype -> Tolerance
    flops: Callable[[Shape], int]
    min_bytes: Callable[[Shape, str], int]     # each input read once, each output written once
    solutions: tuple[Solution, ...] = ()
    # A DSL the task ships no solution in, and why: what the DSL lacks for this op (TileLang 0.1.x has no
    # sort primitive, for one), so a reader knows the gap is the DSL's and not an oversight. Shown in
    # `tasks --json`; tests/test_corpus_rules.py requires a TileLang solution or a reason here.
    dsl_gaps: dict = dataclasses.field(default_factory=dict)
    # "torch" (eager: the reference itself, timed beside the kernel) and "torch.compile" (judge/baselines.py);
    # a task whose reference torch.compile cannot take leaves the latter out.
    baselines: tuple[str, ...] = ("torch", "torch.compile")
    # What the reward's E is taken against (issue 34): the library a user would pick instead of writing this
    # kernel. "torch" (eager), "torch.compile", or a name in `alternatives`. Eager is the default; where it
    # is an unfused chain of ops (BiasGELU's add then gelu, RotaryEmbedding's slices and cats, CrossEntropy's
    # log_softmax then gather) a fused kernel beats it 3-10x and E sits at the reward's ceiling, giving no
    # gradient above the reference, so those tasks declare what a user would pick instead. Measured in a
    # trusted process and cached like the torch.compile time (judge/baselines.py); where it is missing (a
    # cpu run, the baseline off) the reward falls back to eager and says so in the record's flags.
    e_baseline: str = "torch"
    # Named library implementations of the same op (FlexAttention for a banded mask, torch._grouped_mm for a
    # grouped GEMM): (the task's inputs) -> the output. Timed beside eager in the baseline process; one that
    # raises (an older torch, a dtype it lacks) is reported missing, never an error of the submission.
    alternatives: dict = dataclasses.field(default_factory=dict)
    output_dtype: Callable[[str], str] = staticmethod(lambda dtype: dtype)
    # Reference in float64 on upcast inputs (the default) or in the input dtype (for ops whose dtype
    # semantics matter, like integer-valued outputs).
    reference_in_float64: bool = True
    # Where float32 arithmetic itself cannot meet the dtype tolerance (a sum that cancels to near zero,
    # multiplied by a large factor): (float64 inputs, dtype) -> a float64 tensor shaped like the output, the
    # error a correct float32-accumulating kernel may reach at each element beyond atol + rtol |expected|.
    # Its docstring says how it is derived (shown in the contract). None: the tolerance alone decides.
    error_bound: Callable[..., Any] | None = None
    # Where the output has more than one correct value (indices among tied values: top-k, argsort; a sample
    # whose float32 cumulative sum may cross a boundary): (inputs, output) -> a tensor compared in its place,
    # the same for every correct output (top-k's indices as the values they pick). Applied to the output and
    # to the reference's; raises ValueError for an output no correct kernel gives (an index out of range or
    # repeated), which is a mismatch with its message. Its docstring says the rule (shown in the contract).
    output_view: Callable[..., Any] | None = None
    # The checker's float64 reference where the reference's own float64 call would not fit the GPU (attention's
    # math backend materialises [B, H, S, S] float64 scores): the same values computed in pieces
    # (core/reference_parts.py). The library timed for E is always `reference` itself. None: `reference`.
    float64_reference: Callable[..., Any] | None = None
    # The distribution the kernel and the library are timed on: what the task's real data looks like. The
    # others are correctness stress inputs only (a library's speed can depend on the values: torch's
    # softmax is 2.4x slower on std-30 inputs than on normal ones, so timing on them inflates E).
    timed_distribution: str = "normal"
    level: int = 1
    tags: tuple[str, ...] = ()
    # Why LLM workloads run this operator (shown in `tasks --json`).
    motivation: str = ""
    # One line per version after v0: what changed (tolerance, shapes, timed inputs, reward semantics).
    changelog: tuple[str, ...] = ()
    # The bytes of min_bytes that are writes (the outputs, written once); the rest are reads. The floor
    # (judge/floor.py) bounds the reads by the read bandwidth and the writes by the write bandwidth where
    # both are measured. None: not split, the floor uses min_bytes over the fastest measured rate (sound).
    written_bytes: Callable[[Shape, str], int] | None = None
    # Set for tasks an importer made (kernelgym_gap/importers/: "kernelbench"). They ship no reference
    # solutions, so validate() does not ask for any.
    origin: str = ""
    # A class of this name (KernelBench's `ModelNew`) is accepted in place of the entry-point function:
    # the gate lets it through and the child calls adapt_module(cls, cases, device), cases being the
    # job's (shape, dtype) pairs, for the callable it runs.
    module_entry_point: str | None = None
    adapt_module: Callable[..., Callable] | None = None
    # The reference as shown to agents when it is not a function's own source (an imported problem file).
    reference_text: str = ""
    # Dtypes whose trials on the timed distribution must also pass KernelBench's own check (torch.allclose,
    # atol = rtol = 1e-2, against the reference in that dtype): an imported problem's own dtype, where that
    # check is the verdict its users know (issue 36: the record said false and the verdict ignored it).
    kernelbench_check: tuple[str, ...] = ()
    # > 0: no constant output may pass a trial; where one would (the reference varies less than the tolerance
    # on that trial), the trial's tolerance is narrowed until every constant misses by this factor
    # (judge/scaled_tolerance.py). Imported tasks set it; built-in ones are audited in the tests instead.
    input_guard: float = 0.0
    directory: Path | None = None              # set by the registry

    @property
    def id(self) -> str:
        return task_id(self.name, self.version)

    @property
    def tasks_dir(self) -> str | None:
        """The registry directory this task was loaded from (tasks/ or a user's --tasks-dir): the child and
        the trusted processes find it there by id (registry.find_task)."""
        return str(self.directory.parent.parent) if self.directory is not None else None

    @property
    def dsls(self) -> tuple[str, ...]:
        """The DSLs a submission may be written in: those of the reference solutions, which show the task
        can be done in them; a task that ships none (an imported one) takes every DSL."""
        return tuple(d for d in DSLS if any(s.dsl == d for s in self.solutions)) or DSLS

    def reference_source(self) -> str:
        return self.reference_text or inspect.getsource(self.reference)

    def solution_path(self, solution: Solution) -> Path:
        if self.directory is None:
            raise ValueError(f"{self.id} was not loaded from a directory")
        return self.directory / "solutions" / solution.file

    def workload(self, backend: str) -> Workload:
        return self.workloads[backend]

    def bytes_split(self, shape, dtype: str) -> tuple[int, int] | None:
        """(bytes read, bytes written) of min_bytes, or None where the task does not split them. A split
        that does not add up (written over min_bytes) is refused as no split: the floor stays sound."""
        if self.written_bytes is None:
            return None
        total, written = int(self.min_bytes(shape, dtype)), int(self.written_bytes(shape, dtype))
        if not 0 <= written <= total:
            return None
        return total - written, written

    def summary(self) -> str:
        """The statement's first sentence (what `kernelgym-gap tasks` shows)."""
        first = self.statement.split(". ", 1)[0].strip()
        return first if first.endswith(".") else first + "."

    def contract(self) -> dict[str, Any]:
        """The whole contract as JSON-able data (`kernelgym-gap tasks --json`): what a submission must do,
        on which shapes and dtypes, within which tolerances, and what it is measured against."""
        def shapes(w: Workload) -> list[dict[str, Any]]:
            return [{"shape": list(s), "split": split, "flops": int(self.flops(s)),
                     "min_bytes": {d: int(self.min_bytes(s, d)) for d in w.dtypes}}
                    for split, group in (("public", w.public), ("heldout", w.heldout)) for s in group]
        return {
            "id": self.id, "name": self.name, "version": self.version, "category": self.category,
            "level": self.level, "tags": list(self.tags), "statement": self.statement,
            "motivation": self.motivation, "entry_point": self.entry_point, "signature": self.signature,
            "dsls": list(self.dsls),
            "workloads": {b: {"dtypes": list(w.dtypes), "shapes": shapes(w)} for b, w in self.workloads.items()},
            "output_dtypes": {d: self.output_dtype(d) for d in sorted({d for w in self.workloads.values()
                                                                     for d in w.dtypes})},
            "tolerances": {d: {"atol": t.atol, "rtol": t.rtol, **({"steps": t.steps} if t.steps is not None else {}),
                               **({"atol_per_rms": t.atol_per_rms} if t.atol_per_rms else {})}
                           for d, t in self.tolerances.items()},
            **({"kernelbench_check": list(self.kernelbench_check)} if self.kernelbench_check else {}),
            **({"input_guard": self.input_guard} if self.input_guard else {}),
            "distributions": list(self.distributions), "timed_distribution": self.timed_distribution,
            "reference_in_float64": self.reference_in_float64, "baselines": list(self.baselines),
            "e_baseline": self.e_baseline, "alternatives": sorted(self.alternatives),
            "error_bound": inspect.cleandoc(self.error_bound.__doc__ or "") if self.error_bound else None,
            "output_view": inspect.cleandoc(self.output_view.__doc__ or "") if self.output_view else None,
            "float64_reference_in_parts": self.float64_reference is not None,
            "changelog": list(self.changelog),
            "solutions": [{"file": s.file, "dsl": s.dsl, "kind": s.kind, "defect": s.defect, "note": s.note,
                           "cpu_status": s.cpu_status} for s in self.solutions],
            **({"dsl_gaps": dict(self.dsl_gaps)} if self.dsl_gaps else {}),
            "reference": self._reference_text(),
        }

    def _reference_text(self) -> str | None:
        try:
            return self.reference_source()
        except (OSError, TypeError):        # defined where its source cannot be read (e.g. a REPL)
            return None

    def validate(self) -> list[str]:
        """Every way this spec breaks the contract (empty when it is sound)."""
        problems = []
        if self.category not in CATEGORIES + (IMPORTED_CATEGORIES if self.origin else ()):
            problems.append(f"category {self.category!r} not in {CATEGORIES}")
        if not self.entry_point.isidentifier():
            problems.append(f"entry point {self.entry_point!r} is not an identifier")
        for backend in BACKENDS:
            w = self.workloads.get(backend)
            if w is None:
                problems.append(f"no workload for backend {backend!r}")
                continue
            if not w.public or not w.heldout:
                problems.append(f"{backend}: needs public and held-out shapes")
            if set(w.public) & set(w.heldout):
                problems.append(f"{backend}: a shape is both public and held-out")
            for d in w.dtypes:
                if d not in DTYPES:
                    problems.append(f"{backend}: dtype {d!r} not in {DTYPES}")
                if d not in self.tolerances:
                    problems.append(f"{backend}: no tolerance for dtype {d!r}")
                elif self.output_dtype(d) in LOWBIT_DTYPES and self.tolerances[d].steps is None:
                    problems.append(f"{backend}: {d} gives a {self.output_dtype(d)} output: its tolerance "
                                    "needs steps (the distance allowed in the format's representable steps)")
            for s in w.all_shapes():
                for d in (d for d in w.dtypes if d in DTYPES):     # an unknown dtype is reported above
                    try:
                        if self.flops(s) < 0 or self.min_bytes(s, d) <= 0:
                            problems.append(f"flops/min_bytes not positive for {s} {d}")
                        elif self.written_bytes is not None and not 0 <= self.written_bytes(s, d) <= self.min_bytes(s, d):
                            problems.append(f"written_bytes outside 0..min_bytes for {s} {d}")
                    except Exception as e:  # noqa: BLE001 - the author's formula: its failure is a problem
                        problems.append(f"flops/min_bytes failed for {s} {d}: {type(e).__name__}: {e}")
        if not self.distributions:
            problems.append("no input distributions")
        elif self.timed_distribution not in self.distributions:
            problems.append(f"timed distribution {self.timed_distribution!r} is not among the distributions "
                            f"{self.distributions} (correctness must cover what is timed)")
        if self.level not in LEVELS:
            problems.append(f"level {self.level!r} not in {LEVELS}")
        if self.e_baseline not in (*self.baselines, *self.alternatives):
            problems.append(f"e_baseline {self.e_baseline!r} is neither a baseline {self.baselines} nor an "
                            f"alternative {tuple(self.alternatives)}")
        for name, fn in self.alternatives.items():
            if not callable(fn) or name in ("torch", "torch.compile"):
                problems.append(f"alternative {name!r}: a named callable, not a baseline's name")
        if len(self.changelog) > self.version:
            problems.append(f"{len(self.changelog)} changelog lines for version {self.version} (one per "
                            "version after v0)")
        for dsl, why in self.dsl_gaps.items():
            if dsl not in DSLS or not isinstance(why, str) or not why.strip():
                problems.append(f"dsl_gaps: {dsl!r} needs a DSL from {tuple(DSLS)} and a reason")
            elif any(s.dsl == dsl for s in self.solutions):
                problems.append(f"dsl_gaps names {dsl!r}, which has a solution")
        for sol in self.solutions:
            if sol.dsl not in DSLS:
                problems.append(f"solution {sol.file}: dsl {sol.dsl!r}")
            if sol.kind not in SOLUTION_KINDS:
                problems.append(f"solution {sol.file}: kind {sol.kind!r}")
            if sol.kind == "slow" and sol.defect not in DEFECTS:
                problems.append(f"solution {sol.file}: a slow solution names its defect from {DEFECTS}")
            if sol.cpu_status not in ("ok", "unverified"):
                problems.append(f"solution {sol.file}: cpu_status {sol.cpu_status!r}")
            if self.directory is not None and not self.solution_path(sol).is_file():
                problems.append(f"solution file missing: {self.solution_path(sol)}")
        if self.module_entry_point is not None and (not self.module_entry_point.isidentifier()
                                                    or self.adapt_module is None):
            problems.append("a module entry point needs an identifier and adapt_module")
        if self.origin:             # an imported task: the user's problem, no shipped solutions
            return problems
        if not any(s.dsl == "triton" and s.kind == "optimized" for s in self.solutions):
            problems.append("needs an optimized Triton solution")
        if not any(s.dsl == "triton" and s.kind == "slow" for s in self.solutions):
            problems.append("needs a slow Triton solution")
        return problems


def numel(shape: Sequence[int]) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def itemsize(dtype: str) -> int:
    return {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int8": 1, "float8_e4m3fn": 1,
            "float8_e5m2": 1, "int32": 4, "int64": 8}[dtype]
