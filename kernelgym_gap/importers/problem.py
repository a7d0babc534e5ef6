"""A KernelBench-style problem file at run time: the module (with its size globals set per shape), the
reference `Model`, deterministic inputs, and the binding of parameters that both the reference and a
submitted `ModelNew` use.

A problem file defines `class Model(nn.Module)`, `get_inputs()` and `get_init_inputs()`, and sizes as
module-level int literals or tuples of them (`batch_size = 16`, `input_shape = (32768,)`) that those
functions read (importers/sizes.py). A task's shape tuple is the values of those sizes, in the order the
importer recorded (`size_names`): each shape is a fresh module of the problem file with those literals
rewritten before it runs, so derived globals (`bias_shape = (out_features,)`) and `forward` follow them.

Inputs of one trial are `get_inputs()`'s tensors followed by the reference model's parameters and buffers
(`named_parameters()` then `named_buffers()`, in that order): the model is built from `get_init_inputs()`
under a fixed seed (its parameters then conditioned where META["state_init"] says: importers/state_init.py),
and its state travels as inputs, so the child, the checker and the submission see the
same values, the integrity checks (input digests, mutation) cover them, and a function submission can take
them. The file's code runs wherever this module runs: at import only inside the sandbox
(importers/sandboxed.py); at evaluation in the trusted parent and checker only for a task imported with
`--trust` (runtime.build_task refuses the others outside the sandbox).
"""
from __future__ import annotations

import contextlib
import types
from pathlib import Path

import torch

from kernelgym_gap.importers import state_init
from kernelgym_gap.importers.sizes import compile_with_sizes

MODEL_SEED = 0          # the reference model's (and a ModelNew's) parameters: built under this seed

# Distributions drawn from what get_inputs() generates (floating point inputs only; integer inputs such as
# class indices are as generated). The importer keeps those the problem is well-conditioned on.
TRANSFORMS = {
    "as_given": None,                     # get_inputs()'s own values: the timed distribution
    "large": ("scale", 10.0),             # overflow, cancellation
    "small": ("scale", 1e-2),             # underflow, epsilon handling
    "offset": ("shift", 4.0),             # a large mean: one-pass variance, a missing max subtraction
    "sparse": ("sparse", 0.1),            # mostly zeros
    # each element's sign flipped at random: get_inputs() often draws torch.rand (all in [0, 1)), on which
    # ReLU, LeakyReLU, ELU and HardTanh are the identity and a kernel copying its input passes; the importer
    # drops it where the problem is not well-conditioned on negative inputs (a log, a sqrt, probabilities)
    "signed": ("signs", 0.5),
}
DISTRIBUTIONS = tuple(TRANSFORMS)


def load_module(path: str | Path, sizes: dict[str, int] | None = None, name: str = "kernelbench_problem"):
    """A fresh module of the problem file, its size globals then overridden by `sizes`."""
    path = Path(path)
    module = types.ModuleType(name)
    module.__file__ = str(path)
    # the sizes are written into their literals before the module runs, so derived globals follow them
    code, rest = compile_with_sizes(path.read_text(), str(path), sizes)
    exec(code, module.__dict__)   # noqa: S102 - in the sandbox, or a file the user trusted (--trust)
    if not hasattr(module, "get_init_inputs"):   # KernelBench's rule: none means the Model takes no arguments
        module.get_init_inputs = lambda: []
    for k, v in rest.items():                       # a size with no literal site (set by the module otherwise)
        setattr(module, k, int(v))
    return module


@contextlib.contextmanager
def cuda_calls_to(device: str):
    """`.cuda()` inside a problem's get_inputs() or __init__ puts the tensor on `device` (KernelBench
    problems often end get_inputs with `.cuda()`; on the cpu and meta devices that would fail)."""
    if device == "cuda":
        yield
        return
    own = torch.Tensor.__dict__.get("cuda")        # normally inherited from torch._C.TensorBase

    def to_device(self, *args, **kwargs):
        return self.to(device)
    torch.Tensor.cuda = to_device
    try:
        yield
    finally:                                        # exactly as before: the child's snapshots compare
        if own is None:
            del torch.Tensor.cuda
        else:
            torch.Tensor.cuda = own


@contextlib.contextmanager
def seeded(seed: int, device: str):
    """torch's global generators seeded with `seed`, restored afterwards (the caller's state untouched)."""
    devices = [torch.cuda.current_device()] if device == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(int(seed))
        yield


def build_model(module, device: str = "cpu", init: dict | None = None):
    """The problem's Model from get_init_inputs() under MODEL_SEED (on `device`: cpu or meta), its parameters
    then as META["state_init"] (`init`; None: the default init) says (importers/state_init.py)."""
    with seeded(MODEL_SEED, "cpu"), torch.device(device), cuda_calls_to(device):
        model = module.Model(*module.get_init_inputs())
    return state_init.apply(model, init)


def state_tensors(model) -> list[tuple[str, torch.Tensor]]:
    """The model's parameters, then its buffers (tied ones once), by name."""
    return [(n, p.detach()) for n, p in model.named_parameters()] + list(model.named_buffers())


def raw_inputs(module, seed: int, device: str) -> list:
    """get_inputs() with torch's generators seeded by `seed`, its tensors made on `device`."""
    with seeded(seed, device), torch.device(device), cuda_calls_to(device):
        values = list(module.get_inputs())
    return [v.to(device) if isinstance(v, torch.Tensor) else v for v in values]


def transform(x: torch.Tensor, distribution: str, seed: int) -> torch.Tensor:
    kind = TRANSFORMS[distribution]
    if kind is None or not x.is_floating_point():
        return x
    op, value = kind
    if op == "scale":
        return x * value
    if op == "shift":
        return x + value
    g = torch.Generator(device=x.device)
    g.manual_seed(int(seed) ^ 0x5EED)
    keep = torch.rand(x.shape, generator=g, device=x.device) < value
    if op == "signs":
        return torch.where(keep, -x, x)
    return x * keep


def bind(model, names: list[str], tensors, _bound={}) -> None:   # noqa: B006 - the cache is the point
    """Makes `tensors` the model's parameters and buffers of those names (sharing their storage: no copy), as
    plain tensors (the DSL adapters refuse tensor subclasses such as nn.Parameter as kernel arguments).
    Skipped when the same tensors are bound already (timing calls the model on the same inputs)."""
    key = tuple((t.data_ptr(), t.dtype, tuple(t.shape), t.device) for t in tensors)
    if _bound.get(id(model), (None, None))[0] is model and _bound[id(model)][1] == key:
        return
    for name, t in zip(names, tensors):
        path, _, leaf = name.rpartition(".")
        sub = model.get_submodule(path) if path else model
        if leaf in sub._parameters:
            sub._parameters[leaf] = t
        elif leaf in sub._buffers:
            sub._buffers[leaf] = t
        else:
            raise KeyError(f"the model has no parameter or buffer {name!r}")
    _bound[id(model)] = (model, key)


class Problem:
    """One imported problem at run time: per-shape modules and models, cached."""

    def __init__(self, path: str | Path, meta: dict):
        self.path, self.meta = Path(path), meta
        self.size_names = list(meta["size_names"])
        self.names = list(meta["state_names"])
        self.n_data = int(meta["n_data_inputs"])
        self.init = meta.get("state_init")      # None: the default init; else every model is built so
        self._modules: dict = {}
        self._models: dict = {}
        self._state: dict = {}

    def module(self, shape):
        shape = tuple(int(s) for s in shape)
        if shape not in self._modules:
            self._modules[shape] = load_module(self.path, dict(zip(self.size_names, shape)),
                                               name=f"kernelbench_problem_{self.meta['name']}")
        return self._modules[shape]

    def base_model(self, shape):
        shape = tuple(int(s) for s in shape)
        if shape not in self._models:
            model = build_model(self.module(shape), init=self.init)
            self._state[shape] = [t.clone() for _, t in state_tensors(model)]
            self._models[shape] = model
        return self._models[shape]

    def model_for(self, shape, dtype: torch.dtype, device: str):
        key = (tuple(int(s) for s in shape), dtype, str(device))
        if key not in self._models:
            # built afresh, not deep-copied: a model holding a lambda over its own submodules (level3
            # 44_MiniGPTBlock's `mlpf`) keeps calling the original's float32 layers from a copy (issue 36);
            # the values are the same (MODEL_SEED) and the trial's state is bound over them anyway
            self.base_model(shape)
            self._models[key] = build_model(self.module(shape), init=self.init).to(device=device, dtype=dtype)
        return self._models[key]

    def make_inputs(self, shape, dtype: str, gen, distribution: str, device: str) -> tuple:
        seed = gen.initial_seed()
        data = raw_inputs(self.module(shape), seed, device)
        want = getattr(torch, dtype)
        data = [transform(v, distribution, seed + i).to(want) if isinstance(v, torch.Tensor)
                and v.is_floating_point() else v for i, v in enumerate(data)]
        self.base_model(shape)
        state = [t.to(device=device, dtype=want if t.is_floating_point() else t.dtype, copy=True)
                 for t in self._state[tuple(int(s) for s in shape)]]
        return tuple(data + state)

    def shape_of(self, ins) -> tuple[int, ...]:
        """The task shape whose inputs these are (matched on every tensor's shape)."""
        sig = [list(t.shape) if isinstance(t, torch.Tensor) else None for t in ins]
        for key, entry in self.meta["shapes"].items():
            if entry["signature"] == sig:
                return tuple(int(s) for s in key.split(","))
        raise ValueError(f"inputs of shapes {sig} match none of the task's shapes")

    def reference(self, *ins):
        shape = self.shape_of(ins)
        floats = [t for t in ins if isinstance(t, torch.Tensor) and t.is_floating_point()]
        dtype = floats[0].dtype if floats else torch.float32
        device = next((t.device for t in ins if isinstance(t, torch.Tensor)), torch.device("cpu"))
        model = self.model_for(shape, dtype, str(device))
        bind(model, self.names, ins[self.n_data:])
        return model(*ins[:self.n_data])

    def adapt_module(self, cls, cases, device: str):
        """A callable over a trial's inputs that runs a KernelBench `ModelNew`: one instance per (shape,
        dtype) in `cases`, built now (before any trial: construction is not the kernel's work) from the
        shape's get_init_inputs() under the reference's seed, on `device` in that dtype. Parameters and
        buffers whose names and shapes match the reference's are bound to the trial's state inputs (strict
        when every name matches); others keep the values ModelNew built (KernelBench's own rule: the same
        seed and creation order give the same values; on a task with conditioned state those are the default
        init's, not the reference's: docs/importing.md says so)."""
        instances = {}
        for shape, dtype in sorted(set((tuple(int(s) for s in sh), d) for sh, d in cases)):
            want = getattr(torch, dtype)
            with seeded(MODEL_SEED, "cpu"), cuda_calls_to(device):
                inst = cls(*self.module(shape).get_init_inputs())
            inst = inst.to(device=device, dtype=want)
            for mod in inst.modules():          # plain tensors: a Parameter is a subclass, refused by the DSLs
                for leaf, p in list(mod._parameters.items()):
                    if p is not None:
                        mod._parameters[leaf] = p.detach()
            own = {n: t for n, t in state_tensors(inst)}
            ref = dict(zip(self.names, self.meta["shapes"][",".join(map(str, shape))]["signature"][self.n_data:]))
            picked = [i for i, n in enumerate(self.names) if n in own and list(own[n].shape) == ref[n]]
            instances[(shape, want)] = (inst, picked)

        def call(*ins):
            shape = self.shape_of(ins)
            floats = [t for t in ins if isinstance(t, torch.Tensor) and t.is_floating_point()]
            inst, picked = instances[(shape, floats[0].dtype if floats else torch.float32)]
            state = ins[self.n_data:]
            bind(inst, [self.names[i] for i in picked], [state[i] for i in picked])
            return inst(*ins[:self.n_data])
        return call
