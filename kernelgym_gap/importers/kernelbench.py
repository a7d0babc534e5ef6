"""`kernelgym-gap import kernelbench PATH... --out DIR`: KernelBench-style problem files become task folders
DIR/<category>/<stem>/ (task.py and a copy of the problem file) that `--tasks-dir DIR` loads.

What a problem gets (docs/importing.md says why):
- shapes: the problem's own sizes on cuda; on cpu its sizes shrunk (importers/shrink.py: equal sizes
  together, kernel-like sizes kept, derived globals recomputed) until its work is small; held-out shapes
  from the batch-like size scaled by 3/4.
- flops from torch's FlopCounterMode over one reference call (on the meta device: nothing is allocated),
  minimal bytes from the distinct input, state and output tensors, both per shape.
- dtypes: the float dtype get_inputs() gives, plus float16/bfloat16 when it gives float32 and the model in
  that dtype agrees with its float64 self within the dtype's tolerance at the cpu shape.
- distributions: get_inputs()'s values as given (timed) and rescaled/shifted/sparsified variants the problem
  is well-conditioned on; tolerances per dtype scaled by the output's magnitude.
A problem it cannot take raises ImportRefused with the reason, and no folder is written. One problem's
failure (its refusal, its time limit, the analysis crashing) is that problem's result only: iter_import yields
each result as it is made, so the others are neither lost nor held back.
"""
from __future__ import annotations

import ast
import dataclasses
import math
import os
import pprint
import re
import shutil
import stat
from pathlib import Path

import torch

from kernelgym_gap.core.errors import KernelGymError
from kernelgym_gap.core.task import DSLS
from kernelgym_gap.importers import analysis, conditioning, modelnew, sandboxed, soundness, state_init
from kernelgym_gap.importers.analysis import ImportRefused, InputIndependent
from kernelgym_gap.importers.problem import DISTRIBUTIONS, Problem, build_model, load_module
from kernelgym_gap.importers.runtime import FORMAT, shape_key
from kernelgym_gap.importers.shrink import BATCHNORM_FEW, CPU_ELEMENTS, CPU_FLOPS, heldout_of, plan
from kernelgym_gap.importers.tolerance import RULE_DOT, RULE_POINTWISE

__all__ = ["ImportRefused", "ImportOutError", "ImportResult", "discover", "import_file", "import_paths",
           "iter_import", "build_meta", "CPU_ELEMENTS", "CPU_FLOPS"]

ENTRY_POINT = "model_forward"
MAX_PROBLEM_BYTES = 1 << 20   # a KernelBench problem file is a few kB

# Tolerances: importers/tolerance.py's RULE_POINTWISE and RULE_DOT (atol per unit of output magnitude R,
# rtol). Without counted matmul/conv flops the error of a correct kernel is a few roundings of the output
# (fp32 accumulation): the built-in elementwise and normalization tasks' values. With them, a dot product of depth K: float32 sums may use TF32 on cuda
# (inputs rounded to 10 bits: error ~2^-11 |C| rms, 8 sigma ~4e-3 R); float16/bfloat16 with float32
# accumulation err by one rounding of C (u = 2^-11, 2^-8) plus the float32 sum: the Matmul task's values.

# torch's own same-dtype result must sit within this share of the tolerance for a dtype or distribution to
# be kept: a correct kernel then passes with room.
_MARGIN = 0.5


@dataclasses.dataclass(frozen=True)
class ImportResult:
    source: Path
    task_dir: Path | None
    name: str
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.task_dir is not None


class ImportOutError(KernelGymError, ValueError):
    """--out names something that is not a directory (or cannot be made one)."""


def discover(paths) -> list[Path]:
    """Problem files: each path given, and every *.py under each folder given (sorted). Links are not
    followed: a linked file or folder, given or found, is listed so that import_file refuses it by name."""
    found = []
    for p in map(Path, paths):
        if p.is_dir() and not p.is_symlink():
            found.extend(_walk(p))
        else:
            found.append(p)
    return found


def _walk(root: Path) -> list[Path]:
    found = []
    for dirpath, dirs, files in os.walk(root, followlinks=False):
        base = Path(dirpath)
        found.extend(base / d for d in dirs if (base / d).is_symlink())      # refused, not entered
        dirs[:] = sorted(d for d in dirs if not (base / d).is_symlink())
        found.extend(base / f for f in files if f.endswith(".py") and f != "__init__.py")
    return sorted(found)


def task_name(path: Path) -> str:
    """The file's stem in [A-Za-z0-9_] (others replaced), at most 100 characters: it names a folder and a
    Gymnasium id, and it is written into generated code (as a repr, still)."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", path.stem).strip("_")[:100].strip("_") or "problem"
    return name


def read_problem(path: Path) -> bytes:
    """The problem file's bytes, read without following a link; ImportRefused naming the reason kind only
    (never the content: a link to a one-word secret quoted it in a refusal before, issue 32 I3)."""
    for part in [*reversed(path.parents), path]:
        if part != Path(part.anchor) and str(part) not in ("", ".") and part.is_symlink():
            raise ImportRefused(f"{'the path goes through a symbolic link' if part != path else 'a symbolic link'}"
                                f" ({part.name}): links are refused (one can point at any file this user can "
                                f"read); import the file itself")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise ImportRefused("no such file") from None
    except OSError as e:
        raise ImportRefused(f"cannot be opened ({e.strerror})") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise ImportRefused("a folder (give it as a folder of problem files)")
        if not stat.S_ISREG(info.st_mode):
            raise ImportRefused("not a regular file")
        if path.suffix != ".py":
            raise ImportRefused("not a .py file: a KernelBench problem is a Python file")
        if info.st_size > MAX_PROBLEM_BYTES:
            raise ImportRefused(f"{info.st_size} bytes, over the {MAX_PROBLEM_BYTES} a problem file may have")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(MAX_PROBLEM_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_PROBLEM_BYTES:
        raise ImportRefused(f"over the {MAX_PROBLEM_BYTES} bytes a problem file may have")
    return data


def _level(path: Path) -> int:
    m = re.search(r"level([123])", str(path.resolve()).lower())
    return int(m.group(1)) if m else 1


def _tolerances(dtypes, dot: bool, magnitude: float, per_rms: dict[str, float] | None = None) -> dict:
    """`per_rms`: dtype -> the atol per unit of magnitude where the problem's measured error widens the
    table's (importers/conditioning.py)."""
    table = RULE_DOT if dot else RULE_POINTWISE
    r = float(f"{max(1.0, magnitude):.2g}")
    per_rms = per_rms or {}
    return {d: [float(f"{max(table[d][0], per_rms.get(d, 0.0)) * r:.3g}"), table[d][1]] for d in dtypes}


def _growth(shapes: dict, cpu_key: str) -> float:
    """How much larger an output value can get at the largest derived shape than at the cpu shape: each output
    sums at most `depth` terms (a dot product's reduction length from the counted flops, or the elements read
    per output element), so its size grows at most linearly with depth. A mean-shifted distribution does grow
    linearly: the matmul of 2_Standard_matrix_multiplication overflowed float16 on 'offset' inputs at its
    cuda K = 4096 (H200, 2026-12-04) while the cpu shape's outputs fit."""
    def depth(e):
        out = max(1, math.prod(e["out_shape"]))
        return max(1.0, e["flops"] / (2 * out), e["float_elements"] / out)
    return max(1.0, max(depth(e) for e in shapes.values()) / depth(shapes[cpu_key]))


def _fits(problem: Problem, shape, dtype: str, distribution: str, tol, seeds=(11, 12),
          growth: float = 1.0) -> str | None:
    """None when torch's own result in `dtype` passes `tol` with room against the float64 reference on this
    distribution (and the float64 output, times `growth` for the larger shapes, fits the dtype); else why not."""
    from kernelgym_gap.core.inputs import generator
    for seed in seeds:
        try:
            ins = problem.make_inputs(shape, dtype, generator(seed, "cpu"), distribution, "cpu")
            with torch.no_grad():
                ref = problem.reference(*(t.double() if isinstance(t, torch.Tensor) and t.is_floating_point()
                                          else t for t in ins))
                out = problem.reference(*ins)
        except Exception as e:  # noqa: BLE001 - a dtype the problem does not run in
            return f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"
        if not ref.is_floating_point():
            return None if torch.equal(out, ref) else "integer outputs differ across dtypes"
        r = ref.double()
        if not bool(torch.isfinite(r).all()):
            return "the float64 reference is not finite"
        if float(r.abs().max()) * growth >= torch.finfo(getattr(torch, dtype)).max / 4:
            return "outputs beyond the dtype's range" + (f" at the larger shapes (x{growth:.3g})" if growth > 1 else "")
        err = (out.double() - r).abs() / (tol[0] + tol[1] * r.abs())
        if not bool(torch.isfinite(err).all()) or float(err.max()) > _MARGIN:
            return f"torch in {dtype} errs by {float(err.max()):.2g} of the tolerance"
    return None


def import_file(path: Path, out: Path, taken: set[str] | None = None, trust: bool = False,
                config=None, keep_modelnew: bool = False) -> ImportResult:
    """One problem file: its facts counted in a sandboxed child (sandboxed.py), then its task folder written.
    `trust` is recorded in the task: only a trusted import's reference may run in a trusted process.
    `keep_modelnew`: a ModelNew the file defines in a DSL this harness runs is kept as the task's solution
    (so `bench --agent replay` replays it). Never raises for the problem: any failure is its refusal."""
    path = Path(path)
    name = task_name(path)
    try:
        if taken is not None and name in taken:
            raise ImportRefused(f"another problem of this run is named {name!r} already")
        source = read_problem(path)
        meta = sandboxed.analyse(source, name, config)
        level = _level(path)
        meta.update(source=str(path), level=level, trusted=bool(trust))
        if level == 3:                          # counted in the child, which cannot see the level folder
            meta["category"] = "architecture"
        kept = modelnew.solution_of(source) if keep_modelnew else None
        if kept is not None and kept.get("dsl"):
            meta["solutions"] = [kept]
        text = render_task(meta)
    except ImportRefused as e:
        return ImportResult(path, None, name, str(e))
    except Exception as e:  # noqa: BLE001 - the importer's own failure on this file stays this file's refusal
        return ImportResult(path, None, name, f"the import failed: {type(e).__name__}")
    task_dir = Path(out) / meta["category"] / name
    for other in Path(out).glob(f"*/{name}"):
        if other != task_dir and not other.is_symlink():
            shutil.rmtree(other)        # a re-import that lands in another category
    task_dir.mkdir(parents=True, exist_ok=True)
    (task_dir / "problem.py").write_bytes(source)      # the bytes analysed, not a second read of the path
    if meta.get("solutions"):
        (task_dir / "solutions").mkdir(exist_ok=True)
        (task_dir / "solutions" / meta["solutions"][0]["file"]).write_bytes(source)
    (task_dir / "task.py").write_text(text)
    if taken is not None:
        taken.add(name)
    note = ("" if not keep_modelnew else f"; ModelNew kept as a {kept['dsl']} solution" if kept and kept.get("dsl")
            else f"; ModelNew not kept: {kept['why']}" if kept else "; no ModelNew to keep")
    return ImportResult(path, task_dir, name, f"{meta['category']}/{name}: shapes cpu "
                        f"{meta['workloads']['cpu']['public']}, cuda {meta['workloads']['cuda']['public']}; "
                        f"dtypes {meta['workloads']['cuda']['dtypes']}" + note
                        + (f"; {meta['cpu_over_budget']}" if meta.get("cpu_over_budget") else "")
                        # a repair after an input-independent refusal is said where the user reads the result
                        + ("; parameters conditioned (importers/state_init.py): at torch's default init the "
                           "output does not depend on the input" if meta.get("state_init") else "")
                        + (f"; cpu batch kept >= {meta['rules']['cpu_batch']['min']}: at 1 the output does not "
                           "depend on the input" if meta.get("rules", {}).get("cpu_batch") else "")
                        + ("" if trust else "; not trusted (--trust): evaluating it is refused, docs/importing.md"))


def render_task(meta: dict) -> str:
    """The generated task.py. Every value is written as a Python literal (repr, via pprint) of plain data,
    checked to read back equal, and nothing from the problem's file name or content is written outside it:
    a file name holding triple quotes ran code when the task loaded (issue 32, I2)."""
    sandboxed.check_plain(meta)
    literal = pprint.pformat(meta, width=110, sort_dicts=False)
    try:
        same = ast.literal_eval(literal) == meta
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        same = False
    if not same:
        raise ImportRefused("the problem's facts do not write as a Python literal")
    return ('"""A task imported by `kernelgym-gap import kernelbench` (docs/importing.md); its problem file is '
            'problem.py beside it. Generated: import the problem again rather than edit."""\n'
            "from kernelgym_gap.importers.runtime import build_task\n\n"
            f"META = {literal}\n\nTASK = build_task(__file__, META)\n")


def iter_import(paths, out: str | Path, trust: bool = False, config=None, keep_modelnew: bool = False):
    """Each problem file under `paths` imported into `out`, its ImportResult yielded as soon as it is made (a
    caller prints it then: issue 36 lost a whole level's output to one crash after 18 minutes).
    ImportOutError (before any problem) when `out` cannot be a folder."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ImportOutError(f"--out {out} exists and is not a directory: give a task directory to write")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ImportOutError(f"--out {out} cannot be created ({e.strerror})") from None
    taken: set[str] = set()
    for p in discover(paths):
        yield import_file(p, out, taken, trust, config, keep_modelnew)


def import_paths(paths, out: str | Path, trust: bool = False, config=None,
                 keep_modelnew: bool = False) -> list[ImportResult]:
    """iter_import's results as a list; ImportOutError when `out` cannot be a folder."""
    return list(iter_import(paths, out, trust, config, keep_modelnew))


def _line_of(e: BaseException, path: Path) -> str:
    if isinstance(e, SyntaxError) and e.lineno:
        return f" at line {e.lineno}"
    tb, line = e.__traceback__, None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == str(path):
            line = tb.tb_lineno
        tb = tb.tb_next
    return f" at line {line}" if line else ""


def build_meta(path: Path, name: str) -> dict:
    """Every fact the generated task holds, or ImportRefused. A problem the import audit refuses because its
    output does not depend on the input (InputIndependent) is analysed again, from the start, where something
    other than its algebra can be the cause (`_repairs`): with conditioned parameters (importers/state_init.py:
    torch's default init makes a mean over a GroupNorm 0), and, where the shrink took its batch to 1, at a cpu
    batch of 2 (a training-mode BatchNorm's statistics over one sample are that sample's own). Every fact that
    depends on the values or the shape (the output's magnitude, the tolerance, the dtypes and distributions
    kept, the whole audit) is derived again. The first repair that passes is imported; if none does, the
    first refusal stands, with each repair's."""
    try:
        return _build_meta(path, name, None)
    except InputIndependent as first:
        refused = first
    why = str(refused)
    tried = []
    for what, init, cpu_batch in _repairs(path, why):
        try:
            return _build_meta(path, name, init, cpu_batch)
        except ImportRefused as again:
            tried.append(f"{what} as well: {'the same' if str(again) == why else again}")
    if not tried:
        raise refused
    raise ImportRefused("; ".join([why, *tried]))


def _repairs(path: Path, why: str) -> list[tuple[str, dict | None, dict | None]]:
    """(what it is called in a refusal, META["state_init"], META["rules"]["cpu_batch"]) of each analysis worth
    trying after an InputIndependent refusal (`why`), in order."""
    try:
        touched = state_init.conditioned_names(build_model(load_module(path), "meta"))
    except Exception:  # noqa: BLE001 - a model that builds only for real (Swin's tables): try it anyway
        touched = ["?"]
    conditioned = state_init.record(why) if touched else None   # none re-drawn: it would repeat the first
    sizes, _, batch, cpu_sizes, _, _ = plan(path)
    batch_two = None
    held = heldout_of(path, cpu_sizes, batch, sizes)        # 3/4 of a cpu batch of 2 is 1 (level2 77)
    if min(cpu_sizes[batch], held[batch]) == 1 and sizes[batch] >= 2:
        batch_two = {"min": 2, "why": why,
                     "rule": f"{batch} kept >= 2 on cpu (public and held-out): at 1 a training-mode BatchNorm's "
                             "batch statistics are the one sample's own, and a per-sample pool of its output is "
                             "its bias for every input (level2 77)"}
    out = []
    if conditioned:
        out.append(("with conditioned parameters (importers/state_init.py)", conditioned, None))
    if batch_two:
        out.append((f"at a cpu {batch} of 2", None, batch_two))
        if conditioned:
            out.append((f"at a cpu {batch} of 2 with conditioned parameters", conditioned, batch_two))
    return out


def _build_meta(path: Path, name: str, init: dict | None, cpu_batch: dict | None = None) -> dict:
    """build_meta with the parameters as `init` (META["state_init"]; None: the default init) says, and the cpu
    batch-like size kept >= cpu_batch["min"] (META["rules"]["cpu_batch"]; None: the shrink's own rule)."""
    min_batch = int(cpu_batch["min"]) if cpu_batch else 1
    if not path.is_file():
        raise ImportRefused(f"{path} is not a file")
    try:
        module = load_module(path)
    except Exception as e:  # noqa: BLE001 - anything the user's file raises on import
        # the kind and the line only: the message can quote the file (a NameError names a word of it); a
        # missing package is named (a dotted identifier: what the user installs), so the refusal is actionable
        missing = getattr(e, "name", None) if isinstance(e, ModuleNotFoundError) else None
        named = (f" (the package {missing!r} is not installed: install it and import again)"
                 if isinstance(missing, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]{0,80}", missing) else "")
        raise ImportRefused(f"importing the problem file failed: {type(e).__name__}{_line_of(e, path)}{named}") from None
    analysis.check_definitions(module)
    sizes, own, batch, cpu_sizes, steps, heavy = plan(path, min_batch)
    run = analysis.real_run(path, cpu_sizes, init)  # refusals: randomness, non-tensor output, forward errors
    configs = {"cuda": (sizes, heldout_of(path, sizes, batch)),
               "cpu": (cpu_sizes, heldout_of(path, cpu_sizes, batch, sizes, min_batch))}
    names = list(sizes)
    shapes: dict[str, dict] = {}
    for pub, held in configs.values():
        for cfg in (pub, held):
            key = shape_key(cfg[n] for n in names)
            if key not in shapes:
                facts = own if cfg == sizes else analysis.meta_facts(path, cfg)
                shapes[key] = {k: facts[k] for k in ("flops", "float_elements", "fixed_bytes", "signature",
                                                      "out_shape")}
    sigs = [str(e["signature"]) for e in shapes.values()]
    if len(set(sigs)) != len(sigs):
        raise ImportRefused("two of the derived shapes give inputs of the same shapes (the sizes changed only "
                            "non-tensor arguments); the reference could not tell them apart")
    dot = any(e["flops"] > 0 for e in shapes.values())
    cpu_key = shape_key(cpu_sizes[n] for n in names)
    magnitude = run["rms"]
    if dot and shapes[cpu_key]["flops"] > 0:        # a dot product's output grows like sqrt(depth)
        depth = lambda e: e["flops"] / (2 * max(1, math.prod(e["out_shape"])))   # noqa: E731
        magnitude = max(run["rms"] * math.sqrt(depth(e) / depth(shapes[cpu_key])) for e in shapes.values())
    given = run["float_dtype"] or "float32"
    meta = {
        "format": FORMAT, "name": name, "category": analysis.category(run["ops"], _level(path)), "problem_file": "problem.py",
        "source": str(path), "level": _level(path), "tags": ["imported", "kernelbench"] + (["cpu-heavy"] if heavy else []),
        "size_names": names, "n_data_inputs": run["n_data"], "state_names": run["state_names"],
        "entry_point": ENTRY_POINT, "output_dtype": run["output_dtype"],
        "reference_in_float64": run["output_dtype"] is None or run["output_float"],
        "shapes": shapes, "distributions": list(DISTRIBUTIONS),
        "workloads": {b: {"public": [[pub[n] for n in names]], "heldout": [[held[n] for n in names]],
                          "dtypes": [given]} for b, (pub, held) in configs.items()},
        "tolerances": _tolerances(("float32", "float16", "bfloat16"), dot, magnitude),
        "dsls": list(DSLS),     # no shipped solutions: a submission may be written in any DSL
        "cpu_over_budget": heavy,
        "rules": {"cpu": f"sizes halved (equal ones together, kernel-like ones kept; importers/shrink.py) to at "
                         f"most {CPU_ELEMENTS} elements and {CPU_FLOPS} counted flops: {', '.join(steps) or 'none'}",
                  "heldout": f"{batch} scaled by 3/4 (doubled when that leaves it unchanged; by 3/2 where 3/4 "
                             f"leaves a training-mode BatchNorm under {BATCHNORM_FEW} values per channel)",
                  "tolerance_magnitude": round(magnitude, 4), "counted_dot_flops": dot},
    }
    if init is not None:
        meta["state_init"] = init           # before Problem: every model below is built that way
    if cpu_batch is not None:
        meta["rules"]["cpu_batch"] = cpu_batch
    problem = Problem(path, meta)
    cpu_shape = [cpu_sizes[n] for n in names]
    if run["float_dtype"] is not None and run["output_float"]:
        # the problem's own dtype errs as measured (a deep network: more than one op's rounding), or it is
        # refused as ill-conditioned; the audit below and in soundness.finish then runs against that tolerance
        cond = conditioning.derive(problem, [cpu_shape, meta["workloads"]["cpu"]["heldout"][0]], given,
                                   (RULE_DOT if dot else RULE_POINTWISE)[given][0])
        meta["rules"]["conditioning"] = cond
        meta["tolerances"] = _tolerances(("float32", "float16", "bfloat16"), dot, magnitude,
                                         {given: cond["atol_per_rms"]})
    if run["float_dtype"] is not None:
        base_tol = meta["tolerances"][given]
        bad = _fits(problem, cpu_shape, given, "as_given", base_tol)
        if bad:
            raise ImportRefused(f"the problem's own dtype {given} does not pass its tolerance against float64 "
                                f"at the cpu shape: {bad}")
    growth = _growth(shapes, cpu_key)
    if run["float_dtype"] == "float32" and run["dtype_free"]:
        extra = [d for d in ("float16", "bfloat16")
                 if _fits(problem, cpu_shape, d, "as_given", meta["tolerances"][d], growth=growth) is None]
        meta["workloads"]["cuda"]["dtypes"] += extra
        # no bfloat16 on cpu: the Triton interpreter's bfloat16 tl.dot is silently wrong
        meta["workloads"]["cpu"]["dtypes"] += [d for d in extra if d == "float16"]
    if run["float_dtype"] is not None:
        kept = set(meta["workloads"]["cuda"]["dtypes"])
        meta["distributions"] = [dist for dist in DISTRIBUTIONS if dist == "as_given" or all(
            _fits(problem, cpu_shape, d, dist, meta["tolerances"][d], growth=growth) is None for d in kept)]
    else:
        meta["distributions"] = ["as_given"]
    used = set(meta["workloads"]["cuda"]["dtypes"]) | set(meta["workloads"]["cpu"]["dtypes"])
    meta["tolerances"] = {d: v for d, v in meta["tolerances"].items() if d in used}
    meta["signature"], meta["statement"] = analysis.describe(name, path, meta, run)
    if init is not None:
        meta["statement"] += (
            " The reference Model's parameters are not torch's default initialisation: at that init its output "
            "does not depend on the input enough to be checked, so they are re-drawn by a fixed rule ("
            f"{init['rule']}). They are the state inputs above; a ModelNew gets them by parameter name, so "
            "name your parameters as the Model does.")
    return soundness.finish(path, meta)    # per-shape tolerance, degenerate refusals, the input audit (issue 36)
