"""The seconds honest evaluations spent in the submission's import stage, from every committed results file
that carries the child's phases (the evidence for SandboxConfig.import_s, docs/security.md "import deadline").

    python3 scripts/import_stage_evidence.py [results]

Each record's `child_import` (child/run.py, phases["import"]) is the submission module's top level run by
exec_module; the import deadline also covers the entry point's construction, which for a function entry
point (every task under tasks/) is a getattr, and for a KernelBench ModelNew (imported tasks) is not in any
record: scripts/modelnew_construction.py measures that. `child_preimport` (the child's own torch/triton
imports before the job) is printed beside it for contrast: the import deadline does not cover it (it starts
at the byte the child writes just before the submission's module runs, core/record.py IMPORT_START_FD_ENV).
Records of the fixtures under tests/fixtures/ (hostile or failing on purpose) are left out.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path


def _records(obj, inherited: tuple[str | None, str | None] = (None, None)):
    """Every dict under `obj` with a `latency` dict holding child_import, with the device (kind, name) it or
    an enclosing dict names (`device.kind`, `device.name`), else None."""
    if isinstance(obj, dict):
        device = obj.get("device")
        here = (device.get("kind"), device.get("name")) if isinstance(device, dict) else inherited
        lat = obj.get("latency")
        if isinstance(lat, dict) and isinstance(lat.get("child_import"), (int, float)):
            yield obj, here
        for v in obj.values():
            yield from _records(v, here)
    elif isinstance(obj, list):
        for v in obj:
            yield from _records(v, inherited)


def _is_fixture(rec: dict) -> bool:
    name = str(rec.get("submission") or rec.get("kernel") or rec.get("name") or "")
    return name.startswith("fixture/") or "fixtures/" in name


def _backend(path: Path, kind: str | None) -> str:
    """cuda or cpu: the record's device kind, else the file's name (throughput_cpu_..., gap_study_cpu...)."""
    if kind in ("cuda", "cpu"):
        return kind
    return "cpu" if "cpu" in path.name else "cuda"


def _dsl(rec: dict) -> str:
    name = str(rec.get("submission") or rec.get("kernel") or "")
    return rec.get("dsl") or ("tilelang" if "tilelang" in name else "triton")


def _machine(path: Path, name: str | None) -> str:
    for m in ("H100", "H200"):
        if name and m in name:
            return m
    for part in path.parts:
        for m in ("h100", "h200"):
            if part.startswith(m):
                return m.upper()
    return "H200" if "h200" in path.name else ("cpu host" if "cpu" in path.name else "?")


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank percentile (no interpolation: a value that was measured)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def load(path: Path) -> list:
    text = path.read_text()
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    return [json.loads(text)]


def rows(root: Path) -> list[dict]:
    out = []
    for path in sorted(p for p in root.rglob("*") if p.suffix in (".json", ".jsonl")):
        try:
            docs = load(path)
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue
        groups: dict[tuple[str, str, str], list[tuple[float, float | None]]] = {}
        for doc in docs:
            for rec, (kind, name) in _records(doc):
                if _is_fixture(rec):
                    continue
                lat, backend = rec["latency"], _backend(path, kind)
                key = (backend, _machine(path, name) if backend == "cuda" else "cpu", _dsl(rec))
                groups.setdefault(key, []).append((lat["child_import"], lat.get("child_preimport")))
        for (backend, machine, dsl), vals in groups.items():
            imports = [v[0] for v in vals]
            pre = [v[1] for v in vals if v[1] is not None]
            out.append(dict(file=str(path), backend=backend, machine=machine, dsl=dsl,
                            n=len(imports), max_s=max(imports), p99_s=percentile(imports, 99),
                            preimport_max_s=max(pre) if pre else None))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", nargs="?", default="results", type=Path)
    args = ap.parse_args(argv)
    table = rows(args.root)
    print("| file | backend | dsl | n | max child_import (s) | p99 (s) | max child_preimport (s, not covered) |")
    print("|---|---|---|---|---|---|---|")
    for r in table:
        pre = "-" if r["preimport_max_s"] is None else f"{r['preimport_max_s']:.2f}"
        print(f"| {r['file']} | {r['backend']} ({r['machine']}) | {r['dsl']} | {r['n']} | {r['max_s']:.3f} "
              f"| {r['p99_s']:.3f} | {pre} |")
    for backend, dsl in sorted({(r["backend"], r["dsl"]) for r in table}):
        sel = [r for r in table if (r["backend"], r["dsl"]) == (backend, dsl)]
        print(f"all {backend} {dsl}: {sum(r['n'] for r in sel)} records in {len(sel)} files, "
              f"max child_import {max(r['max_s'] for r in sel):.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
