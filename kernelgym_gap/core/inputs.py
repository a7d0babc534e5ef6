"""Input distributions shared by every task's generator.

Inputs are a pure function of (shape, dtype, seed, distribution, device): the child and the trusted checker
regenerate the same tensors independently, so the checker never needs data the submission could touch.
"""
from __future__ import annotations

import torch

DISTRIBUTIONS = ("normal", "uniform", "large", "small", "offset", "positive", "sparse")


def generator(seed: int, device: str) -> torch.Generator:
    g = torch.Generator(device=device)
    g.manual_seed(int(seed))
    return g


def sample(shape, dtype: str, gen: torch.Generator, distribution: str, device: str,
           scale: float = 1.0) -> torch.Tensor:
    """One tensor drawn from a named distribution, made in float32 and cast (so every dtype sees the same
    values up to rounding)."""
    shape = tuple(int(s) for s in shape)
    kw = dict(generator=gen, device=device, dtype=torch.float32)
    if distribution == "normal":
        x = torch.randn(shape, **kw)
    elif distribution == "uniform":
        x = torch.rand(shape, **kw) * 2 - 1
    elif distribution == "large":          # large magnitudes: overflow and cancellation show up
        x = torch.randn(shape, **kw) * 30
    elif distribution == "small":
        x = torch.randn(shape, **kw) * 1e-2
    elif distribution == "offset":         # a large mean: naive one-pass variance loses precision
        x = torch.randn(shape, **kw) + 8.0
    elif distribution == "positive":
        x = torch.rand(shape, **kw) + 0.05
    elif distribution == "sparse":         # mostly zeros, a few large values
        x = torch.randn(shape, **kw) * (torch.rand(shape, **kw) < 0.1)
    else:
        raise ValueError(f"unknown distribution {distribution!r}; known: {DISTRIBUTIONS}")
    return (x * scale).to(getattr(torch, dtype))


def digest(tensors) -> str:
    """A fingerprint of a tuple of tensors' dtypes, shapes and bytes: sha256 for cpu tensors; for cuda
    tensors, weighted sums of the 32-bit words computed on the device (hashing gigabytes on the host would
    dominate a step), which any change of the data shows."""
    import hashlib
    h = hashlib.sha256()
    for t in tensors:
        if not isinstance(t, torch.Tensor):
            h.update(repr(t).encode())
            continue
        c = t.detach().contiguous()
        h.update(f"{c.dtype}{tuple(c.shape)}{c.device.type}".encode())
        if not c.numel():
            continue
        raw = c.reshape(-1).view(torch.uint8)
        if c.device.type != "cuda":
            h.update(raw.numpy().tobytes())
            continue
        pad = (-raw.numel()) % 4
        if pad:
            raw = torch.cat([raw, raw.new_zeros(pad)])
        words = raw.view(torch.int32).to(torch.int64)
        idx = torch.arange(words.numel(), device=c.device, dtype=torch.int64)
        sums = torch.stack([words.sum(), (words * (idx * 2654435761 % 2147483647 + 1)).sum(),
                            (words * words).sum(), (words * (idx % 65521 + 7)).sum()])
        h.update(sums.cpu().numpy().tobytes())
    return h.hexdigest()


def make_trial_inputs(task, trial, device: str) -> tuple:
    """The inputs of one trial, regenerated identically wherever it is called."""
    return tuple(task.make_inputs(tuple(trial.shape), trial.dtype, generator(trial.seed, device),
                                  trial.distribution, device))
