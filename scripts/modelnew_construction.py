"""How long a KernelBench ModelNew's construction takes, the part of the import stage's deadline
(SandboxConfig.import_module_class_s) that no results record carries: the child builds one instance per
(shape, dtype) of the job on the host (importers/problem.py, adapt_module: the class under the reference's
seed, then `.to(device, dtype)`), between the submission's import and `import.done`.

    python3 scripts/modelnew_construction.py KernelBench/level2 [KernelBench/level3 ...] [--instances 6]

An honest ModelNew builds what the problem's Model builds, so each problem file's `Model(*get_init_inputs())`
is timed at the problem's own sizes (the cuda workload's public shape), and its cast to float16, on one
torch thread (seeded init is serial). `--instances` (6: a cuda job's two shapes, public and held-out, in
three dtypes) scales one instance to a job. Problem files are code: run this only on files you trust, as
`kernelgym-gap import kernelbench --trust` does. One JSON line per file, the slowest last.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import signal
import sys
import time
from pathlib import Path


def _timeout(*_):
    raise TimeoutError("over the per-file limit")


def measure(path: Path, limit_s: int) -> dict:
    import torch
    signal.signal(signal.SIGALRM, _timeout)
    signal.alarm(limit_s)
    try:
        spec = importlib.util.spec_from_file_location(f"problem_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        args = module.get_init_inputs() if hasattr(module, "get_init_inputs") else []
        torch.manual_seed(0)
        t = time.perf_counter()
        inst = module.Model(*args)
        build = time.perf_counter() - t
        t = time.perf_counter()
        inst.to(dtype=torch.float16)
        cast = time.perf_counter() - t
        return dict(file=str(path), build_s=round(build, 3), cast_s=round(cast, 3),
                    params=sum(p.numel() for p in inst.parameters()))
    except BaseException as e:      # noqa: BLE001 - a problem that does not build is reported, not fatal
        return dict(file=str(path), error=f"{type(e).__name__}: {e}"[:200])
    finally:
        signal.alarm(0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+", type=Path, help="problem files or folders of them")
    ap.add_argument("--instances", type=int, default=6, help="instances a job builds (default 6)")
    ap.add_argument("--limit-s", type=int, default=300, help="per file (default 300)")
    args = ap.parse_args(argv)
    import torch
    torch.set_num_threads(1)
    files = [f for p in args.paths for f in (sorted(p.glob("*.py")) if p.is_dir() else [p])]
    rows = []
    for f in files:
        row = measure(f, args.limit_s)
        if "build_s" in row:
            row["job_s"] = round(args.instances * (row["build_s"] + row["cast_s"]), 1)
        rows.append(row)
    for row in sorted(rows, key=lambda r: r.get("job_s", -1.0)):
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
