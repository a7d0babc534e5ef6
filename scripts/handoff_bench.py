"""The output hand-off from child to checker, old and new side by side in one run (host-side work only: no
GPU is involved, so the figures are this host's disk, page cache and memcpy, never a GPU figure).

  old: torch.save(out.contiguous().clone()) in the child, torch.load(weights_only=True) in the checker
  new: core/tensor_file.write_tensor(host_copy(out)) and read_tensor (a header and the raw bytes)

Each size and dtype is written and read `--reps` times per directory, old and new alternating, files removed
between repetitions; the medians and the ratio old/new are printed as a table last.

    python3 scripts/handoff_bench.py [--dirs /tmp,/dev/shm] [--mib 16,64,256] [--reps 5] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from kernelgym_gap.core import tensor_file  # noqa: E402


def old_write(path: Path, t: torch.Tensor) -> None:
    torch.save(t.detach().to("cpu").contiguous().clone(), path)


def old_read(path: Path, max_bytes: int) -> torch.Tensor:
    return torch.load(path, map_location="cpu", weights_only=True)


def new_write(path: Path, t: torch.Tensor) -> None:
    tensor_file.write_tensor(path, tensor_file.host_copy(t))


def new_read(path: Path, max_bytes: int) -> torch.Tensor:
    return tensor_file.read_tensor(path, max_bytes)


WAYS = {"old": (old_write, old_read), "new": (new_write, new_read)}


def one(way: str, directory: Path, t: torch.Tensor) -> tuple[float, float]:
    write, read = WAYS[way]
    path = directory / f"handoff_{way}_{os.getpid()}"
    t0 = time.perf_counter()
    write(path, t)
    t1 = time.perf_counter()
    back = read(path, t.numel() * t.element_size())
    t2 = time.perf_counter()
    assert torch.equal(back, t), f"{way}: the tensor did not come back"
    path.unlink()
    return t1 - t0, t2 - t1


def run(dirs: list[Path], mibs: list[int], dtypes: list[str], reps: int) -> list[dict]:
    rows = []
    for directory in dirs:
        for mib in mibs:
            free = shutil.disk_usage(directory).free
            if free < 3 * (mib << 20):          # two files at once, and room to spare
                print(f"  {directory}: {free >> 20} MiB free, too little for {mib} MiB: skipped", file=sys.stderr)
                continue
            for dtype in dtypes:
                dt = getattr(torch, dtype)
                n = (mib << 20) // torch.empty((), dtype=dt).element_size()
                t = torch.randn(n).to(dt)
                one("old", directory, t)        # first touch of the page cache, not counted
                one("new", directory, t)
                got = {w: ([], []) for w in WAYS}
                for _ in range(reps):
                    for way in WAYS:
                        w, r = one(way, directory, t)
                        got[way][0].append(w)
                        got[way][1].append(r)
                row = dict(dir=str(directory), mib=mib, dtype=dtype)
                for way, (w, r) in got.items():
                    row[f"{way}_write_s"] = statistics.median(w)
                    row[f"{way}_read_s"] = statistics.median(r)
                row["write_ratio"] = row["old_write_s"] / row["new_write_s"]
                row["total_ratio"] = ((row["old_write_s"] + row["old_read_s"])
                                      / (row["new_write_s"] + row["new_read_s"]))
                rows.append(row)
                print(f"  {directory} {mib} MiB {dtype}: done", file=sys.stderr)
    return rows


def table(rows: list[dict]) -> str:
    head = (f"{'dir':<10} {'MiB':>5} {'dtype':<9} {'old write':>10} {'new write':>10} {'old read':>9} "
            f"{'new read':>9} {'write x':>8} {'total x':>8}")
    lines = [head]
    for r in rows:
        lines.append(f"{r['dir']:<10} {r['mib']:>5} {r['dtype']:<9} {r['old_write_s']:>9.3f}s {r['new_write_s']:>9.3f}s "
                     f"{r['old_read_s']:>8.3f}s {r['new_read_s']:>8.3f}s {r['write_ratio']:>8.2f} {r['total_ratio']:>8.2f}")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    default_dirs = [tempfile.gettempdir()] + (["/dev/shm"] if os.path.isdir("/dev/shm") else [])
    p.add_argument("--dirs", default=",".join(default_dirs))
    p.add_argument("--mib", default="16,64,256")
    p.add_argument("--dtypes", default="float16,float32")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--json", default=None, help="write the rows and the host's description here")
    a = p.parse_args(argv)
    dirs = [Path(d) for d in a.dirs.split(",") if d]
    rows = run(dirs, [int(m) for m in a.mib.split(",")], a.dtypes.split(","), a.reps)
    if a.json:
        Path(a.json).write_text(json.dumps(dict(
            what="child-to-checker output hand-off, host side (no GPU)", date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            host=dict(machine=platform.machine(), cpus=os.cpu_count(), python=platform.python_version(),
                      torch=torch.__version__), reps=a.reps, rows=rows), indent=1))
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
