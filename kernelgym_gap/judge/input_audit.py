"""The input-independence audit (issue 36): can a task's own check be passed without reading the input?

For a task and a backend, on every (shape, dtype, distribution) its checker uses, the candidate outputs a
submission could write without computing anything are judged by the real checker (judge/checker.judge_output,
on an output file written as a child writes it):
- `mean`: a constant, the reference output's mean on this very trial (the best a constant can do, nearly;
  not tried on a one-element output, which is its own mean);
- `mean_other_seed`: a constant a cheat could precompute: the mean at another seed;
- `zeros`: all zeros;
- `input`: the first input of the output's shape passed through (only where one has that shape);
- `reference_other_seed`: the reference's output on the inputs of another seed (a memorised answer).
Any of them passing a cell is a finding: on that (shape, dtype, distribution) the check does not show that the
submission read its input. `control` is the opposite probe: torch's own result on float32 inputs (an honest
float32 kernel) must pass, or the check is too tight to be fair.

The audit computes in torch only (the references and the checker); it compiles no kernel and runs nothing a
submission wrote. The importer runs it at the cpu shapes (importers/tolerance.py); tests/test_input_audit.py
runs it over every built-in task and the imported fixtures."""
from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import torch

from kernelgym_gap.core import tensor_file
from kernelgym_gap.core.inputs import digest, generator
from kernelgym_gap.core.record import Trial
from kernelgym_gap.core.status import Status
from kernelgym_gap.core.task import TaskSpec
from kernelgym_gap.judge.checker import judge_output

CANDIDATES = ("mean", "mean_other_seed", "zeros", "input", "reference_other_seed")
AUDIT_SEED = 20261205
OTHER_SEED = 7919           # added to a trial's seed for the "another seed" candidates


@dataclasses.dataclass(frozen=True)
class Cell:
    shape: tuple[int, ...]
    dtype: str
    distribution: str
    seed: int

    def label(self) -> str:
        return f"{list(self.shape)} {self.dtype} {self.distribution} seed {self.seed}"


@dataclasses.dataclass(frozen=True)
class AuditReport:
    task_id: str
    backend: str
    cells: tuple[Cell, ...]
    tried: tuple[str, ...]                        # the candidates tried (input only where shapes allow)
    passed: tuple[tuple[Cell, str], ...]          # (cell, candidate) the task's check accepted
    control_failed: tuple[tuple[Cell, str], ...] = ()   # (cell, the checker's message) for honest float32

    @property
    def sound(self) -> bool:
        return not self.passed

    def by_distribution(self) -> dict[str, list[str]]:
        """distribution -> the candidates that passed on it somewhere."""
        out: dict[str, list[str]] = {}
        for cell, cand in self.passed:
            names = out.setdefault(cell.distribution, [])
            if cand not in names:
                names.append(cand)
        return out

    def summary(self) -> str:
        if self.sound:
            return f"{self.task_id} ({self.backend}): no candidate passes on {len(self.cells)} cells"
        return f"{self.task_id} ({self.backend}): " + "; ".join(f"{c.label()}: {cand}" for c, cand in self.passed)


def _float64(ins) -> tuple:
    return tuple(x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in ins)


def reference64(task: TaskSpec, ins) -> torch.Tensor:
    """The reference the checker compares against (float64 on upcast inputs unless the task says otherwise)."""
    with torch.no_grad():
        if not task.reference_in_float64:
            return task.reference(*ins)
        return (task.float64_reference or task.reference)(*_float64(ins))


def inputs_of(task: TaskSpec, cell: Cell, seed: int, device: str) -> tuple:
    return tuple(task.make_inputs(cell.shape, cell.dtype, generator(seed, device), cell.distribution, device))


def _constant(ref: torch.Tensor, value: float, dtype: torch.dtype) -> torch.Tensor:
    if not dtype.is_floating_point:
        value = round(value)
    return torch.full(ref.shape, value, dtype=dtype, device=ref.device)


def _mean(ref: torch.Tensor) -> float:
    r = ref.double()
    finite = r[torch.isfinite(r)]
    return float(finite.mean()) if finite.numel() else 0.0


def candidate_outputs(task: TaskSpec, cell: Cell, ins: tuple, ref: torch.Tensor, device: str = "cpu",
                      names=CANDIDATES) -> dict[str, torch.Tensor]:
    """The candidate outputs for one cell, in the task's output dtype (`input` left out where no input has
    the output's shape)."""
    out_dtype = getattr(torch, task.output_dtype(cell.dtype))
    other_ins = inputs_of(task, cell, cell.seed + OTHER_SEED, device) if {"mean_other_seed", "reference_other_seed"} \
        & set(names) else None
    other = reference64(task, other_ins) if other_ins is not None else None
    made: dict[str, torch.Tensor] = {}
    for name in names:
        if name == "mean":
            # a one-element output (a scalar loss) is its own mean: that is this trial's answer, not a constant
            # a cheat could write (the scalar losses were refused for it); mean_other_seed still asks whether
            # the value depends on the input
            if ref.numel() > 1:
                made[name] = _constant(ref, _mean(ref), out_dtype)
        elif name == "mean_other_seed":
            made[name] = _constant(ref, _mean(other), out_dtype)
        elif name == "zeros":
            made[name] = torch.zeros(ref.shape, dtype=out_dtype, device=ref.device)
        elif name == "input":
            same = [x for x in ins if isinstance(x, torch.Tensor) and tuple(x.shape) == tuple(ref.shape)]
            if same:
                made[name] = same[0].detach().to(out_dtype).clone()
        elif name == "reference_other_seed":
            if tuple(other.shape) == tuple(ref.shape):
                made[name] = other.to(out_dtype).contiguous()
        else:
            raise ValueError(f"unknown candidate {name!r}; known: {CANDIDATES}")
    return made


def honest_float32(task: TaskSpec, ins: tuple, dtype: str) -> torch.Tensor:
    """torch's own result on float32 copies of the inputs, in the task's output dtype: what a correct kernel
    that computes in float32 returns."""
    up = tuple(x.float() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in ins)
    with torch.no_grad():
        return task.reference(*up).to(getattr(torch, task.output_dtype(dtype)))


def cells_of(task: TaskSpec, backend: str, seeds=(AUDIT_SEED,), shapes=None, dtypes=None,
             distributions=None) -> tuple[Cell, ...]:
    """Every (shape, dtype, distribution, seed) the backend's checker can meet: its public and held-out
    shapes, its dtypes, the task's distributions."""
    w = task.workload(backend)
    return tuple(Cell(tuple(int(v) for v in s), d, dist, int(seed))
                 for s in (shapes or w.all_shapes()) for d in (dtypes or w.dtypes)
                 for dist in (distributions or task.distributions) for seed in seeds)


def _memo(fn):
    """`fn` computed once per distinct input values (the checker calls the reference once per candidate
    judged: on the same inputs, the same result). Keyed by the inputs' digest, so no stale entry can match."""
    if fn is None or getattr(fn, "audit_memo", False):
        return fn
    cache: dict[str, torch.Tensor] = {}

    def call(*ins):
        key = digest(ins)
        if key not in cache:
            if len(cache) > 8:
                cache.clear()
            cache[key] = fn(*ins)
        return cache[key]
    call.audit_memo = True
    return call


def memoized(task: TaskSpec) -> TaskSpec:
    """The same task, its references computed once per cell (a float64 matmul per candidate judged was most
    of an audit's time)."""
    return dataclasses.replace(task, reference=_memo(task.reference), float64_reference=_memo(task.float64_reference))


def judge_cell(task: TaskSpec, cell: Cell, ins: tuple, ref: torch.Tensor, path: Path, device: str = "cpu",
               candidates=CANDIDATES, control: bool = False) -> tuple[list[str], list[str], str | None]:
    """(the candidates the check passed, those tried, the checker's first line on the honest control or None
    when it passed or was not asked) for one cell, each output judged from a file at `path`."""
    trial = Trial(index=0, shape=cell.shape, dtype=cell.dtype, seed=cell.seed, distribution=cell.distribution,
                  split="public")
    outputs = candidate_outputs(task, cell, ins, ref, device, candidates)
    if control:
        outputs["control"] = honest_float32(task, ins, cell.dtype)
    passed, control_message = [], None
    for name, out in outputs.items():
        path.unlink(missing_ok=True)
        tensor_file.write_tensor(path, out.contiguous())
        status, message = judge_output(task, trial, path, ins, device)
        if name == "control":
            if status is not Status.OK:
                control_message = message.splitlines()[0] if message else str(status)
        elif status is Status.OK:
            passed.append(name)
    return passed, [n for n in outputs if n != "control"], control_message


def audit(task: TaskSpec, backend: str = "cpu", *, device: str = "cpu", seeds=(AUDIT_SEED,), shapes=None,
          dtypes=None, distributions=None, candidates=CANDIDATES, control: bool = True,
          workdir: str | Path | None = None) -> AuditReport:
    """Every candidate on every cell judged by the task's own check (see the module docstring)."""
    cells = cells_of(task, backend, seeds, shapes, dtypes, distributions)
    task = memoized(task)
    passed, failed_control, tried = [], [], []
    with tempfile.TemporaryDirectory(prefix="kgg-audit-", dir=workdir) as tmp:
        path = Path(tmp) / "out.bin"
        for cell in cells:
            ins = inputs_of(task, cell, cell.seed, device)
            ok, names, control_message = judge_cell(task, cell, ins, reference64(task, ins), path, device,
                                                    candidates, control)
            tried += [n for n in names if n not in tried]
            passed += [(cell, n) for n in ok]
            if control_message is not None:
                failed_control.append((cell, control_message))
    return AuditReport(task.id, backend, cells, tuple(tried), tuple(passed), tuple(failed_control))
