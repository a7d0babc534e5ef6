"""State conditioning of an imported problem (issue 36): re-initialised parameters where KernelBench's default
initialisation makes the reference's output (near) independent of its input.

Some problems are refused by the import audit (importers/soundness.py) not for their algebra but for torch's
default parameter values: a mean over a GroupNorm's output is 0 for every input while the norm's weight is 1
and its bias 0 (level2 23, 27); nn.Linear's default init gives outputs of std ~0.3, so `relu(x - 2)` is all
zero (level2 9); 16 default Linear+ReLU layers shrink the signal until the output is the last biases (level3
3_DeepNarrowMLP). On those the importer (kernelbench.build_meta) retries once with the parameters this module
draws, and runs the whole audit again on them; META["state_init"] records it, and Problem builds every model of
the task (each shape, the child, the checker) through `apply`, so all of them agree.

The rule is a pure function of the model (its parameters' owners, names, shapes, in named_parameters() order)
drawn from its own generator seeded with SEED, not from torch's global one: the trial seeds never touch it.
Parameters only: buffers (BatchNorm's running statistics) keep what the Model built.
- weights (>= 2-D) of Linear, Conv and ConvTranspose: normal with std sqrt(2 / fan_in) (He, with
  torch.nn.init's fan computation): the signal keeps its scale through ReLU layers instead of shrinking;
- their biases: normal with std BIAS_STD, so a subtracted constant or a ReLU threshold is not all one side;
- 1-D weights of norm layers (BatchNorm, InstanceNorm, GroupNorm, LayerNorm, RMSNorm): uniform in
  [0.5, 1.5], their biases normal with std BIAS_STD: channels weighted unequally, so a mean over a
  normalised output no longer cancels to its bias;
- every other parameter keeps the Model's own value: embeddings (N(0, 1) lookup tables) and class or
  positional tokens (the problem's own torch.randn draws) are already of unit scale and are added or looked
  up, not multiplied through depth; MultiheadAttention's in_proj (xavier) is variance preserving already; a
  recurrent layer's weights are re-applied at every step, where He's scale would blow up; a problem's own
  nn.Parameter (a bias_shape tensor of randn * 0.02) is what its author chose.
"""
from __future__ import annotations

import math

import torch

from kernelgym_gap.core.errors import KernelGymError

CONDITIONED = "conditioned"
# its own stream: problem.MODEL_SEED (0) + 1, independent of the model's seed and of every trial's seed (this
# module cannot import problem.py, which imports it; tests/test_import_state_init.py checks the relation)
SEED = 1
BIAS_STD = 0.5
NORM_WEIGHT = (0.5, 1.5)
_NORMS = (torch.nn.modules.batchnorm._NormBase, torch.nn.GroupNorm, torch.nn.LayerNorm, torch.nn.RMSNorm)
_DOTS = (torch.nn.Linear, torch.nn.Bilinear, torch.nn.modules.conv._ConvNd)
RULE = ("parameters re-drawn from their own generator (seed MODEL_SEED + 1) in named_parameters() order: "
        "Linear/Conv/ConvTranspose weights normal with std sqrt(2 / fan_in) (He), their biases normal with std "
        f"{BIAS_STD}; norm layers' weights uniform in [{NORM_WEIGHT[0]}, {NORM_WEIGHT[1]}], their biases normal "
        f"with std {BIAS_STD}; other parameters and every buffer as the Model built them "
        "(importers/state_init.py)")


class UnknownStateInit(KernelGymError, ValueError):
    """META["state_init"] names a kind this importer version does not know: the task is imported again."""


def _kind(owner: torch.nn.Module, leaf: str, p: torch.Tensor) -> str | None:
    """How the rule draws `owner`'s parameter `leaf` ("he", "bias", "norm_weight"), or None to keep it."""
    if not p.is_floating_point():
        return None
    if isinstance(owner, _DOTS):
        if leaf == "weight" and p.dim() >= 2:
            return "he"
        if leaf == "bias":
            return "bias"
    if isinstance(owner, _NORMS):
        if leaf == "weight":
            return "norm_weight"
        if leaf == "bias":
            return "bias"
    return None


def _draw(kind: str, p: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """A conditioned value for `p` (float64 on cpu: the same draws whatever the model's dtype)."""
    if kind == "he":
        # torch.nn.init's fans, as torch's own init computes them: for a ConvTranspose (weight [in, out/groups,
        # k...]) that "fan_in" is out_channels / groups x kernel, not the in_channels x kernel / stride^d terms
        # each output sums over; the two agree for equal channel counts at stride 1, and the audit judges the rest
        fan_in, _ = torch.nn.init._calculate_fan_in_and_fan_out(p)
        return torch.randn(p.shape, generator=g, dtype=torch.float64) * math.sqrt(2.0 / max(1, fan_in))
    if kind == "norm_weight":
        lo, hi = NORM_WEIGHT
        return lo + (hi - lo) * torch.rand(p.shape, generator=g, dtype=torch.float64)
    return torch.randn(p.shape, generator=g, dtype=torch.float64) * BIAS_STD


def _owned(model: torch.nn.Module):
    """(name, parameter, the rule's kind for it) in named_parameters() order (tied parameters once)."""
    for name, p in model.named_parameters():
        path, _, leaf = name.rpartition(".")
        yield name, p, _kind(model.get_submodule(path) if path else model, leaf, p)


def conditioned_names(model: torch.nn.Module) -> list[str]:
    """The parameters `condition` re-draws (empty: conditioning cannot change this model)."""
    return [name for name, _, kind in _owned(model) if kind is not None]


def condition(model: torch.nn.Module) -> torch.nn.Module:
    """`model` with its parameters re-drawn by the rule (in place; buffers untouched); returns it. Every
    parameter of a kind the rule covers draws from the generator in named_parameters() order, so the same
    model class at the same sizes always gets the same values. A model on the meta device has no values: it
    is returned as it is."""
    if any(p.device.type == "meta" for p in model.parameters()):
        return model
    g = torch.Generator()
    g.manual_seed(SEED)
    with torch.no_grad():
        for _, p, kind in _owned(model):
            if kind is not None:
                p.copy_(_draw(kind, p, g).to(p.dtype))
    return model


def validate(record) -> None:
    """UnknownStateInit unless META["state_init"] (`record`) is absent or one this version builds."""
    if record is None:
        return
    kind = record.get("kind") if isinstance(record, dict) else None
    if kind != CONDITIONED:
        raise UnknownStateInit(f"META['state_init'] kind {kind!r} is not one this importer knows "
                               f"({CONDITIONED!r}); import the problem again")


def apply(model: torch.nn.Module, record: dict | None) -> torch.nn.Module:
    """The model as META["state_init"] (`record`, None for the default init) says it is initialised."""
    validate(record)
    return model if record is None else condition(model)


def record(why: str) -> dict:
    """META["state_init"] of a problem imported with conditioned parameters: why the default init was refused
    and the rule."""
    return {"kind": CONDITIONED, "why": why, "seed": SEED, "rule": RULE}
