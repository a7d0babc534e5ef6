"""The outputs' trip between the GPU and their files, pageable against pinned, side by side in one run (issue 35;
needs a CUDA device: on a machine without one it says so and exits 2, since host-only figures would not be these).

  write  a device tensor to its file as a child writes a device-held output (child/outputs.py):
         pageable  core/tensor_file.write_tensor(path, t): the whole tensor copied into fresh pageable memory first
         staged    write_tensor(path, t, staging=B): a chunk at a time through one pinned buffer B of --staging-mib
                   (Placement.output_staging_bytes)
  read   a file to the device as the check reads an output (judge/output_source.py, then `.to(device)`):
         pageable  read_tensor(path) into fresh memory (zeroed first), then the copy to the device
         pinned    read_tensor(path, into=) into pinned memory from torch's caching host allocator, a block it
                   keeps (one of the size is made and freed before the repetitions: what a long-lived checker would
                   reuse), then the copy to the device
  pin    the cost of pinning a fresh buffer of the size (the caching host allocator emptied first), which a
         short-lived process pays on its first use

Each size is run `--reps` times, the ways alternating, files removed between repetitions; each repetition's file
is checked against the device tensor byte for byte. The medians, the ratios and GiB/s are printed as a table last.

    python3 scripts/staging_bench.py [--dir /tmp] [--mib 64,256,1024] [--reps 5] [--staging-mib 64] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from kernelgym_gap.core import tensor_file  # noqa: E402


def _sync():
    torch.cuda.synchronize()


def _pinned(n: int) -> torch.Tensor:
    return torch.empty(n, dtype=torch.uint8, pin_memory=True)


def _empty_host_cache() -> bool:
    fn = getattr(torch._C, "_host_emptyCache", None)
    if fn is None:
        return False
    fn()
    return True


def one_size(directory: Path, mib: int, reps: int, staging: torch.Tensor) -> dict:
    n = mib << 20
    t = torch.randn(n // 4, device="cuda")
    _sync()
    times: dict[str, list[float]] = {k: [] for k in ("write_pageable", "write_staged", "read_pageable",
                                                     "read_pinned", "pin")}
    _pinned(n)          # made and dropped: the caching host allocator keeps the block, the pinned reads reuse it
    for rep in range(reps):
        for way in (("pageable", "staged") if rep % 2 == 0 else ("staged", "pageable")):
            path = directory / f"staging_bench_{os.getpid()}_{way}"
            t0 = time.perf_counter()
            tensor_file.write_tensor(path, t, staging=staging if way == "staged" else None)
            times[f"write_{way}"].append(time.perf_counter() - t0)
            for read_way in (("pageable", "pinned") if rep % 2 == 0 else ("pinned", "pageable")):
                t0 = time.perf_counter()
                host = tensor_file.read_tensor(path, n, into=_pinned if read_way == "pinned" else None)
                back = host.to("cuda")
                _sync()
                times[f"read_{read_way}"].append(time.perf_counter() - t0)
                if way == "staged" or read_way == "pinned":
                    assert torch.equal(back, t), f"{way} write / {read_way} read: the tensor did not come back"
                del host, back
            path.unlink()
    for _ in range(reps):       # pinning a fresh block, after the reads (emptying the cache between each)
        if _empty_host_cache():
            t0 = time.perf_counter()
            buf = _pinned(n)
            times["pin"].append(time.perf_counter() - t0)
            del buf
    _empty_host_cache()
    med = {k: round(statistics.median(v), 4) if v else None for k, v in times.items()}
    gib = n / 2**30
    return {"mib": mib, "reps": reps, "median_s": med, "all_s": {k: [round(x, 4) for x in v] for k, v in times.items()},
            "write_x": round(med["write_pageable"] / med["write_staged"], 2),
            "read_x": round(med["read_pageable"] / med["read_pinned"], 2),
            "gib_per_s": {k: round(gib / v, 2) for k, v in med.items() if v}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default="/tmp", help="where the files go (the evaluations' scratch: the system temp)")
    ap.add_argument("--mib", default="64,256,1024", help="tensor sizes, MiB, comma-separated")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--staging-mib", type=int, default=64, help="the pinned staging buffer of the staged writes")
    ap.add_argument("--json", help="write the figures here too")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("staging_bench.py needs a CUDA device: its figures are the GPU's copies to and from the host",
              file=sys.stderr)
        return 2
    directory = Path(args.dir)
    staging = _pinned(args.staging_mib << 20)
    rows = [one_size(directory, int(m), args.reps, staging) for m in args.mib.split(",") if m]
    info = {"date": time.strftime("%Y-%m-%d", time.gmtime()), "device": torch.cuda.get_device_name(0),
            "host": platform.node(), "torch": torch.__version__, "dir": str(directory),
            "staging_mib": args.staging_mib, "rows": rows}
    if args.json:
        Path(args.json).write_text(json.dumps(info, indent=1))
    print(f"\n== the outputs' trip, {info['device']}, {info['date']}, files in {directory}, medians of "
          f"{args.reps}, staging buffer {args.staging_mib} MiB")
    print(f"{'MiB':>6} {'write pageable':>15} {'write staged':>13} {'write x':>8} {'read pageable':>14} "
          f"{'read pinned':>12} {'read x':>7} {'pin fresh':>10}")
    for r in rows:
        m = r["median_s"]
        pin = f"{m['pin']:.4f}s" if m["pin"] is not None else "n/a"
        print(f"{r['mib']:>6} {m['write_pageable']:>14.4f}s {m['write_staged']:>12.4f}s {r['write_x']:>8} "
              f"{m['read_pageable']:>13.4f}s {m['read_pinned']:>11.4f}s {r['read_x']:>7} {pin:>10}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
