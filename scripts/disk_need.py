"""What each built-in task's evaluation writes to disk, and the limits derived from it (sandbox/disk.py).

    .venv/bin/python scripts/disk_need.py [--backend cuda] [--top 10] [--tasks-dir DIR]

For every task: the output files a child of the default EvalConfig writes (engine/trials.output_cases: the
correctness trials and, on cuda, the timed shapes' rechecks), their bytes in all and the largest one
(sandbox/output_sizes.py: exact under FakeTensorMode where it follows the task, else the task's declaration),
and the child's quota and largest file that sandbox/disk.job_limits derives (the configured ones where
they hold it). No tensor is allocated and nothing runs on a GPU.
"""
from __future__ import annotations

import argparse

from kernelgym_gap.core.config import EvalConfig
from kernelgym_gap.core.registry import TaskRegistry, default_registry
from kernelgym_gap.engine.trials import output_cases
from kernelgym_gap.sandbox import disk, output_sizes

GIB = 2 ** 30


def rows(registry, backend: str, config: EvalConfig):
    for task in registry:
        cases = output_cases(task, backend, config)
        need = output_sizes.need(task, cases)
        limits = disk.job_limits(config.sandbox, task, cases, with_probe=False)
        yield task, need, limits


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--top", type=int, default=10)
    ap.add_argument("--tasks-dir", default=None)
    args = ap.parse_args(argv)
    registry = TaskRegistry(args.tasks_dir) if args.tasks_dir else default_registry()
    config = EvalConfig()
    found = list(rows(registry, args.backend, config))
    unknown = [t.id for t, need, _ in found if need is None]
    known = [(t, n, lim) for t, n, lim in found if n is not None]
    print(f"{len(found)} tasks on {args.backend}; configured quota "
          f"{config.sandbox.scratch_quota_bytes / GIB:.2f} GiB, "
          f"largest file {config.sandbox.fsize_bytes / GIB:.2f} GiB; sizes unknown: {unknown or 'none'}")
    for title, key in (("largest total", lambda r: r[1].total), ("largest single output", lambda r: r[1].largest)):
        print(f"\n{title}:")
        for task, need, lim in sorted(known, key=key, reverse=True)[:args.top]:
            print(f"  {task.id:36s} {need.total / GIB:8.3f} GiB in {need.count:3d} files, largest "
                  f"{need.largest / GIB:6.3f} GiB ({need.source}); quota {lim.quota / GIB:7.2f} GiB, "
                  f"file {lim.fsize / GIB:5.2f} GiB{' (derived)' if lim.derived else ''}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
