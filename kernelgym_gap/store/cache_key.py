"""The cache key of an evaluation, computed without starting anything: (source sha256, task id, task version,
dsl, backend, device, settings hash, software hash).

The device is `cpu` on the cpu backend and the GPU's name on cuda (read with nvidia-smi: the parent never
holds a CUDA context; the GPU is the Placement's gpu_index); the settings hash covers the EvalConfig whole:
where an evaluation runs (GPU index, lanes, scratch and cache paths, held outputs) is not on it but on the
core/placement.Placement passed beside it, so two evaluations that differ only there share a key; the software
hash covers the versions of python, torch, triton, tilelang and this package, and a fingerprint of the
harness's own source, so an upgrade or an edit of the harness measures again. store/db.py keeps records under
these keys and serves them back.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from kernelgym_gap.core import dsls
from kernelgym_gap.core.record import EvalRecord


def source_bytes(source: str | bytes) -> bytes:
    return source.encode("utf-8", "surrogateescape") if isinstance(source, str) else bytes(source)


def source_sha256(source: str | bytes) -> str:
    return hashlib.sha256(source_bytes(source)).hexdigest()


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def settings_hash(config) -> str:
    # the whole config: a field added to EvalConfig is hashed; where it runs is a Placement, never on it
    fields = dataclasses.asdict(config)
    return hashlib.sha256(canonical(fields).encode()).hexdigest()[:16]


def software_versions(dsl: str) -> dict[str, str]:
    from importlib import metadata
    out = {"python": sys.version.split()[0]}
    entry = dsls.DSLS.get(dsl, dsls.DSLS[dsls.DEFAULT])
    for dist in ("kernelgym_gap", "torch") + entry.distributions:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "absent"
    out["harness"] = harness_fingerprint()
    return out


@functools.lru_cache(maxsize=1)
def harness_fingerprint() -> str:
    """A hash of the harness's own source: a change to the engine, checker, timing or reward code makes
    earlier cached records stale even when the package version string was not bumped."""
    h = hashlib.sha256()
    pkg = Path(__file__).resolve().parents[1]
    for path in sorted(pkg.rglob("*.py")):
        if path.relative_to(pkg).parts[0] in ("web", "cli"):     # presentation: no effect on a record
            continue
        h.update(str(path.relative_to(pkg)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def software_hash(dsl: str) -> str:
    return hashlib.sha256(canonical(software_versions(dsl)).encode()).hexdigest()[:16]


CPU_DEVICE = "cpu"


@functools.lru_cache(maxsize=16)
def _gpu_name(index: int) -> str:
    """The GPU's name from nvidia-smi, so that the parent holds no CUDA context; torch as the fallback."""
    try:
        out = subprocess.run(["nvidia-smi", f"--id={index}", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
        name = out.stdout.strip().splitlines()[0].strip() if out.returncode == 0 and out.stdout.strip() else ""
    except (OSError, subprocess.SubprocessError):
        name = ""
    if not name:
        import torch
        name = torch.cuda.get_device_name(index)
    return name


def cache_device_key(backend: str, placement=None) -> str:
    """The device part of a cache key, known before running anything: `cpu`, or the name of the placement's
    GPU (the same string the child records as device.name)."""
    if backend == "cuda":
        return _gpu_name(placement.gpu_index if placement is not None else 0)
    return CPU_DEVICE


@dataclasses.dataclass(frozen=True)
class CacheKey:
    source_sha256: str
    task_id: str
    task_version: int
    dsl: str
    backend: str
    device: str
    settings_hash: str
    software_hash: str = ""


def cache_key_for(task, source, dsl: str, backend: str, config, placement=None) -> CacheKey:
    """The key an evaluation of `source` would be stored under; starts no process. `placement` (a
    core.placement.Placement, default GPU 0) only says which GPU's name is the device."""
    if backend == "auto":
        from kernelgym_gap.core.backend import resolve_backend
        backend = resolve_backend(backend)
    return CacheKey(source_sha256(source), task.id, task.version, dsl, backend, cache_device_key(backend, placement),
                    settings_hash(config), software_hash(dsl))


def key_from_record(record: EvalRecord, source: str | bytes, config=None) -> CacheKey:
    """The key of a record measured elsewhere (a batch run, an environment). Without the EvalConfig that
    produced it, its settings hash is empty and the cache never serves it."""
    device = CPU_DEVICE if record.backend != "cuda" else str(record.device.get("name") or "cuda")
    return CacheKey(source_sha256(source), record.task, record.task_version, record.dsl, record.backend, device,
                    settings_hash(config) if config is not None else "", software_hash(record.dsl))
