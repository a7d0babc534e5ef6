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
    x = x * scale
    if dtype == "int8":
        # a quantized tensor uses its whole range: the draw scaled so its largest magnitude maps to 127, then
        # rounded (the distribution's shape is kept, its scale is the quantizer's)
        return (x * (127.0 / x.abs().max().clamp_min(1e-12))).round().clamp(-127, 127).to(torch.int8)
    if dtype.startswith("float8"):
        # clamped to the finite range first: e4m3fn has no inf, and an out-of-range cast is NaN on some builds
        fmax = torch.finfo(getattr(torch, dtype)).max
        return x.clamp(-fmax, fmax).to(getattr(torch, dtype))
    return x.to(getattr(torch, dtype))


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
        h.update(word_sums(raw.view(torch.int32)).cpu().numpy().tobytes())
    return h.hexdigest()


# Words per stretch of `word_sums`: int64 temporaries of 128 MiB each. Unchunked, a 0.94 GiB input needed
# about ten times its size at once: the child's digest of CrossEntropyBackward's logits asked 1.87 GiB for one
# temporary and ran the GPU out of memory beside the held children (H100, 2026-12-07, the hand-over's full mix).
DIGEST_CHUNK_WORDS = 1 << 24


def word_sums(words32: torch.Tensor, chunk: int = DIGEST_CHUNK_WORDS) -> torch.Tensor:
    """The four weighted sums of `digest` over a 1-D int32 tensor, as int64 (wrapping as the device's int64
    sums wrap): computed a stretch of `chunk` words at a time, so that the temporaries are bounded by the
    stretch, not the input. Integer addition modulo 2**64 is associative, so the sums are the same for any
    `chunk`: the digests of earlier versions, and of the checker and the child, agree."""
    if chunk <= 0:
        raise ValueError(f"chunk must be positive, got {chunk}")
    total = torch.zeros(4, dtype=torch.int64, device=words32.device)
    for start in range(0, words32.numel(), chunk):
        words = words32[start:start + chunk].to(torch.int64)
        idx = torch.arange(start, start + words.numel(), device=words.device, dtype=torch.int64)
        total += torch.stack([words.sum(), (words * (idx * 2654435761 % 2147483647 + 1)).sum(),
                              (words * words).sum(), (words * (idx % 65521 + 7)).sum()])
        del words, idx
    return total


def make_trial_inputs(task, trial, device: str) -> tuple:
    """The inputs of one trial, regenerated identically wherever it is called."""
    return tuple(task.make_inputs(tuple(trial.shape), trial.dtype, generator(trial.seed, device),
                                  trial.distribution, device))


def reproduce(task, trial=None, *, shape=None, dtype: str | None = None, seed: int | None = None,
              distribution: str | None = None, device: str = "cpu", tasks_dir: str | None = None) -> tuple:
    """The inputs of a trial, as the harness made them: for a failing trial, pass the record's
    `failure.trial` (a Trial or its dict from the JSON record), or the shape, dtype, seed and distribution a
    failure's message prints. `task`: a TaskSpec, an id or a name (of `tasks_dir` for a task of a user's
    directory: the message prints it). Inputs of cuda trials come from the device's own generator: pass
    device="cuda" to get those.

        ins = kernelgym_gap.reproduce("LayerNorm", shape=(16, 128), dtype="float32", seed=123, distribution="normal")
        expected = task.reference(*ins); got = layernorm(*ins)
    """
    from kernelgym_gap.core.record import Trial
    if isinstance(task, str):
        from kernelgym_gap.core.registry import TaskRegistry, get_task
        task = TaskRegistry(tasks_dir).get(task) if tasks_dir else get_task(task)
    if trial is None:
        if shape is None or dtype is None or seed is None:
            raise TypeError("reproduce needs a trial, or shape, dtype and seed")
        trial = Trial(index=0, shape=tuple(shape), dtype=dtype, seed=int(seed),
                      distribution=distribution or task.distributions[0], split="public")
    elif isinstance(trial, dict):
        trial = Trial(index=trial.get("index", 0), shape=tuple(trial["shape"]), dtype=trial["dtype"],
                      seed=int(trial["seed"]), distribution=trial["distribution"], split=trial.get("split", "public"))
    return make_trial_inputs(task, trial, device)


def reproduce_call(task_id: str, trial, device: str = "cpu", tasks_dir: str | None = None) -> str:
    """The one-line call that regenerates a trial's inputs, as a failure's message prints it; tasks_dir: a
    user's task directory (None for the project's tasks/)."""
    dev = "" if device == "cpu" else f", device={device!r}"
    where = f", tasks_dir={tasks_dir!r}" if tasks_dir else ""
    return (f"kernelgym_gap.reproduce({task_id!r}, shape={tuple(trial.shape)!r}, dtype={trial.dtype!r}, "
            f"seed={trial.seed}, distribution={trial.distribution!r}{dev}{where})")
