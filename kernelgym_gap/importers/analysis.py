"""What the importer learns from a problem file: its size globals, per-shape facts counted on the meta
device (flops, elements, bytes, the input signature), one real run at the cpu shape (the refusals), the
category, and the text an agent sees."""
from __future__ import annotations

import functools
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from kernelgym_gap.importers.problem import (build_model, cuda_calls_to, load_module, raw_inputs, seeded,
                                             state_tensors)
from kernelgym_gap.importers.sizes import find_sizes

META_FALLBACK_ELEMENTS = 1 << 26    # a shape the meta device cannot run is run for real only under this


def _typename(x) -> str:
    cls = type(x)
    kind = " (a tuple)" if isinstance(x, tuple) else ""
    return f"{cls.__module__}.{cls.__qualname__}{kind}" if cls.__module__ != "builtins" else cls.__qualname__ + kind


class ImportRefused(Exception):
    """A problem the importer cannot take; the message says why (kernelbench.py re-exports it)."""


class InputIndependent(ImportRefused):
    """The import audit's refusal of a reference whose output does not depend on its input enough to be
    checked (degenerate, or passed by an output that ignores the input): the one refusal that re-initialised
    parameters can lift (importers/state_init.py), so kernelbench.build_meta retries on it."""


def _refused(message: str) -> ImportRefused:
    return ImportRefused(message)


def check_definitions(module) -> None:
    model = getattr(module, "Model", None)
    if not (isinstance(model, type) and issubclass(model, torch.nn.Module)):
        raise _refused("no `class Model(nn.Module)` in the problem file")
    if not callable(getattr(module, "get_inputs", None)):
        raise _refused("no get_inputs() in the problem file: the harness cannot make the inputs")


def size_globals(path: Path) -> dict[str, int]:
    """The problem's sizes (importers/sizes.py): int literals and elements of int tuples that get_inputs() or
    get_init_inputs() reach, in source order: the task's shape."""
    try:
        sizes = find_sizes(Path(path).read_text())
    except SyntaxError as e:
        raise _refused(f"the problem file does not parse (line {e.lineno})") from None
    if not sizes:
        raise _refused("get_inputs() and get_init_inputs() read no module-level int sizes (write `batch_size "
                       "= 16` and use it): without them the harness cannot derive cpu or held-out shapes")
    return sizes


def _facts(model, ins, flops: int, out) -> dict:
    state = state_tensors(model)
    tensors, seen = [], set()
    for t in [x for x in ins if isinstance(x, torch.Tensor)] + [t for _, t in state] + [out]:
        if id(t) not in seen:
            seen.add(id(t))
            tensors.append(t)
    floats = sum(t.numel() for t in tensors if t.is_floating_point())
    fixed = sum(t.numel() * t.element_size() for t in tensors if not t.is_floating_point())
    sig = [list(x.shape) if isinstance(x, torch.Tensor) else None for x in ins] + [list(t.shape) for _, t in state]
    return {"flops": int(flops), "n_data": len(ins), "elements": sum(t.numel() for t in tensors), "float_elements": int(floats),
            "fixed_bytes": int(fixed), "signature": sig, "out_shape": list(out.shape)}


def group_members(model) -> int | None:
    """The fewest channels a group of the model's GroupNorms has (None without one): the shrink keeps it, since
    one channel a group normalises each channel alone (importers/shrink.py), whether the group count is a size
    global or, as in level2 27, an __init__ default the sizes do not show."""
    counts = [m.num_channels // m.num_groups for m in model.modules() if isinstance(m, torch.nn.GroupNorm)]
    return min(counts) if counts else None


def _counted(model, ins) -> dict:
    """One forward of `model` on `ins` (meta or real) with its flops and BatchNorms counted: the facts the size
    rules read, or ImportRefused for an output that is no tensor."""
    with torch.no_grad(), FlopCounterMode(display=False) as fc, BatchNormCount() as bn:
        out = model(*ins)
    if not isinstance(out, torch.Tensor):
        raise _refused(f"forward returns {_typename(out)}, not a torch.Tensor") from None
    return dict(_facts(model, ins, fc.get_total_flops(), out), bn_fewest=bn.fewest, group_members=group_members(model))


@functools.lru_cache(maxsize=256)
def _meta_facts(path: str, sizes: tuple) -> dict:
    module = load_module(path, dict(sizes))
    try:
        model = build_model(module, "meta")
        with torch.device("meta"), cuda_calls_to("meta"):
            ins = list(module.get_inputs())
        return _counted(model, ins)
    except Exception as meta_error:  # noqa: BLE001 - data-dependent ops cannot run on meta: run for real
        if isinstance(meta_error, ImportRefused):
            raise
        # the sizes are checked on metadata before anything is allocated: 100_HingeLoss allocated 8.6 GB
        # of inputs here before this guard refused them (issue 36)
        try:
            with torch.device("meta"), cuda_calls_to("meta"):
                meta_ins = list(module.get_inputs())
        except Exception:  # noqa: BLE001 - then nothing says how large they are: not run for real
            raise _refused(f"cannot count sizes {dict(sizes)} on the meta device ({type(meta_error).__name__})"
                           f" nor size its inputs from metadata") from None
        try:                # a model whose __init__ indexes data (Swin's position tables) builds only for real
            state = sum(t.numel() for _, t in state_tensors(build_model(module, "meta")))
        except Exception:  # noqa: BLE001
            state = 0
        need = sum(t.numel() for t in meta_ins if isinstance(t, torch.Tensor)) + state
        if need > META_FALLBACK_ELEMENTS:
            raise _refused(f"cannot count sizes {dict(sizes)} on the meta device ({type(meta_error).__name__}: "
                           f"{str(meta_error)[:120]}) and they are too large to run for real ({need} elements "
                           f"of inputs and state, over {META_FALLBACK_ELEMENTS})") from None
        ins = raw_inputs(module, 1, "cpu")
        model = build_model(module)
        return _counted(model, ins)


def meta_facts(path, sizes: dict[str, int]) -> dict:
    return _meta_facts(str(path), tuple(sizes.items()))


def batch_size_name(path: Path, sizes: dict[str, int], own: dict) -> str:
    """The size held-out shapes scale: the first that moves only the first input's leading dimension (a
    batch), else the first that moves only inputs (not the model's state), else the largest."""
    data_only = []
    n = own["n_data"]
    for name in sizes:
        try:
            other = meta_facts(path, dict(sizes, **{name: sizes[name] * 2}))
        except Exception:  # noqa: BLE001 - a size that cannot double is not scaled
            continue
        a, b = own["signature"], other["signature"]
        if len(a) != len(b) or a[n:] != b[n:] or a == b:
            continue
        if a[0] and b[0] and a[0][0] != b[0][0] and a[0][1:] == b[0][1:]:
            return name
        data_only.append(name)
    return data_only[0] if data_only else max(sizes, key=lambda k: sizes[k])


class _FunctionLog(TorchFunctionMode):
    """The torch functions forward calls (F.max_pool2d, F.triplet_margin_loss): composite ops that dispatch
    to pointwise aten ops only still name their kind here."""

    def __init__(self):
        super().__init__()
        self.names: set[str] = set()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name:
            self.names.add(name)
        return func(*args, **(kwargs or {}))


class BatchNormCount(TorchDispatchMode):
    """The fewest values per channel a training-mode batch norm normalised over in one forward: the usual
    reason a network's float32 result is chaotic at a small batch or spatial size."""

    def __init__(self):
        super().__init__()
        self.fewest: int | None = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func._overloadpacket.__name__ == "native_batch_norm" and len(args) > 5 and args[5] is True:
            x = args[0]
            n = x.numel() // max(1, x.shape[1]) if x.dim() > 1 else x.numel()
            self.fewest = n if self.fewest is None else min(self.fewest, n)
        return func(*args, **(kwargs or {}))


class _OpLog(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops: set[str] = set()
        self.random: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._overloadpacket.__name__
        self.ops.add(name)
        if torch.Tag.nondeterministic_seeded in func.tags:
            self.random.add(str(func))
        return func(*args, **(kwargs or {}))


def real_run(path: Path, sizes: dict[str, int], init: dict | None = None) -> dict:
    """The problem run for real at the cpu sizes: the refusals (forward raising, randomness, a non-tensor
    or non-finite output, mixed float dtypes) and what the task needs (ops, dtypes, output magnitude).
    `init`: META["state_init"] (None: the default init)."""
    module = load_module(path, sizes)
    try:
        model = build_model(module, init=init)
    except Exception as e:  # noqa: BLE001
        raise _refused(f"building Model(*get_init_inputs()) failed: {type(e).__name__}: {e}") from None
    try:
        ins = raw_inputs(module, 1, "cpu")
    except Exception as e:  # noqa: BLE001
        raise _refused(f"get_inputs() failed: {type(e).__name__}: {e}") from None
    for v in ins:
        if not isinstance(v, (torch.Tensor, int, float, bool)):
            raise _refused(f"get_inputs() returned a {type(v).__name__}: only tensors and numbers are supported")
    state = state_tensors(model)
    float_dtypes = {str(t.dtype).removeprefix("torch.") for t in [*ins, *(t for _, t in state)]
                    if isinstance(t, torch.Tensor) and t.is_floating_point()}
    if len(float_dtypes) > 1:
        raise _refused(f"inputs and parameters mix float dtypes ({sorted(float_dtypes)}): the harness draws "
                       "one dtype per trial")
    outs, log, flog = [], _OpLog(), _FunctionLog()
    for seed in (1, 2):
        try:
            with torch.no_grad(), seeded(seed, "cpu"), flog, log:
                outs.append(model(*ins))
        except Exception as e:  # noqa: BLE001
            raise _refused(f"forward does not run on get_inputs(): {type(e).__name__}: {e}") from None
    out = outs[0]
    if type(out) is not torch.Tensor:
        raise _refused(f"forward returns {_typename(out)}, not a torch.Tensor (one output tensor is "
                       "supported)")
    # randomness counts where it is used: forward run under two seeds must agree bitwise (SDPA with
    # dropout_p=0 dispatches a seeded op yet is deterministic; issue 36 refused it by the op's tag)
    if not (outs[0].shape == outs[1].shape and torch.equal(torch.nan_to_num(outs[0]), torch.nan_to_num(outs[1]))):
        ops = f" ({', '.join(sorted(log.random))})" if log.random else ""
        raise _refused(f"randomness used inside forward{ops}: its outputs differ between two seeds on the same "
                       "inputs, so they cannot be checked against a reference (make it deterministic, e.g. "
                       "dropout p=0 or eval mode)")
    if out.is_floating_point() and not bool(torch.isfinite(out).all()):
        raise _refused("forward gives non-finite outputs on get_inputs()'s own values")
    float_dtype = next(iter(float_dtypes), None)
    out_dtype = str(out.dtype).removeprefix("torch.")
    rms = 1.0
    if out.is_floating_point() and float_dtype is not None:
        m64 = build_model(module, init=init).double()      # afresh: a deep copy can keep calling float32 layers
        with torch.no_grad(), seeded(1, "cpu"):
            o64 = m64(*[t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in ins])
        rms = float(o64.double().pow(2).mean().sqrt()) if o64.numel() else 1.0
    follows = out.is_floating_point() and out_dtype == float_dtype
    losses = sorted(type(m).__name__ for m in model.modules() if isinstance(m, torch.nn.modules.loss._Loss))
    return {"ops": sorted(log.ops | flog.names | set(losses)), "float_dtype": float_dtype, "n_data": len(ins),
            "state_names": [n for n, _ in state], "output_dtype": None if follows else out_dtype,
            "output_float": out.is_floating_point(), "dtype_free": follows, "rms": rms,
            "data_kinds": [str(v.dtype).removeprefix("torch.") if isinstance(v, torch.Tensor)
                           else type(v).__name__ for v in ins],
            "state_kinds": [str(t.dtype).removeprefix("torch.") for _, t in state]}


# op names (aten overload packets, torch functions, loss modules) by category, checked in this order: the
# first category with an op wins, so a conv followed by a pool is a convolution and a pool alone is pooling
_KINDS = (
    ("attention", ("scaled_dot_product", "_scaled_dot_product", "_flash_attention", "_efficient_attention", "multi_head_attention")),
    ("convolution", ("convolution", "conv", "_convolution", "cudnn_convolution", "mkldnn_convolution",
                     "slow_conv", "thnn_conv", "conv_transpose", "conv1d", "conv2d", "conv3d")),
    ("gemm", ("mm", "bmm", "addmm", "baddbmm", "addbmm", "matmul", "linear", "mv", "addmv", "dot", "einsum",
              "_int_mm")),
    ("pooling", ("max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d", "avg_pool2d", "avg_pool3d",
                 "max_pool2d_with_indices", "max_pool3d_with_indices", "adaptive_avg_pool1d",
                 "adaptive_avg_pool2d", "adaptive_avg_pool3d", "adaptive_max_pool1d", "adaptive_max_pool2d",
                 "adaptive_max_pool3d", "_adaptive_avg_pool2d", "_adaptive_avg_pool3d", "lp_pool1d",
                 "lp_pool2d", "max_unpool2d")),
    ("loss", ("nll_loss_forward", "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "kl_div",
              "cross_entropy", "cross_entropy_loss", "binary_cross_entropy", "binary_cross_entropy_with_logits",
              "triplet_margin_loss", "margin_ranking_loss", "hinge_embedding_loss", "cosine_embedding_loss",
              "soft_margin_loss", "multilabel_margin_loss", "poisson_nll_loss", "gaussian_nll_loss")),
    ("normalization", ("native_layer_norm", "native_batch_norm", "_native_batch_norm_legit",
                       "_native_batch_norm_legit_no_training", "native_group_norm", "_fused_rms_norm",
                       "rms_norm", "instance_norm", "layer_norm", "batch_norm", "group_norm")),
    ("reduction", ("sum", "mean", "amax", "amin", "max", "min", "argmax", "argmin", "_softmax",
                   "_log_softmax", "logsumexp", "cumsum", "cumprod", "prod", "var", "std", "var_mean",
                   "std_mean", "norm", "linalg_vector_norm", "any", "all", "sort", "topk")),
)


_PREFIXES = ("slow_conv", "conv_transpose", "scaled_dot_product", "_scaled_dot_product")


def category(ops, level: int = 1) -> str:
    """The category of the heaviest kind of op the reference ran; "architecture" for a level-3 problem (a
    whole network: KernelBench's level 3); "elementwise" when it ran only pointwise, view and indexing ops
    (memory-bound, like the elementwise tasks)."""
    if level == 3:
        return "architecture"
    ops = set(ops)
    if any(o.endswith("Loss") for o in ops):       # a loss module (nn.MSELoss, ...)
        ops.add("mse_loss")
    for cat, names in _KINDS:
        if any(n in ops or any(o.startswith(n) for o in ops if n in _PREFIXES)
               for n in names):
            return cat
    return "elementwise"


def describe(name: str, path: Path, meta: dict, run: dict) -> tuple[str, str]:
    """(signature, statement) for the agent."""
    ins = [f"in{i}" for i in range(run["n_data"])]
    state = [n.replace(".", "_") for n in run["state_names"]]
    entry = meta["entry_point"]
    signature = f"{entry}({', '.join(ins + state)}) -> Tensor"
    cuda = meta["workloads"]["cuda"]["public"][0]
    sig = meta["shapes"][",".join(map(str, cuda))]["signature"]
    parts = [f"{a}: {run['data_kinds'][i]} {sig[i] if sig[i] is not None else ''}".rstrip()
             for i, a in enumerate(ins)]
    parts += [f"{a} (state {run['state_names'][i]!r}): {run['state_kinds'][i]} {sig[run['n_data'] + i]}"
              for i, a in enumerate(state)]
    statement = (
        f"KernelBench problem {path.name} (imported): compute Model.forward of the problem file (the reference "
        f"below) with your own kernel. Submit either KernelBench's `class ModelNew(nn.Module)` (built with "
        f"get_init_inputs() under the reference's seed, its parameters and buffers then set to the reference "
        f"Model's by name, called with get_inputs()'s values) or a function `{signature}` taking get_inputs()'s "
        f"values, then the Model's parameters and buffers in named_parameters(), named_buffers() order. The "
        f"shape tuple is ({', '.join(meta['size_names'])}), the problem's size globals; floating point inputs "
        f"and state come in the trial's dtype, and the output is "
        f"{'in that dtype' if meta['output_dtype'] is None else meta['output_dtype']}. At the problem's own "
        f"sizes {cuda}: " + "; ".join(parts) + ".")
    return signature, statement
